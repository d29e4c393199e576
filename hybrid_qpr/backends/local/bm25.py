"""BM25 over per-segment postings with corpus-wide statistics.

Each segment stores raw postings, not scores: for every token of its vocabulary the rows
that contain it and how often (a CSC-style layout: ``ptr``, ``rows``, ``tf``), plus each
document's length in tokens. Scores are computed at query time with statistics taken over
the live documents of *all* segments (``N``, ``df``, ``avgdl``), so a document's score does
not depend on how the corpus is split into segments: it equals the score one index over the
same live documents gives (tested). bm25s cannot do this (it stores scores with idf and
avgdl baked in at indexing time), which is why the postings live here.

Scoring (Lucene's BM25, the bm25s default; Kamphuis et al., ECIR 2020)::

    idf(t)     = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(d,q) = sum over query tokens t (repeats count) of
                 idf(t) * tf(t,d) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))

with ``k1 = 1.5``, ``b = 0.75``. Deleted documents count neither in ``N``, ``df`` nor
``avgdl``.

Files (plain ``.npy`` without pickle plus a JSON vocabulary): ``bm25.vocab.json`` (tokens
in column order), ``bm25.ptr.npy`` (int64, vocabulary + 1), ``bm25.rows.npy`` (int32),
``bm25.tf.npy`` (float32), ``bm25.doclen.npy`` (float32, one per document).
"""

from __future__ import annotations

import itertools
import json
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_qpr.artifacts import load_npy
from hybrid_qpr.errors import require

BM25_K1, BM25_B = 1.5, 0.75
VOCAB, PTR, ROWS, TF, DOCLEN = "bm25.vocab.json", "bm25.ptr.npy", "bm25.rows.npy", "bm25.tf.npy", "bm25.doclen.npy"
FILES: tuple[str, ...] = (VOCAB, PTR, ROWS, TF, DOCLEN)
# Tokens in at least this share of a segment's documents are also kept as dense columns
# (``dense_columns``), at most this many per segment (each costs 4 bytes per document).
DENSE_MIN_SHARE, DENSE_MAX_COLUMNS = 0.25, 8
# The compiled scorer's pass over the sums starts from a floor scored on up to this many documents (``_seed_floor``).
SEED_ROWS = 2048


@dataclass
class Postings:
    """The postings of one segment (arrays may be memory-mapped)."""

    vocab: list[str]
    ptr: np.ndarray
    rows: np.ndarray
    tf: np.ndarray
    doc_len: np.ndarray

    def __post_init__(self) -> None:
        self._columns: dict[str, int] | None = None

    def column(self, token: str) -> int | None:
        if self._columns is None:
            self._columns = {t: i for i, t in enumerate(self.vocab)}
        return self._columns.get(token)

    def posting(self, token: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(rows, tf) of ``token`` in this segment, or ``None`` if it never occurs."""
        col = self.column(token)
        if col is None:
            return None
        start, end = int(self.ptr[col]), int(self.ptr[col + 1])
        return self.rows[start:end], self.tf[start:end]


def build_postings(token_lists: Iterable[Sequence[str]], chunk: int = 50_000) -> Postings:
    """Postings of documents given as token lists (row ``i`` = the ``i``-th list). Consumed
    ``chunk`` documents at a time into integer arrays, so a generator of a million token
    lists never holds them all at once."""
    columns: dict[str, int] = {}
    col_parts, row_parts, length_parts = [], [], []
    n_docs = 0
    it = iter(token_lists)
    while batch := list(itertools.islice(it, chunk)):
        lengths = np.fromiter((len(tokens) for tokens in batch), dtype=np.int64, count=len(batch))
        col_parts.append(np.fromiter((columns.setdefault(t, len(columns)) for tokens in batch for t in tokens),
                                     dtype=np.int64, count=int(lengths.sum())))
        row_parts.append(np.repeat(np.arange(n_docs, n_docs + len(batch), dtype=np.int64), lengths))
        length_parts.append(lengths)
        n_docs += len(batch)
    lengths = np.concatenate(length_parts) if length_parts else np.zeros(0, dtype=np.int64)
    cols = np.concatenate(col_parts) if col_parts else np.zeros(0, dtype=np.int64)
    rows = np.concatenate(row_parts) if row_parts else np.zeros(0, dtype=np.int64)
    span = max(n_docs, 1)
    keys, counts = np.unique(cols * span + rows, return_counts=True)  # sorted by column, then row
    ptr = np.zeros(len(columns) + 1, dtype=np.int64)
    np.cumsum(np.bincount(keys // span, minlength=len(columns)), out=ptr[1:])
    return Postings(list(columns), ptr, (keys % span).astype(np.int32), counts.astype(np.float32),
                    lengths.astype(np.float32))


def save_postings(postings: Postings, directory: Path) -> None:
    with open(directory / VOCAB, "w", encoding="utf-8") as fh:
        json.dump(postings.vocab, fh, ensure_ascii=False)
    for name, array in ((PTR, postings.ptr), (ROWS, postings.rows), (TF, postings.tf), (DOCLEN, postings.doc_len)):
        np.save(directory / name, array, allow_pickle=False)


def load_postings(directory: Path, mmap: bool = True) -> Postings:
    mode = "r" if mmap else None
    # plain ndarray views of the maps: slicing a np.memmap costs a Python object per slice
    arrays = [np.asarray(load_npy(directory / name, mmap_mode=mode)) for name in (PTR, ROWS, TF, DOCLEN)]
    vocab = json.loads((directory / VOCAB).read_text(encoding="utf-8"))
    return Postings(vocab, *arrays)


def idf(df: int, n_docs: int) -> float:
    """Lucene's idf: ``ln(1 + (N - df + 0.5) / (df + 0.5))`` (never negative)."""
    return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))


