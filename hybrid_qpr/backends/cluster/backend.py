"""``ClusterBackend``: everything the OpenSearch and Elasticsearch backends do alike.

An index holds ``text`` (BM25), ``embedding`` (the encoder vector, HNSW), ``metadata``
(strings mapped as keywords, so filters are exact term matches) and, in the mapping
``_meta``, the model facts (``dim``, ``distance``, ``model_fingerprint``, ``model_kind``)
and the tuned ``fusion`` defaults. An engine module (``backends/opensearch.py``,
``backends/elasticsearch.py``) adds only what differs: the vector field's mapping and
kNN clause, the exact re-scoring of given ids, its client and its server-side modes.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_qpr.backends.base import Capabilities, IngestReport
from hybrid_qpr.backends.cluster.bodies import (DEFAULT_SHARDS, HITS_FILTER, METADATA_FIELD, TEXT_FIELD, VECTOR_FIELD,
                                                bm25_body, bm25_tokens, check_shards)
from hybrid_qpr.backends.cluster.bulk import BulkAction, RetryPolicy, write_bulk
from hybrid_qpr.backends.cluster.connection import (Engine, HttpFailure, Transport, error_for, missing_index, reason,
                                                    translate)
from hybrid_qpr.distance import Distance, check_distance, prepare_vectors, score_from_opensearch
from hybrid_qpr.errors import BackendError, ConfigError, ModelMismatchError
from hybrid_qpr.types import Document, Filters, Hit

logger = logging.getLogger(__name__)

KNN_CANDIDATES = 100
_BAD_INDEX_CHARS = re.compile(r'[\\/*?"<>| ,#:]')


class ClusterBackend:
    """``hybrid_qpr.backends.base.Backend`` over one index of a search cluster (see the module docstring).

    Reads the model facts from the index's mapping ``_meta``; ``ingest`` creates the index
    when it is missing and refuses a model that does not match it.
    """

    engine: Engine
    capabilities = Capabilities(batched_bm25_and_knn=True)
    vector_type: str  # the mapping type of the vector field
    bm25_field: str = TEXT_FIELD  # the field BM25 searches (bodies.TOKENS_FIELD where the client tokenizes)
    bm25_analyzer: str  # its analyzer in the mapping, which yields hybrid_qpr.text.tokenize's tokens

    def __init__(self, client: Any, index: str, *, request_timeout: float | None = None):
        if not index or index != index.lower() or index.startswith(("_", "-", "+")) or _BAD_INDEX_CHARS.search(index):
            raise ConfigError(f"index name {index!r}: {self.engine_name} needs lowercase, no spaces or \\/*?\"<>|,#:, "
                              "not starting with _ - +")
        self.client = client
        self.transport = self.transport_class(client)
        self.index = index
        self.request_timeout = request_timeout
        self._meta: dict[str, Any] | None = None

    # ---- what an engine module provides
    transport_class: type[Transport]

    @staticmethod
    def index_body(dim: int, distance: str, fingerprint: str, kind: str, *, shards: int = DEFAULT_SHARDS,
                   replicas: int = 0) -> dict:
        """The create-index body (the engine module's ``index_body``)."""
        raise NotImplementedError

    def knn_body(self, vector: np.ndarray, depth: int, filters: Filters | None) -> dict:
        raise NotImplementedError

    def vector_field_problems(self, field: Mapping[str, Any], encoder) -> list[str]:
        """What is wrong with a vector field of the right type for ``encoder`` (dims, similarity)."""
        raise NotImplementedError

    def vector_scores(self, vector: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        raise NotImplementedError

    @property
    def engine_name(self) -> str:
        return {"opensearch": "OpenSearch", "elasticsearch": "Elasticsearch"}[self.engine]

    # ---- requests
    def request(self, method: str, path: str, body: Any = None, params: dict | None = None, *, what: str,
                ndjson: bool = False) -> Any:
        with translate(f"{what} in {self.index!r}", self.engine, self.index):
            return self.transport.request(method, path, body, params, ndjson=ndjson, timeout=self.request_timeout)

    def _search(self, body: dict, what: str, params: dict | None = None) -> list[dict]:
        params = {"filter_path": HITS_FILTER, **(params or {})}
        response = self.request("POST", f"/{self.index}/_search", body, params, what=what)
        return response.get("hits", {}).get("hits", [])  # filter_path drops an empty hits list

    def _msearch(self, bodies: Sequence[dict], whats: Sequence[str]) -> list[list[dict]]:
        """Several searches of this index in one round trip; a failed one raises like a search would."""
        header = json.dumps({"index": self.index})
        payload = "".join(f"{header}\n{json.dumps(body)}\n" for body in bodies)
        params = {"filter_path": "responses.hits.hits._id,responses.hits.hits._score,responses.error,responses.status"}
        responses = self.request("POST", "/_msearch", payload, params, what=" + ".join(whats), ndjson=True)["responses"]
        out = []
        for what, response in zip(whats, responses):
            if "error" in response:  # _msearch reports a failed search in its item, not as an HTTP error
                failure = HttpFailure(int(response.get("status") or 500), {"error": response["error"]})
                raise error_for(failure, f"{what} in {self.index!r}", self.engine, self.index)
            out.append(response.get("hits", {}).get("hits", []))
        return out

    def _refresh(self) -> None:
        self.request("POST", f"/{self.index}/_refresh", what="refreshing")

    # ---- index facts
    def exists(self) -> bool:
        with translate(f"checking index {self.index!r}", self.engine):
            return self.transport.exists(f"/{self.index}")

    @property
    def meta(self) -> dict[str, Any]:
        """The index mapping's ``_meta`` plus ``_properties`` (cached; ``refresh_meta`` re-reads it)."""
        if self._meta is None:
            self.refresh_meta()
        return self._meta  # type: ignore[return-value]

    def refresh_meta(self) -> dict[str, Any]:
        mapping = self.request("GET", f"/{self.index}/_mapping", what="reading the mapping")
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
        """Fusion settings stored by tuning (e.g. ``{"fusion": "minmax", "alpha": 0.3, "depth": 100}``), or ``{}``."""
        return dict(self.meta.get("fusion") or {})

    def set_fusion_defaults(self, defaults: Mapping[str, Any]) -> None:
        """Store tuned fusion defaults in the mapping ``_meta`` (other ``_meta`` keys kept)."""
        meta = {k: v for k, v in self.meta.items() if not k.startswith("_")}
        meta["fusion"] = dict(defaults)
        self.request("PUT", f"/{self.index}/_mapping", {"_meta": meta}, what="updating the _meta")
        self._meta = None

    def check_encoder(self, encoder) -> None:
        """Refuse an encoder whose dims, distance or fingerprint differ from the index's."""
        problems = self.layout_problems(self.meta, encoder)
        if problems:
            raise ModelMismatchError(f"index {self.index!r} does not match model {encoder.model_dir}: "
                                     + "; ".join(problems) + ". Use the model the index was built with, or ingest "
                                     "into a new index")
        analyzer = self.meta.get("_properties", {}).get(self.bm25_field, {}).get("analyzer")
        if analyzer != self.bm25_analyzer:
            logger.warning("index %s: field %r uses the %s analyzer, not %s (made by an older hybrid-qpr), so its BM25 "
                           "scores differ from the embedded engine's; ingest into a new index to align them",
                           self.index, self.bm25_field, analyzer or "default", self.bm25_analyzer)

    def layout_problems(self, meta: Mapping[str, Any], encoder) -> list[str]:
        """What differs between an index's mapping and what ``encoder`` needs (empty = fine)."""
        properties = meta.get("_properties", {})
        vector = properties.get(VECTOR_FIELD, {})
        if vector.get("type") != self.vector_type:
            problems = [f"field {VECTOR_FIELD!r} is {vector.get('type') or 'missing'}, expected {self.vector_type}"]
        else:
            problems = self.vector_field_problems(vector, encoder)
        for field in dict.fromkeys((TEXT_FIELD, self.bm25_field)):
            if properties.get(field, {}).get("type") != "text":
                problems.append(f"field {field!r} is {properties.get(field, {}).get('type') or 'missing'}, expected text "
                                "(an index made by an older hybrid-qpr: ingest into a new index)")
        if meta.get("distance") not in (None, encoder.distance):
            problems.append(f"index distance is {meta.get('distance')}, the model uses {encoder.distance}")
        if meta.get("model_fingerprint") not in (None, encoder.fingerprint):
            problems.append(f"index was built with model fingerprint {meta.get('model_fingerprint')}, "
                            f"this model is {encoder.fingerprint}")
        if "distance" not in meta:
            problems.append("mapping _meta lacks the hybrid-qpr model facts (not created by hybrid-qpr)")
        return problems

    def default_replicas(self) -> int:
        """0 on a one-data-node cluster (a replica could never be placed), else 1."""
        with translate("reading cluster health", self.engine):
            health = self.transport.request("GET", "/_cluster/health")
        return 0 if int(health.get("number_of_data_nodes") or 1) <= 1 else 1

    def ensure_index(self, encoder, *, shards: int | None = None, replicas: int | None = None) -> bool:
        """Create the index for ``encoder`` if missing (True), else check it matches (False).
        ``shards`` defaults to 1 and ``replicas`` to what the cluster can hold (``default_replicas``);
        both only apply when the index is created."""
        if self.exists():
            self.check_encoder(encoder)
            return False
        shards, replicas = check_shards(DEFAULT_SHARDS if shards is None else shards,
                                        self.default_replicas() if replicas is None else replicas)
        body = self.index_body(encoder.dim, encoder.distance, encoder.fingerprint, encoder.kind,
                               shards=shards, replicas=replicas)
        try:
            with translate(f"creating index {self.index!r}", self.engine):
                try:
                    self.transport.request("PUT", f"/{self.index}", body, {"wait_for_active_shards": "all"})
                except HttpFailure as failure:
                    if failure.error_type != "resource_already_exists_exception":  # lost a race with another ingest
                        raise
        finally:
            self._meta = None
        self.check_encoder(encoder)
        logger.info("created index %s (dim %d, %s, %d shards, %d replicas)", self.index, encoder.dim,
                    encoder.distance, shards, replicas)
        return True

    def drop(self) -> bool:
        """Delete the whole index; False if it did not exist."""
        self._meta = None
        with translate(f"deleting index {self.index!r}", self.engine):
            try:
                self.transport.request("DELETE", f"/{self.index}")
            except HttpFailure as failure:
                if failure.status == 404:
                    return False
                raise
        return True

    # ---- read side
    def bm25(self, query: str, depth: int, filters: Filters | None = None) -> list[Hit]:
        """BM25 via a ``match`` query: the text is analysed, never parsed as query syntax."""
        return self._raw_hits(self._search(bm25_body(query, depth, filters, self.bm25_field), "BM25 search"))

    def knn(self, vector: np.ndarray, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` by HNSW; filters run inside the graph search (so ``depth`` hits still come back)."""
        return self._to_hits(self._search(self.knn_body(vector, depth, filters), "kNN search"))

    def bm25_and_knn(self, query: str, vector: np.ndarray, depth: int,
                     filters: Filters | None = None) -> tuple[list[Hit], list[Hit]]:
        """``bm25`` and ``knn`` in one ``_msearch`` round trip (client-side hybrid's candidates)."""
        bm25_hits, knn_hits = self._msearch([bm25_body(query, depth, filters, self.bm25_field),
                                             self.knn_body(vector, depth, filters)],
                                            ["BM25 search", "kNN search"])
        return self._raw_hits(bm25_hits), self._to_hits(knn_hits)

    def documents(self, ids: Sequence[str]) -> dict[str, Document]:
        ids = list(dict.fromkeys(ids))
        if not ids:
            return {}
        response = self.request("POST", f"/{self.index}/_mget", {"ids": ids},
                                {"_source_includes": f"{TEXT_FIELD},{METADATA_FIELD}"}, what="fetching documents")
        out = {}
        for doc in response["docs"]:
            if doc.get("found"):
                source = doc.get("_source", {})
                out[doc["_id"]] = Document(doc["_id"], source.get(TEXT_FIELD, ""), source.get(METADATA_FIELD) or {})
        return out

    def count(self) -> int:
        return int(self.request("GET", f"/{self.index}/_count", what="counting documents")["count"])

    def close(self) -> None:
        """Close the client's connection pool."""
        self.client.close()

    # ---- write side
    def ingest(self, documents: Iterable[Document | tuple[int, Document]], encoder, *, batch_size: int = 256,
               rejects_path: str | Path | None = None, show_progress: bool = True, max_retries: int = 5,
               initial_backoff: float = 1.0, max_backoff: float = 30.0, shards: int | None = None,
               replicas: int | None = None) -> IngestReport:
        """Encode and bulk-index ``documents`` (``Document`` or ``(line, Document)``) with ``_id`` =
        document id, so re-running replaces instead of duplicating.

        Retries are those of ``cluster.bulk.write_bulk`` (capped exponential backoff
        ``min(max_backoff, initial_backoff * 2**attempt)``, at most ``max_retries`` times);
        a connection lost for longer raises ``ClusterError`` (re-run the same ingest to resume).
        Failures are listed in the report and written as JSON lines to ``rejects_path``.
        At the end the index is refreshed and its count checked against what was acknowledged.
        ``shards``/``replicas`` apply when the index is created (see ``ensure_index``).
        """
        if batch_size < 1:
            raise ConfigError(f"batch_size={batch_size}: must be >= 1")
        report = IngestReport(rejects_path=str(rejects_path) if rejects_path else None)
        start = time.monotonic()
        self.ensure_index(encoder, shards=shards, replicas=replicas)
        self._refresh()
        count_before = self.count()
        total = len(documents) if hasattr(documents, "__len__") else None  # type: ignore[arg-type]

        def actions() -> Iterator[BulkAction]:
            for batch in _batches(documents, batch_size):
                vectors = prepare_vectors(encoder.encode([doc.text for _, doc in batch], batch_size=batch_size, side="document"),
                                          encoder.distance)
                for (line, doc), vector in zip(batch, vectors):
                    source = {TEXT_FIELD: doc.text, VECTOR_FIELD: vector.tolist(), METADATA_FIELD: doc.metadata}
                    if self.bm25_field != TEXT_FIELD:
                        source[self.bm25_field] = bm25_tokens(doc.text)
                    yield BulkAction("index", doc.id, source, line)

        def results() -> Iterator[None]:
            retry = RetryPolicy(max_retries, initial_backoff, max_backoff)
            for outcome in write_bulk(self.transport, self.index, actions(), chunk_size=batch_size, retry=retry,
                                      timeout=max(60.0, self.request_timeout or 0)):
                if not outcome.ok:
                    report.failed.append({"id": outcome.action.id, "line": outcome.action.line,
                                          "status": outcome.status, "error": outcome.error})
                elif outcome.result == "created":
                    report.indexed += 1
                else:
                    report.updated += 1
                yield None

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
        if not self.exists():
            raise missing_index("deleting documents", self.index, self.engine)
        deleted = 0
        for outcome in write_bulk(self.transport, self.index,
                                  (BulkAction("delete", i) for i in dict.fromkeys(ids))):
            if not outcome.ok:
                raise BackendError(f"deleting {outcome.action.id!r} from {self.index!r} failed: {outcome.error}")
            deleted += outcome.result == "deleted"
        self._refresh()
        return deleted

    # ---- helpers
    def query_vector(self, vector: np.ndarray) -> list[float]:
        """``vector`` prepared for the index's distance, as JSON numbers; wrong dims are refused."""
        vector = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        if self.dim and vector.shape[1] != self.dim:
            raise ModelMismatchError(f"query vector has {vector.shape[1]} dims but index {self.index!r} holds {self.dim}")
        return prepare_vectors(vector, self.distance)[0].tolist()

    @staticmethod
    def _raw_hits(hits: list[dict]) -> list[Hit]:
        """Hits whose score is already "higher is better" on our scale (BM25, fused)."""
        return [Hit(h["_id"], float(h["_score"])) for h in hits]

    def _to_hits(self, hits: list[dict]) -> list[Hit]:
        """kNN hits: both engines report l2 as 1/(1+d²), cosine as (1+cos)/2 and inner product as
        1+ip (ip >= 0) or 1/(1-ip); undone here so scores equal ``hybrid_qpr.distance.similarity``."""
        if not hits:
            return []
        scores = score_from_opensearch([h["_score"] for h in hits], self.distance)
        return [Hit(h["_id"], float(s)) for h, s in zip(hits, np.atleast_1d(scores))]


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


__all__ = ["ClusterBackend", "KNN_CANDIDATES", "reason"]
