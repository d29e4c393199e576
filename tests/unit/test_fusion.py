"""Fusion math against hand-computed values (hybrid_qpr.fusion)."""

from __future__ import annotations

import math

import pytest

from hybrid_qpr.types import Hit
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.fusion import fuse, normalize, rrf, weighted_sum

BM25 = [Hit("a", 10.0), Hit("b", 6.0), Hit("c", 2.0)]
KNN = [Hit("c", -0.5), Hit("d", -1.0), Hit("a", -3.0)]


def test_rrf_hand_computed():
    fused = rrf([BM25, KNN], rrf_k=60)
    scores = {f.id: f.score for f in fused}
    assert scores["a"] == pytest.approx(1 / 61 + 1 / 63)
    assert scores["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert scores["b"] == pytest.approx(1 / 62)
    assert scores["d"] == pytest.approx(1 / 62)
    # a and c tie exactly, b and d tie exactly: ids decide
    assert [f.id for f in fused] == ["a", "c", "b", "d"]
    a = fused[0]
    assert a.ranks == (1, 3) and a.scores == (10.0, -3.0)
    assert next(f for f in fused if f.id == "d").ranks == (None, 2)


def test_rrf_weights_depth_and_top_k():
    fused = rrf([BM25, KNN], rrf_k=1, weights=(0.25, 0.75), depth=2, top_k=3)
    # depth 2: BM25 keeps a, b; kNN keeps c, d. a: 0.25/2, b: 0.25/3, c: 0.75/2, d: 0.75/3
    assert [(f.id, round(f.score, 6)) for f in fused] == [("c", 0.375), ("d", 0.25), ("a", 0.125)]
    assert fused[2].ranks == (1, None)  # a's kNN rank 3 is beyond depth: missing


def test_minmax_weighted_sum_hand_computed_and_missing_docs_get_zero():
    fused = weighted_sum([BM25, KNN], normalisation="minmax", weights=(0.5, 0.5))
    # BM25 minmax: a 1, b 0.5, c 0; kNN minmax: c 1, d 0.8, a 0; missing -> 0
    expected = {"a": 0.5 * 1 + 0.5 * 0, "b": 0.5 * 0.5 + 0.5 * 0, "c": 0.5 * 0 + 0.5 * 1, "d": 0.5 * 0 + 0.5 * 0.8}
    assert {f.id: f.score for f in fused} == pytest.approx(expected)
    assert [f.id for f in fused] == ["a", "c", "d", "b"]


def test_minmax_guards_equal_scores():
    assert normalize([3.0, 3.0], "minmax") == [1.0, 1.0]
    assert normalize([], "minmax") == []
    fused = weighted_sum([[Hit("x", 5.0)], [Hit("y", 1.0), Hit("z", 0.0)]], normalisation="minmax")
    assert {f.id: f.score for f in fused} == {"x": 1.0, "y": 1.0, "z": 0.0}


def test_zscore_and_missing_doc_floor():
    z = normalize([1.0, 2.0, 3.0], "zscore")
    std = math.sqrt(2 / 3)
    assert z == pytest.approx([-1 / std, 0.0, 1 / std])
    assert normalize([2.0, 2.0], "zscore") == [0.0, 0.0]
    fused = weighted_sum([[Hit("a", 1.0), Hit("b", 2.0), Hit("c", 3.0)], [Hit("d", 9.0)]], normalisation="zscore",
                         weights=(1.0, 1.0))
    scores = {f.id: f.score for f in fused}
    # list 2 has one score: z = 0, floor 0; d misses list 1: floor = min z = -1/std
    assert scores["d"] == pytest.approx(-1 / std + 0.0)
    assert scores["c"] == pytest.approx(1 / std + 0.0)


def test_l2_normalisation():
    assert normalize([3.0, 4.0], "l2") == pytest.approx([0.6, 0.8])
    assert normalize([0.0, 0.0], "l2") == [0.0, 0.0]
    assert normalize([-3.0, -4.0], "l2") == pytest.approx([-0.6, -0.8])


def test_fuse_alpha_extremes_reproduce_single_lists():
    only_bm25 = fuse(BM25, KNN, fusion="rrf", alpha=0.0)
    assert [f.id for f in only_bm25][:3] == ["a", "b", "c"] and only_bm25[3].id == "d" and only_bm25[3].score == 0
    only_knn = fuse(BM25, KNN, fusion="minmax", alpha=1.0)
    assert [f.id for f in only_knn][:3] == ["c", "d", "a"]


def test_inputs_untouched_and_deterministic():
    first, second = list(BM25), list(KNN)
    one = fuse(first, second, fusion="zscore", alpha=0.3)
    two = fuse(list(reversed(list(reversed(first)))), second, fusion="zscore", alpha=0.3)
    assert one == two and first == BM25 and second == KNN


def test_duplicate_ids_in_a_list_count_once():
    fused = rrf([[Hit("a", 2.0), Hit("a", 1.0), Hit("b", 0.5)]], rrf_k=0)
    assert {f.id: f.score for f in fused} == pytest.approx({"a": 1.0, "b": 0.5})


@pytest.mark.parametrize("kwargs", [dict(fusion="bogus"), dict(alpha=1.5), dict(alpha=-0.1), dict(depth=0)])
def test_bad_arguments_raise_config_error(kwargs):
    with pytest.raises(ConfigError):
        fuse(BM25, KNN, **kwargs)
    with pytest.raises(ConfigError, match="rrf_k"):
        rrf([BM25], rrf_k=-1)


def test_hits_built_in_bulk_equal_hits_built_one_by_one():
    from hybrid_qpr.types import Document, Hit

    bulk = Hit.many(["a", "b"], [2.0, 1.5])
    assert bulk == [Hit("a", 2.0), Hit("b", 1.5)] and bulk[0].document is None
    assert hash(bulk[1]) == hash(Hit("b", 1.5)) and repr(bulk[0]) == "Hit(id='a', score=2.0)"
    with_doc = Hit("a", 2.0, Document("a", "text"))
    assert with_doc == bulk[0] and not with_doc != bulk[0] and hash(with_doc) == hash(bulk[0])  # document not compared
    assert Hit("a", 2.0) != Hit("a", 2.5) and Hit("a", 2.0) != Hit("b", 2.0)
    with pytest.raises(AttributeError):
        bulk[0].score = 3.0  # still immutable


def test_records_keep_their_fields_defaults_and_immutability():
    from hybrid_qpr.fusion import Fused
    from hybrid_qpr.search import RankedScore, SearchResult
    from hybrid_qpr.types import Document

    cases = [(Document, {"id": "d1", "text": "how do i learn python ?", "metadata": {"lang": "en"}}),
             (Fused, {"id": "d1", "score": 0.03, "scores": (2.5, None), "ranks": (1, None)}),
             (SearchResult, {"id": "d1", "text": "t", "score": 0.03, "metadata": {}, "bm25": RankedScore(2.5, 1),
                             "knn": None, "first_stage_rank": None, "cross_encoder": None, "reranked": None,
                             "fused_score": None, "signals": None})]
    for cls, fields in cases:
        by_name, by_place = cls(**fields), cls(*fields.values())
        assert by_name == by_place and type(by_place) is cls and by_place._fields == tuple(fields)
        assert repr(by_place) == f"{cls.__name__}(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"
        with pytest.raises(AttributeError):
            by_place.id = "d2"  # immutable
    assert hash(Fused(**cases[1][1])) == hash(Fused(*cases[1][1].values()))
    # a missing metadata is a new dict each time, never one shared between records
    first, second = Document("a", "x"), SearchResult("a", "x", 1.0)
    assert first.metadata == {} and second.metadata == {} and first.metadata is not Document("b", "y").metadata
    assert second.bm25 is None and second.cross_encoder is None
    reranked = second.with_cross_encoder(0.9, 1, first_stage_rank=3)
    assert (reranked.score, reranked.first_stage_rank, reranked.cross_encoder) == (1.0, 3, RankedScore(0.9, 1))
