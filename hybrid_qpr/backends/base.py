"""The small interface every search backend offers to ``hybrid_qpr.search``.

A backend answers the two first-stage retrievals (BM25 and kNN) and re-scores a
given candidate set with stored vectors (the MSEM rerank flow). Fusion, modes,
pagination and result explanation live above it, in code shared by all backends.
Scores are "higher is better" (see ``hybrid_qpr.distance``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from hybrid_qpr.types import Document, Filters, Hit

@runtime_checkable
class Backend(Protocol):
    distance: str

    def bm25(self, query: str, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` documents by BM25, filters applied before ranking."""

    def knn(self, vector: np.ndarray, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` documents by vector similarity, filters applied before truncation."""

    def vector_scores(self, vector: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        """Similarity of ``vector`` to each stored document in ``ids`` (for rerank)."""

    def documents(self, ids: Sequence[str]) -> dict[str, Document]:
        """Stored text and metadata of ``ids`` (missing ids are absent from the result)."""

    def count(self) -> int:
        """Number of documents indexed."""


@dataclass
class IngestReport:
    """What an ingest did. Every input line is accounted for: indexed (new), updated
    (same id seen before: replaced, never duplicated), skipped (with line and reason),
    or failed (rejected by the store; written to ``rejects_path`` when one is given)."""

    indexed: int = 0
    updated: int = 0
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)
    failed: list[dict[str, Any]] = field(default_factory=list)  # {"id", "error", ...}
    seconds: float = 0.0
    rejects_path: str | None = None

    @property
    def docs_per_second(self) -> float:
        done = self.indexed + self.updated
        return done / self.seconds if self.seconds > 0 else 0.0