@dataclass(frozen=True)
class CorpusStats:
    """Corpus-wide BM25 statistics over the live documents of every segment."""

    n_docs: int
    avg_len: float


def corpus_stats(parts: Sequence[tuple[Postings, np.ndarray | None]]) -> CorpusStats:
    """``parts`` = (postings, deleted mask or ``None``) per segment."""
    n_docs, total = 0, 0.0
    for postings, deleted in parts:
        lengths = np.asarray(postings.doc_len, dtype=np.float64)
        if deleted is not None:
            lengths = lengths[~deleted]
        n_docs += len(lengths)
        total += float(lengths.sum())
    return CorpusStats(n_docs, total / n_docs if n_docs else 0.0)


def term_weights(parts: Sequence[tuple[Postings, np.ndarray | None]], stats: CorpusStats, k1: float = BM25_K1,
                 b: float = BM25_B) -> list[np.ndarray]:
    """``tf / (tf + k1 * (1 - b + b * |d| / avgdl))`` of every posting of every segment,
    aligned with its ``rows`` (float32). Depends on the corpus statistics, so it is
    computed per open (cached by the index until the next commit), not stored."""
    avg = stats.avg_len or 1.0
    out = []
    for postings, _ in parts:
        norm = k1 * (1.0 - b + b * np.asarray(postings.doc_len, dtype=np.float64) / avg)
        tf = np.asarray(postings.tf, dtype=np.float64)
        out.append((tf / (tf + norm[postings.rows])).astype(np.float32))
    return out


@dataclass(frozen=True)
class DenseColumns:
    """The term weights of a segment's most common tokens laid out densely (one float32 row
    of ``n_docs`` per token, 0 where the token is absent): adding a whole column is a
    vectorised pass, where scattering the same postings one by one costs a random access
    each. ``slot[col]`` is the token's row in ``matrix``, or -1."""

    slot: np.ndarray  # int64, one per vocabulary column
    matrix: np.ndarray  # float32, (tokens, n_docs)
    top: np.ndarray  # float32, each column's largest weight


