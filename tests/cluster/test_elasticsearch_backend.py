"""What only the Elasticsearch backend has, against a real node: the dense_vector layout and its
checks, the connection probe, and the one-request ``query`` + ``knn`` search of a basic licence
(the shared contract runs per engine in test_cluster_backends.py)."""

from __future__ import annotations

import pytest

from hybrid_qpr.backends.elasticsearch import index_body
from hybrid_qpr.distance import elasticsearch_similarity
from hybrid_qpr.errors import ModelMismatchError

pytestmark = [pytest.mark.cluster, pytest.mark.engines("elasticsearch")]


def test_layout_matches_the_model(cluster_backend, committed_encoder, question_bank):
    cluster_backend.ingest(question_bank[:20], committed_encoder, show_progress=False)
    vector = cluster_backend.meta["_properties"]["embedding"]
    assert (vector["type"], vector["dims"], vector["index"]) == ("dense_vector", committed_encoder.dim, True)
    assert vector["similarity"] == elasticsearch_similarity(committed_encoder.distance)
    assert vector["index_options"]["type"] == "hnsw"
    assert cluster_backend.refresh_meta()["_properties"]["metadata"]["properties"]["topic"]["type"] == "keyword"
    assert not cluster_backend.capabilities.server_side_hybrid


def test_a_vector_field_of_another_kind_is_refused(cluster_client, cluster_backend, committed_encoder, question_bank):
    enc = committed_encoder
    other = "cosine" if enc.distance != "cosine" else "sqeuclidean"
    body = index_body(enc.dim, other, enc.fingerprint, enc.kind)
    body["mappings"]["_meta"]["distance"] = enc.distance  # only the similarity is wrong
    cluster_backend.transport.request("PUT", f"/{cluster_backend.index}", body)
    with pytest.raises(ModelMismatchError, match=f"similarity is {elasticsearch_similarity(other)}"):
        cluster_backend.ingest(question_bank[:5], enc, show_progress=False)

    cluster_backend.drop()
    cluster_backend.transport.request("PUT", f"/{cluster_backend.index}", {"mappings": {"properties": {
        "text": {"type": "keyword"}, "embedding": {"type": "float"}}}})
    with pytest.raises(ModelMismatchError, match="'embedding' is float, expected dense_vector.*'text' is keyword"):
        cluster_backend.ingest(question_bank[:5], enc, show_progress=False)
