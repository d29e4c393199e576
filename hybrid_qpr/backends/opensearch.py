"""OpenSearch as a hybrid-qpr backend: index layout, bulk ingest, BM25 / kNN / rerank / hybrid.

For an app that already has a client::

    from hybrid_qpr.backends.opensearch import OpenSearchBackend
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.search import HybridSearcher

    backend = OpenSearchBackend(my_client, "questions")
    results = HybridSearcher(backend, Encoder.load()).search("how do i reset my password?")

Layout (``mappings/opensearch/index.json``, dims and space type filled from the encoder):
``text`` (BM25, standard analyzer), ``embedding`` (``knn_vector``, HNSW, Lucene engine),
``metadata`` (object; strings become ``keyword`` so filters are exact term matches), and the
model's ``dim``, ``distance``, ``model_fingerprint``, ``model_kind`` and tuned ``fusion``
defaults in the mapping ``_meta``.

Why the Lucene engine: the k-NN plugin zip on Maven Central carries no native faiss/nmslib
libraries; a faiss index there kills the node (``UnsatisfiedLinkError`` is fatal). Lucene
HNSW also filters efficiently inside the graph search, so filters go inside the ``knn`` clause.

Scores come back "higher is better" on the same scale as the embedded engine: the k-NN
plugin's transform is inverted by ``hybrid_qpr.distance.score_from_opensearch``.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from hybrid_qpr.backends.base import IngestReport
from hybrid_qpr.types import Document, Filters, Hit
from hybrid_qpr.distance import (Distance, check_distance, opensearch_space_type, prepare_vectors,
                                 score_from_opensearch)
from hybrid_qpr.errors import BackendError, ClusterError, ConfigError, ModelMismatchError, require

logger = logging.getLogger(__name__)

MAPPINGS_DIR = Path(__file__).resolve().parents[2] / "mappings"
TEXT_FIELD, VECTOR_FIELD, METADATA_FIELD = "text", "embedding", "metadata"
ServerFusion = Literal["rrf", "minmax", "zscore", "l2"]
SERVER_FUSIONS: tuple[str, ...] = ("rrf", "minmax", "zscore", "l2")
DEFAULT_PIPELINE = "hybrid-qpr-rrf"
KNN_CANDIDATES = 100
_PLACEHOLDER = re.compile(r"^\$\{([A-Z0-9_]+)\}$")


# ---------------------------------------------------------------------- bodies from mappings/
def load_body(relative: str, values: Mapping[str, Any]) -> dict:
    """Read ``mappings/<relative>`` and replace every ``"${NAME}"`` string by ``values[NAME]``
    (typed: a number stays a number). A placeholder without a value is an error."""
    path = MAPPINGS_DIR / relative
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BackendError(f"{path}: mapping file is missing from the installation") from exc

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: fill(v) for k, v in node.items()}
        if isinstance(node, list):
            return [fill(v) for v in node]
        if isinstance(node, str) and (match := _PLACEHOLDER.match(node)):
            if match.group(1) not in values:
                raise BackendError(f"{path}: no value for placeholder {node}")
            return values[match.group(1)]
        return node

    return fill(body)


def index_body(dim: int, distance: str, fingerprint: str, kind: str, engine: str = "lucene",
               flavour: Literal["opensearch", "elasticsearch"] = "opensearch") -> dict:
    """The create-index body for a model with ``dim`` dims trained for ``distance``."""
    from hybrid_qpr.distance import elasticsearch_similarity

    distance = check_distance(distance)
    if engine != "lucene":
        logger.warning("engine=%s needs the k-NN native libraries, which the Maven Central build lacks", engine)
    values = {"DIM": int(dim), "DISTANCE": distance, "MODEL_FINGERPRINT": fingerprint, "MODEL_KIND": kind,
              "ENGINE": engine, "SPACE_TYPE": opensearch_space_type(distance),
              "ES_SIMILARITY": elasticsearch_similarity(distance)}
    return load_body(f"{flavour}/index.json", values)


def pipeline_name(fusion: str) -> str:
    return f"hybrid-qpr-{fusion}"


def pipeline_body(fusion: str, alpha: float = 0.5, rrf_k: int = 60) -> dict:
    """Search pipeline for server-side fusion. ``alpha`` is the weight of the kNN list and
    ``1 - alpha`` that of BM25 (normalisation pipelines); ``rrf_k`` is RRF's rank constant."""
    if fusion not in SERVER_FUSIONS:
        raise ConfigError(f"fusion={fusion!r}: server-side fusion allows {', '.join(SERVER_FUSIONS)}")
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"alpha={alpha}: must be between 0 and 1 (weight of the kNN side)")
    if rrf_k < 1:
        raise ConfigError(f"rrf_k={rrf_k}: must be >= 1")
    return load_body(f"opensearch/pipeline-{fusion}.json",
                     {"WEIGHT_BM25": round(1.0 - alpha, 6), "WEIGHT_KNN": round(alpha, 6), "RRF_K": int(rrf_k)})


