"""The cross-encoder reranker's pair tokenisation (torch-free): the layout of a (question,
candidate) pair, truncation that keeps the question, and bad budgets or tokenizer files."""

from __future__ import annotations

import numpy as np
import pytest

from hybrid_qpr.errors import ArtifactError, ConfigError
from hybrid_qpr.rerankers.pairs import PairTokenizer
from hybrid_qpr.testing.rerankers import MINILM_TOKENIZER as TOKENIZER


def test_pair_layout_segments_and_padding():
    pairs = PairTokenizer(TOKENIZER, max_length=32, query_tokens=8)
    ids, mask, types = pairs.encode("how do i reset my password", ["open settings", "a much longer answer about it"])
    (q,) = pairs.pieces(["how do i reset my password"])
    c0, c1 = pairs.pieces(["open settings", "a much longer answer about it"])
    expected0 = [pairs.cls_id, *q, pairs.sep_id, *c0, pairs.sep_id]
    assert ids.shape == mask.shape == types.shape == (2, len(q) + len(c1) + 3)
    assert ids[0, : len(expected0)].tolist() == expected0
    assert ids[0, len(expected0):].tolist() == [pairs.pad_id] * (ids.shape[1] - len(expected0))
    assert mask[0].tolist() == [1] * len(expected0) + [0] * (ids.shape[1] - len(expected0))
    assert types[0].tolist() == [0] * (len(q) + 2) + [1] * (len(c0) + 1) + [0] * (ids.shape[1] - len(expected0))
    assert ids.dtype == np.int64


def test_truncation_keeps_the_question_and_cuts_the_candidate():
    pairs = PairTokenizer(TOKENIZER, max_length=24, query_tokens=10)
    question = "what is the capital of france"
    (q,) = pairs.pieces([question])
    ids, mask, _ = pairs.encode(question, ["paris " * 200])
    assert ids.shape == (1, 24) and mask.sum() == 24
    assert ids[0, 1 : 1 + len(q)].tolist() == q  # the whole question survives a very long candidate
    assert ids[0, -1] == pairs.sep_id
    long_question = "why " * 100  # a pasted paragraph is capped at query_tokens, the candidate still fits
    ids, _, types = pairs.encode(long_question, ["because"])
    assert int((types[0] == 0).sum()) == 10 + 2 and int(types[0].sum()) == 2


def test_pair_tokenizer_refuses_bad_budgets_and_files(tmp_path):
    with pytest.raises(ConfigError, match="query_tokens=61"):
        PairTokenizer(TOKENIZER, max_length=64, query_tokens=61)
    with pytest.raises(ArtifactError, match="missing"):
        PairTokenizer(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="not a valid tokenizers JSON"):
        PairTokenizer(tmp_path / "bad.json")
    with pytest.raises(ConfigError, match="one question per candidate"):
        PairTokenizer(TOKENIZER).encode_pairs(["a", "b"], ["c"])
