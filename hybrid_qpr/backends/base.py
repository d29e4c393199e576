"""The contract every search backend offers to ``hybrid_qpr.search`` and the CLI.

A backend stores documents with their encoder vectors (write side: ``ingest``, ``delete``),
answers the two first-stage retrievals (BM25 and kNN), re-scores a given candidate set with
stored vectors (the MSEM rerank flow), returns stored documents, and keeps the fusion
settings tuned for it. Fusion, modes, pagination and result explanation live above it, in
code shared by all backends. Scores are "higher is better" (see ``hybrid_qpr.distance``).

What a backend can do beyond the contract is declared in ``capabilities`` - never probed
with ``getattr``/``hasattr`` - so ``search.py`` reads one flag instead of guessing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from hybrid_qpr.errors import SkippedLine
from hybrid_qpr.fusion import DEFAULT_ALPHA, DEFAULT_FUSION, RERANK_DEPTH, RRF_K
from hybrid_qpr.types import Document, Filters, Hit


@dataclass(frozen=True)
class Capabilities:
    """Optional abilities of a backend.

    * ``batched_bm25_and_knn`` - ``bm25_and_knn`` answers both lists in one round trip
      (a cluster's ``_msearch``); otherwise the searcher calls ``bm25`` then ``knn``.
    * ``server_side_hybrid`` - ``hybrid_server`` fuses inside the engine with the same
      method, weights and depth as client-side fusion (OpenSearch neural-search).
    * ``server_side_rerank`` - ``rerank_server`` runs the MSEM flow in one request.
    * ``vector_beside_bm25`` - ``bm25_and_knn`` also takes the query vector as a function
      and calls it while the BM25 list is scored (the embedded index: a hybrid query's
      encoding overlaps BM25 instead of preceding it).
    """

    batched_bm25_and_knn: bool = False
    server_side_hybrid: bool = False
    server_side_rerank: bool = False
    vector_beside_bm25: bool = False


@runtime_checkable
class Backend(Protocol):
    """Read side, write side and settings of one index (embedded or in a cluster)."""

    capabilities: Capabilities

    @property
    def distance(self) -> str:
        """The encoder distance the index was built for (``hybrid_qpr.distance.DISTANCES``)."""

    # ---- read side
    def bm25(self, query: str, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` documents by BM25, filters applied before ranking."""

    def knn(self, vector: np.ndarray, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` documents by vector similarity, filters applied before truncation."""

    def vector_scores(self, vector: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        """Exact similarity of ``vector`` to each stored document in ``ids`` (for rerank)."""

    def documents(self, ids: Sequence[str]) -> dict[str, Document]:
        """Stored text and metadata of ``ids`` (missing ids are absent from the result)."""

    def count(self) -> int:
        """Number of documents indexed."""

    # ---- write side
    def ingest(self, documents: Iterable[Document | tuple[int, Document]], encoder, *, batch_size: int = 256,
               show_progress: bool = True) -> "IngestReport":
        """Encode and store ``documents``; an id seen before is replaced, never duplicated."""

    def delete(self, ids: Sequence[str]) -> int:
        """Remove ``ids``; returns how many existed."""

    # ---- settings and model check
    @property
    def fusion_defaults(self) -> dict[str, Any]:
        """Fusion settings stored by tuning (``fusion``, ``alpha``, ``depth``), or ``{}``."""

    def set_fusion_defaults(self, defaults: Mapping[str, Any]) -> None:
        """Store tuned fusion settings with the index."""

    def check_encoder(self, encoder) -> None:
        """Raise ``ModelMismatchError`` if ``encoder`` is not the model the index was built with."""

    def close(self) -> None:
        """Release files or connections; the backend is not used afterwards."""


class ServerSideBackend(Backend, Protocol):
    """A backend whose ``capabilities`` say ``server_side_hybrid`` / ``server_side_rerank``."""

    def hybrid_server(self, query: str, vector: np.ndarray, depth: int, filters: Filters | None = None, *,
                      method: str = DEFAULT_FUSION, alpha: float = DEFAULT_ALPHA, rrf_k: int = RRF_K) -> list[Hit]:
        """Fused top ``depth`` computed by the engine with ``method`` and weights ``(1 - alpha, alpha)``."""

    def rerank_server(self, query: str, vector: np.ndarray, depth: int = RERANK_DEPTH,
                      filters: Filters | None = None) -> list[Hit]:
        """BM25 recall of ``depth`` re-ordered by vector similarity, in the engine."""


@dataclass
class IngestReport:
    """What an ingest did. Every input line is accounted for: indexed (new), updated
    (same id seen before: replaced, never duplicated), skipped (with line and reason),
    or failed (rejected by the store, or not found as written when checked afterwards;
    written to ``rejects_path`` when one is given).

    A cluster ingest also says what its retries cost: whole requests sent again (no answer,
    429, 5xx), single documents sent again (answered 429 / 5xx inside a request), and the
    seconds spent waiting before them; ``verified`` counts the ids read back and found with
    the text this ingest wrote."""

    indexed: int = 0
    updated: int = 0
    skipped: list[SkippedLine] = field(default_factory=list)  # path None: the caller knows the file
    failed: list[dict[str, Any]] = field(default_factory=list)  # {"id", "error", ...}
    seconds: float = 0.0
    rejects_path: str | None = None
    retried_requests: int = 0
    retried_documents: int = 0
    retry_wait_seconds: float = 0.0
    verified: int = 0

    @property
    def retries(self) -> int:
        return self.retried_requests + self.retried_documents

    @property
    def docs_per_second(self) -> float:
        done = self.indexed + self.updated
        return done / self.seconds if self.seconds > 0 else 0.0
