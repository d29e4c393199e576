"""Ranking helpers of the local index: the best rows of a segment's scores, the exact merge
of per-segment lists (ties broken by id), and the kNN search over segments (FAISS per
segment, each first asked for its share of the list, the segments handed out to the threads
that search them)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from hybrid_qpr.backends.local.vectors import one_thread
from hybrid_qpr.backends.local.worker import query_worker
from hybrid_qpr.distance import Distance, score_from_faiss
from hybrid_qpr.errors import require
from hybrid_qpr.types import Hit, RankedList

if TYPE_CHECKING:
    from hybrid_qpr.backends.local.segment import Segment


class SegmentCandidates(NamedTuple):
    """Rows of one segment that may make a ranked list, with their scores."""

    segment: "Segment"
    scores: np.ndarray
    rows: np.ndarray  # aligned with ``scores``
    complete: bool = True  # False: a kNN share of the segment, which may hold more (see ``settled``)

    @classmethod
    def best(cls, segment: "Segment", scores: np.ndarray, rows: np.ndarray, depth: int) -> "SegmentCandidates":
        """The ``depth`` best of ``scores`` (aligned with ``rows``) plus every row tied with the
        last of them (ties are broken by id later, across segments)."""
        return cls(segment, *best_rows(scores, rows, depth))


def kth_best(scores: np.ndarray, depth: int) -> float:
    """The ``depth``-th best of ``scores`` (-inf when there are no more than ``depth``): every
    score at or above it makes a top-``depth`` list, ties included. Values only: cheaper than
    an argpartition."""
    if len(scores) <= depth:
        return -np.inf
    return np.partition(scores, len(scores) - depth)[len(scores) - depth]


def best_rows(scores: np.ndarray, rows: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, rows)`` cut to the ``depth`` best, ties with the last of them kept."""
    if len(scores) > depth:
        keep = scores >= kth_best(scores, depth)
        scores, rows = scores[keep], rows[keep]
    return scores, rows


# A ranked list as the local index keeps it: (-score, id, row, segment), best first.
Entry = tuple[float, str, int, "Segment"]


def ranked_entries(found: Sequence[SegmentCandidates], depth: int) -> list[Entry]:
    """Best ``depth`` over every segment's candidates, ties broken by id, as ``Entry`` tuples.
    Exact: each segment contributes its own best ``depth`` and all ties with them. Ids are
    read only for the candidates that can still make the list."""
    if depth <= 0 or not found:
        return []
    cutoff = kth_best(found[0].scores if len(found) == 1 else np.concatenate([c.scores for c in found]), depth)
    entries: list[Entry] = []
    for candidates in found:
        scores, rows = candidates.scores, candidates.rows
        if cutoff > -np.inf:  # else every candidate makes the list
            keep = np.flatnonzero(scores >= cutoff)
            scores, rows = scores[keep], rows[keep]
        if len(rows):
            entries.extend(zip((-scores.astype(np.float64)).tolist(), candidates.segment.ids_at(rows), rows.tolist(),
                               repeat(candidates.segment)))
    entries.sort()  # score descending, then id (a live id is in one segment only, so rows never compare)
    del entries[depth:]
    return entries


def entry_list(entries: Sequence[Entry]) -> RankedList:
    """``entries`` as a ranked list whose places are each id's segment and row."""
    return RankedList([doc_id for _, doc_id, _, _ in entries], [-negated for negated, _, _, _ in entries],
                      places=[(segment, row) for _, _, row, segment in entries])


def entry_hits(entries: Sequence[Entry], located: dict[str, tuple["Segment", int]]) -> list[Hit]:
    """``entries`` as ``Hit`` objects; ``located`` gets each id's segment and row."""
    located.update({doc_id: (segment, row) for _, doc_id, row, segment in entries})
    return Hit.many([doc_id for _, doc_id, _, _ in entries], [-negated for negated, _, _, _ in entries])


# efSearch of a segment asked for its share k of a multi-segment kNN list: efSearch * (k / full
# k) ** SHARE_EF_POWER. Measured on ten 100,000-document HNSW32 segments (docs/search.md): power 1
# (efSearch scaled like k) lost 3.5 points of recall@10 against full searches (0.989 -> 0.954),
# 0.75 keeps 0.967 and the merged index's recall@100 (0.892) at about half the FAISS time.
SHARE_EF_POWER = 0.75


def full_k(seg: "Segment", depth: int) -> int:
    """Hits to ask a segment's FAISS index for so that ``depth`` live ones can remain: its
    deleted rows may be among them."""
    return min(depth + seg.count - seg.live, seg.count)


