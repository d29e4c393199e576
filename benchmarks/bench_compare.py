"""Cost of the judgment-free comparison (``hybrid-qpr compare``) against running both
configurations: is the report within 2x the time of searching the query log twice?

For each pair of configurations, alternating round by round so that a burst of load on the
shared machine falls on both alike:

* ``both``: configuration A over every query, then B over every query, one query at a time
  with ``HybridSearcher.search`` (each encodes its query), as two separate runs would;
* ``report``: what ``hybrid-qpr compare`` does: ``overlap.run_queries`` (one encoding per query
  shared by both configurations) plus ``overlap.overlap_report`` (Jaccard, RBO, the most
  changed queries).

Every configuration first searches ``--warmup`` other queries (compiling the BM25 scorer,
touching the index's pages). Prints the medians and the ratio report / both, and writes them
to ``--out``. The query log is ``--queries`` (one per line) or, without it, questions of the
Quora pairs file (``_common.load_pairs_slice``)::

    python benchmarks/bench_compare.py /work/bench-data/quora-124k --n 2000 \\
        --out benchmarks/results/compare-124k.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

from _common import DEFAULT_DATA, command_line, load_pairs_slice, read_queries, repo_relative

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.evaluation.overlap import Configuration, overlap_report, run_queries
from hybrid_qpr.search import HybridSearcher

PAIRS = (("hybrid", "bm25"), ("hybrid,fusion=rrf", "hybrid,fusion=minmax,alpha=0.7"))


def search_all(searcher: HybridSearcher, config: Configuration, texts: list[str], k: int) -> float:
    start = time.perf_counter()
    for text in texts:
        searcher.search(text, top_k=k, **config.search_kwargs())
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("index", type=Path, help="a local index directory")
    parser.add_argument("--queries", type=Path, default=None, help="query log, one per line [default: Quora questions]")
    parser.add_argument("--data", default=DEFAULT_DATA, help="Quora-layout pairs file for the default queries")
    parser.add_argument("--n", type=int, default=2000, help="queries in the log [default: 2000]")
    parser.add_argument("--warmup", type=int, default=50, help="other queries searched first [default: 50]")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds [default: 3]")
    parser.add_argument("-k", type=int, default=10, help="depth compared [default: 10]")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--out", type=Path, default=None, help="write the results here as JSON")
    args = parser.parse_args()

    if args.queries:
        texts = read_queries(args.queries, args.n + args.warmup, args.seed)
    else:
        _, pairs = load_pairs_slice(args.data, 10_000, args.n + args.warmup, args.seed)
        texts = [text for text, _ in pairs]
    warm, texts = texts[:args.warmup], texts[args.warmup:args.warmup + args.n]
    index = LocalIndex.open(args.index)
    searcher = HybridSearcher(index, Encoder.load(index.model_dir))
    queries = {f"q{i}": text for i, text in enumerate(texts, start=1)}
    results = []
    for spec_a, spec_b in PAIRS:
        configs = [Configuration.parse(spec_a), Configuration.parse(spec_b)]
        for config in configs:
            search_all(searcher, config, warm, args.k)
        both, report, comparing = [], [], []
        for _ in range(args.rounds):
            both.append(sum(search_all(searcher, config, texts, args.k) for config in configs))
            start = time.perf_counter()
            (run_a, run_b), _ = run_queries([searcher, searcher], configs, queries, args.k)
            middle = time.perf_counter()
            summary = overlap_report(run_a, run_b, queries, k=args.k)
            report.append(time.perf_counter() - start)
            comparing.append(time.perf_counter() - middle)
        row = {"a": spec_a, "b": spec_b, "queries": len(queries), "both_s": both, "report_s": report,
               "overlap_only_s": comparing, "ratio": statistics.median(report) / statistics.median(both),
               "rbo": summary["rbo"], "jaccard": summary["jaccard"]}
        results.append(row)
        print(f"{spec_a} vs {spec_b}: {len(queries)} queries; running both {statistics.median(both):.2f} s, "
              f"compare report {statistics.median(report):.2f} s (of which overlap {statistics.median(comparing) * 1000:.1f} ms); "
              f"ratio {row['ratio']:.2f}; RBO {summary['rbo']:.4f} Jaccard@{args.k} {summary['jaccard']:.4f}", flush=True)
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent).stdout.strip()
        args.out.write_text(json.dumps({"command": command_line(), "index": repo_relative(args.index), "commit": commit,
                                        "load_average": os.getloadavg(), "documents": index.count(),
                                        "rounds": args.rounds, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
