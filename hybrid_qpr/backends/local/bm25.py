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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_qpr.artifacts import load_npy
from hybrid_qpr.backends.local.ranking import best_rows
from hybrid_qpr.errors import require
from hybrid_qpr.text import tokenize

BM25_K1, BM25_B = 1.5, 0.75
VOCAB, PTR, ROWS, TF, DOCLEN = "bm25.vocab.json", "bm25.ptr.npy", "bm25.rows.npy", "bm25.tf.npy", "bm25.doclen.npy"
FILES: tuple[str, ...] = (VOCAB, PTR, ROWS, TF, DOCLEN)
# Tokens in at least this share of a segment's documents are also kept as dense columns
# (``dense_columns``), at most this many per segment (each costs 4 bytes per document).
DENSE_MIN_SHARE, DENSE_MAX_COLUMNS = 0.25, 8
# The compiled scorer guesses its cut from about this many documents' scores (``_score_top``).
CUT_SAMPLE = 4096


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
        out.append(DenseColumns(slot, matrix))
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
            hit = postings.posting(token)
            if hit is not None:
                df += len(hit[0]) - (int(deleted[hit[0]].sum()) if deleted is not None else 0)
        if df:
            idfs[token] = idf(df, stats.n_docs)
    return idfs


def score_segments(parts: Sequence[tuple[Postings, np.ndarray | None]], tokens: Sequence[str],
                   stats: CorpusStats, weights: Sequence[np.ndarray] | None = None) -> list[np.ndarray]:
    """BM25 score of every document of every segment (deleted ones score 0) for the query
    ``tokens``; one float32 array per segment, aligned with its rows. ``weights``: the
    ``term_weights`` of ``parts`` (computed here when not given).

    Each document's contributions are summed in query-token order (``np.bincount`` adds in
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
        for token in tokens:  # query order, repeats included
            col = postings.column(token) if token in idfs else None
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
    top-``depth`` selection gives, in one compiled pass over every posting of the query
    (numba). One entry per query token in query order (repeats included): postings
    ``starts:ends``, float32 ``token_idfs``, ``slots`` in ``dense`` (its columns are added
    whole; the same sums) or -1. ``blockmax.top_rows`` calls it for the queries that dynamic
    pruning does not speed up; numba must be installed (``has_compiled_scorer``)."""
    kernel = _top_kernel()
    scores, rows = kernel(postings.rows, weights, starts, ends, token_idfs, slots,
                          np.zeros((0, 0), dtype=np.float32) if dense is None else dense.matrix,
                          np.zeros(0, dtype=np.bool_) if excluded is None else excluded, depth,
                          _scratch(len(postings.doc_len))[:len(postings.doc_len)], CUT_SAMPLE)
    return best_rows(scores, rows, depth)  # the cut may keep more than needed: the exact cut, ties kept


_KERNEL: list = []
_SCRATCH = threading.local()
_KERNEL_LOCK = threading.Lock()


def _scratch(n_docs: int) -> np.ndarray:
    """This thread's score accumulator, at least ``n_docs`` long and all zeros between calls
    (the kernel zeroes what it used). Reused across queries: a fresh ``n_docs`` array per
    query costs its page faults (1M documents: 8 MB)."""
    total = getattr(_SCRATCH, "total", None)
    if total is None or len(total) < n_docs:
        _SCRATCH.total = total = np.zeros(n_docs, dtype=np.float64)
    return total


def compile_once(cache: list, namespace: dict, kernel: str, helpers: Sequence[str]):
    """``namespace[kernel]`` compiled by numba on first use (cached on disk, the GIL released),
    its ``helpers`` compiled in ``namespace`` first (compiled code calls compiled functions
    only); kept in ``cache``. ``None`` when numba is not installed. Built once under a lock
    (reader threads may ask at once); every later query reads ``cache`` without it."""
    if not cache:
        with _KERNEL_LOCK:
            if not cache:
                try:
                    import numba
                except ImportError:
                    cache.append(None)
                else:
                    jit = numba.njit(cache=True, nogil=True)
                    for name in helpers:
                        namespace[name] = jit(namespace[name])
                    cache.append(jit(namespace[kernel]))
    return cache[0]


def _top_kernel():
    """The compiled scorer of ``exhaustive_top``, or ``None``."""
    return compile_once(_KERNEL, globals(), "_score_top", ("_histogram_cut", "_collect"))