def dense_columns(parts: Sequence[tuple[Postings, np.ndarray | None]], weights: Sequence[np.ndarray],
                  min_share: float = DENSE_MIN_SHARE, max_columns: int = DENSE_MAX_COLUMNS) -> list[DenseColumns]:
    """Per segment, the tokens in at least ``min_share`` of its documents (the ``max_columns``
    most common), as :class:`DenseColumns`. On Quora questions five tokens (``?``, ``what``,
    ``the``, ...) hold 79% of a median query's postings; as dense columns they cost 2.5 MB at
    123,725 documents. Cached with the term weights (same lifetime: one commit)."""
    out = []
    for (postings, _), values in zip(parts, weights):
        n_docs = len(postings.doc_len)
        df = np.diff(np.asarray(postings.ptr))
        common = np.flatnonzero(df >= max(1, min_share * n_docs))
        common = common[np.argsort(-df[common], kind="stable")][:max_columns]
        slot = np.full(len(df), -1, dtype=np.int64)
        slot[common] = np.arange(len(common))
        matrix = np.zeros((len(common), n_docs), dtype=np.float32)
        for i, col in enumerate(common):
            start, end = int(postings.ptr[col]), int(postings.ptr[col + 1])
            matrix[i, postings.rows[start:end]] = values[start:end]
        out.append(DenseColumns(slot, matrix, matrix.max(axis=1, initial=0.0)))
    return out


def query_idfs(parts: Sequence[tuple[Postings, np.ndarray | None]], tokens: Sequence[str],
               stats: CorpusStats) -> dict[str, float]:
    """Corpus-wide idf of each distinct query token that occurs in a live document."""
    idfs: dict[str, float] = {}
    if stats.n_docs == 0:
        return idfs
    for token in dict.fromkeys(tokens):
        df = 0
        for postings, deleted in parts:
            col = postings.column(token)
            if col is not None:  # from the pointers: slicing the postings cost half a query's Python time at 1M
                start, end = int(postings.ptr[col]), int(postings.ptr[col + 1])
                df += end - start
                if deleted is not None:
                    df -= int(np.count_nonzero(deleted[postings.rows[start:end]]))
        if df:
            idfs[token] = idf(df, stats.n_docs)
    return idfs


def scoring_order(tokens: Sequence[str], idfs: dict[str, float]) -> list[str]:
    """The query's tokens that score (those in ``idfs``), repeats included, in the order every
    scorer adds their contributions: rarest first (idf descending, then the token). Float sums
    depend on their order, and a fixed one lets the compiled scorers add the rare tokens of a
    document first and stop before the common ones when the document cannot make the list,
    with the same bits as adding everything (``exhaustive_top``)."""
    return sorted((token for token in tokens if token in idfs), key=lambda token: (-idfs[token], token))


