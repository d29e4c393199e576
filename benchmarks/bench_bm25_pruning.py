"""Per query: the pruned BM25 list (block-max MaxScore) against the exhaustive compiled pass, in one process.

Over a local index and a query file, each query's list is computed by ``blockmax.top_rows``
with ``PRUNE_MAX_TOKENS`` 0 (every query through ``bm25.exhaustive_top``, the scorer before
issue 24) and with it very large (every query pruned), the two alternating query by query;
``--rounds`` rounds, each query's median over them (the thread's CPU time: the steadier figure
on a shared machine). Printed by the number of distinct query tokens, and for the planner at
several ``PRUNE_MAX_TOKENS`` (the per-query choice between the two), which is how the default
was chosen (docs/search.md).

    python benchmarks/bench_bm25_pruning.py IDX --queries queries.txt --out result.json
"""

from __future__ import annotations

import os
import time

import numpy as np

from _common import index_query_parser, repo_relative
from hybrid_qpr.artifacts import write_json
from hybrid_qpr.backends.local import LocalIndex, blockmax
from hybrid_qpr.backends.local import bm25 as bm25_lib
from hybrid_qpr.text import tokenize

BANDS = ((1, 6), (7, 8), (9, 10), (11, 12), (13, 15), (16, 1000))


def main() -> None:
    args = index_query_parser(__doc__, depth=30, rounds=3).parse_args()

    index = LocalIndex.open(args.index)
    queries = [tokenize(line) for line in args.queries.read_text(encoding="utf-8").splitlines() if line.strip()]
    # what LocalIndex.bm25 builds at open, from the public pieces
    parts = [(seg.postings, seg.deleted) for seg in index.segments]
    stats = bm25_lib.corpus_stats(parts)
    weights = bm25_lib.term_weights(parts, stats)
    dense = bm25_lib.dense_columns(parts, weights)
    blocks = [blockmax.block_maxima(postings, w) for (postings, _), w in zip(parts, weights)]
    default = blockmax.PRUNE_MAX_TOKENS

    def cpu_us(tokens: list[str], prune_max: int) -> float:
        blockmax.PRUNE_MAX_TOKENS = prune_max
        start = time.thread_time_ns()
        blockmax.top_rows(parts, tokens, stats, weights, args.depth, dense, blocks)
        return (time.thread_time_ns() - start) / 1e3

    cpu_us(queries[0], 0), cpu_us(queries[0], 1000)  # compiles both kernels
    rounds = [[(cpu_us(q, 0), cpu_us(q, 1000)) for q in queries] for _ in range(args.rounds)]
    blockmax.PRUNE_MAX_TOKENS = default
    times = np.median(np.asarray(rounds), axis=0)  # (query, [exhaustive, pruned])
    distinct = np.asarray([len(set(q)) for q in queries])
    result = {"index": repo_relative(args.index), "documents": index.count(), "segments": len(index.segments),
              "queries": len(queries), "depth": args.depth, "rounds": args.rounds, "cpus": os.cpu_count(),
              "load_average": os.getloadavg(), "bands": [], "planner": []}
    print(f"{len(queries)} queries, depth {args.depth}, {index.count()} documents in {len(index.segments)} segments; "
          f"load average {result['load_average']}")
    print("| distinct tokens | queries | exhaustive CPU µs | pruned CPU µs |\n|---|---:|---:|---:|")
    for low, high in BANDS:
        chosen = (distinct >= low) & (distinct <= high)
        if chosen.any():
            row = {"tokens": [low, high], "queries": int(chosen.sum()),
                   "exhaustive_us": float(np.median(times[chosen, 0])), "pruned_us": float(np.median(times[chosen, 1]))}
            result["bands"].append(row)
            print(f"| {low}-{high} | {row['queries']} | {row['exhaustive_us']:.0f} | {row['pruned_us']:.0f} |")
    print("| PRUNE_MAX_TOKENS | p50 | mean | p95 |\n|---|---:|---:|---:|")
    for prune_max in (0, 6, 8, 10, 12, 15, 1000):
        picked = np.where(distinct <= prune_max, times[:, 1], times[:, 0])
        row = {"prune_max_tokens": prune_max, "p50_us": float(np.median(picked)), "mean_us": float(picked.mean()),
               "p95_us": float(np.percentile(picked, 95))}
        result["planner"].append(row)
        print(f"| {prune_max} | {row['p50_us']:.0f} | {row['mean_us']:.0f} | {row['p95_us']:.0f} |")
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