def install_pipelines(client, fusions: Sequence[str] = SERVER_FUSIONS, alpha: float = 0.5,
                      rrf_k: int = 60) -> dict[str, str]:
    """PUT one search pipeline per fusion; returns ``{pipeline name: "installed" | reason}``.

    A technique the cluster rejects (z-score on neural-search 2.19) is reported, not raised,
    so the others still get installed."""
    from opensearchpy.exceptions import RequestError

    outcome: dict[str, str] = {}
    for fusion in fusions:
        name = pipeline_name(fusion)
        with _translate_errors(f"installing search pipeline {name}"):
            try:
                client.transport.perform_request("PUT", f"/_search/pipeline/{name}",
                                                 body=pipeline_body(fusion, alpha, rrf_k))
                outcome[name] = "installed"
            except RequestError as exc:
                outcome[name] = f"rejected by the cluster: {_reason(exc)}"
    return outcome


# ---------------------------------------------------------------------- connection
def _env_flag(name: str) -> bool | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"${name}={value!r}: use true/false (or 1/0)")


def redact(url: str) -> str:
    """``url`` without any ``user:password@`` part, for messages and logs."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def connect(url: str | None = None, *, username: str | None = None, password: str | None = None,
            ca_certs: str | None = None, verify_certs: bool | None = None, timeout: float = 30.0,
            check: bool = True):
    """An ``opensearchpy.OpenSearch`` client.

    Unset arguments come from ``$HYBRID_QPR_OPENSEARCH_URL``, ``_USER``, ``_PASSWORD``, ``_CA``
    and ``_VERIFY``; the URL falls back to the local node of ``hybrid-qpr cluster start``.
    Credentials are passed to the client only, never logged or put in an error message.
    ``check`` pings the cluster so a wrong URL fails here with a clear ``ClusterError``.
    """
    opensearchpy = require("opensearchpy", feature="the OpenSearch backend")
    if url is None:
        url = os.environ.get("HYBRID_QPR_OPENSEARCH_URL")
    if not url:
        from hybrid_qpr.localnode import LocalNode

        url = LocalNode().url
    username = username if username is not None else os.environ.get("HYBRID_QPR_OPENSEARCH_USER")
    password = password if password is not None else os.environ.get("HYBRID_QPR_OPENSEARCH_PASSWORD")
    ca_certs = ca_certs if ca_certs is not None else os.environ.get("HYBRID_QPR_OPENSEARCH_CA")
    if verify_certs is None:
        verify_certs = _env_flag("HYBRID_QPR_OPENSEARCH_VERIFY")
        verify_certs = True if verify_certs is None else verify_certs
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"OpenSearch URL {redact(url)!r}: expected http(s)://host[:port]")
    if parts.username and username is None:  # credentials given inside the URL
        username, password = parts.username, parts.password or ""
    if (username is None) != (password is None):
        raise ConfigError("OpenSearch basic auth needs both a user and a password "
                          "(--user/--password or $HYBRID_QPR_OPENSEARCH_USER/_PASSWORD)")
    kwargs: dict[str, Any] = {
        "hosts": [{"host": parts.hostname, "port": parts.port or (443 if parts.scheme == "https" else 80),
                   "scheme": parts.scheme, "url_prefix": parts.path.rstrip("/")}],
        "timeout": timeout,
        "http_compress": True,
    }
    if parts.scheme == "https":
        kwargs.update(use_ssl=True, verify_certs=verify_certs, ssl_show_warn=verify_certs)
        if ca_certs:
            kwargs["ca_certs"] = ca_certs
    if username is not None:
        kwargs["http_auth"] = (username, password)
    client = opensearchpy.OpenSearch(**kwargs)
    if check:
        with _translate_errors(f"connecting to {redact(url)}"):
            client.info()
    return client


def _reason(exc: Exception) -> str:
    info = getattr(exc, "info", None)
    if isinstance(info, dict):
        error = info.get("error")
        if isinstance(error, dict):
            root = (error.get("root_cause") or [error])[0]
            return f"{root.get('type')}: {root.get('reason')}"
        if error:
            return str(error)
    return getattr(exc, "error", None) or str(exc)


def _missing_index(what: str, index: str) -> BackendError:
    return BackendError(f"{what}: index {index!r} does not exist; create it with "
                        f"'hybrid-qpr ingest FILE --opensearch URL --index {index}'")


@contextmanager
def _translate_errors(what: str, index: str | None = None) -> Iterator[None]:
    """opensearch-py exceptions -> hybrid-qpr errors that say what failed and how to fix it."""
    from opensearchpy import exceptions as ose

    try:
        yield
    except ose.ConnectionError as exc:  # includes timeouts and TLS errors
        raise ClusterError(f"{what}: cannot reach OpenSearch ({type(exc).__name__}: {exc.error}). "
                           f"Is the node running? Start one with 'hybrid-qpr cluster start'") from exc
    except ose.AuthenticationException as exc:
        raise ClusterError(f"{what}: authentication failed (check the user and password)") from exc
    except ose.AuthorizationException as exc:
        raise ClusterError(f"{what}: permission denied ({_reason(exc)})") from exc
    except ose.NotFoundError as exc:
        if index is not None and "index_not_found" in str(exc):
            raise _missing_index(what, index) from exc
        raise BackendError(f"{what}: not found ({_reason(exc)})") from exc
    except ose.TransportError as exc:
        raise BackendError(f"{what}: OpenSearch answered {exc.status_code} ({_reason(exc)})") from exc


# ---------------------------------------------------------------------- the backend
class OpenSearchBackend:
    """``hybrid_qpr.backends.base.Backend`` over one OpenSearch index.

    Reads the model facts (``dim``, ``distance``, ``model_fingerprint``) from the index's
    mapping ``_meta``; ``ingest`` creates the index when it is missing.
    """

    def __init__(self, client, index: str, *, request_timeout: float | None = None):
        if not index or index != index.lower() or index.startswith(("_", "-", "+")) or re.search(r'[\\/*?"<>| ,#:]', index):
            raise ConfigError(f"index name {index!r}: OpenSearch needs lowercase, no spaces or \\/*?\"<>|,#:, "
                              "not starting with _ - +")
        self.client = client
        self.index = index
        self.request_timeout = request_timeout
        self._meta: dict[str, Any] | None = None

    # ---- index facts
    def exists(self) -> bool:
        with _translate_errors(f"checking index {self.index!r}"):
            return bool(self.client.indices.exists(index=self.index))

    @property
    def meta(self) -> dict[str, Any]:
        """The index mapping's ``_meta`` (cached; ``refresh_meta`` re-reads it)."""
        if self._meta is None:
            self.refresh_meta()
        return self._meta  # type: ignore[return-value]

    def refresh_meta(self) -> dict[str, Any]:
        with _translate_errors(f"reading the mapping of {self.index!r}", self.index):
            mapping = self.client.indices.get_mapping(index=self.index)
        mappings = next(iter(mapping.values()))["mappings"]
        meta = dict(mappings.get("_meta") or {})
        meta["_properties"] = mappings.get("properties", {})
        self._meta = meta
        return meta

    @property
    def distance(self) -> Distance:
        distance = self.meta.get("distance")
        if distance is None:
            raise BackendError(f"index {self.index!r} was not created by hybrid-qpr: its mapping _meta has no "
                               f"'distance'; re-create it with 'hybrid-qpr ingest'")
        return check_distance(distance)

    @property
    def dim(self) -> int:
        return int(self.meta.get("dim") or 0)

    @property
    def model_fingerprint(self) -> str | None:
        return self.meta.get("model_fingerprint")

    @property
    def fusion_defaults(self) -> dict[str, Any]:
        """Fusion settings stored by tuning (e.g. ``{"fusion": "minmax", "alpha": 0.3}``), or ``{}``."""
        return dict(self.meta.get("fusion") or {})

    def set_fusion_defaults(self, defaults: Mapping[str, Any]) -> None:
        """Store tuned fusion defaults in the mapping ``_meta`` (other ``_meta`` keys kept)."""
        meta = {k: v for k, v in self.meta.items() if not k.startswith("_")}
        meta["fusion"] = dict(defaults)
        with _translate_errors(f"updating the _meta of {self.index!r}", self.index):
            self.client.indices.put_mapping(index=self.index, body={"_meta": meta})
        self._meta = None

    def check_encoder(self, encoder) -> None:
        """Refuse an encoder whose dims or fingerprint differ from the ones the index was built with."""
        problems = _layout_problems(self.meta, encoder)
        if problems:
            raise ModelMismatchError(f"index {self.index!r} does not match model {encoder.model_dir}: "
                                     + "; ".join(problems) + ". Use the model the index was built with, or ingest "
                                     "into a new index")

    def ensure_index(self, encoder, engine: str = "lucene") -> bool:
        """Create the index for ``encoder`` if missing (True), else check it matches (False)."""
        if self.exists():
            self.check_encoder(encoder)
            return False
        body = index_body(encoder.dim, encoder.distance, encoder.fingerprint, encoder.kind, engine)
        from opensearchpy.exceptions import RequestError

        with _translate_errors(f"creating index {self.index!r}"):
            try:
                self.client.indices.create(index=self.index, body=body)
            except RequestError as exc:
                if "resource_already_exists" not in str(exc):  # lost a race with another ingest
                    raise
        self._meta = None
        self.check_encoder(encoder)
        logger.info("created index %s (dim %d, %s, engine %s)", self.index, encoder.dim, encoder.distance, engine)
        return True

    def drop(self) -> bool:
        """Delete the whole index; False if it did not exist."""
        with _translate_errors(f"deleting index {self.index!r}"):
            if not self.client.indices.exists(index=self.index):
                return False
            self.client.indices.delete(index=self.index)
        self._meta = None
        return True

    # ---- the Backend protocol
    def bm25(self, query: str, depth: int, filters: Filters | None = None) -> list[Hit]:
        """BM25 via a ``match`` query: the text is analysed, never parsed as query syntax."""
        return self._raw_hits(self._search(self._bm25_body(query, depth, filters), "BM25 search"))

    def knn(self, vector: np.ndarray, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` by HNSW; filters run inside the graph search (Lucene efficient filtering)."""
        return self._to_hits(self._search(self._knn_body(vector, depth, filters), "kNN search"))

    def bm25_and_knn(self, query: str, vector: np.ndarray, depth: int,
                     filters: Filters | None = None) -> tuple[list[Hit], list[Hit]]:
        """``bm25`` and ``knn`` in one ``_msearch`` round trip (client-side hybrid's candidates)."""
        header = {"index": self.index}
        body = [header, self._bm25_body(query, depth, filters), header, self._knn_body(vector, depth, filters)]
        with _translate_errors(f"BM25 + kNN search in {self.index!r}", self.index):
            responses = self.client.msearch(body=body, params=self._request_params())["responses"]
        for what, response in zip(("BM25 search", "kNN search"), responses):
            if "error" in response:  # _msearch reports a failed sub-search in its item, not as an HTTP error
                error = response["error"]
                reason = error.get("root_cause", [error])[0] if isinstance(error, dict) else {"reason": error}
                if reason.get("type") == "index_not_found_exception":
                    raise _missing_index(what, self.index)
                raise BackendError(f"{what} in {self.index!r}: OpenSearch answered {response.get('status')} "
                                   f"({reason.get('type')}: {reason.get('reason')})")
        bm25_hits, knn_hits = (r["hits"]["hits"] for r in responses)
        return self._raw_hits(bm25_hits), self._to_hits(knn_hits)

    def vector_scores(self, vector: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        """Exact similarity of ``vector`` to the stored vectors of ``ids``, computed in the
        cluster by the k-NN ``knn_score`` script over an ``ids`` query (MSEM rerank)."""
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}
        body = {"size": len(ids), "_source": False,
                "query": {"script_score": {"query": {"ids": {"values": ids}}, "script": self._score_script(vector)}}}
        return {hit.id: hit.score for hit in self._to_hits(self._search(body, "vector re-scoring"))}

    def documents(self, ids: Sequence[str]) -> dict[str, Document]:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}
        with _translate_errors(f"fetching documents from {self.index!r}", self.index):
            response = self.client.mget(index=self.index, body={"ids": ids},
                                        _source_includes=[TEXT_FIELD, METADATA_FIELD])
        out = {}
        for doc in response["docs"]:
            if doc.get("found"):
                source = doc.get("_source", {})
                out[doc["_id"]] = Document(doc["_id"], source.get(TEXT_FIELD, ""), source.get(METADATA_FIELD) or {})
        return out

    def count(self) -> int:
        with _translate_errors(f"counting documents in {self.index!r}", self.index):
            return int(self.client.count(index=self.index)["count"])

    # ---- cluster-side modes
    def hybrid_server(self, query: str, vector: np.ndarray, depth: int, filters: Filters | None = None,
                      pipeline: str | Mapping[str, Any] = DEFAULT_PIPELINE) -> list[Hit]:
        """Fusion in the cluster: neural-search's ``hybrid`` query (a ``match`` and a ``knn``
        sub-query, each returning up to ``depth`` documents) normalised and combined by a
        search pipeline - the name of one installed by ``hybrid-qpr pipeline install``
        (default ``hybrid-qpr-rrf``), or a pipeline body to use for this request only.
        Filters are applied inside each sub-query (2.19's ``hybrid`` has no top-level filter)."""
        clauses = filter_clauses(filters)
        body: dict[str, Any] = {"size": depth, "_source": False, "query": {"hybrid": {"queries": [
            {"bool": {"must": [{"match": {TEXT_FIELD: {"query": query}}}], "filter": clauses}},
            {"knn": {VECTOR_FIELD: self._knn_clause(vector, depth, filters)}},
        ]}}}
        params = {}
        if isinstance(pipeline, str):
            self._require_pipeline(pipeline)
            params["search_pipeline"] = pipeline
        else:
            body["search_pipeline"] = dict(pipeline)
        return self._raw_hits(self._search(body, "server-side hybrid search", params))

    def rerank_server(self, query: str, vector: np.ndarray, depth: int = 30, filters: Filters | None = None) -> list[Hit]:
        """The MSEM flow in one request: BM25 recall of ``depth``, then a ``rescore`` of that
        window with the ``knn_score`` script (BM25 weight 0), so the order is by vector similarity."""
        body = {"size": depth, "_source": False,
                "query": {"bool": {"must": [{"match": {TEXT_FIELD: {"query": query}}}], "filter": filter_clauses(filters)}},
                "rescore": {"window_size": depth, "query": {
                    "rescore_query": {"script_score": {"query": {"match_all": {}}, "script": self._score_script(vector)}},
                    "query_weight": 0.0, "rescore_query_weight": 1.0}}}
        return self._to_hits(self._search(body, "server-side rerank"))

    # ---- writes
    def ingest(self, documents: Iterable[Document | tuple[int, Document]], encoder, *, batch_size: int = 256,
               rejects_path: str | Path | None = None, show_progress: bool = True, max_retries: int = 5,
               initial_backoff: float = 1.0, max_backoff: float = 30.0, engine: str = "lucene") -> IngestReport:
        """Encode and bulk-index ``documents`` (``Document`` or ``(line, Document)``) with ``_id`` =
        document id, so re-running replaces instead of duplicating.

        Retries: a document rejected with 429 or 5xx, or a whole request lost to a connection
        error / 429 / 5xx, is re-sent after a capped exponential backoff
        ``min(max_backoff, initial_backoff * 2**attempt)``, at most ``max_retries`` times; after
        that a connection loss raises ``ClusterError`` (re-run the same ingest to resume) and
        a document still rejected is a failure. Other rejections (e.g. a mapping conflict) fail
        at once. Failures are listed in the report and written as JSON lines to ``rejects_path``.
        At the end the index is refreshed and its count checked against what was acknowledged.
        """
        from opensearchpy.exceptions import ConnectionError as OSConnectionError, TransportError

        if batch_size < 1:
            raise ConfigError(f"batch_size={batch_size}: must be >= 1")
        streaming_bulk = require("opensearchpy.helpers", feature="OpenSearch ingest").streaming_bulk
        report = IngestReport(rejects_path=str(rejects_path) if rejects_path else None)
        start = time.monotonic()
        self.ensure_index(encoder, engine)
        self._refresh()
        count_before = self.count()
        total = len(documents) if hasattr(documents, "__len__") else None  # type: ignore[arg-type]
        distance = encoder.distance

        inflight: dict[str, dict] = {}  # _id -> action sent but not yet acknowledged
        lines: dict[str, int | None] = {}
        attempts: dict[str, int] = {}

        def actions() -> Iterator[dict]:
            for batch in _batches(documents, batch_size):
                vectors = prepare_vectors(encoder.encode([doc.text for _, doc in batch], batch_size=batch_size,
                                                         side="document"), distance)
                for (line, doc), vector in zip(batch, vectors):
                    lines[doc.id] = line
                    yield {"_op_type": "index", "_index": self.index, "_id": doc.id,
                           "_source": {TEXT_FIELD: doc.text, VECTOR_FIELD: vector.tolist(), METADATA_FIELD: doc.metadata}}

        def tracked(stream: Iterable[dict]) -> Iterator[dict]:
            for action in stream:
                inflight[action["_id"]] = action
                yield action

        def results() -> Iterator[None]:
            source, retry = actions(), []
            connection_failures = 0
            while True:
                stream = tracked(itertools.chain(retry, source))
                retry = []
                try:
                    for ok, item in streaming_bulk(self.client, stream, chunk_size=batch_size, raise_on_error=False,
                                                   raise_on_exception=True, max_retries=max_retries,
                                                   initial_backoff=initial_backoff, max_backoff=max_backoff,
                                                   yield_ok=True, request_timeout=max(60.0, self.request_timeout or 0)):
                        op = item.get("index", {})
                        doc_id = str(op.get("_id"))
                        action = inflight.pop(doc_id, None)
                        status = int(op.get("status") or 0)
                        if ok:
                            connection_failures = 0
                            if op.get("result") == "created":
                                report.indexed += 1
                            else:
                                report.updated += 1
                            yield None
                        elif (status == 429 or status >= 500) and action is not None \
                                and attempts.get(doc_id, 0) < max_retries:
                            attempts[doc_id] = attempts.get(doc_id, 0) + 1
                            retry.append(action)
                        else:
                            report.failed.append({"id": doc_id, "line": lines.get(doc_id), "status": status,
                                                  "error": _item_error(op)})
                            yield None
                except (OSConnectionError, TransportError) as exc:
                    status = exc.status_code if isinstance(exc.status_code, int) else None
                    if status is not None and status != 429 and status < 500:
                        raise
                    connection_failures += 1
                    if connection_failures > max_retries:
                        done = report.indexed + report.updated
                        raise ClusterError(
                            f"ingest into {self.index!r} stopped: OpenSearch unreachable or failing after "
                            f"{max_retries} retries ({type(exc).__name__}: {getattr(exc, 'error', exc)}). "
                            f"{done} documents were acknowledged before that. Ids are stable: re-run the same "
                            f"ingest once the cluster is back to resume without duplicates") from exc
                    retry = list(inflight.values())
                    inflight.clear()
                    delay = min(max_backoff, initial_backoff * 2 ** (connection_failures - 1))
                    logger.warning("bulk request failed (%s); retry %d/%d in %.1f s", type(exc).__name__,
                                   connection_failures, max_retries, delay)
                    time.sleep(delay)
                    continue
                if not retry:
                    return
                delay = min(max_backoff, initial_backoff * 2 ** (max(attempts[a["_id"]] for a in retry) - 1))
                logger.info("%d documents rejected with 429/5xx; re-sending in %.1f s", len(retry), delay)
                time.sleep(delay)

        progress: Iterable[None] = results()
        if show_progress:
            from hybrid_qpr.progress import track

            progress = track(progress, total=total, description=f"indexing into {self.index}")
        for _ in progress:
            pass

        if report.failed and rejects_path:
            from hybrid_qpr.artifacts import write_jsonl

            write_jsonl(rejects_path, report.failed)
        self._refresh()
        count_after = self.count()
        expected = count_before + report.indexed
        report.seconds = time.monotonic() - start
        if count_after != expected:
            raise BackendError(
                f"ingest into {self.index!r}: the index holds {count_after} documents but {expected} were expected "
                f"({count_before} before + {report.indexed} new). Another writer may be using the index; "
                f"re-run the ingest to repair (ids are stable)")
        return report

    def delete(self, ids: Sequence[str]) -> int:
        """Delete ``ids``; returns how many existed. Refreshes so counts and searches agree at once."""
        from opensearchpy.helpers import streaming_bulk

        ids = list(dict.fromkeys(ids))
        deleted = 0
        with _translate_errors(f"deleting documents from {self.index!r}", self.index):
            for ok, item in streaming_bulk(self.client, ({"_op_type": "delete", "_index": self.index, "_id": i} for i in ids),
                                           raise_on_error=False, ignore_status=(404,)):
                op = item.get("delete", {})
                if ok and op.get("result") == "deleted":
                    deleted += 1
                elif not ok and op.get("status") != 404:
                    raise BackendError(f"deleting {op.get('_id')!r} from {self.index!r} failed: {_item_error(op)}")
            self._refresh()
        return deleted

    # ---- helpers
    @staticmethod
    def _bm25_body(query: str, depth: int, filters: Filters | None) -> dict:
        return {"size": depth, "_source": False, "track_total_hits": False,
                "query": {"bool": {"must": [{"match": {TEXT_FIELD: {"query": query}}}], "filter": filter_clauses(filters)}}}

    def _knn_body(self, vector: np.ndarray, depth: int, filters: Filters | None) -> dict:
        return {"size": depth, "_source": False, "query": {"knn": {VECTOR_FIELD: self._knn_clause(vector, depth, filters)}}}

    def _knn_clause(self, vector: np.ndarray, depth: int, filters: Filters | None) -> dict:
        # Lucene explores k candidates per segment: a floor of KNN_CANDIDATES keeps recall high
        # for small depths (size still truncates to depth)
        clause: dict[str, Any] = {"vector": self._query_vector(vector), "k": max(depth, KNN_CANDIDATES)}
        clauses = filter_clauses(filters)
        if clauses:
            clause["filter"] = {"bool": {"filter": clauses}}
        return clause

    def _score_script(self, vector: np.ndarray) -> dict:
        return {"source": "knn_score", "lang": "knn",
                "params": {"field": VECTOR_FIELD, "query_value": self._query_vector(vector),
                           "space_type": opensearch_space_type(self.distance)}}

    def _query_vector(self, vector: np.ndarray) -> list[float]:
        vector = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        if self.dim and vector.shape[1] != self.dim:
            raise ModelMismatchError(f"query vector has {vector.shape[1]} dims but index {self.index!r} holds {self.dim}")
        return prepare_vectors(vector, self.distance)[0].tolist()

    @staticmethod
    def _raw_hits(hits: list[dict]) -> list[Hit]:
        """Hits whose score is already "higher is better" on our scale (BM25, fused)."""
        return [Hit(h["_id"], float(h["_score"])) for h in hits]

    def _to_hits(self, hits: list[dict]) -> list[Hit]:
        scores = score_from_opensearch([h["_score"] for h in hits], self.distance)
        return [Hit(h["_id"], float(s)) for h, s in zip(hits, np.atleast_1d(scores))]

    def _search(self, body: dict, what: str, params: dict | None = None) -> list[dict]:
        with _translate_errors(f"{what} in {self.index!r}", self.index):
            response = self.client.search(index=self.index, body=body, params=self._request_params(params))
        return response["hits"]["hits"]

    def _request_params(self, params: dict | None = None) -> dict:
        params = dict(params or {})
        if self.request_timeout is not None:
            params["request_timeout"] = self.request_timeout
        return params

    def _refresh(self) -> None:
        with _translate_errors(f"refreshing {self.index!r}", self.index):
            self.client.indices.refresh(index=self.index)

    def _require_pipeline(self, name: str) -> None:
        from opensearchpy.exceptions import NotFoundError

        with _translate_errors(f"looking up search pipeline {name!r}"):
            try:
                self.client.transport.perform_request("GET", f"/_search/pipeline/{name}")
            except NotFoundError as exc:
                raise BackendError(f"search pipeline {name!r} is not installed; run 'hybrid-qpr pipeline install "
                                   f"--opensearch URL' first") from exc


def filter_clauses(filters: Filters | None) -> list[dict]:
    """``{"lang": "en", "tag": ["a", "b"]}`` -> exact ``term``/``terms`` clauses on ``metadata.*``."""
    clauses = []
    for key, value in (filters or {}).items():
        if not isinstance(key, str) or not key or key.startswith(".") or key.endswith("."):
            raise ConfigError(f"filter field {key!r}: use a metadata field name such as 'lang' or 'source.site'")
        field = f"{METADATA_FIELD}.{key}"
        if isinstance(value, (list, tuple, set, frozenset)):
            values = list(value)
            if not values or any(v is None for v in values):
                raise ConfigError(f"filter {key}={value!r}: give at least one value and no nulls")
            clauses.append({"terms": {field: values}})
        elif value is None or isinstance(value, dict):
            raise ConfigError(f"filter {key}={value!r}: a filter value must be a string, number, boolean or a list")
        else:
            clauses.append({"term": {field: value}})
    return clauses


def _layout_problems(meta: Mapping[str, Any], encoder) -> list[str]:
    """What differs between an index's mapping and what ``encoder`` needs (empty = fine)."""
    problems = []
    properties = meta.get("_properties", {})
    vector = properties.get(VECTOR_FIELD, {})
    if vector.get("type") != "knn_vector":
        problems.append(f"field {VECTOR_FIELD!r} is {vector.get('type') or 'missing'}, expected knn_vector")
    elif int(vector.get("dimension", 0)) != encoder.dim:
        problems.append(f"{VECTOR_FIELD} has dimension {vector.get('dimension')}, the model produces {encoder.dim}")
    if properties.get(TEXT_FIELD, {}).get("type") != "text":
        problems.append(f"field {TEXT_FIELD!r} is {properties.get(TEXT_FIELD, {}).get('type') or 'missing'}, expected text")
    if meta.get("distance") not in (None, encoder.distance):
        problems.append(f"index distance is {meta.get('distance')}, the model uses {encoder.distance}")
    if meta.get("model_fingerprint") not in (None, encoder.fingerprint):
        problems.append(f"index was built with model fingerprint {meta.get('model_fingerprint')}, "
                        f"this model is {encoder.fingerprint}")
    if "distance" not in meta:
        problems.append("mapping _meta lacks the hybrid-qpr model facts (not created by hybrid-qpr)")
    return problems


def _batches(documents: Iterable[Document | tuple[int, Document]], size: int) -> Iterator[list[tuple[int | None, Document]]]:
    batch: list[tuple[int | None, Document]] = []
    for item in documents:
        line, doc = item if isinstance(item, tuple) else (None, item)
        batch.append((line, doc))
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _item_error(op: Mapping[str, Any]) -> str:
    error = op.get("error")
    if isinstance(error, dict):
        return f"{error.get('type')}: {error.get('reason')}"
    return str(error) if error else f"status {op.get('status')}"
