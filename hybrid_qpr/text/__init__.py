"""Text handling shared by training and inference: one tokenizer, one vocabulary, one id rule."""

from hybrid_qpr.text.ids import normalize_text, text_id
from hybrid_qpr.text.tokenizer import Vocabulary, stable_hash, tokenize

__all__ = ["Vocabulary", "normalize_text", "stable_hash", "text_id", "tokenize"]
