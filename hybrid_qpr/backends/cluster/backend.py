"""``ClusterBackend``: everything the OpenSearch and Elasticsearch backends do alike.

An index holds ``text`` (BM25), ``embedding`` (the encoder vector, HNSW), ``metadata``
(strings mapped as keywords, so filters are exact term matches) and, in the mapping
``_meta``, the model facts (``dim``, ``distance``, ``model_fingerprint``, ``model_kind``)
and the tuned ``fusion`` defaults. An engine module (``backends/opensearch.py``,
``backends/elasticsearch.py``) adds only what differs: the vector field's mapping and
kNN clause, the exact re-scoring of given ids, its client and its server-side modes.

The class is built by concern: ``sending.py`` (requests and the reads sent again while a node is
lost), ``index_admin.py`` (the mapping's facts, settings, encoder checks, create and drop),
``querying.py`` (the searches, their bodies and hits); the write side is ``writer.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from hybrid_qpr.backends.base import Capabilities, IngestReport, document_problem
from hybrid_qpr.backends.cluster import writer
from hybrid_qpr.backends.cluster.bodies import DEFAULT_SHARDS
from hybrid_qpr.backends.cluster.connection import Engine, Transport, reason
from hybrid_qpr.backends.cluster.names import check_index_name, id_problem
from hybrid_qpr.backends.cluster.querying import MAX_KNN_K, IndexQueries
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.types import Document, Filters, TextEncoder

# HNSW candidate floor of a kNN search (OpenSearch ef_search, Elasticsearch num_candidates); an
# engine module sets its own measured default_knn_candidates (docs/opensearch.md, elasticsearch.md)
KNN_CANDIDATES = 100
SearchType = Literal["auto", "query_then_fetch", "dfs_query_then_fetch"]
SEARCH_TYPES: tuple[str, ...] = get_args(SearchType)


class ClusterBackend(IndexQueries):
    """``hybrid_qpr.backends.base.Backend`` over one index of a search cluster (see the module docstring).

    Reads the model facts from the index's mapping ``_meta``; ``ingest`` creates the index
    when it is missing and refuses a model that does not match it.

    ``documents_in_hits`` (default True): searches return each hit's text and metadata with
    it (``Hit.document``), so a query is one request instead of a search plus an ``_mget``
    (measured in docs/opensearch.md, "Latency levers"). False returns bare hits.
    ``knn_candidates``: the HNSW candidate floor of a kNN search (default: the engine's
    ``default_knn_candidates``).
    ``search_type`` of the searches that score BM25: ``dfs_query_then_fetch`` first gathers
    term statistics from every shard, so a document's BM25 score does not depend on which
    shard holds it; ``query_then_fetch`` scores with each shard's own statistics (one round
    trip fewer). ``auto`` (default): dfs when the index has more than one primary shard, which
    is what the measurement in docs/opensearch.md ("Several nodes") chose.
    """

    engine: Engine
    capabilities = Capabilities(batched_bm25_and_knn=True)
    default_knn_candidates = KNN_CANDIDATES
    vector_type: str  # the mapping type of the vector field
    # what multiplies the engine's BM25 scores into the embedded index's (Elasticsearch's differ by a factor)
    bm25_score_scale: float = 1.0

    def __init__(self, client: Any, index: str, *, request_timeout: float | None = None,
                 documents_in_hits: bool = True, knn_candidates: int | None = None, search_type: SearchType = "auto"):
        check_index_name(index, self.engine_name)
        self.client = client
        self.transport = self.transport_class(client)
        self.index = index
        self.request_timeout = request_timeout
        self.documents_in_hits = documents_in_hits
        self.knn_candidates = self.default_knn_candidates if knn_candidates is None else int(knn_candidates)
        if self.knn_candidates < 1:
            raise ConfigError(f"knn_candidates={knn_candidates!r}: must be >= 1")
        if search_type not in SEARCH_TYPES:
            raise ConfigError(f"search_type={search_type!r}: allowed values are {', '.join(SEARCH_TYPES)}")
        self.search_type = search_type
        self._settings: dict[str, str] | None = None
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

    def vector_field_problems(self, field: Mapping[str, Any], encoder: TextEncoder) -> list[str]:
        """What is wrong with a vector field of the right type for ``encoder`` (dims, similarity)."""
        raise NotImplementedError

    def vector_scores(self, vector: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        raise NotImplementedError

    def empty_reason(self) -> str:
        return (f"{self.engine_name} index {self.index!r} holds no documents. Fix: hybrid-qpr ingest FILE --index "
                f"{self.index} --{self.engine}")

    def close(self) -> None:
        """Close the client's connection pool."""
        self.client.close()

    # ---- write side (hybrid_qpr.backends.cluster.writer)
    def ingest(self, documents: Iterable[Document | tuple[int, Document]], encoder: TextEncoder, *,
               batch_size: int = writer.BULK_BATCH_SIZE,
               rejects_path: str | Path | None = None, show_progress: bool = True, wait: bool | float = False,
               max_retries: int = 6,
               initial_backoff: float = 0.5, max_backoff: float = 30.0, shards: int | None = None,
               replicas: int | None = None, bulk_timeout: float | None = None,
               in_flight: int = writer.BULK_IN_FLIGHT) -> IngestReport:
        """Encode and bulk-index ``documents`` (``Document`` or ``(line, Document)``) with ``_id`` =
        document id, so re-running replaces instead of duplicating.

        A document with a ``document_problem`` (as for every backend, plus an id over
        ``names.MAX_ID_BYTES``) is skipped before it is encoded and reported in ``skipped`` with
        its line (a plain ``Document``: its position in ``documents``, from 1); the others are
        written. ``wait`` is the contract's: a cluster has no write lock to wait for.

        Encoding (and writing each document's JSON) runs up to ``writer.READ_AHEAD_BATCHES`` batches ahead
        in a thread, so it goes on while a request is sent or a retry waits; that thread is stopped
        and joined on every way out. ``in_flight`` ``_bulk`` requests of ``batch_size`` documents are
        sent at once (default ``writer.BULK_IN_FLIGHT`` and ``BULK_BATCH_SIZE``, 4 and 1,000). An index the
        ingest creates is loaded with refresh off (replicas kept: a node lost mid-load must not take
        the only copy of a shard), its settings restored at the end, on failure too (``cluster.loading``).
        Writes are externally versioned and retried as ``cluster.bulk.write_bulk`` says (capped
        exponential backoff ``min(max_backoff, initial_backoff * 2**(attempt - 1))`` or the server's
        ``Retry-After``, at most ``max_retries`` times; smaller requests while the cluster answers
        429); a connection lost for longer raises ``ClusterError`` (re-run the same ingest to
        resume). ``bulk_timeout``: seconds one ``_bulk`` may take (default: the client's, >= 60).

        Success is decided by ids, not by the engine's created/updated answers (a try answered
        429 or timed out may have been applied): after a refresh, every id written is read back
        in batches and must hold the text this ingest wrote last for it. An id that does not is
        a failure. ``indexed`` is the number of documents the index gained, ``updated`` the other
        lines written. Failures are listed in the report and written as JSON lines to ``rejects_path``.
        ``shards``/``replicas`` apply when the index is created (see ``ensure_index``).
        """
        return writer.ingest(self, documents, encoder, batch_size=batch_size, rejects_path=rejects_path,
                             show_progress=show_progress, max_retries=max_retries, initial_backoff=initial_backoff,
                             max_backoff=max_backoff, shards=shards, replicas=replicas, bulk_timeout=bulk_timeout,
                             in_flight=in_flight)

    def delete(self, ids: Sequence[str], *, wait: bool | float = False) -> int:
        """Delete ``ids``; returns how many existed. Refreshes so counts and searches agree at
        once. ``wait`` is the contract's: a cluster has no write lock to wait for."""
        return writer.delete(self, ids)

    def document_problem(self, doc: Document) -> str | None:
        return document_problem(doc) or id_problem(str(doc.id), self.engine_name)


__all__ = ["ClusterBackend", "KNN_CANDIDATES", "MAX_KNN_K", "reason"]
