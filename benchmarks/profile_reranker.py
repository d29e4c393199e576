"""Where a reranker's onnxruntime time goes, by operator type (onnxruntime's own profiler).

For each ``--reranker``, the first ``--queries`` val questions of an answer dataset (``dataset
from-answers``) are scored against their own candidates, cut or topped up to ``--depth`` with
other questions' sentences, in one onnxruntime run per question (the pairs padded to the
longest, as ``Reranker.score`` does for one run). Printed: the share of kernel time of each
operator type and the median wall time of a run.

Example (numbers in docs/reranker.md, "Latency")::

    python benchmarks/profile_reranker.py --reranker models/reranker-traced-int8 \\
        --reranker onnx/reranker-minilm-l6-int8 --dataset data/wikiqa --out profile.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import time
from pathlib import Path

import numpy as np

from _common import command_line, repo_relative
from hybrid_qpr.artifacts import write_json


def questions(dataset: Path, count: int, depth: int, seed: int) -> list[tuple[str, list[str]]]:
    from hybrid_qpr.data.answer_dataset import read_answer_records

    records = [r for r in read_answer_records(dataset, "val") if r.positives]
    pool = [text for r in records for text in r.positives + r.negatives]
    rng = random.Random(seed)
    out = []
    for record in records[:count]:
        texts = (record.positives + record.negatives)[:depth]
        texts += [rng.choice(pool) for _ in range(depth - len(texts))]
        out.append((record.question, texts))
    return out


def profile(model_dir: Path, items, threads: int) -> dict:
    import onnxruntime as ort

    from hybrid_qpr.encoders.base import session_options
    from hybrid_qpr.rerankers.cross_encoder import INPUTS, OUTPUT, read_reranker_config
    from hybrid_qpr.rerankers.pairs import PairTokenizer

    config = read_reranker_config(model_dir)
    pairs = PairTokenizer(model_dir / "tokenizer.json", int(config["max_length"]), int(config["query_tokens"]))
    options = session_options(threads)  # as the library runs it
    options.enable_profiling = True
    options.profile_file_prefix = str(model_dir.name)
    session = ort.InferenceSession(str(model_dir / "model.onnx"), options, providers=["CPUExecutionProvider"])
    walls = []
    for query, texts in items:
        arrays = pairs.encode(query, texts)
        width = int(arrays[1].sum(axis=1).max())
        start = time.perf_counter()
        session.run([OUTPUT], {name: array[:, :width] for name, array in zip(INPUTS, arrays)})
        walls.append(time.perf_counter() - start)
    trace = Path(session.end_profiling())
    events = json.loads(trace.read_text())
    trace.unlink()
    by_op: collections.Counter = collections.Counter()
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            by_op[event["args"]["op_name"]] += event["dur"]
    total = sum(by_op.values()) or 1
    return {"run_p50_ms": float(np.median(walls) * 1000), "runs": len(walls),
            "share_by_operator": {op: round(us / total, 4) for op, us in by_op.most_common()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reranker", dest="rerankers", action="append", required=True, type=Path)
    parser.add_argument("--dataset", type=Path, required=True, help="An answer dataset directory (val split)")
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    items = questions(args.dataset, args.queries, args.depth, args.seed)
    load_start = os.getloadavg()
    results = {}
    for directory in args.rerankers:
        results[repo_relative(directory)] = found = profile(directory, items, args.threads)
        print(f"{directory}: run p50 {found['run_p50_ms']:.1f} ms over {found['runs']} questions")
        for op, share in list(found["share_by_operator"].items())[:12]:
            print(f"    {op:<28} {100 * share:5.1f} %")
    report = {"command": command_line(), "dataset": repo_relative(args.dataset), "depth": args.depth,
              "threads": args.threads, "rerankers": results,
              "load_average_1_5_15_min": {"start": load_start, "end": os.getloadavg()}}
    if args.out:
        write_json(args.out, report)


if __name__ == "__main__":
    main()
