"""Two local indexes of the same documents (say, one before and one after ``index optimize``)
searched by the same code in one process, query by query alternating: the way to see a change
of a few percent in what an index stores on a machine whose speed drifts by more than that
between processes (how the graph's locality order and the text store were measured).

Both indexes are opened and warmed up with ``--warmup`` other queries in every mode; then
for each query position and mode, A and B each search (which goes first alternates), each on
another query of the list than the other at that moment, so neither finds the other's walk in
the CPU caches (the two indexes' files do compete for them, as two processes' would not: the
absolute times are higher than ``bench_latency.py``'s). The first 50 queries' pages must be
equal on both sides (ids and scores to 5 decimals). Prints the p50 of each side and mode::

    python benchmarks/bench_index_ab.py IDX-A IDX-B --queries queries.txt --warmup-queries WORKDIR/quora/beir/queries.jsonl \\
        --modes knn,hybrid --rounds 3 --out OUT.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from _common import read_queries, record_ab


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("a", type=Path, help="local index directory A")
    parser.add_argument("b", type=Path, help="local index directory B (the same documents)")
    parser.add_argument("--queries", type=Path, required=True, help="measured queries, one per line (or BEIR jsonl)")
    parser.add_argument("--n", type=int, default=300, help="measured queries (seeded sample)")
    parser.add_argument("--warmup-queries", type=Path, required=True, help="other queries to warm up with")
    parser.add_argument("--warmup", type=int, default=300, help="warm-up queries per mode and side")
    parser.add_argument("--modes", default="knn,hybrid", help="comma-separated: bm25, knn, hybrid")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the measured queries")
    parser.add_argument("--out", type=Path, required=True, help="JSON file the run is appended to")
    args = parser.parse_args()

    from hybrid_qpr.backends.local import LocalIndex, hugepages
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.search import HybridSearcher

    modes = args.modes.split(",")
    queries = read_queries(args.queries, args.n, seed=0)
    measured = set(queries)
    warm = [q for q in read_queries(args.warmup_queries, args.warmup + len(queries), seed=1) if q not in measured]
    sides = {}
    for name, path in (("A", args.a), ("B", args.b)):
        index = LocalIndex.open(path)
        sides[name] = HybridSearcher(index, Encoder.load(index.model_dir))
    for query in queries[:50]:
        for mode in modes:
            pages = [[(r.id, round(r.score, 5)) for r in side.search(query, mode=mode, top_k=10)] for side in sides.values()]
            if pages[0] != pages[1]:
                raise SystemExit(f"the indexes answer {query!r} ({mode}) differently: {pages[0]} against {pages[1]}")
    hugepages.settle()
    for query in warm[:args.warmup]:
        for mode in modes:
            for side in sides.values():
                side.search(query, mode=mode, top_k=10)
    times: dict[tuple[str, str], list[float]] = {(name, mode): [] for name in sides for mode in modes}
    n = len(queries)
    for round_ in range(args.rounds):
        for i in range(n):
            for j, mode in enumerate(modes):
                order = ("A", "B") if (i + round_) % 2 else ("B", "A")
                for k, name in enumerate(order):
                    query = queries[(i + j * n // len(modes) + k * 7 + round_ * 31) % n]
                    start = time.perf_counter()
                    sides[name].search(query, mode=mode, top_k=10)
                    times[(name, mode)].append(time.perf_counter() - start)
    result = {"a": args.a.name, "b": args.b.name, "queries": n, "rounds": args.rounds}
    record_ab(args.out, result, modes, lambda side, mode: statistics.median(times[(side, mode)]) * 1e3, "p50")


if __name__ == "__main__":
    main()
