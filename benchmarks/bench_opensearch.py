"""The OpenSearch benchmark is ``bench_cluster.py --engine opensearch``; this name is kept for
the commands quoted in docs/opensearch.md (``--opensearch URL`` is ``--url URL`` there).

Example::

    hybrid-qpr node start
    python benchmarks/bench_opensearch.py --docs 5000 --queries 300 --warmup 30 --json /tmp/o-bench.json
"""

from __future__ import annotations

import sys

from bench_cluster import main

if __name__ == "__main__":
    sys.exit(main(["--engine", "opensearch", *("--url" if a == "--opensearch" else a for a in sys.argv[1:])]))
