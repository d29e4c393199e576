"""The compiled BM25 top-k: block-max MaxScore over a segment's postings, exact.

A query's top ``depth`` needs the scores of few documents: on Quora questions the best ones
hold the query's rare tokens, and the common tokens (``?``, ``what``, ``the``) can add at
most a little to any document. MaxScore (Turtle and Flood 1995) keeps the query's tokens
sorted by the most each can add (its *upper bound*: idf times its largest term weight in the
segment); once the ``depth``-th best score found so far (the threshold) exceeds the sum of
the smallest bounds, those tokens are *non-essential*: a document that holds none of the
other, *essential* tokens cannot reach the threshold, so only the essential tokens' postings
are walked, and the non-essential tokens are looked up for the documents found there. The
postings of each token are cut into blocks of ``BLOCK`` rows with the largest term weight
of each block (block-max MaxScore, after Ding and Suel's block-max WAND, SIGIR 2011): a
lookup first tries the block's maximum, which often proves the document cannot reach the
threshold without searching the block. Tokens with a dense column (``bm25.dense_columns``)
are looked up directly. The threshold starts at the ``depth``-th best score of the
documents in the best blocks of the query's highest-bound token (scored first), so pruning
starts at once instead of after the first ``depth`` documents in row order.

**Exact.** Every document that is scored gets the bit-identical score of
``bm25.score_segments`` (float32 products ``idf * weight`` summed as float64 in the scoring
order of ``bm25.scoring_order``, repeats included). A document is skipped only when an upper bound of its score is
below the threshold by more than rounding could explain (``MARGIN``); the threshold is
always the score of a real live document, so it never exceeds the final ``depth``-th best.
Every document tied with the final ``depth``-th best is therefore kept, and ties are broken
by id later, as for the exhaustive path. Tested against ``score_segments`` on random
corpora with ties, filters and deletions (``tests/unit/test_bm25_pruning.py``).

**Where the blocks come from.** A term weight ``tf / (tf + k1 * (1 - b + b * |d| / avgdl))``
depends on ``avgdl``, which every commit changes, so the exact block maxima cannot be
written once at ingest (Lucene stores (tf, norm) pairs per block for the same reason and
evaluates them per query). They are computed with the term weights when a commit is opened
(one ``np.maximum.reduceat`` over the postings: no new files, and a segment written by any
earlier version gets them too).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hybrid_qpr.backends.local import bm25 as bm25_lib
from hybrid_qpr.backends.local.bm25 import CorpusStats, DenseColumns, Postings, heap_push, query_idfs, scoring_order

BLOCK = 64  # postings per block (PISA's default block size for its block-max indexes)
# Queries with more distinct tokens than this (in a segment) go to the full compiled pass
# (``bm25.exhaustive_top``): pruning reads postings at random, and with many mid-frequency
# tokens (all essential) that costs more than it saves. Measured per query against the full
# pass (CPU time, 300 Quora questions, 1M documents in 4 segments; docs/search.md): pruning
# 2.3x faster at up to 6 distinct tokens, 1.1x at 7-8, 0.8x at 9-10, 0.35x from 16; the
# planner's p50 and mean are best at 6 at 124k and at 1M.
PRUNE_MAX_TOKENS = 6
BUCKETS = 256  # candidates are visited in this many bands of partial sums, best first
MARGIN = 1e-5  # a bound must be this share below the threshold to skip: rounding (float32 partial sums) is below 2e-6


@dataclass(frozen=True)
class BlockMaxima:
    """A segment's postings cut into blocks: token column ``c`` owns blocks
    ``first[c]:first[c + 1]``, of ``BLOCK`` postings each (its last one may be shorter);
    ``top[b]`` is the largest term weight in block ``b``, ``last_row[b]`` its last row, and
    ``token_max[c]`` the largest term weight of column ``c``."""

    size: int  # postings per block
    first: np.ndarray  # int64, vocabulary + 1
    top: np.ndarray  # float32, one per block
    last_row: np.ndarray  # int32, one per block
    token_max: np.ndarray  # float32, one per vocabulary column


def block_maxima(postings: Postings, weights: np.ndarray, size: int = BLOCK) -> BlockMaxima:
    """The :class:`BlockMaxima` of one segment's postings, from its term ``weights``."""
    ptr = np.asarray(postings.ptr, dtype=np.int64)
    counts = -(-np.diff(ptr) // size)  # blocks per column
    first = np.zeros(len(ptr), dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    column = np.repeat(np.arange(len(counts)), counts)
    starts = ptr[column] + (np.arange(len(column)) - first[column]) * size
    ends = np.minimum(starts + size, ptr[column + 1])
    if len(starts) == 0:
        return BlockMaxima(size, first, np.zeros(0, np.float32), np.zeros(0, np.int32), np.zeros(len(counts), np.float32))
    top = np.maximum.reduceat(weights, starts)  # blocks tile the postings: block b ends where b + 1 starts
    token_max = np.zeros(len(counts), dtype=np.float32)
    token_max[counts > 0] = np.maximum.reduceat(top, first[:-1][counts > 0])
    return BlockMaxima(size, first, top.astype(np.float32), np.asarray(postings.rows[ends - 1], dtype=np.int32), token_max)


def top_rows(parts: Sequence[tuple[Postings, np.ndarray | None]], tokens: Sequence[str], stats: CorpusStats,
             weights: Sequence[np.ndarray], depth: int, dense: Sequence[DenseColumns | None],
             blocks: Sequence[BlockMaxima], allowed: Sequence[np.ndarray] | None = None,
             take: Callable[[], int | None] | None = None, idfs: dict[str, float] | None = None,
             plans: dict[int, tuple | None] | None = None) -> list[tuple[np.ndarray, np.ndarray] | None] | None:
    """Per segment ``(scores, rows)``, rows ascending, of the live documents with a positive
    score that are among the segment's ``depth`` best or tied with the last of them: the rows
    and bit-identical scores that ``bm25.score_segments`` followed by a top-``depth``
    selection gives. ``allowed``: per segment the rows a filter matches (``None``: all).
    ``take``: the next segment number this thread scores (``None``: no more), when threads
    share the segments; the others are ``None`` in the list. ``idfs``: the query's
    ``query_idfs``, when threads sharing the segments had them computed once. ``plans``: a
    dict those threads share; the first to start plans every segment (the Python part) while
    the other is still waking up, so both then go straight to compiled code. ``None`` when
    numba is not installed (the caller then uses ``score_segments``)."""
    kernel = _top_kernel()
    if kernel is None:
        return None
    empty = (np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64))
    out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(parts)
    if idfs is None:
        idfs = query_idfs(parts, tokens, stats) if tokens and depth > 0 else {}
    plans = {} if plans is None else plans
    if len(plans) < len(parts) and idfs and depth > 0:
        ordered = scoring_order(tokens, idfs)  # the query's tokens in scoring order, repeats included
        for seg in range(len(parts)):
            if seg not in plans:
                plans[seg] = _plan(parts[seg], weights[seg], ordered, idfs, depth, dense[seg] if dense is not None else None,
                                   blocks[seg], None if allowed is None else allowed[seg])
    for seg in range(len(parts)) if take is None else iter(take, None):  # one at a time: threads may share them
        plan = plans.get(seg)
        if plan is None:
            out[seg] = empty
        elif plan[0]:  # the full pass
            out[seg] = bm25_lib.exhaustive_top(*plan[1])
        else:  # MaxScore, with this thread's scratch arrays
            out[seg] = kernel(*plan[1], *_scratch(len(parts[seg][0].doc_len)))
    return out


_NO_DENSE = np.zeros((0, 0), dtype=np.float32)


def _plan(part: tuple[Postings, np.ndarray | None], weights: np.ndarray, ordered: Sequence[str],
          idfs: dict[str, float], depth: int, layout: DenseColumns | None, blocks: BlockMaxima,
          allowed: np.ndarray | None) -> tuple[bool, tuple] | None:
    """How one segment scores the query: ``(True, exhaustive_top's arguments)`` or ``(False,
    MaxScore kernel's arguments but its scratch)``; ``None`` when nothing of it can score.
    ``ordered``: the query's tokens in scoring order, repeats included."""
    postings, deleted = part
    columns: dict[int, int] = {}  # vocabulary column -> distinct query token number
    present: list[str] = []  # those distinct tokens, in the same order
    order = []  # the tokens in scoring order (repeats included), as distinct token numbers
    for token in ordered:
        if (col := postings.column(token)) is not None:
            if col not in columns:
                columns[col] = len(columns)
                present.append(token)
            order.append(columns[col])
    if not order or (allowed is not None and len(allowed) == 0):
        return None
    cols = np.fromiter(columns, dtype=np.int64, count=len(columns))
    token_idfs = np.asarray([idfs[token] for token in present], dtype=np.float32)
    slots = layout.slot[cols] if layout is not None else np.full(len(cols), -1, dtype=np.int64)
    excluded = deleted
    if allowed is not None:
        excluded = np.ones(len(postings.doc_len), dtype=np.bool_)
        excluded[allowed] = False
        if deleted is not None:
            excluded |= deleted
    order_array = np.asarray(order, dtype=np.int64)
    if len(cols) > PRUNE_MAX_TOKENS:  # many tokens: pruning saves less than its random accesses cost
        return True, (postings, weights, postings.ptr[cols][order_array], postings.ptr[cols + 1][order_array],
                      token_idfs[order_array], slots[order_array].astype(np.int64), layout, excluded, depth)
    return False, (postings.rows, weights, blocks.top, blocks.last_row, postings.ptr[cols], postings.ptr[cols + 1],
                   blocks.first[cols], blocks.token_max[cols], token_idfs, order_array, slots.astype(np.int64),
                   _NO_DENSE if layout is None else layout.matrix,
                   np.zeros(0, dtype=np.bool_) if excluded is None else excluded, depth, blocks.size, MARGIN)


_KERNEL: list = []
_SCRATCH = threading.local()


def _scratch(n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """This thread's accumulator of partial sums (float32 zeros, at least ``n_docs``; the
    kernel zeroes what it used; float32 halves the memory its random accesses touch, and only
    bounds are read from it) and list of touched rows, reused across queries: fresh arrays per
    query cost their page faults (1M documents: 8 MB)."""
    scratch = getattr(_SCRATCH, "arrays", None)
    if scratch is None or len(scratch[0]) < n_docs:
        _SCRATCH.arrays = scratch = (np.zeros(n_docs, dtype=np.float32), np.zeros(n_docs, dtype=np.int32))
    return scratch


def has_compiled_scorer() -> bool:
    """Whether ``top_rows`` can run (numba is installed; loads the compiled scorer)."""
    return _top_kernel() is not None


# A process loads the compiled scorer only once it pays for itself: importing numba and reading
# its cached kernels costs a fresh process 0.3-1 s (a first run compiles them: up to half a
# minute), while NumPy scores 20,000 documents in about 1.2 ms a query and 100,000 in 5-7 ms
# (compiled: 0.9 and 2 ms; docs/search.md, "When the compiled scorer is loaded"). So an index of
# COMPILED_AT_DOCS documents loads it at its first query, a smaller one once the process's BM25
# queries have scored COMPILED_AFTER_DOCS documents (a batch, a server, a tuning run). Both give
# the same lists, scores bit for bit (tests/unit/test_bm25_fallback.py): switching mid-run is safe.
COMPILED_AT_DOCS = 100_000
COMPILED_AFTER_DOCS = 5_000_000
_SCORED = [0]  # documents this process's BM25 queries have scored with NumPy


def compiled_scorer_pays(docs: int) -> bool:
    """Whether a BM25 query over ``docs`` documents should run on the compiled scorer (loaded
    now if it is the first; see ``COMPILED_AT_DOCS``). Call once per query."""
    if _KERNEL:
        return _KERNEL[0] is not None
    _SCORED[0] += docs
    if docs < COMPILED_AT_DOCS and _SCORED[0] < COMPILED_AFTER_DOCS:
        return False
    return has_compiled_scorer()


def _top_kernel():
    """The compiled ``_pruned_top``, or ``None``."""
    return bm25_lib.compile_once(_KERNEL, globals(), "_pruned_top",
                                 ("_lower_bound", "_seek", "_weight_of", "_score_doc", "heap_push", "_best_partials"))


def _lower_bound(values, lo, hi, target):  # pragma: no cover - compiled
    """The first position in ``lo:hi`` (``values`` ascending) holding ``target`` or more (``hi`` if none)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _seek(rows, lo, hi, row):  # pragma: no cover - compiled
    """The first position in ``lo:hi`` (rows ascending) whose row is at or after ``row``
    (``hi`` if none): a galloping search from ``lo``, cheap when the target is near."""
    step = 1
    while lo + step < hi and rows[lo + step] < row:
        lo += step
        step *= 2
    return _lower_bound(rows, lo, min(hi, lo + step + 1), row)


def _weight_of(rows, weights, block_last, start, end, first, block, row):  # pragma: no cover - compiled
    """The term weight of ``row`` in the postings ``start:end`` (blocks from ``first``), or 0:
    a binary search over the blocks' last rows, then one within the block."""
    last = first + (end - start + block - 1) // block
    at_block = _lower_bound(block_last, first, last, row)
    if at_block == last:
        return np.float32(0.0)
    at = start + (at_block - first) * block
    at = _seek(rows, at, min(at + block, end), row)
    return weights[at] if at < end and rows[at] == row else np.float32(0.0)


def _score_doc(token_idfs, order, found):  # pragma: no cover - compiled
    """The exact score from each distinct token's weight ``found`` in the document: float32
    products summed as float64 in scoring order (``bm25.scoring_order``), as ``score_segments`` sums them."""
    total = 0.0
    for t in order:
        if found[t] > 0:
            total += np.float32(token_idfs[t] * found[t])
    return np.float32(total)


def _best_partials(acc, touched, n_touched, heap, labels):  # pragma: no cover - compiled
    """The ``len(heap)`` largest partial sums of the touched rows into the min-heap ``heap``
    (their rows in ``labels``): one pass, a comparison per row once the heap is full."""
    size = 0
    for i in range(n_touched):
        row = touched[i]
        if size < len(heap) or acc[row] > heap[0]:
            size = heap_push(heap, labels, size, acc[row], row)
    return size


def _pruned_top(rows, weights, block_top, block_last, starts, ends, first_block, token_max, token_idfs, order, slots,
                dense, excluded, depth, block, margin, acc, touched):  # pragma: no cover - compiled
    """Top ``depth`` of one segment by MaxScore (see the module docstring). Per distinct
    query token ``t``: postings ``starts[t]:ends[t]``, blocks from ``first_block[t]``,
    largest weight ``token_max[t]``, idf ``token_idfs[t]``, dense column ``slots[t]`` (or
    -1); ``order``: the query's tokens as distinct token numbers. ``acc`` (zeros, one per
    document) and ``touched`` are per-thread scratch; ``acc`` is all zeros again on return.
    Returns (float32 scores, rows ascending)."""
    m = len(starts)
    check_excluded = len(excluded) > 0
    count = np.zeros(m, dtype=np.int64)
    for t in order:
        count[t] += 1
    bound = np.empty(m, dtype=np.float64)  # the most token t adds to any score (repeats included)
    for t in range(m):
        bound[t] = count[t] * np.float64(np.float32(token_idfs[t] * token_max[t]))
    by_bound = np.argsort(bound, kind="mergesort")
    below = np.zeros(m + 1, dtype=np.float64)  # below[k]: the sum of the k smallest bounds
    for k in range(m):
        below[k + 1] = below[k] + bound[by_bound[k]]

    # 1. the essential tokens, largest bound first, added into ``acc`` (term at a time) until the
    # tokens left could not lift a document that holds none of the added ones to the threshold:
    # the depth-th best partial sum (each partial sum is at most its document's score)
    threshold = 0.0
    n_touched = 0
    best_partial = 0.0
    best_values = np.empty(depth, dtype=np.float64)  # the depth best partial sums and their rows
    best_rows = np.empty(depth, dtype=np.int64)
    k = m - 1
    while k >= 0:
        # stop when depth partial sums exceed what the tokens left can add (counted only when
        # the best one does: a full selection per token costs more than the scoring it saves)
        need = below[k + 1] / (1.0 - margin) ** 2
        if n_touched >= depth and best_partial > need:
            if _best_partials(acc, touched, n_touched, best_values, best_rows) == depth and best_values[0] > need:
                threshold = best_values[0] * (1.0 - margin)  # at most the final depth-th best score
                break
        t = by_bound[k]
        idf32 = token_idfs[t]
        repeats = count[t]
        for j in range(starts[t], ends[t]):
            row = rows[j]
            if check_excluded and excluded[row]:
                continue
            if acc[row] == 0.0:  # contributions are > 0: zero means untouched
                touched[n_touched] = row
                n_touched += 1
            acc[row] += repeats * np.float32(idf32 * weights[j])
            best_partial = max(best_partial, np.float64(acc[row]))
        k -= 1
    essential = k + 1  # tokens by_bound[essential:] were added; by_bound[:essential] are looked up

    if k < 0 and _best_partials(acc, touched, n_touched, best_values, best_rows) == depth:
        threshold = best_values[0] * (1.0 - margin)  # every token added: the depth-th best partial sum
    heap = np.empty(depth, dtype=np.float32)
    heap_rows = np.empty(depth, dtype=np.int64)
    found = np.zeros(m, dtype=np.float32)

    # 2. the touched documents that can still reach the threshold, best partial sum first (so
    # the threshold rises at once to near its final value, and the first band of partial sums
    # that cannot reach it ends the loop):
    # the other tokens looked up (largest bound first; a block's maximum before its
    # postings), then the exact score
    # (bucketed by partial sum: a counting sort, where a full sort would cost more than the pruning saves)
    skip_below = threshold * (1.0 - margin)
    floor = skip_below - below[essential]  # a candidate's partial sum must reach this
    width = max(best_partial - floor, 1e-300) / BUCKETS
    starts_at = np.zeros(BUCKETS + 1, dtype=np.int64)
    for i in range(n_touched):
        value = acc[touched[i]]
        if value >= floor:
            starts_at[BUCKETS - 1 - min(BUCKETS - 1, int((value - floor) / width))] += 1  # best bucket first
    n_cand = 0
    for bucket in range(BUCKETS):
        n_cand, starts_at[bucket] = n_cand + starts_at[bucket], n_cand
    starts_at[BUCKETS] = n_cand
    cand_rows = np.empty(n_cand, dtype=np.int64)
    cand_partials = np.empty(n_cand, dtype=np.float64)
    filled = starts_at[:BUCKETS].copy()
    for i in range(n_touched):
        row = touched[i]
        value = acc[row]
        acc[row] = 0.0
        if value >= floor:
            bucket = BUCKETS - 1 - min(BUCKETS - 1, int((value - floor) / width))
            cand_rows[filled[bucket]], cand_partials[filled[bucket]] = row, value
            filled[bucket] += 1
    size = 0
    capacity = 1024
    out_rows = np.empty(capacity, dtype=np.int64)
    out_scores = np.empty(capacity, dtype=np.float32)
    n_out = 0
    for c in range(n_cand):
        row = cand_rows[c]
        partial = cand_partials[c]
        if partial + below[essential] < skip_below:
            bucket = BUCKETS - 1 - min(BUCKETS - 1, int((partial - floor) / width))
            if floor + (BUCKETS - bucket + 1) * width + below[essential] < skip_below:
                break  # no later bucket (one band of slack for rounding) holds a partial sum that could
            continue
        keep = True
        for kk in range(essential - 1, -1, -1):
            t = by_bound[kk]
            if slots[t] >= 0:
                w = dense[slots[t], row]
            else:
                w = np.float32(0.0)
                last = first_block[t] + (ends[t] - starts[t] + block - 1) // block
                at_block = _lower_bound(block_last, first_block[t], last, row)  # the block that would hold ``row``
                if at_block < last:
                    if partial + count[t] * np.float64(np.float32(token_idfs[t] * block_top[at_block])) + below[kk] < skip_below:
                        keep = False
                        break
                    start = starts[t] + (at_block - first_block[t]) * block
                    at = _seek(rows, start, min(start + block, ends[t]), row)
                    if at < ends[t] and rows[at] == row:
                        w = weights[at]
            found[t] = w
            partial += count[t] * np.float64(np.float32(token_idfs[t] * w))
            if partial + below[kk] < skip_below:
                keep = False
                break
        if not keep:
            continue
        for kk in range(essential, m):
            t = by_bound[kk]
            found[t] = dense[slots[t], row] if slots[t] >= 0 else _weight_of(
                rows, weights, block_last, starts[t], ends[t], first_block[t], block, row)
        score = _score_doc(token_idfs, order, found)
        if score <= 0 or score < threshold:
            continue
        if n_out == capacity:
            capacity *= 2
            grown_rows, grown_scores = np.empty(capacity, dtype=np.int64), np.empty(capacity, dtype=np.float32)
            grown_rows[:n_out], grown_scores[:n_out] = out_rows[:n_out], out_scores[:n_out]
            out_rows, out_scores = grown_rows, grown_scores
        out_rows[n_out], out_scores[n_out] = row, score
        n_out += 1
        size = heap_push(heap, heap_rows, size, score, row)
        if size == depth and heap[0] > threshold:
            threshold = np.float64(heap[0])
            skip_below = threshold * (1.0 - margin)
    final = heap[0] if size == depth else np.float32(0.0)
    kept = np.flatnonzero(out_scores[:n_out] >= final)
    kept = kept[np.argsort(out_rows[kept])]
    return out_scores[kept], out_rows[kept]