def score_segments(parts: Sequence[tuple[Postings, np.ndarray | None]], tokens: Sequence[str],
                   stats: CorpusStats, weights: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
    """BM25 score of every document of every segment (deleted ones score 0) for the query
    ``tokens``; one float32 array per segment, aligned with its rows. ``weights``: the
    ``term_weights`` of ``parts`` (computed here when not given).

    Each document's contributions are summed in ``scoring_order`` (``np.bincount`` adds in
    input order), so the score is the same whichever segment holds the document."""
    scores = [np.zeros(len(p.doc_len), dtype=np.float32) for p, _ in parts]
    if stats.n_docs == 0 or not tokens:
        return scores
    idfs = query_idfs(parts, tokens, stats)
    if not idfs:
        return scores
    if weights is None:
        weights = term_weights(parts, stats)
    for seg, (postings, deleted) in enumerate(parts):
        rows, values = [], []
        for token in scoring_order(tokens, idfs):  # repeats included
            col = postings.column(token)
            if col is None:
                continue
            start, end = int(postings.ptr[col]), int(postings.ptr[col + 1])
            rows.append(postings.rows[start:end])
            values.append(idfs[token] * weights[seg][start:end])
        if rows:
            scores[seg] = np.bincount(np.concatenate(rows), weights=np.concatenate(values),
                                      minlength=len(postings.doc_len)).astype(np.float32)
            if deleted is not None:
                scores[seg][deleted] = 0.0
    return scores


def exhaustive_top(postings: Postings, weights: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                   token_idfs: np.ndarray, slots: np.ndarray, dense: DenseColumns | None, excluded: np.ndarray | None,
                   depth: int) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, rows)`` of one segment's live documents (``excluded``: a mask of the others,
    or ``None``) with a positive score that are among its ``depth`` best or tied with the last
    of them: the rows and the bit-identical scores that ``score_segments`` followed by a
    top-``depth`` selection gives, from one compiled pass over the query's postings (numba).
    One entry per query token in ``scoring_order`` (repeats included): postings
    ``starts:ends``, float32 ``token_idfs``, ``slots`` in ``dense`` or -1. ``blockmax.top_rows``
    calls it for the queries that block-max MaxScore does not speed up; numba must be
    installed (``has_compiled_scorer``)."""
    kernel = _top_kernel()
    total, kept_rows, kept_scores = _scratch(len(postings.doc_len))
    no_dense = dense is None
    n_kept, final = kernel(postings.rows, weights, starts, ends, token_idfs, slots,
                           np.zeros((0, 0), dtype=np.float32) if no_dense else dense.matrix,
                           np.zeros(0, dtype=np.float32) if no_dense else dense.top,
                           np.zeros(0, dtype=np.bool_) if excluded is None else excluded, max(depth, 1),
                           total[:len(postings.doc_len)], kept_rows, kept_scores)
    chosen = np.flatnonzero(kept_scores[:n_kept] >= final)  # rows ascending: kept in row order
    return kept_scores[chosen], kept_rows[chosen].astype(np.int64)


_KERNEL: list = []
_SCRATCH = threading.local()
_KERNEL_LOCK = threading.Lock()


def _scratch(n_docs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This thread's score accumulator (float64, all zeros between calls: the kernel zeroes
    what it used) and its buffers of kept rows and scores, at least ``n_docs`` long. Reused
    across queries: fresh arrays per query cost their page faults (1M documents: 16 MB)."""
    arrays = getattr(_SCRATCH, "arrays", None)
    if arrays is None or len(arrays[0]) < n_docs:
        _SCRATCH.arrays = arrays = (np.zeros(n_docs, dtype=np.float64), np.empty(n_docs, dtype=np.int32),
                                    np.empty(n_docs, dtype=np.float32))
    return arrays


def compile_once(cache: list, namespace: dict, kernel: str, helpers: Sequence[str]):
    """``namespace[kernel]`` compiled by numba on first use (cached on disk, the GIL released),
    its ``helpers`` compiled in ``namespace`` first (compiled code calls compiled functions
    only); kept in ``cache``. ``None`` when numba is not installed. Built once under a lock
    (reader threads may ask at once); every later query reads ``cache`` without it. When numba
    has no cached copy that is newer than the source, a line on stderr says that this run
    compiles it (``announce_compiling``)."""
    if not cache:
        with _KERNEL_LOCK:
            if not cache:
                try:
                    import numba
                except ImportError:
                    cache.append(None)
                else:
                    jit = numba.njit(cache=True, nogil=True)
                    for name in helpers:  # a helper shared by two modules' kernels is compiled once
                        helper = namespace[name]
                        namespace[name] = helper if hasattr(helper, "py_func") else jit(helper)
                    compiled = jit(namespace[kernel])
                    announce_compiling(compiled, namespace[kernel])
                    cache.append(compiled)
    return cache[0]


def announce_compiling(dispatcher, function) -> None:
    """Say on stderr that this run compiles ``function`` when numba's cache (``stats.cache_path``)
    holds no index of it at least as new as its source file: a first run (or the first after an
    upgrade) waits up to half a minute for it, later runs load it in a fraction of a second."""
    import sys

    source = Path(function.__code__.co_filename)
    where = Path(dispatcher.stats.cache_path)
    kept = list(where.glob(f"*.{function.__qualname__}-*.nbi"))
    if source.is_file() and any(k.stat().st_mtime >= source.stat().st_mtime for k in kept):
        return
    print(f"compiling the BM25 scorer ({function.__qualname__.strip('_')}) with numba: once, up to half a minute; "
          f"later runs load it from {where}", file=sys.stderr, flush=True)


def _top_kernel():
    """The compiled scorer of ``exhaustive_top``, or ``None``."""
    return compile_once(_KERNEL, globals(), "_score_top", ("heap_push", "_add_tokens", "_seed_floor", "_keep_best"))


