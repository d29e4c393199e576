"""Search backends: the embedded local index and OpenSearch, behind one protocol."""

from hybrid_qpr.backends.base import Backend, IngestReport
from hybrid_qpr.types import Document, Hit

__all__ = ["Backend", "Document", "Hit", "IngestReport"]
