"""The compiled BM25 top-k (``blockmax.top_rows``: block-max MaxScore, or the exhaustive
compiled pass for long queries) against scoring every document with NumPy
(``bm25.score_segments``): the same rows and bit-identical scores, ties included,
on many random corpora and queries, with deletions, filters, repeated query tokens, several
segments sharing the corpus statistics, and block and seed sizes small enough that every
branch of the kernel runs on a few hundred documents."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_qpr.backends.local import blockmax
from hybrid_qpr.backends.local import bm25 as bm25_lib

pytestmark = pytest.mark.skipif(not blockmax.has_compiled_scorer(), reason="numba is a core dependency; "
                                "tests/unit/test_bm25_fallback.py covers the NumPy path")


def _expected(scores: np.ndarray, live: np.ndarray, depth: int) -> np.ndarray:
    """Rows (ascending) of the live positive scores at or above the ``depth``-th best."""
    rows = np.flatnonzero(live & (scores > 0))
    if len(rows) > depth:
        cut = np.sort(scores[rows])[::-1][depth - 1]
        rows = rows[scores[rows] >= cut]
    return rows


def _corpus(rng: np.random.Generator, n_docs: int, vocab: list[str]) -> list[list[str]]:
    """Zipf-distributed short documents, a share of them exact copies of others (tied scores)."""
    zipf = 1.0 / np.arange(1, len(vocab) + 1) ** rng.uniform(0.6, 1.4)
    docs = [list(rng.choice(vocab, size=rng.integers(1, 9), p=zipf / zipf.sum())) for _ in range(n_docs)]
    for i in rng.choice(n_docs, size=n_docs // 4):
        docs[i] = list(docs[rng.integers(n_docs)])
    return docs


@pytest.mark.parametrize("seed", range(40))
def test_pruned_top_k_equals_scoring_every_document(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    # 0: every segment scored exhaustively (bm25.exhaustive_top), 100: every one pruned, 3: both
    monkeypatch.setattr(blockmax, "PRUNE_MAX_TOKENS", [100, 3, 0][seed % 3])
    vocab = [f"w{i}" for i in range(int(rng.integers(5, 60)))]
    size = int(rng.choice([1, 2, 4, 64]))
    parts = []
    for _ in range(int(rng.integers(1, 4))):
        postings = bm25_lib.build_postings(_corpus(rng, int(rng.integers(1, 400)), vocab))
        deleted = rng.random(len(postings.doc_len)) < rng.choice([0.0, 0.1, 0.6]) if rng.random() < 0.7 else None
        parts.append((postings, deleted))
    stats = bm25_lib.corpus_stats(parts)
    weights = bm25_lib.term_weights(parts, stats)
    dense = bm25_lib.dense_columns(parts, weights, min_share=float(rng.choice([0.05, 0.25, 1.1])))
    blocks = [blockmax.block_maxima(p, w, size) for (p, _), w in zip(parts, weights)]
    for _ in range(25):
        tokens = list(rng.choice(vocab + ["unknown"], size=rng.integers(1, 10)))
        depth = int(rng.choice([1, 2, 3, 10, 50, 1000]))
        allowed = None
        if rng.random() < 0.3:
            allowed = [np.flatnonzero(rng.random(len(p.doc_len)) < rng.choice([0.02, 0.5])) for p, _ in parts]
        scores = bm25_lib.score_segments(parts, tokens, stats, weights)
        got = blockmax.top_rows(parts, tokens, stats, weights, depth, dense if rng.random() < 0.7 else None, blocks,
                                allowed)
        for seg, ((postings, deleted), (got_scores, got_rows)) in enumerate(zip(parts, got)):
            live = np.ones(len(postings.doc_len), dtype=bool) if deleted is None else ~deleted
            if allowed is not None:
                live &= np.isin(np.arange(len(live)), allowed[seg])
            expected = _expected(scores[seg], live, depth)
            assert np.array_equal(got_rows, expected), (tokens, depth, seg)
            assert np.array_equal(got_scores, scores[seg][expected]), (tokens, depth, seg)  # bit-identical


def test_all_documents_tied_come_back(monkeypatch):
    """Every document ties with the ``depth``-th best: all of them are kept (ties are broken
    by id later, across segments), whatever the threshold the seed starts from."""
    monkeypatch.setattr(blockmax, "PRUNE_MAX_TOKENS", 100)
    docs = [["common", "rare"] if row % 50 == 0 else ["common", "other"] for row in range(1000)]
    parts = [(bm25_lib.build_postings(docs), None)]
    stats = bm25_lib.corpus_stats(parts)
    weights = bm25_lib.term_weights(parts, stats)
    blocks = [blockmax.block_maxima(parts[0][0], weights[0], 4)]
    scores = bm25_lib.score_segments(parts, ["common", "rare"], stats, weights)[0]
    got_scores, got_rows = blockmax.top_rows(parts, ["common", "rare"], stats, weights, 40, None, blocks)[0]
    assert np.array_equal(got_rows, np.arange(1000)) and np.array_equal(got_scores, scores)
    got_scores, got_rows = blockmax.top_rows(parts, ["common", "rare"], stats, weights, 20, None, blocks)[0]
    assert np.array_equal(got_rows, np.arange(0, 1000, 50)) and np.array_equal(got_scores, scores[::50])


def test_block_maxima_bound_every_posting():
    rng = np.random.default_rng(5)
    postings = bm25_lib.build_postings(_corpus(rng, 500, [f"w{i}" for i in range(30)]))
    parts = [(postings, None)]
    weights = bm25_lib.term_weights(parts, bm25_lib.corpus_stats(parts))[0]
    b = blockmax.block_maxima(postings, weights, 8)
    for col in range(len(postings.vocab)):
        start, end = int(postings.ptr[col]), int(postings.ptr[col + 1])
        tops, lasts = b.top[b.first[col]:b.first[col + 1]], b.last_row[b.first[col]:b.first[col + 1]]
        assert len(tops) == -(-(end - start) // 8)
        for i, lo in enumerate(range(start, end, 8)):
            assert tops[i] == weights[lo:min(lo + 8, end)].max()
            assert lasts[i] == postings.rows[min(lo + 8, end) - 1]
        assert b.token_max[col] == weights[start:end].max()

