"""What only the OpenSearch backend has, against a real node: the knn_vector layout, search
pipelines and the server-side modes (the shared contract runs per engine in
test_cluster_backends.py).

Every test makes its own index from ``question_bank`` (200 synthetic questions) and the
committed encoder, and deletes it afterwards.
"""

from __future__ import annotations

import pytest

from hybrid_qpr.backends.opensearch import OpenSearchBackend, index_body, install_pipelines, pipeline_body
from hybrid_qpr.errors import BackendError, ModelMismatchError
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.types import QueryVector

pytestmark = [pytest.mark.cluster, pytest.mark.engines("opensearch")]


@pytest.fixture()
def filled(cluster_backend, question_bank, committed_encoder):
    """The question bank written in id order, one bulk request at a time: the node's order of
    equal scores (the order it applied the writes in) is then the client's (by id), so the
    server-side pipelines, which fuse the engine's own lists, see the lists the client fuses."""
    backend = cluster_backend
    in_id_order = sorted(question_bank, key=lambda doc: doc.id)
    report = backend.ingest(in_id_order, committed_encoder, batch_size=64, show_progress=False, in_flight=1)
    return backend, report


def test_layout_is_a_lucene_knn_vector(filled, committed_encoder):
    backend, _ = filled
    vector = backend.meta["_properties"]["embedding"]
    assert (vector["type"], vector["dimension"], vector["method"]["engine"]) == ("knn_vector", committed_encoder.dim, "lucene")
    assert backend.capabilities.server_side_hybrid and backend.capabilities.server_side_rescore


def test_wrong_dims_field_type_or_model_is_refused(cluster_client, cluster_backend, committed_encoder, question_bank):
    opensearch_client, index_name = cluster_client, cluster_backend.index
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


def test_filters_apply_to_every_mode(filled, committed_encoder, question_bank):
    backend, _ = filled
    install_pipelines(backend.client, ["rrf"])
    by_id = {d.id: d for d in question_bank}
    vector = committed_encoder.encode(["how do i change my password?"])[0]
    runs = {
        "bm25": backend.bm25("change my password", 20, {"lang": "de"}),
        "knn": backend.knn(vector, 20, {"lang": "de"}),
        "rerank": backend.rescore_server("change my password", vector, 30, {"lang": "de"}),
        "hybrid_server": backend.hybrid_server("change my password", vector, 20, {"lang": "de"}),
    }
    for mode, hits in runs.items():
        assert hits, mode
        assert all(by_id[h.id].metadata["lang"] == "de" for h in hits), mode
    topics = backend.knn(vector, 50, {"topic": ["password", "avatar"], "lang": "en"})
    assert len(topics) == 10 and {by_id[h.id].metadata["topic"] for h in topics} == {"password", "avatar"}


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
    # the same scale on both sides: the target is first in both lists, so both score it 0.5/61 + 0.5/61
    assert server_rrf[0].score == pytest.approx(client_rrf[0].score, rel=1e-4)
    assert all(r.bm25 is not None or r.knn is not None for r in client_rrf)


def test_missing_pipeline_and_index_give_clear_errors(cluster_client, filled, committed_encoder):
    backend, _ = filled
    vector = committed_encoder.encode(["x"])[0]
    with pytest.raises(BackendError, match="pipeline .no-such-pipeline. is not installed.*search-pipeline install"):
        backend.hybrid_server("x", vector, 5, pipeline="no-such-pipeline")
    absent = OpenSearchBackend(cluster_client, backend.index + "-absent")
    with pytest.raises(BackendError, match="does not exist; create it with 'hybrid-qpr ingest"):
        absent.bm25("x", 5)
    with pytest.raises(BackendError, match="does not exist; create it with 'hybrid-qpr ingest"):
        absent.bm25_and_knn("x", QueryVector.of(vector), 5)  # _msearch reports it per item, not as an HTTP error




def _tied(results, p):
    """Whether results ``p - 1`` and ``p`` have the same score (their order is then free)."""
    x, y = results[p - 1].score, results[p].score
    return abs(x - y) <= 1e-9 * max(1.0, abs(x))


def _assert_same_top(server, reference, n=10):
    """Same top ``n`` within ties: cut both lists where neither has a tie across the cut; each
    piece must hold the same documents. The last piece may be cut short by ``n`` inside a tie, so
    its documents must be among the ``reference``'s documents of that tie, which the reference
    holds when it runs past ``n`` (callers ask it for more)."""
    top, ref = server[:n], reference[:n]
    assert len(top) == len(ref)
    cuts = [0] + [p for p in range(1, len(top)) if not _tied(top, p) and not _tied(ref, p)] + [len(top)]
    pieces = list(zip(cuts, cuts[1:]))
    for start, end in pieces[:-1]:
        assert {r.id for r in top[start:end]} == {r.id for r in ref[start:end]}, (start, end)
    start, end = pieces[-1]
    stop = end
    while stop < len(reference) and _tied(reference, stop):
        stop += 1
    last, tie = {r.id for r in top[start:end]}, {r.id for r in reference[start:stop]}
    if stop < len(reference):  # the whole tie is in the reference
        assert last <= tie, (start, end, stop)
    else:  # the reference may end inside the tie: only documents it holds can be compared
        assert last & tie, (start, end, stop)


