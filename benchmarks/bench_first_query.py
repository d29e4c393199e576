"""Where the time of a one-off ``hybrid-qpr query`` goes: each step of the command's path timed
in a fresh Python process (what a person typing a query pays), and the whole command's wall
time beside it.

The index is built from ``--docs`` synthetic questions with the default model (or ``--index``
names one of your own). Each trial is a new process, so nothing is warm but the page cache and
numba's on-disk cache of compiled kernels; ``--cold-numba`` points numba at an empty cache
directory for the first trial, to show what a first run pays to compile. Prints numbers; it
asserts nothing.

    nice python benchmarks/bench_first_query.py --dir /tmp/first-query --docs 60 --trials 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The steps, run in a child process (``--child``) in the order the query command takes them.
STEPS = ("python start", "import the CLI", "import search (numpy, faiss, onnxruntime)", "open the index",
         "load the encoder (onnxruntime session)", "encode the query", "BM25 list (the first)",
         "kNN list (the first: FAISS read)", "hybrid query, all warm", "print the table")


def child(index: str, text: str, started: float) -> dict[str, tuple[float, float]]:
    """Each step's wall and CPU seconds, ``started`` being the parent's clock before it
    started this process (the interpreter's start has its CPU seconds before the first step)."""
    marks = [("python start", (time.time() - started, time.process_time()))]
    clock = time.perf_counter(), time.process_time()

    def lap(step: str) -> None:
        nonlocal clock
        now = time.perf_counter(), time.process_time()
        marks.append((step, (now[0] - clock[0], now[1] - clock[1])))
        clock = now

    import hybrid_qpr.cli.main  # noqa: F401
    lap("import the CLI")
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.search import HybridSearcher
    lap("import search (numpy, faiss, onnxruntime)")
    backend = LocalIndex.open(index)  # what the command opens for a local --index
    lap("open the index")
    encoder = Encoder.load(backend.model_dir)  # the index's model, as the command loads it
    lap("load the encoder (onnxruntime session)")
    vector = encoder.encode(text)
    lap("encode the query")
    backend.bm25(text, 10)
    lap("BM25 list (the first)")
    backend.knn(vector[0], 10)
    lap("kNN list (the first: FAISS read)")
    results = HybridSearcher(backend, encoder).search(text, mode="hybrid", top_k=10)
    lap("hybrid query, all warm")
    import io

    from rich.console import Console

    from hybrid_qpr.cli.query import results_table

    Console(file=io.StringIO(), width=100).print(results_table(text, "hybrid", results, width=100))
    lap("print the table")
    return dict(marks)


def build(directory: Path, docs: int) -> Path:
    """An index of ``docs`` synthetic support questions, built with ``hybrid-qpr ingest``."""
    index = directory / f"index-{docs}"
    if (index / "manifest.json").is_file():
        return index
    directory.mkdir(parents=True, exist_ok=True)
    subjects = ("password", "parcel", "invoice", "account", "refund", "order", "login", "card", "address", "plan")
    verbs = ("reset", "track", "change", "cancel", "find", "update", "close", "pay", "move", "renew")
    source = directory / f"questions-{docs}.jsonl"
    with open(source, "w", encoding="utf-8") as out:
        for i in range(docs):
            text = f"how do i {verbs[i % 10]} my {subjects[(i // 10) % 10]} {i // 100 or ''}".strip()
            out.write(json.dumps({"id": f"q{i}", "text": text, "topic": subjects[(i // 10) % 10]}) + "\n")
    subprocess.run(["hybrid-qpr", "ingest", str(source), "--index", str(index)], check=True, stdout=subprocess.DEVNULL)
    return index


def trial(index: Path, text: str, cold: bool) -> tuple[dict[str, list[float]], float]:
    """One child's step times and one whole ``hybrid-qpr query`` command's wall seconds;
    ``cold``: each with an empty numba cache of its own."""
    env = {**os.environ, "FIRST_QUERY_STARTED": repr(time.time())}
    if cold:
        env["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="numba-cold-")
    out = subprocess.run([sys.executable, __file__, "--child", str(index), text], check=True, capture_output=True,
                         text=True, env=env)
    steps = json.loads(out.stdout.splitlines()[-1])
    if cold:
        env["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="numba-cold-")
    started = time.perf_counter()
    subprocess.run(["hybrid-qpr", "query", text, "--index", str(index)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=env)
    return steps, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "hybrid-qpr-first-query")
    parser.add_argument("--docs", type=int, default=60)
    parser.add_argument("--index", help="an index of your own instead of the synthetic one")
    parser.add_argument("--text", default="can't remember my password")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--cold-numba", action="store_true",
                        help="the first trial with an empty numba cache (what a first run compiles)")
    parser.add_argument("--child", nargs=2, metavar=("INDEX", "TEXT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], float(os.environ["FIRST_QUERY_STARTED"]))))
        return
    index = Path(args.index) if args.index else build(args.dir, args.docs)
    runs = []
    for number in range(args.trials):
        runs.append(trial(index, args.text, cold=args.cold_numba and number == 0))
        steps, wall = runs[-1]
        print(f"trial {number + 1}: query command {wall:.3f} s wall; steps {sum(s[0] for s in steps.values()):.3f} s"
              + (" (empty numba cache)" if args.cold_numba and number == 0 else ""), file=sys.stderr)
    kept = runs[1:] if args.cold_numba and len(runs) > 1 else runs
    print(f"one-off query on {index} ({len(kept)} trials, median seconds; load average {os.getloadavg()[0]:.2f})")
    print(f"  {'step':45s} {'wall':>7s} {'CPU':>7s}")
    for step in STEPS:
        wall, cpu = (statistics.median(r[0][step][i] for r in kept) for i in (0, 1))
        print(f"  {step:45s} {wall:7.3f} {cpu:7.3f}")
    wall, cpu = (statistics.median(sum(s[i] for s in r[0].values()) for r in kept) for i in (0, 1))
    print(f"  {'sum of the steps':45s} {wall:7.3f} {cpu:7.3f}")
    print(f"  {'hybrid-qpr query (the whole command)':45s} {statistics.median(r[1] for r in kept):7.3f}")
    if args.cold_numba:
        steps, wall = runs[0]
        print(f"  first run, empty numba cache: command {wall:.3f} s, BM25 list {steps['BM25 list (the first)'][0]:.3f} s")


if __name__ == "__main__":
    main()
