"""Elasticsearch as a hybrid-qpr backend on a basic licence (the rest is ``backends.cluster``).

For an app that already has a client (the official ``elasticsearch`` package, 9.x)::

    from elasticsearch import Elasticsearch
    from hybrid_qpr.backends.elasticsearch import ElasticsearchBackend
    from hybrid_qpr.search import HybridSearcher

    backend = ElasticsearchBackend(Elasticsearch("http://127.0.0.1:9201"), "questions")
    results = HybridSearcher(backend, Encoder.load()).search("how do i reset my password?")

Layout (``mappings/elasticsearch/index.json``): the vector is a ``dense_vector`` with the
model's dims and a similarity matched to its training distance (``hybrid_qpr.distance``):
squared-Euclidean CNN vectors -> ``l2_norm`` (Elasticsearch scores ``1/(1+d²)``, a monotone
map of ``-d²``, undone into ``-d²`` here); cosine models -> ``cosine`` on L2-normalised
vectors; unnormalised dot-product models -> ``max_inner_product``. Index options: see
``VECTOR_INDEX_TYPE``.

Why fusion is client-side: Elasticsearch's own hybrid tools (the ``rrf`` and ``linear``
retrievers) need an Enterprise licence, and the Maven Central distribution has no
``rank-rrf`` module and no ``lang-painless`` (so no ``script_score``). hybrid-qpr sends the
BM25 and kNN searches in one ``_msearch`` and fuses with ``hybrid_qpr.fusion`` using the
defaults tuned for the index (kept in the mapping ``_meta``). The MSEM rescore mode scores the 30
BM25 candidates exactly with a ``knn`` search filtered to their ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hybrid_qpr.backends.base import Capabilities
from hybrid_qpr.backends.local.bm25 import BM25_K1
from hybrid_qpr.backends.cluster.backend import MAX_KNN_K, ClusterBackend
from hybrid_qpr.backends.cluster.bodies import (DEFAULT_SHARDS, VECTOR_FIELD, bm25_meta, bm25_values,
                                                check_shards, filter_clauses, load_body, source_param)
from hybrid_qpr.backends.cluster.connection import HttpFailure, Transport, compress_by_default, resolve_options
from hybrid_qpr.backends.cluster.probe import probe
from hybrid_qpr.distance import check_distance, elasticsearch_similarity
from hybrid_qpr.errors import require
from hybrid_qpr.text.analysis import get_analyzer
from hybrid_qpr.types import Filters, TextEncoder

# Measured on 20,000 Quora questions with the committed CNN (docs/elasticsearch.md): plain
# float HNSW; int8_hnsw (Elasticsearch's default for new dense_vector fields) is chosen or
# not by that measurement of recall@10 against exact search.
VECTOR_INDEX_TYPE = "hnsw"
JSON_HEADERS = {"accept": "application/json", "content-type": "application/json"}
NDJSON_HEADERS = {"accept": "application/json", "content-type": "application/x-ndjson"}


class ElasticsearchTransport(Transport):
    """``Transport`` over an ``elasticsearch.Elasticsearch`` client."""

    engine = "elasticsearch"

    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None, *,
                ndjson: bool = False, timeout: float | None = None) -> Any:
        from elastic_transport import ConnectionTimeout, SerializationError, TlsError, TransportError
        from elasticsearch import ApiError, UnsupportedProductError

        client = self.client if timeout is None else self.client.options(request_timeout=timeout)
        headers = NDJSON_HEADERS if ndjson else JSON_HEADERS if body is not None else {"accept": "application/json"}
        try:
            return client.perform_request(method, path, params=params or None, headers=headers, body=body).body
        except UnsupportedProductError as exc:  # a 2xx answer without Elasticsearch's product header
            self.foreign_answer = True
            raise HttpFailure(exc.meta.status, None, str(exc.message)[:200], exc.meta.headers, cause="foreign") from exc
        except ApiError as exc:
            raise HttpFailure(exc.meta.status, exc.body, str(exc.message)[:300], exc.meta.headers) from exc
        except SerializationError as exc:  # an answer that is not JSON
            raise HttpFailure(200, None, str(exc)[:200], cause="foreign") from exc
        except TransportError as exc:  # connection refused or reset, timeout, TLS
            cause = "tls" if isinstance(exc, TlsError) else "timeout" if isinstance(exc, ConnectionTimeout) else ""
            raise HttpFailure(None, None, f"{type(exc).__name__}: {exc.message}"[:300], cause=cause) from exc

    foreign_answer = False  # set when an answer lacked Elasticsearch's product header

    def exists(self, path: str) -> bool:
        try:
            return bool(self.request("HEAD", path))
        except HttpFailure as failure:
            if failure.status == 404:
                return False
            raise

    def other_engine(self) -> str | None:
        """OpenSearch (with its version) when it gave the last answer that was not Elasticsearch's:
        asked with ``GET /`` below the client's product check, which refuses any other engine."""
        if not self.foreign_answer:
            return None
        try:
            root = self.client.transport.perform_request("GET", "/", headers={"accept": "application/json"}).body
        except Exception:  # whatever answers there is not a search engine this can name
            return None
        version = root.get("version") if isinstance(root, dict) else None
        if isinstance(version, dict) and version.get("distribution") == "opensearch":
            return f"OpenSearch {version.get('number', '')}".strip()
        return None


