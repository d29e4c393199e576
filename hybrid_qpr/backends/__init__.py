"""Search backends behind one contract: the embedded local index, OpenSearch and Elasticsearch
(the two cluster engines share ``backends.cluster``)."""

from hybrid_qpr.backends.base import Backend, Capabilities, IngestReport
from hybrid_qpr.types import Document, Hit

__all__ = ["Backend", "Capabilities", "Document", "Hit", "IngestReport"]
