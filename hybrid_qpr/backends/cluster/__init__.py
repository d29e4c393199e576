"""What the OpenSearch and Elasticsearch backends share, written once.

* ``connection`` - connection options (URL, basic auth, API key, TLS) from arguments or the
  environment, the ``Transport`` each engine module implements over its client library, and
  the translation of HTTP failures into hybrid-qpr errors by status code;
* ``probe`` - what answers at the URL (the other engine, a TLS port, another server), checked
  by each engine's ``connect``;
* ``names`` - what the engines accept as an index name and an id, and names sent encoded;
* ``bodies`` - index layout from ``mappings/``, BM25, filter and ids request bodies;
* ``bulk`` - bulk writing with the one retry layer (429 / 5xx / connection loss);
* ``loading`` - bulk-load settings (refresh off, no replicas) while an ingest fills the index it created;
* ``writer`` - the write side: ingest (encode ahead in a thread, bulk-write, read back), delete;
* ``backend`` - ``ClusterBackend``: index facts, creation and drop, model check, fusion
  defaults, BM25, kNN, ``_msearch``, documents, count.
"""

from hybrid_qpr.backends.cluster.connection import ConnectionOptions, resolve_options

__all__ = ["ClusterBackend", "ConnectionOptions", "resolve_options"]


def __getattr__(name: str):
    # ClusterBackend on first use: every CLI command imports ``connection`` for its options,
    # and a local query should not pay for the backend's modules
    if name == "ClusterBackend":
        from hybrid_qpr.backends.cluster.backend import ClusterBackend

        return ClusterBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
