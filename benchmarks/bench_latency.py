"""Query latency of existing local indexes: ``bench_scale.py``'s measurement without the ingest.

For each index: p50/p99 ms of ``HybridSearcher.search`` in bm25, knn and hybrid mode, one
query at a time, encoding included (the index's model), the modes alternating search by
search so that a burst of load falls on all three alike, each mode on queries a third of the
list apart from the others (``bench_scale.mode_queries``: no search finds the same query's
caches warm from another mode). Each run is appended to ``--out`` under its
``--label``, with the commit of the ``hybrid_qpr`` it imported and the load average.

``--warmup N --warmup-queries FILE`` first searches N other queries from FILE (none of the
measured ones) in every mode, as a process that has answered queries before: the first pass
over new queries pays for idfs not yet cached and first touches of the index's pages (124k:
hybrid p50 0.641 ms on a first pass, 0.590 on a second, 2026-11-26).

``--preload`` reads each index's files once just before its queries, as a server that has
been answering queries holds them in the page cache. Without it, the first process to
measure an index after a while pays for reading it from disk: this machine pages out file
pages left unread for about a minute (DAMON ``pageout``), so the second of two indexes, or an
index measured after a larger one, may start cold (docs/scale.md).

To compare two commits, run this script from one checkout with ``PYTHONPATH`` pointing at
each package in turn, alternating, on an idle machine, and compare the medians of the runs::

    for round in 1 2 3; do
      for co in OLD_CHECKOUT NEW_CHECKOUT; do
        PYTHONPATH=$co python benchmarks/bench_latency.py IDX-124k IDX-1m --queries queries.txt \\
            --label $(git -C $co rev-parse --short HEAD) --out benchmarks/results/latency.json
      done
    done
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

import hybrid_qpr
from _common import command_line, read_queries
from bench_scale import MODES, query_latency
from hybrid_qpr.artifacts import write_json


def package_commit() -> str | None:
    """The git commit of the imported ``hybrid_qpr`` checkout (``None`` outside git)."""
    where = Path(hybrid_qpr.__file__).resolve().parent
    done = subprocess.run(["git", "-C", str(where), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def preload(index: Path) -> int:
    """Read every file under ``index`` once (into the page cache); the bytes read."""
    total = 0
    for path in sorted(p for p in index.rglob("*") if p.is_file()):
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 24):
                total += len(chunk)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("indexes", type=Path, nargs="+", help="local index directories")
    parser.add_argument("--queries", type=Path, required=True, help="one query per line")
    parser.add_argument("--n", type=int, default=300, help="queries per mode (seeded sample)")
    parser.add_argument("--label", default="", help="name of this run in --out (e.g. the commit)")
    parser.add_argument("--out", type=Path, required=True, help="JSON file the run is appended to")
    parser.add_argument("--preload", action="store_true", help="read each index's files just before measuring it")
    parser.add_argument("--warmup", type=int, default=0, help="other queries searched in every mode before measuring")
    parser.add_argument("--warmup-queries", type=Path, help="where the --warmup queries come from (JSONL or one a line)")
    args = parser.parse_args()
    if args.warmup and args.warmup_queries is None:
        parser.error("--warmup needs --warmup-queries FILE")

    queries = read_queries(args.queries, args.n, seed=0)
    measured = set(queries)
    warmup = [] if not args.warmup else [
        q for q in read_queries(args.warmup_queries, args.warmup + len(queries), seed=1) if q not in measured][:args.warmup]
    runs = json.loads(args.out.read_text(encoding="utf-8"))["runs"] if args.out.exists() else []
    run = {"label": args.label, "commit": package_commit(), "command": command_line(), "preload": args.preload,
           "warmup": len(warmup), "indexes": {}}
    before = os.getloadavg()
    for index in args.indexes:
        if args.preload:
            print(f"{index}: read {preload(index) / 1e6:,.0f} MB into the page cache", flush=True)
        latency = query_latency(index, queries, warmup)
        run["indexes"][index.name] = latency
        print(f"{args.label} {index}: " + " | ".join(
            f"{m} p50 {latency[m]['p50_ms']:.3f} p99 {latency[m]['p99_ms']:.3f} ms" for m in MODES), flush=True)
    run["load_average"] = [before, os.getloadavg()]
    write_json(args.out, {"runs": runs + [run]})


if __name__ == "__main__":
    main()
