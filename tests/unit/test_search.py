"""HybridSearcher over the embedded index: modes, explanations, pagination, filters, defaults."""

from __future__ import annotations

import pytest

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.search import HybridSearcher


@pytest.fixture(scope="module")
def searcher(tmp_path_factory, committed_encoder, question_bank):
    idx = LocalIndex.create(tmp_path_factory.mktemp("search") / "idx", committed_encoder)
    idx.ingest(question_bank, committed_encoder, show_progress=False)
    return HybridSearcher(idx, committed_encoder)


QUERY = "how do i change my email address?"


def test_round_trip_each_mode_finds_the_question_itself(searcher):
    for mode in ("bm25", "knn", "hybrid", "rerank"):
        results = searcher.search(QUERY, mode=mode, top_k=5)
        assert len(results) == 5, mode
        assert results[0].id == "q010" and results[0].text == QUERY, mode
        assert results[0].metadata["topic"] == "email address"
        assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)


def test_explanations_carry_the_scores_and_ranks_behind_each_hit(searcher):
    from hybrid_qpr.search import DEFAULT_DEPTH

    backend = searcher.backend
    depth = max(DEFAULT_DEPTH, 20)  # the lists hybrid fuses for 20 results
    bm25 = {h.id: (h.score, i) for i, h in enumerate(backend.bm25(QUERY, depth), 1)}
    vec = searcher.encoder.encode([QUERY])[0]
    knn = {h.id: (h.score, i) for i, h in enumerate(backend.knn(vec, depth), 1)}
    for r in searcher.search(QUERY, mode="hybrid", top_k=20):
        assert (r.bm25 is None) == (r.id not in bm25) and (r.knn is None) == (r.id not in knn)
        if r.bm25:
            assert (r.bm25.score, r.bm25.rank) == pytest.approx(bm25[r.id])
        if r.knn:
            assert (r.knn.score, r.knn.rank) == pytest.approx(knn[r.id])
    only = searcher.search(QUERY, mode="bm25", top_k=3)
    assert all(r.knn is None and r.bm25.score == r.score for r in only) and [r.bm25.rank for r in only] == [1, 2, 3]


def test_rerank_orders_bm25_candidates_by_vector_similarity(searcher):
    results = searcher.search(QUERY, mode="rerank", top_k=30, rerank_depth=30)
    recalled = {h.id for h in searcher.backend.bm25(QUERY, 30)}
    assert {r.id for r in results} == recalled
    assert all(r.bm25.rank <= 30 and r.knn.score == r.score for r in results)
    assert [r.knn.rank for r in results] == list(range(1, len(results) + 1))


@pytest.mark.parametrize("mode", ["bm25", "knn", "hybrid", "rerank"])
def test_pages_are_stable(searcher, mode):
    whole = [r.id for r in searcher.search(QUERY, mode=mode, top_k=12)]
    pages = [r.id for offset in (0, 4, 8) for r in searcher.search(QUERY, mode=mode, top_k=4, offset=offset)]
    assert pages == whole and len(set(whole)) == 12
    page = searcher.search(QUERY, mode=mode, top_k=4, offset=4)
    if mode != "hybrid":
        assert [r.bm25.rank if mode == "bm25" else r.knn.rank for r in page] == [5, 6, 7, 8]


def test_filters_return_k_results_in_every_mode(searcher):
    for mode in ("bm25", "knn", "hybrid", "rerank"):
        results = searcher.search(QUERY, mode=mode, top_k=8, filters={"lang": "de"})
        assert len(results) == 8, mode
        assert all(r.metadata["lang"] == "de" for r in results)


def test_hybrid_depth_and_fusion_defaults(searcher):
    searcher.backend.set_fusion_defaults({"fusion": "minmax", "alpha": 1.0})
    try:
        assert searcher.fusion_settings(None, None) == ("minmax", 1.0)
        assert searcher.fusion_settings("rrf", None) == ("rrf", 0.5)
        vec = searcher.encoder.encode([QUERY])[0]
        knn_order = [h.id for h in searcher.backend.knn(vec, 10)]
        assert [r.id for r in searcher.search(QUERY, top_k=10)] == knn_order
    finally:
        searcher.backend.set_fusion_defaults({})
    deep = searcher.search(QUERY, mode="hybrid", top_k=150, depth=10)  # depth grows to offset + top_k
    assert len(deep) == 150


def test_search_many_matches_search(searcher, held_out_queries):
    batch = searcher.search_many(held_out_queries[:5], mode="hybrid", top_k=3)
    assert [[r.id for r in rs] for rs in batch] == [[r.id for r in searcher.search(q, top_k=3)] for q in held_out_queries[:5]]


@pytest.mark.parametrize("kwargs", [dict(mode="fuzzy"), dict(top_k=0), dict(offset=-1), dict(fusion="max"),
                                    dict(alpha=2.0), dict(depth=0), dict(mode="rerank", rerank_depth=0)])
