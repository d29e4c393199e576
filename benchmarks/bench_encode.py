"""Test-split retrieval quality and ONNX encode speed of a CNN encoder directory.

python benchmarks/bench_encode.py --model onnx/sdml-cnn-quora --dataset /work/bench-data/quora
H@1, H@10, MRR@20 over test queries against ALL questions (exact search by the model's
distance, own id dropped); batched throughput (questions/s) and single-query latency.
The quality figures are ``_common.exact_search_quality`` (bench_losses.py reports the same).
"""

from __future__ import annotations

import argparse
import json
import time

from _common import exact_search_quality, repo_relative
from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.evaluation.evaluator import latency_summary


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    enc = Encoder.load(args.model, threads=args.threads)
    corpus, queries, qrels = load_beir(f"{args.dataset}/beir", "test")
    quality = exact_search_quality(enc, corpus, queries, qrels)
    lat = []
    for text in [queries[q] for q in queries if q in qrels][:300]:
        t = time.perf_counter()
        enc.encode([text])
        lat.append(time.perf_counter() - t)
    print(json.dumps({
        "model": repo_relative(enc.model_dir), **quality,
        "encode_questions_per_s": quality["corpus"] / quality["corpus_encode_seconds"],
        "single_query_ms_p50": latency_summary(lat)["p50_ms"],
        "single_query_ms_p95": latency_summary(lat)["p95_ms"], "threads": args.threads,
    }, indent=2))


if __name__ == "__main__":
    main()
