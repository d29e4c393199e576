"""What the readers of a local index see of one commit (``IndexSnapshot``): its manifest, its
segments, its vector base and the BM25 tables derived from them, never changed once made, so
the segments, the graph and the corpus statistics a query reads always belong together. The
derived tables are computed at most once per snapshot, on its first BM25 query (opening an
index stays cheap).

A snapshot is held by its index while it is the current one and by every reader that took it
(``LocalIndex.reader``); consecutive snapshots share the segments a commit kept. ``OpenFiles``
counts the snapshots holding each open segment and graph and closes one only when the last of
them is released, so a commit never closes files that another thread is still reading."""

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


class OpenFiles:
    """The open segments and vector-base graphs of one index, each with the number of snapshots
    holding it; one is closed when the last of them lets it go."""

    def __init__(self) -> None:
        self._holders: dict[int, list] = {}  # id(part) -> [part, snapshots holding it]
        self._lock = threading.Lock()

    def hold(self, parts: Sequence[Any]) -> None:
        with self._lock:
            for part in parts:
                self._holders.setdefault(id(part), [part, 0])[1] += 1

    def let_go(self, parts: Sequence[Any]) -> None:
        closing = []
        with self._lock:
            for part in parts:
                held = self._holders[id(part)]
                held[1] -= 1
                if held[1] == 0:
                    del self._holders[id(part)]
                    closing.append(part)
        for part in closing:
            part.close()

    def held(self, part: Any) -> int:
        """How many snapshots hold ``part`` (0: closed, or never held)."""
        with self._lock:
            return self._holders.get(id(part), [None, 0])[1]


class IndexSnapshot:
    """One commit's manifest, segments and vector base, with its BM25 tables once computed.
    Made holding one reference (its index's); ``acquire`` adds a reader's, ``release`` drops
    one, and the last release lets its segments and graph go (``OpenFiles``)."""

    __slots__ = ("manifest", "segments", "base", "idfs", "_tables", "_rank_bm25", "_lock", "_files", "_holders",
                 "_holding")

    def __init__(self, manifest: dict[str, Any] | None = None, segments: Sequence[Segment] = (), base: Any = None,
                 files: OpenFiles | None = None):
        self.manifest: dict[str, Any] = manifest or {}
        self.segments: tuple[Segment, ...] = tuple(segments)
        self.base = base  # vectorbase.VectorBase over the large segments, or None
        self.idfs: dict[str, float | None] = {}  # query token -> idf (None: in no live document)
        self._tables: Bm25Tables | None = None
        self._rank_bm25: tuple | None = None
        self._lock = threading.Lock()
        self._files = files
        self._holders = 1
        self._holding = threading.Lock()  # not _lock: a reader never waits for the BM25 tables to be computed
        if files is not None:
            files.hold(self._parts())

    @property
    def generation(self) -> int:
        """The commit this snapshot shows (0: no ingest has committed)."""
        return int(self.manifest.get("generation", 0))

    def _parts(self) -> list[Any]:
        return [*self.segments, *([] if self.base is None else [self.base.graph_file])]

    def acquire(self) -> bool:
        """Hold this snapshot for a reader; False when it was released for good (the reader
        then takes its index's newer snapshot)."""
        with self._holding:
            if self._holders == 0:
                return False
            self._holders += 1
            return True

    def release(self) -> None:
        with self._holding:
            self._holders -= 1
            last = self._holders == 0
        if last and self._files is not None:
            self._files.let_go(self._parts())

    def bm25_tables(self, compiled: bool = False) -> Bm25Tables:
        """The tables, computed on first use (by one thread; the others wait for them);
        ``compiled``: with what only the compiled scorer reads (added when first asked for)."""
        tables = self._tables
        if tables is None or (compiled and tables.blocks is None):
            with self._lock:
                if self._tables is None:
                    self._tables = _compute_tables(self.segments)
                if compiled and self._tables.blocks is None:
                    self._tables = _with_compiled_tables(self._tables)
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
    return Bm25Tables(parts, stats, bm25_lib.term_weights(parts, stats), None, None)


def _with_compiled_tables(tables: Bm25Tables) -> Bm25Tables:
    """``tables`` with the dense columns and block maxima of the compiled scorer."""
    dense = bm25_lib.dense_columns(tables.parts, tables.weights)
    blocks = [blockmax.block_maxima(p, w) for (p, _), w in zip(tables.parts, tables.weights)]
    return tables._replace(dense=dense, blocks=blocks)
