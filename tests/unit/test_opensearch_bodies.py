"""Index and pipeline bodies, filters, score conversion and connection errors (no node needed)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybrid_qpr.backends.opensearch import (OpenSearchBackend, connect, filter_clauses, index_body, pipeline_body,
                                            redact)
from hybrid_qpr.backends.elasticsearch import index_body as es_index_body
from hybrid_qpr.distance import score_from_opensearch, similarity
from hybrid_qpr.errors import ClusterError, ConfigError
from hybrid_qpr.text.analysis import get_analyzer
from hybrid_qpr.text.tokenizer import TOKEN_PATTERN


@pytest.mark.parametrize("distance, space, es", [("sqeuclidean", "l2", "l2_norm"), ("cosine", "cosinesimil", "cosine"),
                                                 ("dot", "innerproduct", "max_inner_product")])
def test_index_bodies_take_dims_and_space_from_the_model(distance, space, es):
    body = index_body(96, distance, "abcdef0123456789", "cnn")
    assert "${" not in json.dumps(body)
    vector = body["mappings"]["properties"]["embedding"]
    assert (vector["type"], vector["dimension"], vector["method"]["space_type"]) == ("knn_vector", 96, space)
    assert vector["method"]["engine"] == "lucene" and body["settings"]["index"]["knn"] is True
    assert body["mappings"]["_meta"] == {"format": "hybrid-qpr-index", "format_version": 1, "dim": 96, "distance": distance,
                                         "model_fingerprint": "abcdef0123456789", "model_kind": "cnn",
                                         "engine": "lucene", "fusion": None,
                                         "bm25": {"k1": 1.5, "b": 0.75, "field": "bm25_tokens",
                                                  "analyzer": get_analyzer("english").record()}}
    # BM25 like the embedded index: its k1 and b, over the analyzer's terms the client writes
    settings = body["settings"]["index"]
    assert settings["similarity"]["default"] == {"type": "BM25", "k1": 1.5, "b": 0.75}
    assert body["mappings"]["properties"]["bm25_tokens"] == {"type": "text", "analyzer": "whitespace"}
    assert body["mappings"]["properties"]["text"]["analyzer"] == "hybrid_qpr_words"  # for queries sent directly
    assert settings["analysis"]["tokenizer"]["hybrid_qpr_words"]["pattern"] == TOKEN_PATTERN
    french = index_body(96, distance, "abcdef0123456789", "cnn", analyzer="french")["mappings"]["_meta"]["bm25"]
    assert french["analyzer"]["name"] == "french"
    elastic = es_index_body(96, distance, "abcdef0123456789", "cnn")
    dense = elastic["mappings"]["properties"]["embedding"]
    assert (dense["type"], dense["dims"], dense["similarity"]) == ("dense_vector", 96, es)
    assert "${" not in json.dumps(elastic)
    assert elastic["settings"]["index"]["similarity"]["default"] == {"type": "BM25", "k1": 1.5, "b": 0.75}
    assert elastic["mappings"]["properties"]["bm25_tokens"] == {"type": "text", "analyzer": "whitespace"}
    assert elastic["mappings"]["_meta"]["bm25"] == body["mappings"]["_meta"]["bm25"]


def test_a_legacy_opensearch_index_runs_bm25_on_text_in_the_cluster():
    """The legacy terms are what the cluster's word pattern makes of ``text``: such an index (the one
    ``mlcommons setup`` makes, filled from plain text by an ingest pipeline) has no client-written
    terms field, so documents other tools send are searched too."""
    body = index_body(96, "cosine", "abcdef0123456789", "cnn", analyzer="legacy")
    assert "bm25_tokens" not in body["mappings"]["properties"]
    assert body["mappings"]["properties"]["text"]["analyzer"] == "hybrid_qpr_words"
    assert body["mappings"]["_meta"]["bm25"]["field"] == "text"
    assert body["mappings"]["_meta"]["bm25"]["analyzer"] == get_analyzer("legacy").record()


def test_pipeline_bodies_weights_and_checks():
    minmax = pipeline_body("minmax", alpha=0.3)["phase_results_processors"][0]["normalization-processor"]
    assert minmax["normalization"] == {"technique": "min_max"}
    assert minmax["combination"]["parameters"]["weights"] == [0.7, 0.3]
    assert pipeline_body("zscore", 0.5)["phase_results_processors"][0]["normalization-processor"]["normalization"] == {"technique": "z_score"}
    rrf = pipeline_body("rrf", rrf_k=20)["phase_results_processors"][0]["score-ranker-processor"]
    assert rrf["combination"] == {"technique": "rrf", "rank_constant": 20}
    with pytest.raises(ConfigError, match="alpha=1.5"):
        pipeline_body("minmax", alpha=1.5)
    with pytest.raises(ConfigError, match="fusion='borda'"):
        pipeline_body("borda")
    with pytest.raises(ConfigError, match="rrf_k=0"):
        pipeline_body("rrf", rrf_k=0)


@pytest.mark.parametrize("distance", ["sqeuclidean", "cosine", "dot"])
def test_score_from_opensearch_inverts_the_knn_plugin_scores(distance):
    rng = np.random.default_rng(1)
    q, docs = rng.normal(size=(1, 8)), rng.normal(size=(50, 8))
    exact = similarity(q, docs, distance)[0]
    # the k-NN plugin's transforms, as observed on OpenSearch 2.19.6 (see docs/opensearch.md)
    if distance == "sqeuclidean":
        plugin = 1.0 / (1.0 - exact)
    elif distance == "cosine":
        plugin = (1.0 + exact) / 2.0
    else:
        plugin = np.where(exact >= 0, exact + 1.0, 1.0 / (1.0 - exact))
    np.testing.assert_allclose(score_from_opensearch(plugin, distance), exact, rtol=1e-5, atol=1e-5)


def test_filters_become_exact_term_clauses_on_metadata():
    assert filter_clauses(None) == []
    assert filter_clauses({"lang": "en", "tag": ["a", "b"], "n": 3, "ok": True}) == [
        {"term": {"metadata.lang": "en"}}, {"terms": {"metadata.tag": ["a", "b"]}},
        {"term": {"metadata.n": 3}}, {"term": {"metadata.ok": True}}]
    for bad in ({"lang": None}, {"lang": []}, {"": "x"}, {"lang": {"nested": 1}}):
        with pytest.raises(ConfigError, match="filter"):
            filter_clauses(bad)


def test_index_names_are_checked():
    for bad in ("Questions", "_hidden", "a b", "x/y", ""):
        with pytest.raises(ConfigError, match="index name"):
            OpenSearchBackend(None, bad)


def test_credentials_never_appear_in_errors(monkeypatch):
    assert redact("https://alice:s3cret@search.example.com:9200/prefix") == "https://search.example.com:9200/prefix"
    assert redact("http://127.0.0.1:9200") == "http://127.0.0.1:9200"
    with pytest.raises(ClusterError) as info:
        connect("http://alice:s3cret@127.0.0.1:9", timeout=2)  # port 9 (discard): nothing listens
    assert "s3cret" not in str(info.value) and "alice" not in str(info.value)
    assert "cannot reach OpenSearch" in str(info.value) and "hybrid-qpr node start" in str(info.value)
    monkeypatch.setenv("HYBRID_QPR_OPENSEARCH_PASSWORD", "from-env")
    with pytest.raises(ConfigError, match="both a user and a password"):
        connect("http://127.0.0.1:9", check=False)
    monkeypatch.setenv("HYBRID_QPR_OPENSEARCH_USER", "bob")
    monkeypatch.setenv("HYBRID_QPR_OPENSEARCH_VERIFY", "maybe")
    with pytest.raises(ConfigError, match="HYBRID_QPR_OPENSEARCH_VERIFY='maybe'"):
        connect("https://127.0.0.1:9", check=False)
    monkeypatch.delenv("HYBRID_QPR_OPENSEARCH_VERIFY")
    with pytest.raises(ConfigError, match="expected http"):
        connect("ftp://127.0.0.1:9", check=False)


def test_bm25_queries_carry_the_embedded_tokens():
    from hybrid_qpr.backends.cluster.bodies import TOKENS_FIELD, bm25_body, bm25_tokens

    legacy, english = get_analyzer("legacy"), get_analyzer("english")
    assert bm25_tokens("Levi's Café costs 1,000 Ｙen?", legacy) == "levi s café costs 1 000 yen ?"
    assert bm25_tokens("Levi's Café costs 1,000 Ｙen?", english) == "levi s cafe cost 1 000 yen"
    body = bm25_body("Where is Zürich?", 10, {"group": "q1"}, TOKENS_FIELD, english)
    assert body["query"]["bool"]["must"] == [{"match": {TOKENS_FIELD: {"query": "where zurich"}}}]
