"""The embedded index, OpenSearch and Elasticsearch index the same BM25 terms and give the
same BM25 scores, on a mixed-script, accented, punctuation-heavy corpus (both engines in turn,
through the shared cluster fixtures)."""

from __future__ import annotations

from collections import Counter

import pytest

from hybrid_qpr.backends.cluster.bodies import TOKENS_FIELD, bm25_tokens
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.testing.corpora import mixed_script_texts
from hybrid_qpr.text.analysis import get_analyzer
from hybrid_qpr.types import Document

pytestmark = [pytest.mark.cluster]


@pytest.fixture()
def mixed(cluster_backend, committed_encoder):
    docs = [Document(f"m{i:02d}", text) for i, text in enumerate(mixed_script_texts()) if text.strip()]
    report = cluster_backend.ingest(docs, committed_encoder, batch_size=64, show_progress=False)
    assert report.failed == [] and report.indexed == len(docs)
    return cluster_backend, docs


def test_the_cluster_field_analyses_to_the_embedded_terms(mixed):
    backend, docs = mixed
    analyzer = get_analyzer("english")
    assert backend.analyzer == analyzer and backend.bm25_field == TOKENS_FIELD
    for doc in docs:
        answer = backend.request("POST", backend.path("_analyze"),
                                 {"field": TOKENS_FIELD, "text": bm25_tokens(doc.text, analyzer)}, what="analyze")
        assert [t["token"] for t in answer["tokens"]] == analyzer.analyze(doc.text), doc.text


def test_the_cluster_indexes_the_embedded_terms(mixed):
    backend, docs = mixed
    analyzer = backend.analyzer
    for doc in docs:
        answer = backend.request("GET", backend.path("_termvectors", doc.id),
                                 params={"fields": TOKENS_FIELD, "positions": "false", "offsets": "false"},
                                 what="term vectors")
        terms = answer["term_vectors"].get(TOKENS_FIELD, {}).get("terms", {})
        assert {t: v["term_freq"] for t, v in terms.items()} == Counter(analyzer.analyze(doc.text)), doc.text


def test_bm25_scores_equal_the_embedded_ones(cluster_backend, question_bank, held_out_queries, committed_encoder,
                                             tmp_path):
    """Same terms, same k1 and b, same statistics (one shard): the same scores, not merely the
    same order (Elasticsearch's similarity multiplies by k1 + 1; the backend divides it out)."""
    from hybrid_qpr.backends.local import LocalIndex

    cluster_backend.ingest(question_bank, committed_encoder, batch_size=100, show_progress=False)
    local = LocalIndex.create(tmp_path / "local", committed_encoder)
    local.ingest(question_bank, committed_encoder, show_progress=False)
    for query in held_out_queries[:6]:
        remote = cluster_backend.bm25(query, 10)
        embedded = local.bm25(query, 10)
        assert remote and embedded
        expected = {h.id: h.score for h in embedded}
        for hit in remote:
            if hit.id in expected:  # ties at the cut may differ
                # Lucene stores a document's length in one byte (exact for short texts) and scores in float32
                assert hit.score == pytest.approx(expected[hit.id], rel=2e-3), (query, hit.id)
        assert [h.score for h in remote] == pytest.approx([h.score for h in embedded], rel=2e-3)


def _legacy_body(backend, encoder) -> dict:
    """The create-index body an earlier hybrid-qpr sent: no analyzer in ``_meta``; on OpenSearch,
    BM25 on ``text`` through a server-side pattern analyzer instead of a ``bm25_tokens`` field."""
    from hybrid_qpr.text.tokenizer import TOKEN_PATTERN

    body = backend.index_body(encoder.dim, encoder.distance, encoder.fingerprint, encoder.kind)
    body["mappings"]["_meta"]["bm25"] = {"k1": 1.5, "b": 0.75, "tokens": "hybrid_qpr.text.tokenize"}
    if backend.engine == "opensearch":
        del body["mappings"]["properties"][TOKENS_FIELD]
        body["mappings"]["properties"]["text"]["analyzer"] = "hybrid_qpr_words"
        body["settings"]["index"]["analysis"] = {
            "tokenizer": {"hybrid_qpr_words": {"type": "pattern", "pattern": TOKEN_PATTERN, "group": 0,
                                               "flags": "UNICODE_CHARACTER_CLASS"}},
            "analyzer": {"hybrid_qpr_words": {"type": "custom", "tokenizer": "hybrid_qpr_words", "filter": ["lowercase"]}}}
    return body


def test_an_index_made_before_analyzers_keeps_its_terms(cluster_backend, question_bank, committed_encoder):
    backend = cluster_backend
    backend.transport.request("PUT", backend.path(), _legacy_body(backend, committed_encoder))
    backend.ingest(question_bank, committed_encoder, batch_size=100, show_progress=False)
    assert backend.analyzer.legacy
    assert backend.bm25_field == (TOKENS_FIELD if backend.engine == "elasticsearch" else "text")
    hits = backend.bm25("how do i change my password?", 5)
    assert hits and hits[0].id == "q000"
    assert backend.bm25("passwords", 5) == []  # legacy terms: no stemming
    assert "ingest the same source into a new index" in backend.analyzer_note()
    with pytest.raises(ConfigError, match="analyses BM25 text with the legacy analyzer, not english"):
        backend.ensure_index(committed_encoder, analyzer="english")
