"""Second-stage rerankers: re-score the top hits of any search mode (torch-free at inference)."""

from hybrid_qpr.rerankers.cross_encoder import DEFAULT_RERANK_DEPTH, Interpolation, Reranked, Reranker

__all__ = ["DEFAULT_RERANK_DEPTH", "Interpolation", "Reranked", "Reranker"]
