"""Ranking helpers of the local index: the best rows of a segment's scores, the exact merge
of per-segment lists (ties broken by id), and the hand-out of segments to the threads of a
kNN search."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from hybrid_qpr.types import Hit

if TYPE_CHECKING:
    from hybrid_qpr.backends.local.segment import Segment


def best_rows(scores: np.ndarray, rows: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``depth`` best of ``scores`` (aligned with segment ``rows``) plus every row tied
    with the last of them (ties are broken by id later, across segments)."""
    if len(scores) > depth:
        cutoff = np.partition(scores, len(scores) - depth)[len(scores) - depth]  # values only: cheaper than argpartition
        keep = scores >= cutoff
        scores, rows = scores[keep], rows[keep]
    return scores, rows


def merge_ranked(found: list[tuple["Segment", np.ndarray, np.ndarray]], depth: int) -> list[Hit]:
    """Best ``depth`` over every segment's ``(segment, scores, rows)`` candidates, ties broken
    by id. Exact: each segment contributes its own best ``depth`` and all ties with them. Ids
    are read only for the candidates that can still make the list."""
    if depth <= 0 or not found:
        return []
    all_scores = np.concatenate([scores for _, scores, _ in found])
    if len(all_scores) == 0:
        return []
    cutoff = -np.inf
    if len(all_scores) > depth:
        cutoff = np.partition(all_scores, len(all_scores) - depth)[len(all_scores) - depth]
    kept_scores, kept_ids = [], []
    for seg, scores, rows in found:
        keep = scores >= cutoff
        if keep.any():
            kept_scores.append(scores[keep])
            kept_ids.extend(seg.ids_at(rows[keep]))
    scores, ids = np.concatenate(kept_scores), np.asarray(kept_ids, dtype=object)
    order = np.lexsort((ids, -scores))[:depth]  # score descending, then id
    return Hit.many(ids[order].tolist(), scores[order].astype(np.float64).tolist())


# efSearch of a segment asked for its share k of a multi-segment kNN list: efSearch * (k / full
# k) ** SHARE_EF_POWER. Measured on ten 100,000-document HNSW32 segments (docs/engine.md): power 1
# (efSearch scaled like k) lost 3.5 points of recall@10 against full searches (0.989 -> 0.954),
# 0.75 keeps 0.967 and the merged index's recall@100 (0.892) at about half the FAISS time.
SHARE_EF_POWER = 0.75


def full_k(seg: "Segment", depth: int) -> int:
    """Hits to ask a segment's FAISS index for so that ``depth`` live ones can remain: its
    deleted rows may be among them."""
    return min(depth + seg.count - seg.live, seg.count)


class SegmentQueue:
    """Segments handed out one at a time to the threads that search them (a hybrid query's
    kNN worker and, once its BM25 list is done, the calling thread)."""

    def __init__(self, segments: Sequence["Segment"]):
        self._left = iter(segments)
        self._lock = threading.Lock()

    def take(self) -> "Segment | None":
        with self._lock:
            return next(self._left, None)


_KNN_WORKER: list[ThreadPoolExecutor] = []
_KNN_WORKER_LOCK = threading.Lock()


def knn_worker() -> ThreadPoolExecutor:
    """The process's one thread for ``bm25_and_knn``'s kNN half (started on first use, once
    even when reader threads ask at the same moment)."""
    with _KNN_WORKER_LOCK:
        if not _KNN_WORKER:
            _KNN_WORKER.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="hybrid-qpr-knn"))
    return _KNN_WORKER[0]
