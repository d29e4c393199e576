"""Text handling shared by training and inference: one tokenizer, one vocabulary."""

from hybrid_qpr.text.tokenizer import Vocabulary, stable_hash, tokenize

__all__ = ["Vocabulary", "stable_hash", "tokenize"]
