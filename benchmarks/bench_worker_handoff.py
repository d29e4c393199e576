"""Round trip of an empty task to the local index's worker thread (``worker.query_worker``)
against a one-thread ``ThreadPoolExecutor``: submit, run, wait for the result. A hybrid query
hands its BM25 half over this way once, before its encoding starts.

    python benchmarks/bench_worker_handoff.py --n 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from hybrid_qpr.backends.local.worker import query_worker


def nothing() -> int:
    return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20000, help="round trips per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    args = parser.parse_args()
    executor, worker = ThreadPoolExecutor(max_workers=1), query_worker()
    ways = {"ThreadPoolExecutor": lambda: executor.submit(nothing).result(),
            "query_worker": lambda: worker.submit(nothing).result()}
    for _ in range(args.rounds):
        for name, round_trip in ways.items():
            start = time.perf_counter()
            for _ in range(args.n):
                round_trip()
            print(f"{name:18s} {(time.perf_counter() - start) / args.n * 1e6:6.1f} us per round trip", flush=True)


if __name__ == "__main__":
    main()
