"""Recall and latency of the embedded engine's IVF index at several nprobe values.

Uses the vectors of an existing local index directory (``vectors.npy``) and the same sampling
as ``bench_engine.py``'s FAISS step: ``--queries`` stored vectors (seed ``--seed``) as queries,
recall@10 against exact ``Flat`` search, p50 ms per single-vector search.

    nice -n 10 python benchmarks/bench_ivf_nprobe.py /tmp/cb/quora-cnn
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_engine import recall_and_latency  # noqa: E402
from hybrid_qpr.backends.local import build_faiss, faiss_factory  # noqa: E402
from hybrid_qpr.evaluation.evaluator import latency_summary  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("index", type=Path, help="local index directory (holds vectors.npy and manifest.json)")
    parser.add_argument("--nprobe", type=int, nargs="+", default=[10, 20, 32, 48, 64])
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args()

    manifest = json.loads((args.index / "manifest.json").read_text())
    distance = manifest["model"]["distance"]
    vectors = np.load(args.index / "vectors.npy")
    rows = np.random.default_rng(args.seed).choice(len(vectors), size=min(args.queries, len(vectors)), replace=False)
    queries = np.ascontiguousarray(vectors[rows])
    _, truth = build_faiss(vectors, distance, "Flat").search(queries, 10)
    factory = faiss_factory(len(vectors), "ivf")
    index = build_faiss(vectors, distance, factory)
    print(f"{factory} over {len(vectors)} vectors, {len(queries)} queries")
    print("| nprobe | recall@10 vs Flat | p50 ms |")
    print("|---:|---:|---:|")
    for nprobe in args.nprobe:
        index.nprobe = nprobe
        recall, times = recall_and_latency(index, queries, truth)
        print(f"| {nprobe} | {recall:.3f} | {latency_summary(times)['p50_ms']:.2f} |")


if __name__ == "__main__":
    main()
