"""Tiny cross-encoders for the reranker tests, and the check of a second stage against its first.

``tiny_bert`` writes a randomly initialised BERT (torch and transformers) that exercises the
plumbing, not the quality; ``searches_rerank`` checks that a reranker re-orders exactly a first
stage's top hits, on any backend.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hybrid_qpr import resources
from hybrid_qpr.testing.scores import same_ranked, same_score

MINILM_TOKENIZER = resources.model_dir().parent / "minilm-l6-int8" / "tokenizer.json"


def tiny_bert(directory: Path, layers: int = 2) -> Path:
    """A randomly initialised BERT (``layers`` layers, hidden 32) with MiniLM's tokenizer, saved in ``directory``."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=layers, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(str(directory), safe_serialization=True)
    shutil.copyfile(MINILM_TOKENIZER, directory / "tokenizer.json")
    return directory


def check_reranked(results, first, reranker, query, depth):
    """``results`` = ``first`` with its top ``depth`` ordered by the cross-encoder's score, the
    first stage's scores and ranks kept."""
    head = first[:depth]
    scores = reranker.score(query, [r.text for r in head])
    order = sorted(range(len(head)), key=lambda i: (-float(scores[i]), i))
    assert [r.id for r in results] == [head[i].id for i in order] + [r.id for r in first[depth:]]
    for rank, r in enumerate(results[: len(head)], start=1):
        source = head[order[rank - 1]]
        # first stage kept (two searches: a cluster's scores may differ in the 7th digit)
        assert same_score(r.score, source.score) and same_ranked(r.bm25, source.bm25) and same_ranked(r.knn, source.knn)
        assert r.first_stage_rank == order[rank - 1] + 1 and r.cross_encoder.rank == rank
        assert r.cross_encoder.score == pytest.approx(float(scores[order[rank - 1]]), abs=1e-5)
    for r in results[len(head):]:
        assert r.cross_encoder is None and r.to_dict()["cross_encoder"] is None


def searches_rerank(backend, encoder, reranker_dir, query):
    """Each mode's search of ``query`` on ``backend`` with the reranker at ``reranker_dir`` (depth
    5) checked against the first stage: ``check_reranked``, its pages and depth 0. Returns the
    reranking searcher."""
    from hybrid_qpr.rerankers import Reranker
    from hybrid_qpr.search import HybridSearcher

    reranker = Reranker(reranker_dir)
    plain = HybridSearcher(backend, encoder)
    searcher = HybridSearcher(backend, encoder, reranker=reranker, reranker_depth=5)
    for mode in ("bm25", "knn", "hybrid", "rerank"):
        first = plain.search(query, mode=mode, top_k=8)
        results = searcher.search(query, mode=mode, top_k=8)
        check_reranked(results, first, reranker, query, 5)
        assert set(results[0].to_dict()) >= {"score", "bm25", "knn", "first_stage_rank", "cross_encoder"}
        # a page is a slice of the re-ranked list; depth 0 is the first stage
        assert [r.id for r in searcher.search(query, mode=mode, top_k=3, offset=2)] == [r.id for r in results[2:5]]
        assert [r.id for r in searcher.search(query, mode=mode, top_k=8, reranker_depth=0)] == [r.id for r in first]
    return searcher
