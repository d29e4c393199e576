"""Local OpenSearch and Elasticsearch nodes built from Maven Central artifacts (no Docker needed).

``LocalNode().start()`` fetches, assembles and starts OpenSearch; ``LocalNode(engine="elasticsearch")``
does the same for Elasticsearch and ``LocalNode(nodes=3)`` starts a three-node OpenSearch cluster.
See ``node.py`` for the steps (each done by ``install.py``, ``config.py``, ``process.py`` and
``health.py``), ``distributions.py`` for the versions, ``jdk.py`` for how a JDK is found, and
``docs/local-nodes.md`` for the facts each step relies on.
"""

from hybrid_qpr.localnode.distributions import DEFAULT_PORTS, DEFAULT_VERSIONS, DISTRIBUTIONS, distribution
from hybrid_qpr.localnode.jdk import Jdk, ensure_jdk, find_jdk
from hybrid_qpr.localnode.maven import default_home
from hybrid_qpr.localnode.node import LocalNode, NodeStatus

OPENSEARCH_VERSION = DEFAULT_VERSIONS["opensearch"]
ELASTICSEARCH_VERSION = DEFAULT_VERSIONS["elasticsearch"]

__all__ = ["DEFAULT_PORTS", "DEFAULT_VERSIONS", "DISTRIBUTIONS", "ELASTICSEARCH_VERSION", "Jdk", "LocalNode",
           "NodeStatus", "OPENSEARCH_VERSION", "default_home", "distribution", "ensure_jdk", "find_jdk"]
