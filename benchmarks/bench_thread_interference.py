"""How much a hybrid query's kNN half slows down while the worker thread does something else.

The kNN half of ``bm25_and_knn`` (encode the query, search the vector base) runs on the calling
thread for each of ``--n`` queries, alone and while the worker thread runs, for the same query:

- ``memory``: a NumPy sum over a 4 MB slice of a 64 MB array (the GIL released, memory-bound),
- ``python``: a pure-Python loop (holds the GIL),
- ``bm25``: the query's BM25 list (what a hybrid query gives the worker).

It prints the median of the kNN half and of "until both are done" per load, two passes each,
and the worker's load timed alone. The two halves of a hybrid query run in parallel only as far
as neither holds the GIL nor saturates the shared memory path.

    python benchmarks/bench_thread_interference.py IDX --queries queries.txt
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from _common import read_queries
from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.backends.local.ranking import SegmentQueue, faiss_candidates
from hybrid_qpr.backends.local.vectorbase import knn_units
from hybrid_qpr.distance import prepare_vectors
from hybrid_qpr.encoders import Encoder

SLICE = 500_000  # float64: 4 MB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path, help="a local index directory")
    parser.add_argument("--queries", type=Path, required=True, help="one query per line")
    parser.add_argument("--n", type=int, default=300, help="queries (seeded sample)")
    parser.add_argument("--depth", type=int, default=30)
    args = parser.parse_args()

    index = LocalIndex.open(args.index)
    encoder = Encoder.load(index.model_dir)
    queries = read_queries(args.queries, args.n, seed=0)
    units = knn_units(index.segments, index.base)
    stream = np.random.default_rng(0).random(8_000_000)
    offset = [0]

    def memory(_query: str) -> float:
        start = offset[0]
        offset[0] = (start + SLICE) % (len(stream) - SLICE)
        return float(stream[start:start + SLICE].sum())

    def python(_query: str) -> int:
        total = 0
        for i in range(6000):
            total += i
        return total

    def bm25(query: str) -> list:
        return index.bm25(query, args.depth)

    def knn_half(query: str) -> list:
        vector = prepare_vectors(encoder.encode([query]), index.distance)
        return faiss_candidates(units, vector, args.depth, SegmentQueue(units), index.distance)

    worker = ThreadPoolExecutor(max_workers=1)
    worker.submit(int).result()
    for query in queries[:10]:  # warm-up: kernels compiled, graph and postings loaded
        bm25(query), knn_half(query)
    loads = {"none": None, "memory": memory, "python": python, "bm25": bm25}
    for name, load in loads.items():
        if load is not None:
            alone = []
            for query in queries:
                start = time.perf_counter()
                load(query)
                alone.append(time.perf_counter() - start)
            print(f"{name}: alone {statistics.median(alone) * 1e6:.0f} us")
    for passes in range(2):
        for name, load in loads.items():
            half, both = [], []
            for query in queries:
                start = time.perf_counter()
                pending = worker.submit(load, query) if load is not None else None
                knn_half(query)
                mine = time.perf_counter()
                if pending is not None:
                    pending.result()
                half.append(mine - start)
                both.append(time.perf_counter() - start)
            print(f"pass {passes + 1}, worker {name:6s}: kNN half {statistics.median(half) * 1e6:.0f} us, "
                  f"both done {statistics.median(both) * 1e6:.0f} us", flush=True)


if __name__ == "__main__":
    main()
