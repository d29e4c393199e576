"""Two checkouts of the code (say, the main branch and a change to the query path) searching
the same local index, one process at a time, alternating A B B A ...: the way to see a change
of a few percent in query latency on a machine whose speed drifts by more than that.

Each process imports ``hybrid_qpr`` from its checkout (``PYTHONPATH``), opens the index, warms
up with ``--warmup`` other queries in every mode, then searches the measured queries
``--passes`` times, the modes taking turns query by query, each mode a third of the list
apart from the others (as ``bench_latency.py``), and prints its p50 per mode. The first 50
queries' pages (ids and scores to 5 decimals) must be equal on both sides. Prints the median
over the rounds of each side's p50 per mode::

    python benchmarks/bench_code_ab.py IDX --a ../main --b . --queries queries.txt --rounds 6 --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import read_queries, record_ab

MODES = ("bm25", "knn", "hybrid")


def child(index: Path, queries_path: Path, n: int, warmup: int, passes: int) -> None:
    """One side's process: prints one JSON line, its p50 per mode and its first pages."""
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.search import HybridSearcher

    queries = read_queries(queries_path, n, seed=0)
    measured = set(queries)
    warm = [q for q in read_queries(queries_path, warmup + n, seed=1) if q not in measured][:warmup]
    backend = LocalIndex.open(index)
    searcher = HybridSearcher(backend, Encoder.load(backend.model_dir))
    pages = {mode: [[(r.id, round(r.score, 5)) for r in searcher.search(q, mode=mode, top_k=10)] for q in queries[:50]]
             for mode in MODES}
    for query in warm:
        for mode in MODES:
            searcher.search(query, mode=mode, top_k=10)
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for pass_ in range(passes):
        for i in range(len(queries)):
            for j, mode in enumerate(MODES):
                query = queries[(i + j * len(queries) // len(MODES) + pass_ * 31) % len(queries)]
                start = time.perf_counter()
                searcher.search(query, mode=mode, top_k=10)
                times[mode].append(time.perf_counter() - start)
    print(json.dumps({"p50_ms": {mode: statistics.median(t) * 1e3 for mode, t in times.items()}, "pages": pages}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path, help="local index directory both sides search")
    parser.add_argument("--a", type=Path, required=True, help="checkout A (its root holds hybrid_qpr/)")
    parser.add_argument("--b", type=Path, required=True, help="checkout B")
    parser.add_argument("--queries", type=Path, required=True, help="queries, one per line (or BEIR jsonl)")
    parser.add_argument("--n", type=int, default=300, help="measured queries (seeded sample)")
    parser.add_argument("--warmup", type=int, default=300, help="warm-up queries per mode")
    parser.add_argument("--passes", type=int, default=2, help="passes over the measured queries per process")
    parser.add_argument("--rounds", type=int, default=6, help="processes per side, alternating A B B A ...")
    parser.add_argument("--out", type=Path, required=True, help="JSON file the run is appended to")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.index, args.queries, args.n, args.warmup, args.passes)
    p50s: dict[str, dict[str, list[float]]] = {"A": {m: [] for m in MODES}, "B": {m: [] for m in MODES}}
    first_pages: dict[str, dict] = {}
    for round_ in range(args.rounds):
        for side in (("A", "B") if round_ % 2 == 0 else ("B", "A")):
            checkout = (args.a if side == "A" else args.b).resolve()
            env = {**os.environ, "PYTHONPATH": str(checkout)}
            command = [sys.executable, __file__, str(args.index), "--a", str(args.a), "--b", str(args.b), "--child",
                       "--queries", str(args.queries), "--n", str(args.n), "--warmup", str(args.warmup),
                       "--passes", str(args.passes), "--out", str(args.out)]
            answer = json.loads(subprocess.run(command, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout)
            first_pages.setdefault(side, answer["pages"])
            for mode, value in answer["p50_ms"].items():
                p50s[side][mode].append(value)
            print(f"round {round_ + 1} {side}: " + "  ".join(f"{m} {v:.3f}" for m, v in answer["p50_ms"].items()),
                  flush=True)
    if first_pages["A"] != first_pages["B"]:
        raise SystemExit("the two checkouts answer the first 50 queries differently")
    result = {"index": args.index.name, "queries": args.n, "rounds": args.rounds, "passes": args.passes,
              "p50_ms": p50s}
    record_ab(args.out, result, MODES, lambda side, mode: statistics.median(p50s[side][mode]), "median_p50")


if __name__ == "__main__":
    main()
