"""OpenSearchBackend against a real node (see conftest.py for how the node is found).

Every test makes its own index from ``question_bank`` (200 synthetic questions) and the
committed encoder, and deletes it afterwards.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybrid_qpr.backends.base import Backend
from hybrid_qpr.types import Document
from hybrid_qpr.backends.opensearch import OpenSearchBackend, index_body, install_pipelines, pipeline_body
from hybrid_qpr.distance import similarity
from hybrid_qpr.errors import BackendError, ClusterError, ModelMismatchError

pytestmark = pytest.mark.cluster


@pytest.fixture()
def filled(opensearch_client, index_name, question_bank, committed_encoder):
    backend = OpenSearchBackend(opensearch_client, index_name)
    report = backend.ingest(question_bank, committed_encoder, batch_size=64, show_progress=False)
    return backend, report


def test_ingest_then_count_and_read_back(filled, question_bank, committed_encoder):
    backend, report = filled
    assert isinstance(backend, Backend)
    assert (report.indexed, report.updated, report.failed) == (len(question_bank), 0, [])
    assert backend.count() == len(question_bank)
    docs = backend.documents(["q000", "q123", "missing"])
    assert set(docs) == {"q000", "q123"}
    assert docs["q123"] == question_bank[123]
    meta = backend.meta
    assert (meta["dim"], meta["distance"]) == (committed_encoder.dim, committed_encoder.distance)
    assert (meta["model_fingerprint"], meta["model_kind"]) == (committed_encoder.fingerprint, committed_encoder.kind)
    assert meta["_properties"]["embedding"]["method"]["engine"] == "lucene"


def test_reingest_replaces_and_never_duplicates(filled, question_bank, committed_encoder):
    backend, _ = filled
    changed = [Document(d.id, d.text + " please", d.metadata) for d in question_bank[:10]]
    report = backend.ingest(question_bank[10:] + changed, committed_encoder, show_progress=False)
    assert (report.indexed, report.updated) == (0, len(question_bank))
    assert backend.count() == len(question_bank)
    assert backend.documents(["q005"])["q005"].text.endswith(" please")


def test_wrong_dims_field_type_or_model_is_refused(opensearch_client, index_name, committed_encoder, question_bank):
    enc = committed_encoder
    wrong_dims = index_body(enc.dim + 3, enc.distance, enc.fingerprint, enc.kind)
    opensearch_client.indices.create(index=index_name, body=wrong_dims)
    backend = OpenSearchBackend(opensearch_client, index_name)
    with pytest.raises(ModelMismatchError, match=f"dimension {enc.dim + 3}, the model produces {enc.dim}"):
        backend.ingest(question_bank[:5], enc, show_progress=False)
    assert backend.count() == 0

    opensearch_client.indices.delete(index=index_name)
    opensearch_client.indices.create(index=index_name, body={"mappings": {"properties": {
        "text": {"type": "keyword"}, "embedding": {"type": "float"}}}})
    with pytest.raises(ModelMismatchError, match="'embedding' is float, expected knn_vector.*'text' is keyword"):
        OpenSearchBackend(opensearch_client, index_name).ingest(question_bank[:5], enc, show_progress=False)

    opensearch_client.indices.delete(index=index_name)
    opensearch_client.indices.create(index=index_name, body=index_body(enc.dim, enc.distance, "0123456789abcdef", enc.kind))
    with pytest.raises(ModelMismatchError, match="fingerprint 0123456789abcdef"):
        OpenSearchBackend(opensearch_client, index_name).check_encoder(enc)


def test_knn_agrees_with_exact_search_in_the_embedded_engine(filled, tmp_path, question_bank, held_out_queries,
                                                           committed_encoder):
    from hybrid_qpr.backends.local import LocalIndex

    backend, _ = filled
    local = LocalIndex.create(tmp_path / "local", committed_encoder)
    local.ingest(question_bank, committed_encoder, show_progress=False)
    vectors = committed_encoder.encode(held_out_queries)
    found = expected = 0
    for vector in vectors:
        exact = local.knn(vector, 10)
        cluster = backend.knn(vector, 10)
        expected += len(exact)
        found += len({h.id for h in exact} & {h.id for h in cluster})
        # same scale as the embedded engine: higher is better, same similarity values
        common = {h.id: h.score for h in exact}
        for hit in cluster:
            if hit.id in common:
                assert hit.score == pytest.approx(common[hit.id], rel=1e-3, abs=1e-3)
    assert found / expected >= 0.95


def test_vector_scores_are_exact_similarities(filled, question_bank, committed_encoder):
    backend, _ = filled
    query = committed_encoder.encode(["how to reset a forgotten password"])
    ids = [d.id for d in question_bank[:30]]
    scores = backend.vector_scores(query[0], ids + ["missing"])
    exact = similarity(query, committed_encoder.encode([d.text for d in question_bank[:30]]), committed_encoder.distance)[0]
    assert set(scores) == set(ids)
    np.testing.assert_allclose([scores[i] for i in ids], exact, rtol=1e-3, atol=1e-3)


def test_filters_apply_to_every_mode(filled, committed_encoder, question_bank):
    backend, _ = filled
    install_pipelines(backend.client, ["rrf"])
    by_id = {d.id: d for d in question_bank}
    vector = committed_encoder.encode(["how do i change my password?"])[0]
    runs = {
        "bm25": backend.bm25("change my password", 20, {"lang": "de"}),
        "knn": backend.knn(vector, 20, {"lang": "de"}),
        "rerank": backend.rerank_server("change my password", vector, 30, {"lang": "de"}),
        "hybrid_server": backend.hybrid_server("change my password", vector, 20, {"lang": "de"}),
    }
    for mode, hits in runs.items():
        assert hits, mode
        assert all(by_id[h.id].metadata["lang"] == "de" for h in hits), mode
    topics = backend.knn(vector, 50, {"topic": ["password", "avatar"], "lang": "en"})
    assert len(topics) == 10 and {by_id[h.id].metadata["topic"] for h in topics} == {"password", "avatar"}


def test_bm25_and_knn_in_one_round_trip_match_the_separate_searches(filled, committed_encoder):
    backend, _ = filled
    vector = committed_encoder.encode(["how do i change my password?"])[0]
    for filters in (None, {"lang": "de"}):
        bm25, knn = backend.bm25_and_knn("change my password", vector, 20, filters)
        assert bm25 and knn
        assert [h.id for h in bm25] == [h.id for h in backend.bm25("change my password", 20, filters)]
        assert [h.id for h in knn] == [h.id for h in backend.knn(vector, 20, filters)]
        np.testing.assert_allclose([h.score for h in knn], [h.score for h in backend.knn(vector, 20, filters)], rtol=1e-6)


def test_server_side_and_client_side_hybrid_are_sensible(filled, committed_encoder, question_bank):
    from hybrid_qpr.search import HybridSearcher

    backend, _ = filled
    assert install_pipelines(backend.client, ["rrf", "minmax"]) == {"hybrid-qpr-rrf": "installed",
                                                                  "hybrid-qpr-minmax": "installed"}
    searcher = HybridSearcher(backend, committed_encoder)
    target = question_bank[42]  # an exact question from the bank must come first in every fused list
    vector = committed_encoder.encode([target.text])[0]
    server_rrf = backend.hybrid_server(target.text, vector, 20)
    server_minmax = backend.hybrid_server(target.text, vector, 20, pipeline="hybrid-qpr-minmax")
    inline = backend.hybrid_server(target.text, vector, 20, pipeline=pipeline_body("minmax", alpha=0.5))
    client_rrf = searcher.search(target.text, mode="hybrid", fusion="rrf", top_k=10, depth=20)
    for name, ids in {"server rrf": [h.id for h in server_rrf], "server minmax": [h.id for h in server_minmax],
                      "inline": [h.id for h in inline], "client rrf": [r.id for r in client_rrf]}.items():
        assert ids[0] == target.id, name
        assert len(ids) == len(set(ids)), name
    assert [h.id for h in server_minmax] == [h.id for h in inline]
    for hits in (server_rrf, server_minmax):
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
    # both fusions draw on both retrievers, and agree on most of the top 10
    bm25_ids = {h.id for h in backend.bm25(target.text, 20)}
    knn_ids = {h.id for h in backend.knn(vector, 20)}
    server_ids = {h.id for h in server_rrf}
    assert server_ids <= bm25_ids | knn_ids
    # the fused list is not just one retriever's list
    assert server_ids != bm25_ids or bm25_ids == knn_ids
    assert server_ids & (knn_ids - bm25_ids) or server_ids & (bm25_ids - knn_ids) or bm25_ids == knn_ids
    top_server = {h.id for h in server_rrf[:10]}
    assert len(top_server & {r.id for r in client_rrf}) >= 7
    assert all(r.bm25 is not None or r.knn is not None for r in client_rrf)


def test_missing_pipeline_and_index_give_clear_errors(opensearch_client, index_name, filled, committed_encoder):
    backend, _ = filled
    vector = committed_encoder.encode(["x"])[0]
    with pytest.raises(BackendError, match="pipeline 'no-such-pipeline' is not installed.*pipeline install"):
        backend.hybrid_server("x", vector, 5, pipeline="no-such-pipeline")
    absent = OpenSearchBackend(opensearch_client, index_name + "-absent")
    with pytest.raises(BackendError, match="does not exist; create it with 'hybrid-qpr ingest"):
        absent.bm25("x", 5)
    with pytest.raises(BackendError, match="does not exist; create it with 'hybrid-qpr ingest"):
        absent.bm25_and_knn("x", vector, 5)  # _msearch reports it per item, not as an HTTP error


def test_rejected_documents_are_counted_and_written(opensearch_client, index_name, committed_encoder, tmp_path):
    backend = OpenSearchBackend(opensearch_client, index_name)
    docs = [Document("a", "first question?", {"size": 3}), Document("b", "second question?", {"size": 4})]
    backend.ingest(docs, committed_encoder, show_progress=False)
    bad = [(7, Document("c", "third question?", {"size": "large"})), (8, Document("d", "fourth?", {"size": 5}))]
    rejects = tmp_path / "rejects.jsonl"
    report = backend.ingest(bad, committed_encoder, rejects_path=rejects, show_progress=False)
    assert (report.indexed, len(report.failed)) == (1, 1)
    rows = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert [(r["id"], r["line"], r["status"]) for r in rows] == [("c", 7, 400)]
    assert "mapper_parsing_exception" in rows[0]["error"]
    assert backend.count() == 3


@pytest.mark.slow
def test_node_stopped_mid_ingest_then_resumed(local_node, opensearch_client, index_name, committed_encoder,
                                               question_bank):
    if local_node is None:
        pytest.skip("the node under test is not the local node of 'hybrid-qpr cluster start', so it cannot be stopped")
    backend = OpenSearchBackend(opensearch_client, index_name)
    stopped = []

    def documents():
        for i, doc in enumerate(question_bank):
            if i == 120 and not stopped:  # at least the first batch of 50 is acknowledged by now
                stopped.append(local_node.stop())
            yield doc

    try:
        with pytest.raises(ClusterError, match="re-run the same ingest once the cluster is back to resume"):
            backend.ingest(documents(), committed_encoder, batch_size=50, show_progress=False,
                           max_retries=2, initial_backoff=0.2, max_backoff=0.5)
    finally:
        local_node.start()
    assert stopped == [True]
    partial = backend.count()
    assert 50 <= partial < len(question_bank)
    report = backend.ingest(question_bank, committed_encoder, batch_size=50, show_progress=False)
    assert report.indexed == len(question_bank) - partial and report.updated == partial
    assert backend.count() == len(question_bank)
