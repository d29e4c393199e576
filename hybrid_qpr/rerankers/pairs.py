"""A question and a candidate as one token sequence for a cross-encoder: ``[CLS] q [SEP] c [SEP]``.

Torch-free (the ``tokenizers`` library only): training (``hybrid_qpr.model.cross_encoder``) and
inference (``hybrid_qpr.rerankers.cross_encoder``) both build their pairs here, so the token ids
a model was trained on are the ones it is served with.

Truncation keeps the question: it is cut to ``query_tokens`` word pieces first (questions are
short; the cap only stops a pasted paragraph from taking the whole budget), and the candidate
gets what is left of ``max_length`` after the question and the three special tokens. A plain
``longest_first`` truncation would cut a long question to make room for a long answer, and a
reranker that does not see the question cannot rank for it. Segment ids are 0 for ``[CLS] q
[SEP]`` and 1 for ``c [SEP]``, as BERT's pair input.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hybrid_qpr.errors import ArtifactError, ConfigError

DEFAULT_MAX_LENGTH = 128
DEFAULT_QUERY_TOKENS = 48
SPECIAL_TOKENS = ("[CLS]", "[SEP]", "[PAD]")


def tokenizer_sha256(path: str | Path) -> str:
    """The hash a cross-encoder's config records of the tokenizer it was trained with."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class PairTokenizer:
    """Turns (question, candidate) pairs into ``input_ids``, ``attention_mask``, ``token_type_ids``
    (int64 arrays [pairs, longest pair]) under the truncation rule of the module docstring."""

    def __init__(self, path: str | Path, max_length: int = DEFAULT_MAX_LENGTH,
                 query_tokens: int = DEFAULT_QUERY_TOKENS):
        from tokenizers import Tokenizer

        if not 1 <= query_tokens <= max_length - 4:
            raise ConfigError(f"query_tokens={query_tokens}: must be between 1 and max_length - 4 = {max_length - 4} "
                              "(three special tokens and at least one candidate token)")
        self.path = Path(path)
        if not self.path.is_file():
            raise ArtifactError(f"{self.path}: tokenizer file is missing")
        try:
            tokenizer = Tokenizer.from_file(str(self.path))
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            raise ArtifactError(f"{self.path}: not a valid tokenizers JSON file ({exc})") from exc
        ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
        missing = [token for token, i in ids.items() if i is None]
        if missing:
            raise ArtifactError(f"{self.path}: the tokenizer has no {', '.join(missing)}; a cross-encoder needs a "
                                "BERT WordPiece tokenizer")
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer = tokenizer
        self.cls_id, self.sep_id, self.pad_id = (int(ids[t]) for t in SPECIAL_TOKENS)  # type: ignore[arg-type]
        self.max_length = int(max_length)
        self.query_tokens = int(query_tokens)

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size())

    def pieces(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's word-piece ids, untruncated and without special tokens."""
        return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def pair_ids(self, query_ids: list[int], text_ids: list[int]) -> tuple[list[int], int]:
        """The ids of one pair and the length of its first segment (``[CLS] q [SEP]``)."""
        query_ids = query_ids[: self.query_tokens]
        room = self.max_length - 3 - len(query_ids)
        first = [self.cls_id, *query_ids, self.sep_id]
        return first + text_ids[:room] + [self.sep_id], len(first)

    def encode(self, query: str, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One question against each of ``texts`` (the question is tokenized once)."""
        (query_ids,) = self.pieces([query])
        return self.pad([self.pair_ids(query_ids, ids) for ids in self.pieces(texts)])

    def encode_pairs(self, queries: Sequence[str], texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``queries[i]`` against ``texts[i]`` for every i."""
        return self.pad(self.pair_list(queries, texts))

    def pair_list(self, queries: Sequence[str], texts: Sequence[str]) -> list[tuple[list[int], int]]:
        """``pair_ids`` of ``queries[i]`` against ``texts[i]`` for every i, unpadded."""
        if len(queries) != len(texts):
            raise ConfigError(f"{len(queries)} questions for {len(texts)} candidates: give one question per candidate")
        return [self.pair_ids(q, t) for q, t in zip(self.pieces(queries), self.pieces(texts))]

    def pad(self, pairs: list[tuple[list[int], int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The three arrays of ``pairs`` (``pair_list``), padded to the longest of them."""
        width = max((len(ids) for ids, _ in pairs), default=0)
        input_ids = np.full((len(pairs), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(pairs), width), dtype=np.int64)
        types = np.zeros((len(pairs), width), dtype=np.int64)
        for row, (ids, first) in enumerate(pairs):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
            types[row, first : len(ids)] = 1
        return input_ids, mask, types
