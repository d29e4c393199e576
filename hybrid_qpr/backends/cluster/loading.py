"""Bulk-load settings for an ingest that fills an index it created.

Both engines' tuning guides advise, for a first load, ``refresh_interval: -1`` (no refresh
every second: no small segments to write and merge again, and for vectors no small HNSW
graphs built and rebuilt). They also advise ``number_of_replicas: 0`` during the load; we do
not take that one: an index asked for with replicas must not lose acknowledged documents when a
node dies mid-load (``test_cluster_multinode``), and on a one-node cluster there are no
replicas to drop. ``begin`` switches an index the ingest created to these settings and ``end``
restores its own values - on every way out, an error or Ctrl-C included.

An ingest that dies without reaching ``end`` (kill -9, the machine lost) must not leave the
index without refreshes for good: the values to restore are written into the mapping ``_meta``
(``bulk_load``) before the settings change. The next ingest into that index sees the mark,
goes on loading with the same settings (it resumes the first load) and restores them when it
ends. Until then, searches see only what the last refresh showed.

An ingest into an index that already existed (and is not marked) changes no settings: readers
of a live index keep their refreshes.
"""

from __future__ import annotations

import logging
from typing import Any

from hybrid_qpr.backends.cluster.target import ClusterIndex

logger = logging.getLogger(__name__)

LOAD_SETTINGS = {"refresh_interval": "-1"}
MARK = "bulk_load"  # the mapping _meta key holding the settings to restore


def begin(backend: ClusterIndex, created: bool) -> dict[str, Any] | None:
    """Switch the index to ``LOAD_SETTINGS`` when this ingest ``created`` it or an earlier one
    left it marked; returns the settings ``end`` restores, or None (settings left alone)."""
    restore = backend.meta.get(MARK)
    if restore is None and not created:
        return None
    if restore is None:
        answer = backend.request("GET", backend.path("_settings"), None, {
            "filter_path": "*.settings.index.refresh_interval"},
            what="reading the index settings")
        current = next(iter(answer.values()), {}).get("settings", {}).get("index", {})
        # refresh_interval None restores the engine's default (it was not set at creation)
        restore = {"refresh_interval": current.get("refresh_interval")}
        _mark(backend, restore)
    backend.request("PUT", backend.path("_settings"), {"index": LOAD_SETTINGS}, what="switching to bulk-load settings")
    logger.info("index %s: refresh off while loading (restored afterwards: %s)", backend.index, restore)
    return dict(restore)


def end(backend: ClusterIndex, restore: dict[str, Any] | None, *, failing: bool = False) -> None:
    """Put back the settings ``begin`` saved and remove the mark. While an error is on its way
    (``failing``), a failure here is only logged: the mark stays, and the next ingest restores."""
    if restore is None:
        return
    try:
        backend.request("PUT", backend.path("_settings"), {"index": restore}, what="restoring the index settings")
        _mark(backend, None)
    except Exception as exc:
        if not failing:
            raise
        logger.warning("index %s keeps its bulk-load settings (refresh off) after the failed ingest: "
                       "restoring them failed too (%s). Re-run the ingest: it restores them when it ends", backend.index,
                       exc)


def _mark(backend: ClusterIndex, restore: dict[str, Any] | None) -> None:
    """Write (or, with None, remove) the ``bulk_load`` mark in the mapping ``_meta``, other keys kept."""
    meta = {k: v for k, v in backend.refresh_meta().items() if not k.startswith("_") and k != MARK}
    if restore is not None:
        meta[MARK] = restore
    backend.request("PUT", backend.path("_mapping"), {"_meta": meta}, what="updating the _meta")
    backend.refresh_meta()
