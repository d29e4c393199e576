"""What the cluster write side (``writer.py``, ``loading.py``) uses of a cluster index, as a
protocol: those modules annotate with it instead of importing ``backend.py``, which imports them."""

from __future__ import annotations

from typing import Any, Protocol

from hybrid_qpr.types import Document


class ClusterIndex(Protocol):
    """One index of a cluster (``ClusterBackend``), as the ingest and delete code sees it."""

    index: str
    engine: str
    bm25_field: str
    request_timeout: float | None
    transport: Any

    @property
    def meta(self) -> dict[str, Any]: ...

    def path(self, *parts: str) -> str: ...

    def request(self, method: str, path: str, body: Any = None, params: dict | None = None, *, what: str,
                ndjson: bool = False) -> Any: ...

    def exists(self) -> bool: ...

    def count(self) -> int: ...

    def refresh_index(self) -> None:
        """Make what was written searchable (the engine's ``_refresh``)."""

    def refresh_meta(self) -> dict[str, Any]: ...

    def ensure_index(self, encoder, *, shards: int | None = None, replicas: int | None = None) -> bool: ...

    def document_problem(self, doc: Document) -> str | None: ...
