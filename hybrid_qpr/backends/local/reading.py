"""The read side of a local index: ``IndexReader``, one query's view of one commit (an
``IndexSnapshot``: its segments, vector base and BM25 statistics, with the index's distance,
dimension and BM25 scorer), held from the first list to the last document fetched, so a
commit made meanwhile never changes or closes what the query reads. ``LocalIndex.reader``
hands one out; the reader lets its snapshot go when it is closed (it is a context manager).

Every list is merged exactly across segments (``ranking.ranked_entries``, ties broken by id)
into ``(-score, id, row, segment)`` entries. ``bm25``, ``knn`` and ``bm25_and_knn`` turn them
into hits (``bm25_and_knn``: ranked lists of ids and scores, no ``Hit`` per listed document;
both lists at once on two threads) and the reader notes which segment row each listed id came
from, so fetching the documents of a result page reads those rows by position (SQLite's rowid)
instead of looking every id up in every segment: at one million documents in four segments
that fetch was a sixth of a BM25 query (docs/search.md). Fusion is the searcher's
(``hybrid_qpr.search``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_qpr.backends.base import Capabilities
from hybrid_qpr.backends.local import blockmax
from hybrid_qpr.backends.local import bm25 as bm25_lib
from hybrid_qpr.backends.local.matching import matching_rows
from hybrid_qpr.backends.local.ranking import (SegmentCandidates, Entry, SegmentQueue, either, entry_hits, faiss_candidates,
                                               entry_list, ranked_entries, settled,
                                               shared_with_worker)
from hybrid_qpr.backends.local.segment import Segment
from hybrid_qpr.backends.local.snapshot import Bm25Tables, IndexSnapshot
from hybrid_qpr.backends.local.vectorbase import knn_units
from hybrid_qpr.backends.local.worker import query_worker
from hybrid_qpr.distance import Distance, prepare_vectors, similarity
from hybrid_qpr.errors import ModelMismatchError
from hybrid_qpr.text.analysis import Analyzer
from hybrid_qpr.types import Candidates, Document, Filters, Hit, QueryVector, RankedList


# From this many documents in several segments, a BM25 list's segments are shared with the
# worker thread when it is free (smaller lists take a few hundred microseconds on one thread).
PARALLEL_BM25_DOCS = 200_000
# Ids whose segment row a reader remembers for the documents fetch (a few dozen queries' lists;
# a forgotten id is looked up by id, as any other).
LOCATED_IDS = 4096
# bm25_and_knn runs the two lists on two threads (both release the GIL while they score)
CAPABILITIES = Capabilities(batched_bm25_and_knn=True, knn_search_settings=True, snapshot_reads=True)


class IndexReader:
    """Queries over one snapshot (see the module docstring). ``close`` (or leaving the ``with``
    block) lets the snapshot go; a reader is not used afterwards."""

    __slots__ = ("capabilities", "snapshot", "segments", "base", "path", "distance", "dim", "bm25_impl", "analyzer",
                 "_rows", "_open")

    def __init__(self, snapshot: IndexSnapshot, path: Path, distance: Distance, dim: int, bm25_impl: str,
                 capabilities: Capabilities = CAPABILITIES, analyzer: Analyzer | None = None):
        self.capabilities = capabilities  # its index's
        self.snapshot = snapshot  # held for this reader (IndexSnapshot.acquire) by LocalIndex.reader
        self.segments: tuple[Segment, ...] = snapshot.segments
        self.base = snapshot.base  # vectorbase.VectorBase of the commit, or None
        self.path, self.distance, self.dim, self.bm25_impl = path, distance, dim, bm25_impl
        self.analyzer = analyzer or Analyzer.from_record(snapshot.manifest.get("bm25", {}).get("analyzer"), f"index {path}")
        self._rows: dict[str, tuple[Segment, int]] = {}  # where the ids of this reader's lists live
        self._open = True

    def __enter__(self) -> "IndexReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._open:
            self._open = False
            self.snapshot.release()

    @property
    def generation(self) -> int:
        """The commit this reader shows."""
        return self.snapshot.generation

    def count(self) -> int:
        return sum(s.live for s in self.segments)

    def _located(self) -> dict[str, tuple[Segment, int]]:
        """Where the ids of this reader's lists live (id -> segment, row): right for as long as
        the reader's snapshot, which never changes; past ``LOCATED_IDS`` the oldest half is
        forgotten."""
        memory = self._rows
        if len(memory) > LOCATED_IDS:
            for doc_id in list(islice(memory, len(memory) - LOCATED_IDS // 2)):
                del memory[doc_id]
        return memory

    def matching(self, filters: Filters | None) -> list[np.ndarray] | None:
        """Per segment, the live rows matching ``filters`` (``None`` = no filter; ``matching.py``)."""
        return matching_rows(self.segments, filters, self.path) if filters else None

    def _bm25_scores(self, tokens: list[str]) -> list[np.ndarray]:
        """BM25 score of every row of every segment (deleted rows 0)."""
        if self.bm25_impl == "rank-bm25":  # the reference for benchmarks: built once per commit
            return self.snapshot.rank_bm25_scores(tokens, self.analyzer.analyze)
        tables = self.snapshot.bm25_tables()
        return bm25_lib.score_segments(tables.parts, tokens, tables.stats, tables.weights)

    def _bounded(self, depth: int) -> int:
        """``depth`` clamped to the documents the index holds: a list is never longer, and
        asking FAISS or a partition for a billion hits would allocate for them."""
        return max(0, min(int(depth), self.count()))

    def bm25(self, query: str, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` documents with a positive BM25 score, filters applied before ranking."""
        return entry_hits(self._bm25_entries(query, self._bounded(depth), self.matching(filters)), self._located())

    def _bm25_entries(self, query: str, depth: int, allowed: list[np.ndarray] | None,
                      compiled: bool | None = None) -> list[Entry]:
        segments = self.segments
        if not segments:
            return []
        if self._compiled_bm25() if compiled is None else compiled:
            best = shared_with_worker(self._bm25_scorer(query, depth, allowed), len(segments),
                                      share=len(segments) > 1 and self.count() >= PARALLEL_BM25_DOCS)
            return self._bm25_merged(best, depth)
        found = []
        for i, (seg, scores) in enumerate(zip(segments, self._bm25_scores(self.analyzer.analyze(query)))):
            rows = np.flatnonzero(scores > 0) if allowed is None else allowed[i][scores[allowed[i]] > 0]
            found.append(SegmentCandidates.best(seg, scores[rows], rows, depth))
        return ranked_entries(found, depth)

    def _compiled_bm25(self) -> bool:
        """Whether this query's BM25 list runs on the compiled scorer (asked once per query:
        ``blockmax.compiled_scorer_pays``)."""
        return self.bm25_impl == "builtin" and blockmax.compiled_scorer_pays(self.count())

    def _bm25_scorer(self, query: str, depth: int, allowed: list[np.ndarray] | None) -> Callable[[Callable[[], Any]], list]:
        """``score(take)``: the best rows of each segment number ``take`` hands out (``None``
        for the others), by the compiled scorer; two threads may share one ``take``."""
        snapshot, tokens = self.snapshot, self.analyzer.analyze(query)
        tables = snapshot.bm25_tables(compiled=True)
        idfs = _query_idfs(snapshot, tables, tokens) if tokens else {}  # once for both threads
        plans: dict = {}  # shared by the threads that score this list (blockmax.top_rows)
        return lambda take: blockmax.top_rows(tables.parts, tokens, tables.stats, tables.weights, depth, tables.dense,
                                              tables.blocks, allowed, take, idfs, plans)

    def _bm25_merged(self, best: list, depth: int) -> list[Entry]:
        return ranked_entries([SegmentCandidates(seg, *found) for seg, found in zip(self.segments, best)], depth)

    def knn(self, vector: np.ndarray, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` by similarity: FAISS per segment without filters; exact over the
        matching rows with them."""
        query = self._knn_query(vector)
        depth = self._bounded(depth)
        allowed = self.matching(filters)
        if allowed is None:
            units = knn_units(self.segments, self.base)
            found = faiss_candidates(units, query, depth, SegmentQueue(units), self.distance)
            return entry_hits(ranked_entries(settled(found, query, depth, self.distance), depth), self._located())
        found = []
        for seg, rows in zip(self.segments, allowed):
            if len(rows):
                scores = similarity(query, np.asarray(seg.vectors[rows]), self.distance)[0]
                found.append(SegmentCandidates.best(seg, scores, rows, depth))
        return entry_hits(ranked_entries(found, depth), self._located())

    def _knn_query(self, vector: np.ndarray) -> np.ndarray:
        query = prepare_vectors(np.asarray(vector, dtype=np.float32).reshape(1, -1), self.distance)
        if query.shape[1] != self.dim:
            raise ModelMismatchError(f"query vector has {query.shape[1]} dims; index {self.path} has {self.dim}")
        return query

    def bm25_and_knn(self, query: str, vector: QueryVector, depth: int,
                     filters: Filters | None = None) -> Candidates:
        """The ``bm25`` and ``knn`` lists at once (``_both_lists``); ``vector`` is encoded while
        the BM25 list is scored."""
        depth = self._bounded(depth)
        if not self.segments or depth == 0:
            return Candidates(RankedList([], []), RankedList([], []))
        if filters:  # filtered lists are exact scans over the matching rows: no FAISS call to overlap
            return Candidates.of_hits(self.bm25(query, depth, filters), self.knn(vector.get(), depth, filters))
        bm25_list, knn_list = self._both_lists(query, vector, depth)
        return Candidates(entry_list(bm25_list), entry_list(knn_list))

    def _both_lists(self, query: str, vector: QueryVector, depth: int) -> tuple[list[Entry], list[Entry]]:
        """The unfiltered BM25 and kNN lists (``depth`` >= 1) on two threads: the BM25 list on
        the worker while this thread encodes the query and searches the vectors. FAISS, the
        compiled BM25 scorer and onnxruntime release the GIL, so on two cores a hybrid query
        costs about the slower half instead of their sum. The kNN half stays here because it
        starts with the encoding: the worker wakes up a tenth of a millisecond after it is
        asked (measured), which BM25 can better afford; the worker also reads the query's
        tokens and idfs, so the encoding starts at once. With one graph to search (a vector
        base, or one segment) this thread merges the kNN list while the worker may still be
        scoring; with several, each thread takes what the other has not started: this one
        BM25 segments, the worker graphs."""
        units = knn_units(self.segments, self.base)
        vector_units = SegmentQueue(units)
        several_graphs = len(units) > 1
        ready: list[np.ndarray] = []  # the prepared query vector, once this thread has it
        compiled = self._compiled_bm25()
        if compiled:
            segment_numbers = SegmentQueue(range(len(self.segments)))
            # one scorer for both threads when both may score; else the worker makes its own
            shared = self._bm25_scorer(query, depth, None) if len(self.segments) > 1 else None
            bm25_part = lambda: (shared or self._bm25_scorer(query, depth, None))(segment_numbers.take)  # noqa: E731
        else:  # the NumPy or reference scorer: the whole list on the worker
            shared, bm25_part = None, lambda: self._bm25_entries(query, depth, None, compiled=False)

        def bm25_half() -> tuple[list, list[SegmentCandidates]]:
            rows = bm25_part()
            if shared is None and compiled:  # every segment scored here: merge before this thread waits
                rows = self._bm25_merged(rows, depth)
            helps = ready and several_graphs  # one graph: this thread has it
            return rows, (faiss_candidates(units, ready[0], depth, vector_units, self.distance) if helps else [])

        pending = query_worker().submit(bm25_half)
        mine: list = []
        knn_list = None
        try:
            ready.append(self._knn_query(vector.get()))
            found = faiss_candidates(units, ready[0], depth, vector_units, self.distance)
            if not several_graphs:  # the whole kNN list is here: merge it while the worker scores
                knn_list = ranked_entries(settled(found, ready[0], depth, self.distance), depth)
            if shared is not None:
                mine = shared(segment_numbers.take)
        finally:
            theirs, helped = pending.result()
        if knn_list is None:
            knn_list = ranked_entries(settled(found + helped, ready[0], depth, self.distance), depth)
        if shared is None:  # the worker's list is whole
            return theirs, knn_list
        return self._bm25_merged(either(mine, theirs), depth), knn_list

    def vector_scores(self, vector: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        """Exact similarity of ``vector`` to the stored vectors of ``ids`` (the MSEM rescore mode)."""
        wanted = list(dict.fromkeys(ids))
        query = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        out: dict[str, float] = {}
        for seg in self.segments:
            rows = seg.lookup(wanted)
            if rows:
                scores = similarity(query, np.asarray(seg.vectors[[pos for _, pos in rows]]), self.distance)[0]
                out.update((doc_id, float(s)) for (doc_id, _), s in zip(rows, scores))
        return out

    def documents(self, ids: Sequence[str], places: Sequence[tuple[Segment, int]] | None = None) -> dict[str, Document]:
        """The live documents of ``ids``: read by segment row where ``places`` (from
        ``bm25_and_knn``'s lists) or this reader's ``bm25``/``knn`` lists say where they are,
        the others looked up by id in every segment."""
        wanted = list(dict.fromkeys(ids))
        if places is None:
            places = list(map(self._located().get, wanted))
        current = {id(seg): seg for seg in self.segments}
        found = self._documents_at([(segment, row) for segment, row in filter(None, places)
                                    if current.get(id(segment)) is segment])  # a place of this snapshot
        rest = [doc_id for doc_id in wanted if doc_id not in found]
        if rest:
            found.update(_documents(row for seg in self.segments for row in seg.lookup(rest, "id, text, metadata")))
        return found

    @staticmethod
    def _documents_at(places: Sequence[tuple[Segment, int]]) -> dict[str, Document]:
        """The live documents at ``places`` (segment, row), read by row."""
        by_row: dict[Segment, list[int]] = {}
        for seg, row in places:
            by_row.setdefault(seg, []).append(row)
        return _documents(row for seg, rows in by_row.items() for row in seg.documents_at(rows))


def _documents(rows: Iterable[tuple[str, str, str]]) -> dict[str, Document]:
    """``Document`` per stored ``(id, text, metadata JSON)`` row."""
    return {doc_id: Document(doc_id, text, json.loads(metadata) if metadata and metadata != "{}" else {})
            for doc_id, text, metadata in rows}


def _query_idfs(snapshot: IndexSnapshot, tables: Bm25Tables, tokens: list[str]) -> dict[str, float]:
    """``bm25.query_idfs``, remembered per snapshot (its corpus statistics): summing a token's
    document frequency over the segments was 40 us of a query at 1M documents."""
    cache = snapshot.remembered_idfs()
    known = {token: cache.get(token, False) for token in dict.fromkeys(tokens)}  # False: not looked up yet
    missing = [token for token, value in known.items() if value is False]
    if missing:
        found = bm25_lib.query_idfs(tables.parts, missing, tables.stats)
        for token in missing:
            known[token] = cache[token] = found.get(token)  # None: in no live document
    return {token: value for token, value in known.items() if value is not None}