def test_bad_arguments(searcher, kwargs):
    with pytest.raises(ConfigError):
        searcher.search(QUERY, **kwargs)


def test_server_side_needs_opensearch(searcher):
    with pytest.raises(ConfigError, match="OpenSearch"):
        searcher.search(QUERY, server_side=True)


@pytest.fixture(scope="module")
def segmented_searcher(tmp_path_factory, committed_encoder, question_bank):
    """The question bank in three segments, a few documents deleted."""
    idx = LocalIndex.create(tmp_path_factory.mktemp("segmented") / "idx", committed_encoder)
    for part in (question_bank[:70], question_bank[70:140], question_bank[140:]):
        idx.ingest(part, committed_encoder, show_progress=False)
    idx.delete([doc.id for doc in question_bank[5:200:17]])
    return HybridSearcher(idx, committed_encoder)


@pytest.mark.parametrize("fusion", ["rrf", "minmax", "zscore", "l2"])
@pytest.mark.parametrize("which", ["searcher", "segmented_searcher"])
def test_local_hybrid_page_is_the_fusion_of_the_two_lists(request, which, fusion, held_out_queries):
    """A hybrid page (``bm25_and_knn``'s ranked lists fused by ids and scores, documents read by
    the rows noted while ranking) is exactly ``fusion.fuse`` of the separate ``bm25`` and ``knn``
    hits: ids, scores, ranks, order and documents."""
    from hybrid_qpr.fusion import fuse

    searcher = request.getfixturevalue(which)
    backend = searcher.backend
    assert len(backend.segments) == (1 if which == "searcher" else 3)
    for query in [QUERY, *held_out_queries[:4]]:
        vector = searcher.encoder.encode([query])[0]
        for alpha, depth, top_k, offset, filters in [(0.5, 30, 10, 0, None), (0.3, 12, 5, 5, None),
                                                     (0.8, 30, 7, 2, {"lang": "de"})]:
            got = searcher.search(query, mode="hybrid", fusion=fusion, alpha=alpha, depth=depth, top_k=top_k,
                                  offset=offset, filters=filters)
            bm25, knn = backend.bm25(query, depth, filters), backend.knn(vector, depth, filters)
            page = fuse(bm25, knn, fusion=fusion, alpha=alpha, depth=depth, top_k=offset + top_k)[offset:]
            docs = backend.documents([item.id for item in page])
            want = [(f.id, f.score, f.scores, f.ranks, docs[f.id].text, docs[f.id].metadata) for f in page]
            assert [(r.id, r.score, (r.bm25 and r.bm25.score, r.knn and r.knn.score),
                     (r.bm25 and r.bm25.rank, r.knn and r.knn.rank), r.text, r.metadata) for r in got] == want


@pytest.mark.parametrize("settings", [
    {"fusion": "rrf", "alpha": 0.5}, {"fusion": "minmax", "alpha": 0.3, "offset": 3},
    {"fusion": "zscore", "alpha": 0.7, "autocut": 2},
    {"fusion": "minmax", "alpha": 0.5, "bounds": {"knn": {"lower": "clip:0.4"}}}])
def test_a_tuning_grid_point_ranks_what_a_query_with_its_settings_ranks(searcher, settings):
    """One page composition (``hybrid_page``): the tuner's page, from the lists it keeps (longer
    than the point's depth, so the composition cuts them), is the query's page."""
    from hybrid_qpr.evaluation.evaluator import tuning_request
    from hybrid_qpr.search import hybrid_page
    from hybrid_qpr.types import QueryVector

    lists = searcher.candidates(QUERY, QueryVector.encoding(searcher.encoder, QUERY), 60)
    request = tuning_request(settings["fusion"], settings["alpha"], 30, 10, settings.get("bounds")).replace(
        offset=settings.get("offset", 0), autocut=settings.get("autocut", 0))
    page = hybrid_page(lists, request).fused
    results = searcher.search(QUERY, top_k=10, depth=30, **settings)
    assert page and [f.id for f in page] == [r.id for r in results]
    assert [f.score for f in page] == pytest.approx([r.score for r in results])


def test_a_directory_is_loaded_as_a_reranker_and_a_reranker_is_used_as_it_is(searcher):
    from hybrid_qpr import resources
    from hybrid_qpr.types import ResultReranker

    directory = resources.model_dir().parent / "reranker-minilm-l6-int8"  # the bundled cross-encoder
    loaded = HybridSearcher(searcher.backend, searcher.encoder, reranker=directory).reranker
    assert isinstance(loaded, ResultReranker) and not isinstance(str(directory), ResultReranker)
    assert HybridSearcher(searcher.backend, searcher.encoder, reranker=loaded).reranker is loaded
