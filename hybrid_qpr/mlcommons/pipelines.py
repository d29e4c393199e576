"""What a cluster runs around a deployed model: the ``text_embedding`` ingest pipeline, the
``neural`` query, the ``rerank`` search pipeline and its ``ext``, and the stored hybrid search
template (BM25 + ``neural``) that needs only the query text."""

from __future__ import annotations

from typing import Any

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.mlcommons.calls import ml_request


def ingest_pipeline_body(model_id: str, source: str = "text", target: str = "embedding") -> dict[str, Any]:
    """A pipeline whose ``text_embedding`` processor fills ``target`` from ``source``."""
    return {"description": f"hybrid-qpr: {source} -> {target} with ml-commons model {model_id}",
            "processors": [{"text_embedding": {"model_id": model_id, "field_map": {source: target}}}]}


def put_ingest_pipeline(client, name: str, model_id: str, source: str = "text", target: str = "embedding") -> None:
    ml_request(client, "PUT", f"/_ingest/pipeline/{name}", ingest_pipeline_body(model_id, source, target))


def neural_query(model_id: str, text: str, k: int, field: str = "embedding") -> dict[str, Any]:
    """A ``neural`` query: the cluster embeds ``text`` with ``model_id`` and runs k-NN on ``field``."""
    if k < 1:
        raise ConfigError(f"k={k}: must be >= 1")
    return {"neural": {field: {"query_text": text, "model_id": model_id, "k": k}}}


def rerank_pipeline_body(model_id: str, field: str = "text") -> dict[str, Any]:
    """A search pipeline whose ``rerank`` response processor re-scores the hits with the
    ml-commons ``TEXT_SIMILARITY`` model ``model_id`` on the document field ``field``."""
    return {"description": f"hybrid-qpr: rerank on {field} with ml-commons cross-encoder {model_id}",
            "response_processors": [{"rerank": {"ml_opensearch": {"model_id": model_id},
                                                "context": {"document_fields": [field]}}}]}


def put_rerank_pipeline(client, name: str, model_id: str, field: str = "text") -> None:
    ml_request(client, "PUT", f"/_search/pipeline/{name}", rerank_pipeline_body(model_id, field))


def rerank_ext(query_text: str) -> dict[str, Any]:
    """The ``ext`` a search through a rerank pipeline carries: the text the documents are scored against."""
    return {"rerank": {"query_context": {"query_text": query_text}}}


def search_template_body(model_id: str, depth: int, size: int = 10, text: str = "text",
                         vector: str = "embedding") -> dict[str, Any]:
    """A stored mustache template of the hybrid query: BM25 ``match`` on ``text`` and a ``neural``
    query (the cluster embeds the text with ``model_id``) on ``vector``, each taking ``depth``
    candidates (HNSW candidate list as the client's kNN: ``KNN_CANDIDATES``, at least ``depth``;
    ``pagination_depth``, so a page of ``size`` is fused from lists of ``depth``).
    The only parameter a caller must send is ``query_text`` (``size`` is optional).
    Mustache escapes the text for JSON, so quotes in a question cannot break the query."""
    from hybrid_qpr.backends.cluster.backend import KNN_CANDIDATES

    # pagination_depth (neural-search 2.19+): each sub-query keeps its top ``depth`` whatever the
    # page's size, so min-max, z-score and L2 normalise over the lists the client's fusion sees
    source = ('{"size": {{size}}{{^size}}%d{{/size}}, "_source": ["%s", "metadata"], "query": {"hybrid": {'
              '"pagination_depth": %d, "queries": ['
              '{"match": {"%s": {"query": "{{query_text}}"}}}, '
              '{"neural": {"%s": {"query_text": "{{query_text}}", "model_id": "%s", "k": %d, '
              '"method_parameters": {"ef_search": %d}}}}]}}}'
              % (size, text, depth, text, vector, model_id, depth, max(depth, KNN_CANDIDATES)))
    return {"script": {"lang": "mustache", "source": source}}
