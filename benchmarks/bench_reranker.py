"""The latency a cross-encoder reranker adds to a query, at depth 10, 20 and 50.

For each eval set (a BEIR directory: ``examples/beir`` for questions, an answer dataset's
``beir/`` for answer sentences), the corpus is ingested into a local index with ``--model``
(cached under ``--work``), each query's hybrid top 50 is fetched once, and then, per depth,
``Reranker.rerank(query, hits, depth)`` is timed alone: tokenising the pairs and the
onnxruntime runs, i.e. exactly what ``--reranker`` adds to a search. Several rerankers (and
settings: ``--threads``, ``--run-costs``) are timed *round-robin*, query by query, so a load that
changes during the run weighs on all of them alike. One warm-up query per depth and variant is
not counted. Reported: p50/p95/mean ms, the mean pair length and the mean padded tokens computed
per pair, the p50 CPU time, and the largest score difference from the first run-cost (length-sorted runs against
one run per query).

Example (numbers in docs/reranker.md)::

    nice -n 10 python benchmarks/bench_reranker.py --reranker onnx/reranker-minilm-l6-int8 \\
        --reranker onnx/reranker-minilm-l3-int8 --set questions=examples/beir \\
        --set answers=data/squad/beir --work WORKDIR --out benchmarks/results/reranker_latency.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
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


def padded_tokens(reranker, text: str, texts: list[str]) -> tuple[float, float]:
    """Mean pair length and mean tokens computed per pair (each run pads to its longest)."""
    from hybrid_qpr.rerankers.cross_encoder import length_runs

    _, mask, _ = reranker.pairs.encode(text, texts)
    lengths = mask.sum(1)
    computed = sum(len(run) * int(lengths[run].max()) for run in length_runs(lengths.tolist(), reranker.run_cost))
    return float(lengths.mean()), computed / len(texts)


def time_round_robin(variants: dict, lists, depth: int) -> dict:
    """Per variant: p50/p95/mean ms of ``rerank`` at ``depth``, the variants taking turns per query."""
    ms = {name: [] for name in variants}
    cpu_ms = {name: [] for name in variants}  # CPU time of this process (all its threads): what the
    # work costs whatever else shares the cores; with --threads 1, the latency of an idle core
    for name, reranker in variants.items():  # warm-up
        reranker.rerank(lists[0][0], lists[0][1], depth)
    for text, hits in lists:
        for name, reranker in variants.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            reranker.rerank(text, hits, depth)
            ms[name].append((time.perf_counter() - start) * 1000)
            cpu_ms[name].append((time.process_time() - cpu_start) * 1000)
    rows = {}
    for name, reranker in variants.items():
        tokens = [padded_tokens(reranker, text, [h.text for h in hits[:depth]]) for text, hits in lists]
        rows[name] = {"depth": depth, "queries": len(ms[name]), "p50_ms": float(np.percentile(ms[name], 50)),
                      "p95_ms": float(np.percentile(ms[name], 95)), "mean_ms": float(np.mean(ms[name])),
                      "cpu_p50_ms": float(np.percentile(cpu_ms[name], 50)),
                      "mean_pair_tokens": float(np.mean([t[0] for t in tokens])),
                      "computed_tokens_per_pair": float(np.mean([t[1] for t in tokens]))}
    return rows


def score_differences(variants: dict, lists, depth: int) -> dict:
    """Largest |score - score of the same reranker's first run-cost variant| over all pairs."""
    firsts, out = {}, {}
    for name, reranker in variants.items():
        key = reranker.model_dir
        scores = np.concatenate([reranker.score(text, [h.text for h in hits[:depth]]) for text, hits in lists])
        if key not in firsts:
            firsts[key] = (name, scores)
        else:
            out[name] = {"against": firsts[key][0], "max_abs_diff": float(np.abs(scores - firsts[key][1]).max())}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reranker", dest="rerankers", action="append", required=True, type=Path,
                        help="Reranker directory (repeatable: timed round-robin)")
    parser.add_argument("--set", dest="sets", action="append", required=True, help="NAME=BEIR_DIR (repeatable)")
    parser.add_argument("--model", default=None, help="First-stage encoder [default: the bundled model]")
    parser.add_argument("--split", default="test")
    parser.add_argument("--max-queries", type=int, default=200)
    parser.add_argument("--depths", default="10,20,50")
    parser.add_argument("--threads", default="0", help="onnxruntime intra-op threads, comma-separated variants "
                                                       "[default: 0 = onnxruntime's default, all cores]")
    parser.add_argument("--run-costs", default=None,
                        help="Reranker run costs in padded tokens, comma-separated variants; 'one' = one run per "
                             "query [default: the library's: one run for int8, 16 for fp32]")
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from hybrid_qpr.rerankers import Reranker
    from hybrid_qpr.rerankers.cross_encoder import ONE_RUN

    depths = [int(d) for d in args.depths.split(",")]
    run_costs = [None] if args.run_costs is None else [  # None: the library's choice for the model
        ONE_RUN if c == "one" else int(c) for c in args.run_costs.split(",")]
    variants = {}
    for directory, threads, run_cost in itertools.product(args.rerankers, map(int, args.threads.split(",")), run_costs):
        reranker = Reranker(directory, threads=threads or None, run_cost=run_cost)
        name = f"{directory.name} threads={threads or 'default'} runs={'one' if reranker.run_cost == ONE_RUN else reranker.run_cost}"
        variants[name] = reranker
    results, load_start = {}, os.getloadavg()  # the machine may be shared: say how busy it was
    for item in args.sets:
        set_name, _, beir = item.partition("=")
        beir_dir = Path(beir)
        split = args.split if (beir_dir / "qrels" / f"{args.split}.tsv").is_file() else "val"
        lists, corpus = first_stage(beir_dir, args.work, set_name, args.model, split, args.max_queries, max(depths))
        by_depth = {d: time_round_robin(variants, lists, d) for d in depths}
        results[set_name] = {"beir": repo_relative(beir_dir), "split": split, "corpus": corpus,
                             "by_variant": {name: [by_depth[d][name] for d in depths] for name in variants}}
        if len(run_costs) > 1:
            results[set_name]["score_differences_depth_20"] = score_differences(variants, lists, 20)
            print(json.dumps(results[set_name]["score_differences_depth_20"]))
        for name in variants:
            for row in results[set_name]["by_variant"][name]:
                print(f"{set_name:<10} {name:<50} depth {row['depth']:>3}: p50 {row['p50_ms']:6.1f} ms  "
                      f"p95 {row['p95_ms']:6.1f} ms  CPU p50 {row['cpu_p50_ms']:6.1f} ms  ({row['queries']} queries, {row['mean_pair_tokens']:.0f} "
                      f"tokens per pair, {row['computed_tokens_per_pair']:.0f} computed)")
    report = {"command": command_line(), "rerankers": [repo_relative(d) for d in args.rerankers],
              "quantization": {name: r.config.get("quantization") for name, r in variants.items()}, "sets": results,
              "load_average_1_5_15_min": {"start": load_start, "end": os.getloadavg()}}
    print(f"load average (1, 5, 15 min) at start {load_start}, at end {os.getloadavg()}")
    if args.out:
        write_json(args.out, report)
    else:
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
