"""The cost curve of the embedded index: one run over growing corpus sizes, the default model.

For each size N (Quora's distinct questions, then numbered variants, the corpus of
``bench_segments.py data``), in one run:

1. ingest: ``hybrid-qpr ingest`` of the first N documents into a fresh index, as its own
   process, so its wall time and peak RSS are the command's alone (``os.wait4``);
2. disk: bytes of the index directory per document;
3. latency: p50/p99 ms of ``HybridSearcher.search`` for bm25, knn and hybrid, one query at a
   time, encoding included; the modes alternate search by search, so a burst of load on a shared
   machine falls on all three alike, and each mode takes the queries a third of the list apart
   from the others (``mode_queries``): a search never follows the same query's search in
   another mode, whose graph walk and postings it would find in the CPU caches (measured before
   the change: a kNN search of a query just searched took 79 us instead of 184 us at 124k).

Prints a table, writes ``scale.json`` and a log-log plot ``scale.png`` (time, memory and disk
against N). Timings depend on the machine; run it idle and say so.

Usage::

    python benchmarks/bench_segments.py data ../shared/data/quora-pairs.tsv.gz --n 5000000 --out WORKDIR/data
    nice -n 10 python benchmarks/bench_scale.py WORKDIR/data --work WORKDIR --sizes 100000,1000000,5000000 \\
        --out benchmarks/results/scale
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from _common import command_line, read_queries
from hybrid_qpr.artifacts import write_json
from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.evaluation.evaluator import latency_summary
from hybrid_qpr.search import HybridSearcher

MODES = ("bm25", "knn", "hybrid")


def write_prefix(corpus: Path, n: int, out: Path) -> int:
    """The first ``n`` lines of ``corpus`` into ``out``; returns how many there were."""
    written = 0
    with open(corpus, encoding="utf-8") as src, open(out, "w", encoding="utf-8") as dst:
        for line in itertools.islice(src, n):
            dst.write(line)
            written += 1
    return written


def timed_ingest(docs: Path, index_dir: Path, model: str | None) -> dict:
    """Run ``hybrid-qpr ingest`` as a child process: its wall seconds and its own peak RSS."""
    # the console script installed beside this interpreter (the package has no __main__)
    # -v: the log keeps each segment's and the vector base's timings and efSearch calibration
    command = [str(Path(sys.executable).with_name("hybrid-qpr")), "-v", "ingest", str(docs), "--index", str(index_dir)]
    if model:
        command += ["--model", model]
    log = index_dir.with_name(index_dir.name + ".log")
    start = time.perf_counter()
    with open(log, "wb") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        # wait4 gives this child's resource usage alone (getrusage(RUSAGE_CHILDREN) would keep
        # the largest child of the whole run)
        _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        last = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
        raise SystemExit(f"ingest of {docs} failed ({log}): {last}")
    return {"seconds": seconds, "peak_rss_mb": usage.ru_maxrss / 1024}


def directory_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def settle_huge_pages() -> None:
    """Wait until the loaded HNSW arrays sit on 2 MB pages (``hugepages.settle``), so every
    timed query sees them; a checkout from before 2026-11-26 has none to wait for."""
    try:
        from hybrid_qpr.backends.local.hugepages import settle
    except ImportError:
        return
    settle()


def mode_queries(queries: list[str], i: int) -> list[tuple[str, str]]:
    """Step ``i`` of the latency loop: each mode with its own query, a third of the list apart
    (every query is searched once in every mode over the loop), the order of the modes turning
    with ``i``."""
    order = MODES[i % 3:] + MODES[:i % 3]
    return [(mode, queries[(i + MODES.index(mode) * len(queries) // 3) % len(queries)]) for mode in order]


def query_latency(index_dir: Path, queries: list[str], warmup: Sequence[str] = ()) -> dict:
    """p50/p99 per mode of ``queries`` (``mode_queries``), after one search per mode (the
    vocabularies, FAISS parts and compiled kernels load on first use) and, with ``warmup``,
    those other queries searched in every mode first: a process that has answered queries
    before, as a server has (its idf cache and its first touches of the index's pages)."""
    index = LocalIndex.open(index_dir)
    searcher = HybridSearcher(index, Encoder.load(index.model_dir))
    for query in [queries[0], *warmup]:
        for mode in MODES:
            searcher.search(query, mode=mode, top_k=10)
    settle_huge_pages()
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for i in range(len(queries)):
        for mode, query in mode_queries(queries, i):
            start = time.perf_counter()
            searcher.search(query, mode=mode, top_k=10)
            times[mode].append(time.perf_counter() - start)
    index.close()
    return {mode: latency_summary(values) for mode, values in times.items()}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = [row["documents"] for row in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for mode in MODES:
        left.plot(sizes, [row["latency"][mode]["p50_ms"] for row in rows], "o-", label=f"{mode} p50")
        left.plot(sizes, [row["latency"][mode]["p99_ms"] for row in rows], "x--", label=f"{mode} p99")
    left.set(xscale="log", yscale="log", xlabel="documents", ylabel="ms per query (encoding included)")
    left.legend(fontsize=8)
    right.plot(sizes, [row["ingest"]["seconds"] for row in rows], "o-", label="ingest s")
    right.plot(sizes, [row["ingest"]["peak_rss_mb"] for row in rows], "s-", label="ingest peak RSS MB")
    right.plot(sizes, [row["disk_bytes_per_doc"] for row in rows], "^-", label="disk bytes / document")
    right.set(xscale="log", yscale="log", xlabel="documents")
    right.legend(fontsize=8)
    for axis in (left, right):
        axis.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, help="output of 'bench_segments.py data' (corpus.jsonl, queries.txt)")
    parser.add_argument("--work", type=Path, required=True, help="where the indexes are built (removed per size)")
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated document counts")
    parser.add_argument("--queries", type=int, default=300, help="queries per mode (at most those in queries.txt)")
    parser.add_argument("--model", help="encoder directory (default: the bundled model)")
    parser.add_argument("--keep", action="store_true", help="keep each index after measuring it")
    parser.add_argument("--out", type=Path, required=True, help="folder for scale.json and scale.png")
    args = parser.parse_args()

    queries = read_queries(args.data / "queries.txt", args.queries, seed=0)
    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in sorted(int(s) for s in args.sizes.split(",")):
        docs = args.work / f"corpus-{size}.jsonl"
        index_dir = args.work / f"idx-{size}"
        if index_dir.exists():
            shutil.rmtree(index_dir)
        documents = write_prefix(args.data / "corpus.jsonl", size, docs)
        ingest = timed_ingest(docs, index_dir, args.model)
        row = {"documents": documents, "ingest": ingest,
               "disk_bytes_per_doc": directory_bytes(index_dir) / documents,
               "latency": query_latency(index_dir, queries)}
        rows.append(row)
        print(f"{documents:>9,} docs: ingest {ingest['seconds']:7.1f} s, peak RSS {ingest['peak_rss_mb']:7.0f} MB, "
              f"{row['disk_bytes_per_doc']:6.0f} B/doc | " + " | ".join(
                  f"{m} p50 {row['latency'][m]['p50_ms']:.2f} p99 {row['latency'][m]['p99_ms']:.2f} ms" for m in MODES),
              flush=True)
        docs.unlink()
        if not args.keep:
            shutil.rmtree(index_dir)
        write_json(args.out / "scale.json", {"command": command_line(), "load_average": os.getloadavg(),
                                             "rows": rows})
    plot(rows, args.out / "scale.png")
    print(json.dumps({"out": str(args.out)}))


if __name__ == "__main__":
    main()
