"""The latency a cross-encoder reranker adds to a query, at depth 10, 20 and 50.

For each eval set (a BEIR directory: ``examples/beir`` for questions, an answer dataset's
``beir/`` for answer sentences), the corpus is ingested into a local index with ``--model``
(cached under ``--work``), each query's hybrid top 50 is fetched once, and then, per depth,
``Reranker.rerank(query, hits, depth)`` is timed alone: tokenising the pairs and the
onnxruntime run, i.e. exactly what ``--reranker`` adds to a search. One warm-up query per
depth is not counted. Reported: p50/p95/mean ms and the mean pair length in tokens.

Example (numbers in docs/reranker.md)::

    nice -n 10 python benchmarks/bench_reranker.py --reranker onnx/reranker-minilm-l6-int8 \\
        --set questions=examples/beir --set answers=data/squad/beir --work /tmp/rerank-bench \\
        --out benchmarks/results/reranker_latency.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from _common import command_line, repo_relative
from hybrid_qpr.artifacts import write_json


def first_stage(beir_dir: Path, work: Path, name: str, model: str | None, split: str, max_queries: int, depth: int):
    """(query text, hybrid top ``depth`` results) for up to ``max_queries`` queries of ``split``."""
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.evaluation.evaluator import sample_queries
    from hybrid_qpr.search import HybridSearcher
    from hybrid_qpr.types import Document

    encoder = Encoder.load(model)
    corpus, queries, qrels = load_beir(beir_dir, split)
    path = work / f"{name}-{encoder.fingerprint}"
    if not (path / "manifest.json").is_file():
        index = LocalIndex.create(path, encoder)
        index.ingest([Document(i, t) for i, t in corpus.items()], encoder, show_progress=False)
        index.close()
    searcher = HybridSearcher(LocalIndex.open(path), encoder)
    sample = sample_queries(queries, qrels, max_queries)
    return [(text, searcher.search(text, mode="hybrid", top_k=depth)) for text in sample.values()], len(corpus)


def time_rerank(reranker, lists, depth: int) -> dict:
    text, hits = lists[0]
    reranker.rerank(text, hits, depth)  # warm-up
    ms, tokens = [], []
    for text, hits in lists:
        start = time.perf_counter()
        reranker.rerank(text, hits, depth)
        ms.append((time.perf_counter() - start) * 1000)
        _, mask, _ = reranker.pairs.encode(text, [h.text for h in hits[:depth]])
        tokens.append(float(mask.sum(1).mean()))
    return {"depth": depth, "queries": len(ms), "p50_ms": float(np.percentile(ms, 50)),
            "p95_ms": float(np.percentile(ms, 95)), "mean_ms": float(np.mean(ms)), "mean_pair_tokens": float(np.mean(tokens))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reranker", required=True, type=Path)
    parser.add_argument("--set", dest="sets", action="append", required=True, help="NAME=BEIR_DIR (repeatable)")
    parser.add_argument("--model", default=None, help="First-stage encoder [default: the bundled model]")
    parser.add_argument("--split", default="test")
    parser.add_argument("--max-queries", type=int, default=200)
    parser.add_argument("--depths", default="10,20,50")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads [default: all cores]")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from hybrid_qpr.rerankers import Reranker

    depths = [int(d) for d in args.depths.split(",")]
    reranker = Reranker(args.reranker, threads=args.threads)
    results = {}
    for item in args.sets:
        name, _, beir = item.partition("=")
        beir_dir = Path(beir)
        split = args.split if (beir_dir / "qrels" / f"{args.split}.tsv").is_file() else "val"
        lists, corpus = first_stage(beir_dir, args.work, name, args.model, split, args.max_queries, max(depths))
        results[name] = {"beir": repo_relative(beir_dir), "split": split, "corpus": corpus,
                         "by_depth": [time_rerank(reranker, lists, d) for d in depths]}
        for row in results[name]["by_depth"]:
            print(f"{name:<10} depth {row['depth']:>3}: p50 {row['p50_ms']:6.1f} ms  p95 {row['p95_ms']:6.1f} ms  "
                  f"({row['queries']} queries, {row['mean_pair_tokens']:.0f} tokens per pair)")
    report = {"command": command_line(), "reranker": repo_relative(args.reranker),
              "quantization": reranker.config.get("quantization"), "threads": args.threads, "sets": results}
    if args.out:
        write_json(args.out, report)
    else:
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
