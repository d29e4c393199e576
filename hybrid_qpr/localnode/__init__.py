"""A local single-node OpenSearch built from Maven Central artifacts (no Docker needed).

``LocalNode().start()`` fetches, assembles and starts it; see ``node.py`` for the steps and
``docs/opensearch.md`` for the facts each step relies on.
"""

from hybrid_qpr.localnode.maven import OPENSEARCH_VERSION, default_home
from hybrid_qpr.localnode.node import LocalNode, NodeStatus

__all__ = ["LocalNode", "NodeStatus", "OPENSEARCH_VERSION", "default_home"]