def heap_push(heap, labels, size, value, label):  # pragma: no cover - compiled
    """Add ``value`` (with ``label``) to the min-heap ``heap[:size]`` of capacity ``len(heap)``,
    dropping the smallest when full; return the new size. (Compiled by the kernels that call it.)"""
    if size < len(heap):
        i = size
        while i > 0 and heap[(i - 1) >> 1] > value:
            parent = (i - 1) >> 1
            heap[i], labels[i] = heap[parent], labels[parent]
            i = parent
        heap[i], labels[i] = value, label
        return size + 1
    if value <= heap[0]:
        return size
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if heap[child] >= value:
            break
        heap[i], labels[i] = heap[child], labels[child]
        i = child
    heap[i], labels[i] = value, label
    return size


def _score_top(rows, weights, starts, ends, token_idfs, slots, dense, dense_top, deleted, depth, total, kept_rows,
               kept_scores):  # pragma: no cover - compiled
    """Sum ``token_idf * weight`` (float32 products, float64 sums in scoring order: what
    ``np.bincount`` does in ``score_segments``) into the documents, then one pass in row order
    keeps each live positive score that reaches the ``depth``-th best seen so far (a min-heap;
    a float64 floor a little under it skips the rest with one comparison) in ``kept_rows`` /
    ``kept_scores``, and zeroes ``total`` again (a per-thread scratch). Returns how many were
    kept and the final ``depth``-th best (0: fewer live positive scores): the kept scores at
    or above it are the list, ties included.

    The common tokens come last in scoring order and have dense columns (``slots[t] >= 0``).
    When the query has rarer tokens too, only those are added first; the pass then adds the
    dense tail to a document only if its partial sum plus the most the tail can add
    (``tail_bound``) reaches the floor: the same sum, in the same order, for the documents
    that can make the list. A document with none of the rarer tokens scores at most
    ``tail_bound``; if the list's last score is not above it, the whole query is added to
    every document instead (adding a dense column's zeros leaves sums unchanged)."""
    m = len(starts)
    tail = m  # the dense tail of the scoring order: tokens tail..m-1
    while tail > 0 and slots[tail - 1] >= 0:
        tail -= 1
    tail_bound = 0.0
    for t in range(tail, m):
        tail_bound += np.float64(np.float32(token_idfs[t] * dense_top[slots[t]]))
    heap = np.empty(depth, dtype=np.float32)
    if 0 < tail < m:
        _add_tokens(rows, weights, starts, ends, token_idfs, slots, dense, total, tail)
        seed = _seed_floor(rows, starts, ends, token_idfs, slots, dense, deleted, total, tail, m, depth)
        n_kept, size = _keep_best(token_idfs, slots, dense, deleted, total, kept_rows, kept_scores, heap, tail, m,
                                  tail_bound, seed)
        if size == depth and np.float64(heap[0]) > tail_bound * (1.0 + 1e-6):
            return n_kept, heap[0]
    _add_tokens(rows, weights, starts, ends, token_idfs, slots, dense, total, m)
    seed = _seed_floor(rows, starts, ends, token_idfs, slots, dense, deleted, total, m, m, depth)
    n_kept, size = _keep_best(token_idfs, slots, dense, deleted, total, kept_rows, kept_scores, heap, m, m, 0.0, seed)
    return n_kept, heap[0] if size == depth else np.float32(0.0)


def _add_tokens(rows, weights, starts, ends, token_idfs, slots, dense, total, added):  # pragma: no cover - compiled
    """Add the first ``added`` tokens (scoring order) into ``total``: dense columns whole, postings one by one."""
    for t in range(added):
        idf32 = token_idfs[t]
        if slots[t] >= 0:
            column = dense[slots[t]]
            for row in range(len(total)):
                total[row] += np.float32(idf32 * column[row])
        else:
            for j in range(starts[t], ends[t]):
                total[rows[j]] += np.float32(idf32 * weights[j])


