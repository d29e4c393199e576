"""OpenSearch as a hybrid-qpr backend: what differs from Elasticsearch (the rest is ``backends.cluster``).

For an app that already has a client::

    from hybrid_qpr.backends.opensearch import OpenSearchBackend
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.search import HybridSearcher

    backend = OpenSearchBackend(my_client, "questions")
    results = HybridSearcher(backend, Encoder.load()).search("how do i reset my password?")

Layout (``mappings/opensearch/index.json``): the vector is a ``knn_vector`` with the
model's dims and space type (``l2`` for squared-Euclidean CNN models, ``cosinesimil`` for
cosine ones), HNSW on the Lucene engine.

Why the Lucene engine: the k-NN plugin zip on Maven Central carries no native faiss/nmslib
libraries; a faiss index there kills the node (``UnsatisfiedLinkError`` is fatal). Lucene
HNSW also filters efficiently inside the graph search, so filters go inside the ``knn`` clause.

Server side (``capabilities``): neural-search's ``hybrid`` query fuses in the cluster with a
search pipeline sent inline in the request, built from the same method, ``alpha`` and depth
the client side would use; the MSEM rescore mode runs as a ``rescore`` with the k-NN plugin's
``knn_score`` script.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hybrid_qpr.backends.base import Capabilities
from hybrid_qpr.backends.cluster.backend import KNN_CANDIDATES, ClusterBackend
from hybrid_qpr.backends.cluster.bodies import (DEFAULT_SHARDS, METADATA_FIELD, TEXT_FIELD, TOKENS_FIELD, VECTOR_FIELD,
                                                bm25_meta, bm25_query, bm25_values, check_shards, filter_clauses,
                                                load_body, source_param)
from hybrid_qpr.backends.cluster.connection import (HttpFailure, Transport, compress_by_default, reason, redact,
                                                    resolve_options, translate)
from hybrid_qpr.backends.cluster.probe import probe
from hybrid_qpr.distance import check_distance, opensearch_space_type
from hybrid_qpr.errors import BackendError, ConfigError, require
from hybrid_qpr.fusion import DEFAULT_ALPHA, DEFAULT_FUSION, FUSION_METHODS, RESCORE_DEPTH, RRF_K, check_fusion
from hybrid_qpr.text.analysis import get_analyzer
from hybrid_qpr.text.tokenizer import TOKEN_PATTERN
from hybrid_qpr.types import Filters, Hit, TextEncoder

logger = logging.getLogger(__name__)

DEFAULT_PIPELINE = "hybrid-qpr-rrf"
CONNECTIONS = 10  # kept open per node (elasticsearch-py's default connections_per_node)

__all__ = ["OpenSearchBackend", "connect", "index_body", "pipeline_body", "install_pipelines", "filter_clauses",
           "redact", "load_body", "KNN_CANDIDATES", "TEXT_FIELD", "VECTOR_FIELD", "METADATA_FIELD"]


# ---------------------------------------------------------------------- client
class OpenSearchTransport(Transport):
    """``Transport`` over an ``opensearchpy.OpenSearch`` client."""

    engine = "opensearch"

    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None, *,
                ndjson: bool = False, timeout: float | None = None) -> Any:
        from opensearchpy import exceptions as ose

        headers = {"content-type": "application/x-ndjson"} if ndjson else None
        try:
            return self.client.transport.perform_request(method, path, params=params or None, body=body,
                                                         timeout=timeout, headers=headers)
        except ose.ConnectionError as exc:  # timeouts and TLS errors too
            cause = "tls" if isinstance(exc, ose.SSLError) else "timeout" if isinstance(exc, ose.ConnectionTimeout) else ""
            raise HttpFailure(None, None, f"{type(exc).__name__}: {exc.error}", cause=cause) from exc
        except ose.TransportError as exc:
            status = exc.status_code if isinstance(exc.status_code, int) else None
            raise HttpFailure(status, exc.info, str(exc.error)[:300], getattr(exc, ANSWER_HEADERS, None)) from exc
        except ose.SerializationError as exc:  # a 2xx answer that is not JSON: not an OpenSearch node
            raise HttpFailure(200, None, str(exc)[:200], getattr(_LAST_ANSWER, "headers", None), cause="foreign") from exc

    def exists(self, path: str) -> bool:
        return bool(self.request("HEAD", path))  # opensearch-py answers a HEAD with True/False

    def other_engine(self) -> str | None:
        # Elasticsearch names itself in a header of every answer; OpenSearch never sends it
        return (getattr(_LAST_ANSWER, "headers", None) or {}).get("x-elastic-product")


ANSWER_HEADERS = "hybrid_qpr_headers"  # attribute of an opensearch-py error: the failed answer's headers
_LAST_ANSWER = threading.local()  # headers of this thread's last answer (for one opensearch-py could not decode)


def _connection_class():
    """opensearch-py's urllib3 connection, keeping the headers of a failed answer on its
    exception (``Retry-After``, ``content-type``), which opensearch-py itself drops."""
    from opensearchpy import Urllib3HttpConnection
    from opensearchpy.exceptions import TransportError

    class HeaderKeepingConnection(Urllib3HttpConnection):
        def perform_request(self, *args: Any, **kwargs: Any) -> Any:
            status, headers, data = super().perform_request(*args, **kwargs)
            _LAST_ANSWER.headers = {k.lower(): v for k, v in headers.items()}  # for an answer that is not JSON
            return status, headers, data

        def get_response_headers(self, response: Any) -> Any:
            headers = super().get_response_headers(response)
            _LAST_ANSWER.headers = headers  # read by _raise_error, which opensearch-py calls next
            return headers

        def _raise_error(self, status_code: int, raw_data: Any, content_type: str | None = None) -> None:
            try:
                super()._raise_error(status_code, raw_data, content_type)
            except TransportError as exc:
                setattr(exc, ANSWER_HEADERS, getattr(_LAST_ANSWER, "headers", None))
                raise

    return HeaderKeepingConnection


def connect(url: str | None = None, *, username: str | None = None, password: str | None = None,
            api_key: str | None = None, ca_certs: str | None = None, verify_certs: bool | None = None,
            timeout: float = 30.0, check: bool = True, compress: bool | None = None):
    """An ``opensearchpy.OpenSearch`` client.

    Unset arguments come from ``$HYBRID_QPR_OPENSEARCH_URL``, ``_USER``, ``_PASSWORD``,
    ``_API_KEY``, ``_CA`` and ``_VERIFY``; the URL falls back to the local node of
    ``hybrid-qpr node start``. Credentials go to the client only, never into a log or an
    error message. The client does not retry on its own (the bulk writer is the one retry
    layer). ``compress`` (HTTP gzip) defaults to ``compress_by_default``: off on loopback, on
    elsewhere. ``check`` probes ``/_cluster/health`` so a wrong URL fails here with a clear error.
    """
    opensearchpy = require("opensearchpy", feature="the OpenSearch backend")
    options = resolve_options("opensearch", url, username=username, password=password, api_key=api_key,
                              ca_certs=ca_certs, verify_certs=verify_certs, timeout=timeout)
    from urllib.parse import urlsplit

    parts = urlsplit(options.url)
    kwargs: dict[str, Any] = {
        "hosts": [{"host": parts.hostname, "port": parts.port or (443 if parts.scheme == "https" else 80),
                   "scheme": parts.scheme, "url_prefix": parts.path.rstrip("/")}],
        "timeout": options.timeout, "max_retries": 0, "retry_on_timeout": False,
        "http_compress": compress_by_default(options.url) if compress is None else compress,
        "connection_class": _connection_class(),
        # urllib3 keeps one connection per host unless told: an ingest's parallel _bulk requests need theirs
        "pool_maxsize": CONNECTIONS,
    }
    if parts.scheme == "https":
        kwargs.update(use_ssl=True, verify_certs=options.verify_certs, ssl_show_warn=options.verify_certs)
        if options.ca_certs:
            kwargs["ca_certs"] = options.ca_certs
    if options.username is not None:
        kwargs["http_auth"] = (options.username, options.password)
    if options.api_key:
        kwargs["headers"] = {"Authorization": f"ApiKey {options.api_key}"}
    client = opensearchpy.OpenSearch(**kwargs)
    if check:
        probe(OpenSearchTransport(client), options.url)
    return client


# ---------------------------------------------------------------------- bodies
def index_body(dim: int, distance: str, fingerprint: str, kind: str, engine: str = "lucene", *,
               shards: int = DEFAULT_SHARDS, replicas: int = 0, analyzer: str | None = None) -> dict:
    """The OpenSearch create-index body for a model with ``dim`` dims trained for ``distance``
    and BM25 terms by ``analyzer`` (default English; Elasticsearch's:
    ``hybrid_qpr.backends.elasticsearch.index_body``)."""
    distance = check_distance(distance)
    shards, replicas = check_shards(shards, replicas)
    if engine != "lucene":
        logger.warning("engine=%s needs the k-NN native libraries, which the Maven Central build lacks", engine)
    chosen = get_analyzer(analyzer)
    body = load_body("opensearch/index.json", {
        "DIM": int(dim), "DISTANCE": distance, "MODEL_FINGERPRINT": fingerprint, "MODEL_KIND": kind,
        "ENGINE": engine, "SPACE_TYPE": opensearch_space_type(distance), "SHARDS": shards, "REPLICAS": replicas,
        **bm25_values(), "BM25": bm25_meta(chosen), "TOKEN_PATTERN": TOKEN_PATTERN})
    if chosen.legacy:  # the legacy terms are what the cluster's own word pattern makes of ``text``: BM25 runs
        # there, so documents that other tools send as plain text (an ingest pipeline) are searched too
        del body["mappings"]["properties"][TOKENS_FIELD]
        body["mappings"]["_meta"]["bm25"]["field"] = TEXT_FIELD
    return body


def pipeline_name(fusion: str) -> str:
    return f"hybrid-qpr-{fusion}"


def unweighted_rrf(alpha: float) -> bool:
    """Equal weights: the RRF pipeline is sent without weights (see ``pipeline_body``)."""
    return round(1.0 - alpha, 6) == round(alpha, 6)


# Fusion methods no search pipeline can run (neural-search normalises by min_max, l2 and z_score
# only): a hybrid search with one of them fuses client-side, and --server-side refuses it.
CLIENT_SIDE_ONLY: tuple[str, ...] = ("dbsf",)


def pipeline_body(fusion: str, alpha: float = DEFAULT_ALPHA, rrf_k: int = RRF_K) -> dict:
    """Search pipeline for server-side fusion with the client side's meaning of every setting:
    ``alpha`` is the weight of the kNN list and ``1 - alpha`` that of BM25 (for RRF too: the
    weights go into the score-ranker when they are not equal); ``rrf_k`` is RRF's rank constant.
    A method in ``CLIENT_SIDE_ONLY`` has none (``ConfigError``)."""
    check_fusion(fusion)
    if fusion in CLIENT_SIDE_ONLY:
        raise ConfigError(f"fusion {fusion} runs client-side only: neural-search has no such normalization technique")
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"alpha={alpha}: must be between 0 and 1 (weight of the kNN side)")
    if rrf_k < 1:
        raise ConfigError(f"rrf_k={rrf_k}: must be >= 1")
    weights = [round(1.0 - alpha, 6), round(alpha, 6)]
    body = load_body(f"opensearch/pipeline-{fusion}.json",
                     {"WEIGHT_BM25": weights[0], "WEIGHT_KNN": weights[1], "RRF_K": int(rrf_k)})
    if fusion == "rrf" and not unweighted_rrf(alpha):  # weighted RRF (neural-search 3.x); equal weights rank alike
        body["phase_results_processors"][0]["score-ranker-processor"]["combination"]["parameters"] = {"weights": weights}
    return body


def install_pipelines(client, fusions: Sequence[str] = FUSION_METHODS, alpha: float = DEFAULT_ALPHA,
                      rrf_k: int = RRF_K) -> dict[str, str]:
    """PUT one search pipeline per fusion; returns ``{pipeline name: "installed" | reason}``.

    A technique the cluster rejects (z-score on neural-search 2.19) is reported, not raised,
    so the others still get installed."""
    transport = OpenSearchTransport(client)
    outcome: dict[str, str] = {}
    for fusion in fusions:
        name = pipeline_name(fusion)
        if fusion in CLIENT_SIDE_ONLY:
            outcome[name] = f"not installed: {fusion} runs client-side only (neural-search has no such technique)"
            continue
        with translate(f"installing search pipeline {name}", "opensearch"):
            try:
                transport.request("PUT", f"/_search/pipeline/{name}", pipeline_body(fusion, alpha, rrf_k))
                outcome[name] = "installed"
            except HttpFailure as failure:
                if failure.status != 400:
                    raise
                outcome[name] = f"rejected by the cluster: {reason(failure.body)}"
    return outcome


# ---------------------------------------------------------------------- the backend
class OpenSearchBackend(ClusterBackend):
    """``hybrid_qpr.backends.base.Backend`` over one OpenSearch index (k-NN + neural-search plugins)."""

    engine = "opensearch"
    vector_type = "knn_vector"
    capabilities = Capabilities(batched_bm25_and_knn=True, server_side_hybrid=True, server_side_rescore=True)

    transport_class = OpenSearchTransport
    index_body = staticmethod(index_body)
    # ef_search 150: kNN recall@10 against exact search 0.969 on 120,000 questions (0.953 at 100,
    # below the 0.95 recall floor with little margin), for +0.25 ms (docs/opensearch.md)
    default_knn_candidates = 150

    def vector_field_problems(self, field: Mapping[str, Any], encoder: TextEncoder) -> list[str]:
        if int(field.get("dimension", 0)) != encoder.dim:
            return [f"{VECTOR_FIELD} has dimension {field.get('dimension')}, the model produces {encoder.dim}"]
        return []

    def knn_body(self, vector: np.ndarray, depth: int, filters: Filters | None) -> dict:
        return {"size": depth, "_source": source_param(self.documents_in_hits),
                "query": {"knn": {VECTOR_FIELD: self._knn_clause(vector, depth, filters)}}}

    def _knn_clause(self, vector: np.ndarray, depth: int, filters: Filters | None) -> dict:
        # k is the number of hits; ef_search the HNSW candidate list (knn_candidates, never below
        # depth): measured cheaper than asking k = 100 for the same recall (docs/opensearch.md)
        clause: dict[str, Any] = {"vector": self.query_vector(vector), "k": depth,
                                  "method_parameters": {"ef_search": max(depth, self.knn_candidates)}}
        clauses = filter_clauses(filters)
        if clauses:
            clause["filter"] = {"bool": {"filter": clauses}}
        return clause

    def _score_script(self, vector: np.ndarray) -> dict:
        return {"source": "knn_score", "lang": "knn",
                "params": {"field": VECTOR_FIELD, "query_value": self.query_vector(vector),
                           "space_type": opensearch_space_type(self.distance)}}

    def vector_scores(self, vector: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        """Exact similarity of ``vector`` to the stored vectors of ``ids``, computed in the
        cluster by the k-NN ``knn_score`` script over an ``ids`` query (the MSEM rescore mode)."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}
        body = {"size": len(ids), "_source": False,
                "query": {"script_score": {"query": {"ids": {"values": ids}}, "script": self._score_script(vector)}}}
        return {hit.id: hit.score for hit in self._to_hits(self._search(body, "vector re-scoring"))}

    # ---- cluster-side modes
    def hybrid_server(self, query: str, vector: np.ndarray, depth: int, filters: Filters | None = None, *,
                      fusion: str = DEFAULT_FUSION, alpha: float = DEFAULT_ALPHA, rrf_k: int = RRF_K,
                      pipeline: str | Mapping[str, Any] | None = None) -> list[Hit]:
        """Fusion in the cluster: neural-search's ``hybrid`` query (a ``match`` and a ``knn``
        sub-query, each taking its top ``depth``) normalised and combined by a search pipeline.

        By default the pipeline is built from ``fusion``, ``alpha`` and ``rrf_k`` and sent inline
        with the request, so the cluster fuses exactly as ``hybrid_qpr.fusion`` would (nothing to
        install, and a tuned index's settings are honoured). ``pipeline`` overrides it with the
        name of one installed by ``hybrid-qpr search-pipeline install`` or with a pipeline body.
        Filters are applied inside each sub-query (2.19's ``hybrid`` has no top-level filter).

        Scores are on the client side's scale: RRF with equal weights goes to the cluster without
        weights (2.19 knows no weighted RRF), where each list adds ``1 / (rrf_k + rank)``, twice
        the client's ``0.5 / (rrf_k + rank)``; those scores are halved here."""
        self.check_depth(depth, knn=True)
        filters = self.checked_filters(filters)
        body: dict[str, Any] = {"size": depth, "_source": source_param(self.documents_in_hits), "query": {"hybrid": {"queries": [
            bm25_query(query, filters, self.bm25_field, self.analyzer), {"knn": {VECTOR_FIELD: self._knn_clause(vector, depth, filters)}}]}}}
        # never dfs_query_then_fetch: neural-search 3.6 then skips the pipeline and returns the
        # hybrid query's raw delimiter scores (seen on a 3-shard index; docs/opensearch.md)
        params = {"search_type": "query_then_fetch"}
        if isinstance(pipeline, str):
            self._require_pipeline(pipeline)
            params["search_pipeline"] = pipeline
        else:
            body["search_pipeline"] = dict(pipeline) if pipeline is not None else pipeline_body(fusion, alpha, rrf_k)
        try:
            hits = self._raw_hits(self._search(body, "server-side hybrid search", params))
        except BackendError as exc:
            failure = exc.__cause__
            if pipeline is None and isinstance(failure, HttpFailure) and failure.error_type == "illegal_argument_exception":
                raise ConfigError(f"server-side hybrid with fusion={fusion}, alpha={alpha}: this cluster's neural-search "
                                  f"rejects it ({reason(failure.body)}). Weighted RRF (alpha != 0.5) and z-score need "
                                  "neural-search 3.x; use client-side fusion (drop --server-side) instead") from failure
            raise
        if pipeline is None and fusion == "rrf" and unweighted_rrf(alpha):
            hits = [Hit(h.id, 0.5 * h.score, h.document) for h in hits]
        return hits

    def rescore_server(self, query: str, vector: np.ndarray, depth: int = RESCORE_DEPTH, filters: Filters | None = None) -> list[Hit]:
        """The MSEM flow in one request: BM25 recall of ``depth``, then a ``rescore`` of that
        window with the ``knn_score`` script (BM25 weight 0), so the order is by vector similarity."""
        self.check_depth(depth, knn=False)
        filters = self.checked_filters(filters)
        body = {"size": depth, "_source": source_param(self.documents_in_hits),
                "query": bm25_query(query, filters, self.bm25_field, self.analyzer),
                "rescore": {"window_size": depth, "query": {
                    "rescore_query": {"script_score": {"query": {"match_all": {}}, "script": self._score_script(vector)}},
                    "query_weight": 0.0, "rescore_query_weight": 1.0}}}
        return self._to_hits(self._search(body, "server-side rescore", self._bm25_params()))

    def _require_pipeline(self, name: str) -> None:
        with translate(f"looking up search pipeline {name!r}", self.engine):
            try:
                self.transport.request("GET", f"/_search/pipeline/{name}")
            except HttpFailure as failure:
                if failure.status == 404:
                    raise BackendError(f"search pipeline {name!r} is not installed; run 'hybrid-qpr search-pipeline install "
                                       f"--opensearch URL' first") from failure
                raise
