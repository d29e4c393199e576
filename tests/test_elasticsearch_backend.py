"""What only the Elasticsearch backend has, against a real node: the dense_vector layout and its
checks, the connection probe, and the one-request ``query`` + ``knn`` search of a basic licence
(the shared contract runs per engine in test_cluster_backends.py)."""

from __future__ import annotations

import uuid

import pytest

from hybrid_qpr.backends.elasticsearch import ElasticsearchBackend, connect, index_body
from hybrid_qpr.distance import elasticsearch_similarity
from hybrid_qpr.errors import ModelMismatchError

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def es_client(elasticsearch_url):
    return connect(elasticsearch_url)


@pytest.fixture()
def es_backend(es_client):
    backend = ElasticsearchBackend(es_client, f"hqpr-test-{uuid.uuid4().hex[:10]}")
    yield backend
    backend.drop()


def test_layout_matches_the_model(es_backend, committed_encoder, question_bank):
    es_backend.ingest(question_bank[:20], committed_encoder, show_progress=False)
    vector = es_backend.meta["_properties"]["embedding"]
    assert (vector["type"], vector["dims"], vector["index"]) == ("dense_vector", committed_encoder.dim, True)
    assert vector["similarity"] == elasticsearch_similarity(committed_encoder.distance)
    assert vector["index_options"]["type"] == "hnsw"
    assert es_backend.refresh_meta()["_properties"]["metadata"]["properties"]["topic"]["type"] == "keyword"
    assert not es_backend.capabilities.server_side_hybrid


def test_a_vector_field_of_another_kind_is_refused(es_client, es_backend, committed_encoder, question_bank):
    enc = committed_encoder
    other = "cosine" if enc.distance != "cosine" else "sqeuclidean"
    body = index_body(enc.dim, other, enc.fingerprint, enc.kind)
    body["mappings"]["_meta"]["distance"] = enc.distance  # only the similarity is wrong
    es_backend.transport.request("PUT", f"/{es_backend.index}", body)
    with pytest.raises(ModelMismatchError, match=f"similarity is {elasticsearch_similarity(other)}"):
        es_backend.ingest(question_bank[:5], enc, show_progress=False)

    es_backend.drop()
    es_backend.transport.request("PUT", f"/{es_backend.index}", {"mappings": {"properties": {
        "text": {"type": "keyword"}, "embedding": {"type": "float"}}}})
    with pytest.raises(ModelMismatchError, match="'embedding' is float, expected dense_vector.*'text' is keyword"):
        es_backend.ingest(question_bank[:5], enc, show_progress=False)
