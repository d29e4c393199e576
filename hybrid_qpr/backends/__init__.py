"""Search backends: the embedded local index and OpenSearch, behind one protocol."""

from hybrid_qpr.backends.base import Backend, Document, Hit, IngestReport

__all__ = ["Backend", "Document", "Hit", "IngestReport"]