def connect(url: str | None = None, *, username: str | None = None, password: str | None = None,
            api_key: str | None = None, ca_certs: str | None = None, verify_certs: bool | None = None,
            timeout: float = 30.0, check: bool = True, compress: bool | None = None):
    """An ``elasticsearch.Elasticsearch`` client.

    Unset arguments come from ``$HYBRID_QPR_ELASTICSEARCH_URL``, ``_USER``, ``_PASSWORD``,
    ``_API_KEY``, ``_CA`` and ``_VERIFY``; the URL falls back to the local node of
    ``hybrid-qpr node start --engine elasticsearch``. The client does not retry on its own
    (the bulk writer is the one retry layer). ``compress`` (HTTP gzip) defaults to
    ``compress_by_default``: off on loopback, on elsewhere. ``check`` probes ``/_cluster/health`` (the
    Maven Central build answers ``GET /`` with 405)."""
    elasticsearch = require("elasticsearch", extra="elasticsearch", feature="the Elasticsearch backend")
    options = resolve_options("elasticsearch", url, username=username, password=password, api_key=api_key,
                              ca_certs=ca_certs, verify_certs=verify_certs, timeout=timeout)
    kwargs: dict[str, Any] = {"request_timeout": options.timeout, "max_retries": 0, "retry_on_timeout": False,
                              "http_compress": compress_by_default(options.url) if compress is None else compress}
    if options.scheme == "https":
        kwargs["verify_certs"] = options.verify_certs
        if not options.verify_certs:
            kwargs["ssl_show_warn"] = False
        if options.ca_certs:
            kwargs["ca_certs"] = options.ca_certs
    if options.username is not None:
        kwargs["basic_auth"] = (options.username, options.password)
    if options.api_key:
        kwargs["api_key"] = options.api_key
    client = elasticsearch.Elasticsearch(options.url, **kwargs)
    if check:
        probe(ElasticsearchTransport(client), options.url)
    return client


def index_body(dim: int, distance: str, fingerprint: str, kind: str, *, shards: int = DEFAULT_SHARDS,
               replicas: int = 0, vector_index_type: str | None = None, analyzer: str | None = None) -> dict:
    """The create-index body for a model with ``dim`` dims trained for ``distance`` and BM25
    terms by ``analyzer`` (default English); ``vector_index_type`` (``hnsw``, ``int8_hnsw``,
    ...) defaults to ``VECTOR_INDEX_TYPE``."""
    distance = check_distance(distance)
    shards, replicas = check_shards(shards, replicas)
    return load_body("elasticsearch/index.json", {
        "DIM": int(dim), "DISTANCE": distance, "MODEL_FINGERPRINT": fingerprint, "MODEL_KIND": kind,
        "ES_SIMILARITY": elasticsearch_similarity(distance), "VECTOR_INDEX_TYPE": vector_index_type or VECTOR_INDEX_TYPE,
        "SHARDS": shards, "REPLICAS": replicas, **bm25_values(), "BM25": bm25_meta(get_analyzer(analyzer))})


class ElasticsearchBackend(ClusterBackend):
    """``hybrid_qpr.backends.base.Backend`` over one Elasticsearch index (basic licence)."""

    engine = "elasticsearch"
    vector_type = "dense_vector"
    capabilities = Capabilities(batched_bm25_and_knn=True)
    # Elasticsearch's "BM25" similarity is Lucene's BM25 as it was before Lucene 8 (its
    # LegacyBM25Similarity): every term's score times (k1 + 1), the same for every document, so
    # the ranking is Lucene's and the scores 2.5x (k1 = 1.5) those of OpenSearch and the
    # embedded index. Divided out here, BM25 scores agree across backends (tested to 0.2%).
    bm25_score_scale = 1.0 / (1.0 + BM25_K1)

    transport_class = ElasticsearchTransport
    index_body = staticmethod(index_body)

    def vector_field_problems(self, field: Mapping[str, Any], encoder: TextEncoder) -> list[str]:
        problems = []
        if int(field.get("dims", 0)) != encoder.dim:
            problems.append(f"{VECTOR_FIELD} has dims {field.get('dims')}, the model produces {encoder.dim}")
        wanted = elasticsearch_similarity(encoder.distance)
        if field.get("similarity") != wanted:
            problems.append(f"{VECTOR_FIELD} similarity is {field.get('similarity')}, the model's {encoder.distance} "
                            f"distance needs {wanted}")
        if field.get("index") is False:
            problems.append(f"{VECTOR_FIELD} is not indexed for kNN (index: false)")
        return problems

    def knn_body(self, vector: np.ndarray, depth: int, filters: Filters | None) -> dict:
        # num_candidates per shard: a floor of knn_candidates keeps recall high for small depths
        knn: dict[str, Any] = {"field": VECTOR_FIELD, "query_vector": self.query_vector(vector), "k": depth,
                               "num_candidates": max(depth, self.knn_candidates)}
        clauses = filter_clauses(filters)
        if clauses:
            knn["filter"] = clauses  # applied during the graph search, so depth hits still come back
        return {"size": depth, "_source": source_param(self.documents_in_hits), "knn": knn}

    def vector_scores(self, vector: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        """Exact similarity of ``vector`` to the stored vectors of ``ids`` (the MSEM rescore mode), without
        painless: a ``knn`` search restricted to those ids by an ``ids`` filter. When the filter
        matches no more documents than ``num_candidates``, Lucene scores them all exactly
        instead of walking the graph; measured exact to 1e-5 and faster than reading the
        vectors back with ``_mget`` and scoring them here (docs/elasticsearch.md)."""
        ids = list(dict.fromkeys(ids))
        scores: dict[str, float] = {}
        for start in range(0, len(ids), MAX_KNN_K):
            chunk = ids[start:start + MAX_KNN_K]
            body = {"size": len(chunk), "_source": False,
                    "knn": {"field": VECTOR_FIELD, "query_vector": self.query_vector(vector), "k": len(chunk),
                            "num_candidates": len(chunk), "filter": {"ids": {"values": chunk}}}}
            scores.update((hit.id, hit.score) for hit in self._to_hits(self._search(body, "vector re-scoring")))
        return scores
