"""What the readers of a local index see of one commit: its segments, its vector base and the
BM25 tables derived from them (``IndexSnapshot``). ``LocalIndex`` replaces its snapshot whole at
each commit and refresh and never changes one, so the segments, the graph and the corpus
statistics a query reads always belong together. The derived tables are computed at most once
per snapshot, on its first BM25 query (opening an index stays cheap)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from hybrid_qpr.backends.local import blockmax
from hybrid_qpr.backends.local import bm25 as bm25_lib
from hybrid_qpr.backends.local.segment import Segment

IDF_CACHE_TOKENS = 100_000  # distinct query tokens whose idf a snapshot remembers


class Bm25Tables(NamedTuple):
    """The corpus statistics and term weights of one snapshot, and what only the compiled
    scorer reads (up to 8 columns of 4 bytes per document; 9 bytes per 64 postings)."""

    parts: list[tuple[Any, np.ndarray | None]]  # (postings, deleted mask) per segment
    stats: Any  # bm25.CorpusStats
    weights: list
    dense: list | None
    blocks: list | None


class IndexSnapshot:
    """One commit's segments and vector base, with its BM25 tables once computed."""

    __slots__ = ("segments", "base", "idfs", "_tables", "_rank_bm25", "_lock")

    def __init__(self, segments: Sequence[Segment] = (), base: Any = None):
        self.segments: tuple[Segment, ...] = tuple(segments)
        self.base = base  # vectorbase.VectorBase over the large segments, or None
        self.idfs: dict[str, float | None] = {}  # query token -> idf (None: in no live document)
        self._tables: Bm25Tables | None = None
        self._rank_bm25: tuple | None = None
        self._lock = threading.Lock()

    def bm25_tables(self) -> Bm25Tables:
        """The tables, computed on first use (by one thread; the others wait for them)."""
        tables = self._tables
        if tables is None:
            with self._lock:
                if self._tables is None:
                    self._tables = _compute_tables(self.segments)
                tables = self._tables
        return tables

    def rank_bm25_scores(self, tokens: list[str], analyze: Callable[[str], list[str]]) -> list[np.ndarray]:
        """The reference scorer's scores (``bm25.rank_bm25_scores``), its model built once."""
        scores, self._rank_bm25 = bm25_lib.rank_bm25_scores(self.segments, tokens, self._rank_bm25, analyze)
        return scores

    def remembered_idfs(self) -> dict[str, float | None]:
        """``idfs``, emptied first when it has grown past ``IDF_CACHE_TOKENS``."""
        if len(self.idfs) > IDF_CACHE_TOKENS:
            self.idfs.clear()
        return self.idfs


def _compute_tables(segments: Sequence[Segment]) -> Bm25Tables:
    parts = [(s.postings, s.deleted) for s in segments]
    stats = bm25_lib.corpus_stats(parts)
    weights = bm25_lib.term_weights(parts, stats)
    compiled = blockmax.has_compiled_scorer()
    dense = bm25_lib.dense_columns(parts, weights) if compiled else None
    blocks = [blockmax.block_maxima(p, w) for (p, _), w in zip(parts, weights)] if compiled else None
    return Bm25Tables(parts, stats, weights, dense, blocks)
