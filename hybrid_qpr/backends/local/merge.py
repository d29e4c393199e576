"""Which segments to merge: a size-tiered policy (Lucene's TieredMergePolicy, simplified).

Segments fall into tiers by the order of magnitude of their live documents, with every
segment below ``FLOOR_DOCS`` in the lowest tier (below 10,000, 10,000-99,999, ...; Lucene's
floor segment size: tiny segments are merged early instead of forming their own tiers). When a tier holds more than ``SEGMENTS_PER_TIER`` segments, its
``SEGMENTS_PER_TIER`` smallest are merged into one (which lands in a higher tier), unless
the result would exceed ``MAX_MERGED_DOCS`` (``hybrid-qpr index optimize`` has no cap). A
segment with more than half of its rows deleted is rewritten on its own, so tombstones do
not pile up. Each ingest or delete runs the policy after its commit, so a long series of
small ingests keeps O(10 · log10 N) segments.

Exact (``Flat``) segments are scanned whole by every kNN query, so with the ``auto`` vector
index (Flat below ``flat_limit`` documents, HNSW above) the Flat segments together may hold
at most ``flat_limit`` live documents: past that they are merged into one, which becomes an
HNSW segment. Ten ingests of 12,000 documents would otherwise leave ten Flat segments, one
full scan of 120,000 vectors per query (measured: docs/search.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

SEGMENTS_PER_TIER = 10
MAX_MERGED_DOCS = 2_000_000
EXPUNGE_SHARE = 0.5
FLOOR_DOCS = 1_000


def live_docs(entry: dict[str, Any]) -> int:
    return int(entry["count"]) - int(entry.get("deleted", 0))


def tier(live: int) -> int:
    return int(math.log10(max(live, FLOOR_DOCS)))


def plan_merge(entries: Sequence[dict[str, Any]], per_tier: int = SEGMENTS_PER_TIER,
               max_docs: int = MAX_MERGED_DOCS, flat_limit: int | None = None) -> list[str] | None:
    """Names of the segments to merge next, or ``None`` when the index is in shape.
    ``flat_limit``: the most live documents all ``Flat`` segments may hold together (``None``:
    no limit; see the module docstring)."""
    for entry in entries:
        if int(entry.get("deleted", 0)) > EXPUNGE_SHARE * int(entry["count"]):
            return [entry["name"]]
    if flat_limit is not None:
        flat = [e for e in entries if e.get("factory") == "Flat"]
        if len(flat) > 1 and sum(live_docs(e) for e in flat) > flat_limit:
            return [e["name"] for e in sorted(flat, key=lambda e: (live_docs(e), e["name"]))]
    tiers: dict[int, list[dict[str, Any]]] = {}
    for entry in entries:
        tiers.setdefault(tier(live_docs(entry)), []).append(entry)
    for level in sorted(tiers):
        group = tiers[level]
        if len(group) > per_tier:
            smallest = sorted(group, key=lambda e: (live_docs(e), e["name"]))[:per_tier]
            if sum(live_docs(e) for e in smallest) <= max_docs:
                return [e["name"] for e in smallest]
    return None