class SegmentQueue:
    """Segments (or segment numbers) handed out one at a time to the threads that search
    them: a hybrid query's kNN worker and, once its BM25 list is done, the calling thread; a
    large index's BM25 list and the worker."""

    def __init__(self, segments: Iterable[Any]):
        self._left = iter(segments)
        self._lock = threading.Lock()

    def take(self) -> Any:
        with self._lock:
            return next(self._left, None)


def shared_with_worker(score: Callable[[Callable[[], Any]], list], count: int, share: bool) -> list:
    """``score(take)`` over items ``0..count-1`` handed out by ``take`` one at a time: on this
    thread and, when ``share``, on the worker thread too once it is free (a bm25 query on a
    large index). ``score`` returns one entry per item, ``None`` for the items it did not take;
    the two lists are merged (``either``)."""
    queue = SegmentQueue(range(count))
    helper = query_worker().submit(score, queue.take) if share else None
    mine = score(queue.take)
    if helper is not None and not helper.cancel():  # cancelled: it never started, so took nothing
        mine = either(mine, helper.result())
    return mine


def either(mine: list, theirs: list) -> list:
    """Two threads' entries for the same items, each ``None`` where the other thread took the item."""
    return [own if own is not None else other for own, other in zip(mine, theirs)]


def faiss_candidates(segments: Sequence["Segment"], query: np.ndarray, depth: int, queue: SegmentQueue,
                     distance: Distance) -> list[SegmentCandidates]:
    """The live rows among each segment's FAISS hits, for the segments this thread takes
    from ``queue`` (several threads may share
    it; the index's vector base is one of them, searched once for all its segments). With one segment it is asked for ``depth`` (plus its deleted rows). With several,
    each is first asked only for its share (the optimistic per-segment k of Lucene 10's
    multi-segment kNN): twice ``depth`` times its fraction of the live documents, plus 10,
    with efSearch times (that k / the full k) ** ``SHARE_EF_POWER``. A segment whose whole
    answer lands in the merged top ``depth`` may hold more, so ``settled`` searches it again
    in full (``complete`` is False until then)."""
    found = []
    live_total = max(1, sum(seg.live for seg in segments))
    while (seg := queue.take()) is not None:
        if getattr(seg, "is_base", False):  # the vector base (vectorbase.py): one graph over many segments
            found.extend(seg.candidates(query, depth, distance))
            continue
        full = full_k(seg, depth)
        k, ef = full, seg.ef_search
        if len(segments) > 1:
            k = min(full, math.ceil(2 * depth * seg.live / live_total) + 10 + seg.count - seg.live)
            if k < full:
                ef = math.ceil(seg.ef_search * (k / full) ** SHARE_EF_POWER)
        found.append(search_segment(seg, query, k, distance, ef)._replace(complete=k == full))
    return found


def search_segment(seg: "Segment", query: np.ndarray, k: int, distance: Distance,
                   ef: int | None = None) -> SegmentCandidates:
    """The live rows among ``seg``'s FAISS top ``k``. An HNSW graph is searched with
    efSearch ``ef`` (default: the segment's), never below ``k``: FAISS does not raise it
    itself, and a list longer than its candidate queue loses its tail (measured on Quora
    val, depth 30: equal-RRF MRR@20 0.854 at ef 16, 0.856 at ef 30)."""
    params = None
    if hasattr(seg.faiss, "hnsw"):
        wanted = max(k, ef or seg.ef_search)
        if wanted != seg.faiss.hnsw.efSearch:
            params = require("faiss", feature="the local index").SearchParametersHNSW(efSearch=wanted)
    with one_thread():
        raw, hits = seg.faiss.search(query, k, params=params)
    valid = hits[0] >= 0
    rows = hits[0][valid].astype(np.int64)
    scores = score_from_faiss(raw[0][valid], distance)
    if seg.deleted is not None:
        keep = ~seg.deleted[rows]
        rows, scores = rows[keep], scores[keep]
    return SegmentCandidates(seg, scores, rows)


def settled(found: list[SegmentCandidates], query: np.ndarray, depth: int, distance: Distance) -> list[SegmentCandidates]:
    """``found`` with every partial answer that reaches the merged top ``depth`` whole
    (all its scores at or above the ``depth``-th best) replaced by a full search of its
    segment: only then could the segment hold more documents that belong in the list.
    Every answer whole (one vector base, single-segment searches): ``found`` as it is, which
    ``ranked_entries`` cuts to the list."""
    if all(candidates.complete for candidates in found):
        return found
    cutoff = kth_best(np.concatenate([c.scores for c in found]) if found else np.zeros(0, np.float32), depth)
    out = []
    for candidates in found:
        if not candidates.complete and len(candidates.scores) and candidates.scores.min() >= cutoff:
            candidates = search_segment(candidates.segment, query, full_k(candidates.segment, depth), distance)
        out.append(SegmentCandidates.best(candidates.segment, candidates.scores, candidates.rows, depth))
    return out
