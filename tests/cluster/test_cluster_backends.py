"""The Backend contract on a real cluster, once per engine (OpenSearch and Elasticsearch).

Every test makes its own index from ``question_bank`` (200 synthetic questions) and the
committed encoder (see conftest.py for how the nodes are found), and drops it afterwards.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from hybrid_qpr.backends.base import Backend
from hybrid_qpr.distance import similarity
from hybrid_qpr.errors import BackendError, ClusterError, ModelMismatchError
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.types import Document, QueryVector

# The backend contract also runs in the smoke phase against OpenSearch 2.19.6 (scripts/test).
pytestmark = [pytest.mark.cluster, pytest.mark.smoke]


@pytest.fixture()
def filled(cluster_backend, question_bank, committed_encoder):
    report = cluster_backend.ingest(question_bank, committed_encoder, batch_size=64, show_progress=False)
    return cluster_backend, report


def test_ingest_then_count_and_read_back(filled, question_bank, committed_encoder):
    backend, report = filled
    assert isinstance(backend, Backend)
    assert backend.capabilities.batched_bm25_and_knn
    assert (report.indexed, report.updated, report.failed) == (len(question_bank), 0, [])
    assert backend.count() == len(question_bank)
    docs = backend.documents(["q000", "q123", "missing"])
    assert set(docs) == {"q000", "q123"}
    assert docs["q123"] == question_bank[123]
    meta = backend.meta
    assert (meta["dim"], meta["distance"]) == (committed_encoder.dim, committed_encoder.distance)
    assert (meta["model_fingerprint"], meta["model_kind"]) == (committed_encoder.fingerprint, committed_encoder.kind)


def test_reingest_replaces_and_never_duplicates(filled, question_bank, committed_encoder):
    backend, _ = filled
    changed = [Document(d.id, d.text + " please", d.metadata) for d in question_bank[:10]]
    report = backend.ingest(question_bank[10:] + changed, committed_encoder, show_progress=False)
    assert (report.indexed, report.updated) == (0, len(question_bank))
    assert backend.count() == len(question_bank)
    assert backend.documents(["q005"])["q005"].text.endswith(" please")


def test_a_different_model_is_refused(cluster_backend, committed_encoder, question_bank):
    enc = committed_encoder
    body = cluster_backend.index_body(enc.dim, enc.distance, "0123456789abcdef", enc.kind)
    cluster_backend.transport.request("PUT", f"/{cluster_backend.index}", body)
    with pytest.raises(ModelMismatchError, match="fingerprint 0123456789abcdef"):
        cluster_backend.ingest(question_bank[:5], enc, show_progress=False)
    with pytest.raises(ModelMismatchError, match="fingerprint 0123456789abcdef"):
        HybridSearcher(cluster_backend, enc)
    assert cluster_backend.count() == 0

    cluster_backend.drop()
    cluster_backend.transport.request("PUT", f"/{cluster_backend.index}",
                                      cluster_backend.index_body(enc.dim + 3, enc.distance, enc.fingerprint, enc.kind))
    with pytest.raises(ModelMismatchError, match=f"{enc.dim + 3}, the model produces {enc.dim}"):
        cluster_backend.ingest(question_bank[:5], enc, show_progress=False)


def test_knn_agrees_with_exact_search_in_the_embedded_engine(filled, tmp_path, question_bank, held_out_queries,
                                                           committed_encoder):
    from hybrid_qpr.backends.local import LocalIndex

    backend, _ = filled
    local = LocalIndex.create(tmp_path / "local", committed_encoder)
    local.ingest(question_bank, committed_encoder, show_progress=False)
    local = LocalIndex.open(tmp_path / "local")
    found = expected = 0
    for vector in committed_encoder.encode(held_out_queries):
        exact = local.knn(vector, 10)
        expected += len(exact)
        found += len({h.id for h in exact} & {h.id for h in backend.knn(vector, 10)})
        common = {h.id: h.score for h in exact}  # same scale as the embedded index
        for hit in backend.knn(vector, 10):
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


def test_every_mode_filters_pages_and_explains(filled, committed_encoder, question_bank):
    backend, _ = filled
    searcher = HybridSearcher(backend, committed_encoder)
    by_id = {d.id: d for d in question_bank}
    query = "how do i change my password?"
    for mode in ("bm25", "knn", "hybrid", "rerank"):
        filtered = searcher.search(query, mode=mode, top_k=10, filters={"lang": "de"})
        assert filtered, mode
        assert all(by_id[r.id].metadata["lang"] == "de" and r.metadata["lang"] == "de" for r in filtered), mode
        assert all(r.text == by_id[r.id].text for r in filtered), mode
        whole = searcher.search(query, mode=mode, top_k=20, depth=40) if mode == "hybrid" else \
            searcher.search(query, mode=mode, top_k=20)
        pages = (searcher.search(query, mode=mode, top_k=10, depth=40) + searcher.search(query, mode=mode, top_k=10, offset=10, depth=40)
                 if mode == "hybrid" else
                 searcher.search(query, mode=mode, top_k=10) + searcher.search(query, mode=mode, top_k=10, offset=10))
        if mode == "rerank":  # rerank re-orders a recall of 30: the two pages are slices of one list
            assert len(pages) == 20
        assert [r.id for r in pages] == [r.id for r in whole], mode
        assert len({r.id for r in pages}) == len(pages), mode
    for r in searcher.search(query, mode="hybrid", top_k=10):
        assert r.bm25 is not None or r.knn is not None
    topics = backend.knn(committed_encoder.encode([query])[0], 50, {"topic": ["password", "avatar"], "lang": "en"})
    assert len(topics) == 10 and {by_id[h.id].metadata["topic"] for h in topics} == {"password", "avatar"}


def test_bm25_and_knn_in_one_round_trip_match_the_separate_searches(filled, committed_encoder):
    backend, _ = filled
    vector = committed_encoder.encode(["how do i change my password?"])[0]
    for filters in (None, {"lang": "de"}):
        bm25, knn = backend.bm25_and_knn("change my password", QueryVector.of(vector), 20, filters)
        assert bm25.ids and knn.ids
        assert bm25.ids == [h.id for h in backend.bm25("change my password", 20, filters)]
        assert knn.ids == [h.id for h in backend.knn(vector, 20, filters)]


def test_delete_removes_and_counts(filled, question_bank):
    backend, _ = filled
    assert backend.delete(["q001", "q002", "q001", "no-such-id"]) == 2
    assert backend.count() == len(question_bank) - 2
    assert backend.documents(["q001", "q003"]).keys() == {"q003"}
    assert "q001" not in {h.id for h in backend.bm25(question_bank[1].text, 50)}


def test_tuned_hybrid_is_never_below_the_better_single_mode(filled, committed_encoder, question_bank,
                                                           held_out_queries):
    from hybrid_qpr.evaluation.evaluator import tune

    backend, _ = filled
    subjects = sorted({d.metadata["topic"] for d in question_bank}, key=lambda s: [d.metadata["topic"] for d in question_bank].index(s))
    queries = {f"h{i}": text for i, text in enumerate(held_out_queries)}
    qrels = {f"h{i}": {d.id: 1 for d in question_bank if d.metadata["topic"] == subject}
             for i, subject in enumerate(subjects)}
    searcher = HybridSearcher(backend, committed_encoder)
    result = tune(searcher, queries, qrels, depth=40)
    assert result.mrr >= max(result.bm25_mrr, result.knn_mrr) - 1e-12
    backend.set_fusion_defaults(result.defaults)
    assert HybridSearcher(backend, committed_encoder).fusion_settings(None, None) == (result.fusion, result.alpha)


def test_rejected_documents_are_counted_and_written(cluster_backend, committed_encoder, tmp_path):
    docs = [Document("a", "first question?", {"size": 3}), Document("b", "second question?", {"size": 4})]
    cluster_backend.ingest(docs, committed_encoder, show_progress=False)
    bad = [(7, Document("c", "third question?", {"size": "large"})), (8, Document("d", "fourth?", {"size": 5}))]
    rejects = tmp_path / "rejects.jsonl"
    report = cluster_backend.ingest(bad, committed_encoder, rejects_path=rejects, show_progress=False)
    assert (report.indexed, len(report.failed)) == (1, 1)
    rows = [json.loads(line) for line in rejects.read_text().splitlines()]
    assert [(r["id"], r["line"], r["status"]) for r in rows] == [("c", 7, 400)]
    assert "exception" in rows[0]["error"]
    assert cluster_backend.count() == 3


def test_missing_index_and_unreachable_node_give_clear_errors(cluster_backend, cluster_engine, committed_encoder):
    import importlib

    vector = committed_encoder.encode(["x"])[0]
    with pytest.raises(BackendError, match=f"does not exist; create it with 'hybrid-qpr ingest FILE --{cluster_engine}"):
        cluster_backend.bm25("x", 5)
    with pytest.raises(BackendError, match="does not exist"):
        cluster_backend.bm25_and_knn("x", QueryVector.of(vector), 5)  # _msearch reports it per item, not as an HTTP error
    with pytest.raises(BackendError, match="does not exist"):
        cluster_backend.delete(["a"])
    engine = importlib.import_module(f"hybrid_qpr.backends.{cluster_engine}")
    with pytest.raises(ClusterError, match="cannot reach .*Is the node running"):
        engine.connect("http://127.0.0.1:9", timeout=2)


def test_shards_and_replicas_are_index_settings(cluster_backend, committed_encoder, question_bank):
    cluster_backend.ingest(question_bank[:20], committed_encoder, shards=2, replicas=0, show_progress=False)
    settings = cluster_backend.transport.request("GET", f"/{cluster_backend.index}/_settings")
    index = next(iter(settings.values()))["settings"]["index"]
    assert (index["number_of_shards"], index["number_of_replicas"]) == ("2", "0")
    assert cluster_backend.count() == 20
