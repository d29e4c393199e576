"""Test-split retrieval quality and ONNX encode speed of a CNN encoder directory.

python benchmarks/bench_encode.py --model onnx/sdml-cnn-quora --dataset /work/bench-data/quora
H@1, H@10, MRR@20 over test queries against ALL questions (exact search by the model's
distance, own id dropped); batched throughput (questions/s) and single-query latency.
``test_quality`` is also used by bench_losses.py.
"""

from __future__ import annotations

import argparse
import json
import time

from _results import repo_relative
from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.evaluation.evaluator import exact_run, latency_summary
from hybrid_qpr.evaluation.metrics import hits_at_k, mrr_at_k


def test_quality(enc: Encoder, corpus: dict, queries: dict, qrels: dict) -> dict:
    """Encode every corpus question and every judged query; exact top 20 by the encoder's
    distance (own id dropped); H@1, H@10, MRR@20 and the corpus encoding time."""
    ids = list(corpus)
    t0 = time.perf_counter()
    docs = enc.encode([corpus[i] for i in ids], batch_size=512)
    seconds = time.perf_counter() - t0
    qids = [q for q in queries if q in qrels]
    qv = enc.encode([queries[q] for q in qids], batch_size=512)
    run = exact_run(qids, qv, ids, docs, enc.distance, retrieve=20)
    return {"corpus": len(ids), "test_queries": len(qids), "distance": enc.distance,
            "H@1": hits_at_k(run, qrels, 1), "H@10": hits_at_k(run, qrels, 10), "MRR@20": mrr_at_k(run, qrels, 20),
            "corpus_encode_seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    enc = Encoder.load(args.model, threads=args.threads)
    corpus, queries, qrels = load_beir(f"{args.dataset}/beir", "test")
    quality = test_quality(enc, corpus, queries, qrels)
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
