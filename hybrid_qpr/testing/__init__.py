"""Tools for testing and benchmarking hybrid-qpr, and applications built on it. Nothing in the
rest of the package imports them.

* ``hybrid_qpr.testing.cli`` - the command line run in-process, and its one-line errors;
* ``hybrid_qpr.testing.corpora`` - synthetic question banks and paraphrase clusters, built in
  memory and reproducible (no data download);
* ``hybrid_qpr.testing.faultproxy`` - an HTTP proxy in front of a real OpenSearch or
  Elasticsearch node that injects the failures of a busy or flaky cluster;
* ``hybrid_qpr.testing.mlcommons`` - test models on a shared OpenSearch node: named apart, and
  what an interrupted run left deployed removed first;
* ``hybrid_qpr.testing.limits`` - a file size limit (a full disk) and a block run as uid nobody
  (file modes refuse writes even when the suite runs as root);
* ``hybrid_qpr.testing.rerankers`` - a tiny randomly initialised BERT to build cross-encoders
  from (torch), and the check that a reranker re-orders exactly a first stage's top hits;
* ``hybrid_qpr.testing.scores`` - scores of separate cluster searches compared within float32
  noise, never with ``==``;
* ``hybrid_qpr.testing.web`` - a plain HTML site on a free local port (another origin, a server
  that is not a search engine);
* ``hybrid_qpr.testing.workbench`` - the relevance workbench served on a thread, its API
  called, the examples/ bank judged, and headless Chromium to look at the page (the ``serve``
  extra; the browser needs selenium and Debian's chromium and chromium-driver).
"""
