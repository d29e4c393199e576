"""What a hybrid query costs the search node itself, without our client in the way.

``bench_opensearch.py`` times every mode through ``HybridSearcher.search`` (encoding, the
client library, JSON, fusion). This script sends the very same request bodies over one
keep-alive ``http.client`` connection and reads the answers, nothing else, interleaved query
by query:

* ``bm25``      one ``_search`` (the BM25 body of ``bm25_body``, documents in the hits)
* ``knn``       one ``_search`` (the backend's ``knn_body``, the same ef_search)
* ``msearch``   both in one ``_msearch`` (what client-side hybrid sends)
* ``two conns`` both as two ``_search`` requests on two connections, sent before either
                answer is read (the alternative to ``_msearch``)

Query vectors are encoded beforehand. The ratio ``msearch / bm25`` is the floor of what
client-side hybrid can cost relative to BM25 on this node; the rest of the ratio that
``bench_opensearch.py`` reports is client-side work.

    python benchmarks/bench_msearch_raw.py --url http://127.0.0.1:9240 --index hqpr-b20k --docs 20000 \\
        --json benchmarks/results/issue13/msearch-raw-3.6.0-20k.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from _common import command_line
from _common import DEFAULT_DATA, cluster_backend, load_pairs_slice
from hybrid_qpr.artifacts import write_json
from hybrid_qpr.backends.cluster.bodies import bm25_body
from hybrid_qpr.encoders import Encoder

HITS = "hits.hits._id,hits.hits._score,hits.hits._source"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, help="plain-http node URL (loopback)")
    parser.add_argument("--index", required=True, help="an index filled by bench_opensearch.py --keep")
    parser.add_argument("--docs", type=int, required=True, help="the --docs it was filled with (picks the queries)")
    parser.add_argument("--data", default=DEFAULT_DATA)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3, help="the first round is a warm-up")
    parser.add_argument("--depth", type=int, default=30)
    parser.add_argument("--engine", default="opensearch", choices=["opensearch", "elasticsearch"])
    parser.add_argument("--json", dest="json_out")
    args = parser.parse_args(argv)

    backend = cluster_backend(args.engine, args.url, args.index)
    encoder = Encoder.load(backend.model_dir)
    _, pairs = load_pairs_slice(args.data, args.docs, args.queries, 0)
    queries = [q for q, _ in pairs][: args.queries]
    vectors = encoder.encode(queries)
    bodies = [(json.dumps(bm25_body(q, args.depth, None, backend.bm25_field, True)),
               json.dumps(backend.knn_body(v, args.depth, None))) for q, v in zip(queries, vectors)]

    parts = urlsplit(args.url)
    conns = [http.client.HTTPConnection(parts.hostname, parts.port or 9200) for _ in range(2)]
    search_path = f"/{args.index}/_search?filter_path={HITS}"
    msearch_path = "/_msearch?filter_path=" + ",".join(f"responses.{p}" for p in HITS.split(","))
    json_header = {"Content-Type": "application/json"}

    def send(conn, path, body, ndjson=False):
        conn.request("POST", path, body, {"Content-Type": "application/x-ndjson"} if ndjson else json_header)

    def read(conn):
        answer = conn.getresponse()
        data = answer.read()
        if answer.status != 200:
            raise SystemExit(f"{args.url}: HTTP {answer.status}: {data[:300]!r}")
        return json.loads(data)

    def one(path, body):
        send(conns[0], path, body)
        read(conns[0])

    def msearch(bm25, knn):
        header = json.dumps({"index": args.index})
        send(conns[0], msearch_path, f"{header}\n{bm25}\n{header}\n{knn}\n", ndjson=True)
        read(conns[0])

    def two_connections(bm25, knn):
        send(conns[0], search_path, bm25)
        send(conns[1], search_path, knn)
        read(conns[0])
        read(conns[1])

    steps = {"bm25": lambda b, k: one(search_path, b), "knn": lambda b, k: one(search_path, k),
             "msearch": msearch, "two conns": two_connections}
    times: dict[str, list[float]] = {name: [] for name in steps}
    for round_no in range(args.rounds):
        for bm25, knn in bodies:
            for name, step in steps.items():
                start = time.perf_counter()
                step(bm25, knn)
                if round_no:  # round 0 warms caches and connections
                    times[name].append(time.perf_counter() - start)
    base = float(np.median(times["bm25"]))
    result = {"command": command_line(), "url": args.url, "index": args.index, "docs": args.docs,
              "queries": len(queries), "depth": args.depth, "timed_rounds": args.rounds - 1, "modes": {}}
    print(f"{args.index} at {args.url}: {len(queries)} queries x {args.rounds - 1} rounds, depth {args.depth}")
    print(f"{'request':12} {'p50 ms':>8} {'p99 ms':>8} {'p50/bm25':>9}")
    for name, values in times.items():
        p50, p99 = float(np.median(values)) * 1000, float(np.percentile(values, 99)) * 1000
        result["modes"][name] = {"p50_ms": p50, "p99_ms": p99, "p50_over_bm25": p50 / 1000 / base}
        print(f"{name:12} {p50:8.2f} {p99:8.2f} {p50 / 1000 / base:8.2f}x")
    if args.json_out:
        write_json(Path(args.json_out), result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