def _seed_floor(rows, starts, ends, token_idfs, slots, dense, deleted, total, tail, m, depth):  # pragma: no cover - compiled
    """A score the list's last one is sure to reach: the ``depth``-th best exact score among
    up to ``SEED_ROWS`` documents of the rarest token with at least ``depth`` postings (a
    token's rows are distinct, so these are ``depth`` different documents), or 0."""
    check_deleted = len(deleted) > 0
    for t in range(tail):
        if slots[t] < 0 and ends[t] - starts[t] >= depth:
            heap = np.empty(depth, dtype=np.float32)
            labels = np.empty(depth, dtype=np.int64)
            size = 0
            for j in range(starts[t], min(ends[t], starts[t] + SEED_ROWS)):
                row = rows[j]
                if check_deleted and deleted[row]:
                    continue
                value = total[row]
                # the tail inline, as in _keep_best: a shared compiled helper made the 1M full pass ~20% slower
                for u in range(tail, m):
                    value += np.float32(token_idfs[u] * dense[slots[u], row])
                size = heap_push(heap, labels, size, np.float32(value), row)
            return np.float64(heap[0]) if size == depth else 0.0
    return 0.0


def _keep_best(token_idfs, slots, dense, deleted, total, kept_rows, kept_scores, heap, tail, m, tail_bound,
               seed):  # pragma: no cover - compiled
    """One pass in row order over the sums of the tokens before ``tail``, zeroing them: a
    document whose sum plus ``tail_bound`` can reach the floor gets the dense tail
    ``tail..m-1`` added (in order), and its score is kept if it reaches the heap's least.
    ``seed``: a score the list's last one reaches (``_seed_floor``; 0: none). Returns (kept,
    heap size). Once the floor is high, a row costs one well-predicted comparison."""
    check_deleted = len(deleted) > 0
    depth = len(heap)
    heap_rows = np.empty(depth, dtype=np.int64)
    size = 0
    n_kept = 0
    # a float64 sum below floor (a little under heap[0]) cannot round to a float32 at or above
    # heap[0]; rows are tested against floor - tail_bound (measured 7x faster than adding
    # tail_bound to every row's sum, when the sums are zero for half the rows)
    limit = seed * (1.0 - 1e-6) - tail_bound if seed > 0.0 else -tail_bound
    for row in range(len(total)):
        value = total[row]
        total[row] = 0.0
        if value > limit:
            if value <= 0.0 or (check_deleted and deleted[row]):
                continue
            for t in range(tail, m):
                value += np.float32(token_idfs[t] * dense[slots[t], row])
            score = np.float32(value)
            if size < depth or score >= heap[0]:
                kept_rows[n_kept], kept_scores[n_kept] = row, score
                n_kept += 1
                size = heap_push(heap, heap_rows, size, score, row)
                if size == depth:
                    limit = max(limit, np.float64(heap[0]) * (1.0 - 1e-6) - tail_bound)
    return n_kept, size


def rank_bm25_scores(segments: Sequence[Any], tokens: list[str], built: tuple | None,
                     analyze: Callable[[str], list[str]]) -> tuple[list[np.ndarray], tuple]:
    """rank-bm25's scores of every row of ``segments`` (deleted rows 0), for benchmarks: one
    BM25Okapi over the live texts, built now unless ``built`` (what an earlier call returned
    for the same commit) is given, its texts analysed by ``analyze``; returns the scores and that model."""
    if built is None:
        rank_bm25 = require("rank_bm25", extra="bench", feature="rank-bm25 search")
        live = [np.flatnonzero(~s.deleted) if s.deleted is not None else np.arange(s.count) for s in segments]
        texts = [t for s, rows in zip(segments, live)
                 for t in np.asarray([r[0] for r in s.sql("SELECT text FROM docs ORDER BY pos")], dtype=object)[rows]]
        built = (rank_bm25.BM25Okapi([analyze(t) or [""] for t in texts], k1=BM25_K1, b=BM25_B), live)
    model, live = built
    flat = np.asarray(model.get_scores(tokens), dtype=np.float32) if sum(map(len, live)) else np.zeros(0, np.float32)
    out, start = [], 0
    for seg, rows in zip(segments, live):
        scores = np.zeros(seg.count, dtype=np.float32)
        scores[rows] = flat[start:start + len(rows)]
        start += len(rows)
        out.append(scores)
    return out, built