def _score_top(rows, weights, starts, ends, token_idfs, slots, dense, deleted, depth, total,
               sample_size):  # pragma: no cover - compiled
    """Sum ``token_idf * weight`` (float32 products, float64 sums in query-token order: what
    ``np.bincount`` does in ``score_segments``) into every document, then return the live
    positive scores at or above a cut that keeps at least the ``depth`` best, in row order,
    and zero ``total`` again (a per-thread scratch reused across queries).

    A token with a dense column (``slots[t] >= 0``) is added as the whole column (adding 0.0
    leaves a sum unchanged, so the sums are the same). The cut is guessed from a strided
    sample of about ``sample_size`` scores (the sample's score at the rank that predicts about
    three times ``depth`` documents above it): one pass then collects the documents at or
    above it. When fewer than ``depth`` come back, the exact cut of a 4,096-bin histogram over
    every score is used instead. (A list of touched documents instead of full passes was
    measured slower: Quora queries' postings reach most documents.)"""
    n_docs = len(total)
    bound = 0.0
    for t in range(len(starts)):
        idf32 = token_idfs[t]
        bound += idf32
        if slots[t] >= 0:
            column = dense[slots[t]]
            for row in range(n_docs):
                total[row] += np.float32(idf32 * column[row])
        else:
            for j in range(starts[t], ends[t]):
                total[rows[j]] += np.float32(idf32 * weights[j])
    check_deleted = len(deleted) > 0
    stride = max(1, n_docs // sample_size)
    want = -(-3 * depth // stride) + 4  # sample ranks above the guessed cut
    best = np.zeros(want, dtype=np.float64)  # the sample's best ``want`` scores, unordered (0: empty)
    low, low_at, m = 0.0, 0, 0
    for row in range(0, n_docs, stride):
        score = total[row]
        if score > 0 and not (check_deleted and deleted[row]):
            m += 1
            if score > low:  # replace the lowest kept score; rare once the buffer holds high ones
                best[low_at] = score
                low, low_at = best[0], 0
                for i in range(1, want):
                    if best[i] < low:
                        low, low_at = best[i], i
    cut = low if m >= want else 0.0  # the want-th best sampled score; 0: every positive score
    out_scores, out_rows = _collect(total, deleted, cut)
    if len(out_scores) < depth and cut > 0:  # the guess was too high: the exact histogram cut
        out_scores, out_rows = _collect(total, deleted, _histogram_cut(total, deleted, depth, bound))
    for row in range(n_docs):
        total[row] = 0.0
    return out_scores, out_rows


def _collect(total, deleted, cut):  # pragma: no cover - compiled
    """Rows (ascending) and float32 scores of the live documents scoring above 0 and at least ``cut``."""
    check_deleted = len(deleted) > 0
    n = 0
    rows = np.empty(len(total), dtype=np.int64)
    for row in range(len(total)):
        score = total[row]
        rows[n] = row
        n += score > 0 and score >= cut and not (check_deleted and deleted[row])
    out_scores = np.empty(n, dtype=np.float32)
    for i in range(n):
        out_scores[i] = np.float32(total[rows[i]])
    return out_scores, rows[:n].copy()


def _histogram_cut(total, deleted, depth, bound):  # pragma: no cover - compiled
    """A cut at or below the ``depth``-th best live score: the floor of the highest of 4,096
    bins over [0, ``bound``] (the sum of the query's idfs; weights are below 1, so no score
    reaches it) at which the count of scores reaches ``depth``."""
    bins = 4096
    counts = np.zeros(bins, dtype=np.int64)
    scale = bins / (bound * 1.001) if bound > 0 else 0.0
    check_deleted = len(deleted) > 0
    for row in range(len(total)):
        score = total[row]
        if score > 0 and not (check_deleted and deleted[row]):
            counts[int(score * scale)] += 1
    seen = 0
    for b in range(bins - 1, -1, -1):
        seen += counts[b]
        if seen >= depth:
            return (b - 1) / scale if b > 0 else 0.0  # one bin lower: never above the bin floor after rounding
    return 0.0


def rank_bm25_scores(segments: Sequence[Any], tokens: list[str], built: tuple | None) -> tuple[list[np.ndarray], tuple]:
    """rank-bm25's scores of every row of ``segments`` (deleted rows 0), for benchmarks: one
    BM25Okapi over the live texts, built now unless ``built`` (what an earlier call returned
    for the same commit) is given; returns the scores and that model."""
    if built is None:
        rank_bm25 = require("rank_bm25", extra="bench", feature="rank-bm25 search")
        live = [np.flatnonzero(~s.deleted) if s.deleted is not None else np.arange(s.count) for s in segments]
        texts = [t for s, rows in zip(segments, live)
                 for t in np.asarray([r[0] for r in s.sql("SELECT text FROM docs ORDER BY pos")], dtype=object)[rows]]
        built = (rank_bm25.BM25Okapi([tokenize(t) or [""] for t in texts], k1=BM25_K1, b=BM25_B), live)
    model, live = built
    flat = np.asarray(model.get_scores(tokens), dtype=np.float32) if sum(map(len, live)) else np.zeros(0, np.float32)
    out, start = [], 0
    for seg, rows in zip(segments, live):
        scores = np.zeros(seg.count, dtype=np.float32)
        scores[rows] = flat[start:start + len(rows)]
        start += len(rows)
        out.append(scores)
    return out, built
