"""What the OpenSearch and Elasticsearch backends share, written once.

* ``connection`` - connection options (URL, basic auth, API key, TLS) from arguments or the
  environment, the ``Transport`` each engine module implements over its client library, and
  the translation of HTTP failures into hybrid-qpr errors by status code;
* ``bodies`` - index layout from ``mappings/``, BM25, filter and ids request bodies;
* ``bulk`` - bulk writing with the one retry layer (429 / 5xx / connection loss);
* ``backend`` - ``ClusterBackend``: index facts, model check, fusion defaults, BM25, kNN,
  ``_msearch``, documents, count, ingest, delete.
"""

from hybrid_qpr.backends.cluster.backend import ClusterBackend
from hybrid_qpr.backends.cluster.connection import ConnectionOptions, resolve_options

__all__ = ["ClusterBackend", "ConnectionOptions", "resolve_options"]
