"""Encode speed of several models side by side: questions/s on a fixed number of onnxruntime
threads, the models alternating round by round so that a burst of load falls on all alike.

python benchmarks/bench_encode_speed.py --dataset data/quora --threads 1 \
    --model fast --model distilled-cnn-quora --model quality --rounds 5

Each round encodes the same ``--n`` test questions of the dataset with each model
(``Encoder.encode``, its default batch size). On a busy machine read the ratios between
models, which alternation keeps fair, not the absolute rates.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.encoders import Encoder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", required=True, help="dataset directory (its beir/ test queries are encoded)")
    ap.add_argument("--model", action="append", required=True, help="model name or directory (repeatable)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--n", type=int, default=5000, help="questions per round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    _, queries, _ = load_beir(f"{args.dataset}/beir", "test")
    texts = list(queries.values())[: args.n]
    encoders = {name: Encoder.load(name, threads=args.threads) for name in args.model}
    for encoder in encoders.values():
        encoder.encode(texts[:500])  # first-call costs paid before timing
    rates: dict[str, list[float]] = {name: [] for name in encoders}
    for _ in range(args.rounds):
        for name, encoder in encoders.items():
            start = time.perf_counter()
            encoder.encode(texts)
            rates[name].append(len(texts) / (time.perf_counter() - start))
    print(json.dumps({name: {"median_per_s": round(float(np.median(r))), "best_per_s": round(max(r)),
                             "rounds": [round(x) for x in r], "threads": args.threads, "questions": len(texts)}
                      for name, r in rates.items()}, indent=1))


if __name__ == "__main__":
    main()