@pytest.mark.parametrize("query", ["how do i change my password?", "i lost my phone number", "newsletter settings"])
def test_server_side_rrf_gives_the_client_side_top_10(filled, committed_encoder, query):
    """RRF is rank-based, so the cluster's fusion and hybrid_qpr.fusion must agree exactly
    (the same lists of ``depth`` from each retriever, weights and rank constant): the same
    scores position by position, the same documents up to the order of tied ones (two
    documents at ranks (1, 2) and (2, 1) tie; the client breaks the tie by id, the cluster by
    its internal document order, which follows the order the node applied the writes in)."""
    backend, _ = filled
    searcher = HybridSearcher(backend, committed_encoder)
    for depth in (20, 50):
        client = searcher.search(query, mode="hybrid", fusion="rrf", alpha=0.5, top_k=depth, depth=depth)
        server = searcher.search(query, mode="hybrid", fusion="rrf", alpha=0.5, top_k=10, depth=depth, server_side=True)
        _assert_same_top(server, client)
        for s, c in zip(server, client):  # the cluster's unweighted RRF (2x) is brought to the client's scale
            assert s.score == pytest.approx(c.score, rel=1e-5)
    filtered = {"lang": "de"}
    client = searcher.search(query, mode="hybrid", fusion="rrf", top_k=30, depth=30, filters=filtered)
    server = searcher.search(query, mode="hybrid", fusion="rrf", top_k=10, depth=30, filters=filtered, server_side=True)
    _assert_same_top(server, client)
    for s, c in zip(server, client):
        assert s.score == pytest.approx(c.score, rel=1e-5)


def test_server_side_pipeline_uses_the_tuned_method_alpha_and_depth(filled, committed_encoder):
    """With tuned defaults stored on the index and no fusion arguments, the server side takes
    the tuned method and alpha: min-max with alpha=1 ranks as kNN alone, alpha=0 as BM25
    alone (the other list's weight is 0), on both sides; the tuned depth bounds each list."""
    backend, _ = filled
    query = "how can i see who views my profile picture?"
    vector = committed_encoder.encode([query])[0]
    for alpha, single in ((1.0, backend.knn(vector, 20)), (0.0, backend.bm25(query, 20))):
        backend.set_fusion_defaults({"fusion": "minmax", "alpha": alpha, "depth": 20})
        searcher = HybridSearcher(backend, committed_encoder)
        assert searcher.fusion_settings(None, None) == ("minmax", alpha)
        server = searcher.search(query, mode="hybrid", top_k=10, server_side=True)
        client = searcher.search(query, mode="hybrid", top_k=20)
        _assert_same_top(server, client)
        _assert_same_top(server, single)  # the list with weight 1 decides alone
    # the tuned depth is what the cluster gets: with depth 3 at most 3 + 3 documents can be fused
    backend.set_fusion_defaults({"fusion": "rrf", "alpha": 0.5, "depth": 3})
    server = HybridSearcher(backend, committed_encoder).search(query, mode="hybrid", top_k=3, server_side=True)
    client = HybridSearcher(backend, committed_encoder).search(query, mode="hybrid", top_k=3)
    _assert_same_top(server, client)


def test_weighted_rrf_and_zscore_server_side_follow_the_cluster_version(filled, committed_encoder):
    """neural-search 3.x fuses weighted RRF and z-score like the client side; 2.19 refuses both,
    and the search says so instead of silently dropping alpha."""
    from hybrid_qpr.errors import ConfigError

    backend, _ = filled
    major = int(backend.transport.request("GET", "/")["version"]["number"].split(".")[0])
    searcher = HybridSearcher(backend, committed_encoder)
    query = "how do i change my password?"
    if major < 3:
        for fusion, alpha in (("rrf", 0.3), ("zscore", 0.5)):
            with pytest.raises(ConfigError, match="need[s]? neural-search 3.x; use client-side fusion"):
                searcher.search(query, mode="hybrid", fusion=fusion, alpha=alpha, server_side=True)
        return
    client = searcher.search(query, mode="hybrid", fusion="rrf", alpha=0.3, top_k=30, depth=30)
    server = searcher.search(query, mode="hybrid", fusion="rrf", alpha=0.3, top_k=10, depth=30, server_side=True)
    _assert_same_top(server, client)
    # z-score with alpha=1: BM25 weighs nothing, so the kNN documents keep the kNN order. (A document
    # only BM25 found scores 0 in the cluster but the kNN list's floor on the client side - a z-score
    # can be negative - so such documents may sit differently; docs/opensearch.md.)
    knn = backend.knn(committed_encoder.encode([query])[0], 30)
    server = searcher.search(query, mode="hybrid", fusion="zscore", alpha=1.0, top_k=30, depth=30, server_side=True)
    knn_ids = {h.id for h in knn}
    in_knn = [r for r in server if r.id in knn_ids]
    assert len(in_knn) >= 5
    _assert_same_top(in_knn, knn, n=len(in_knn))
