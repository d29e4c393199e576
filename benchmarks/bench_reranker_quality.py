"""Does the reranker help, and does interpolating it with the first stage stop it from hurting?

For each eval set (``NAME=BEIR_DIR:INDEX``: a BEIR directory and the local index of its corpus),
the judged queries of ``--split`` (a seeded sample of ``--max-queries``) are cut in two seeded
halves. On the first half, ``tune`` chooses the fusion and ``tune_reranker`` the reranker's
depth, norm and weight (depth 0: no reranker), exactly as ``hybrid-qpr tune --reranker`` does.
On the other half, reported: the tuned first stage alone, + the reranker plain (depth 20,
weight 0: the cross-encoder alone), and + the reranker as tuned; and, to choose the norm by
measurement, the best setting of each norm on the first half, scored on the second.

Example (numbers in docs/reranker.md)::

    nice -n 10 python benchmarks/bench_reranker_quality.py --reranker onnx/reranker-minilm-l6-int8 \\
        --set wikiqa=data/wikiqa-dev/beir:idx/wikiqa --task answer-selection \\
        --out benchmarks/results/reranker_interpolation.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time

from _common import command_line
from hybrid_qpr.artifacts import write_json


def halves(queries: dict[str, str], seed: int) -> tuple[dict[str, str], dict[str, str]]:
    """Two seeded halves of ``queries`` (tune on the first, report on the second)."""
    ids = sorted(queries)
    random.Random(seed).shuffle(ids)
    cut = len(ids) // 2
    return {q: queries[q] for q in sorted(ids[:cut])}, {q: queries[q] for q in sorted(ids[cut:])}


def measure(name: str, beir_dir: str, index: str, reranker_dir: str, args) -> dict:
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.evaluation.evaluator import sample_queries, tune, tune_reranker
    from hybrid_qpr.evaluation.tasks import get_task, task_query_filters
    from hybrid_qpr.rerankers import Interpolation, Reranker
    from hybrid_qpr.rerankers.cross_encoder import NORMS, ONE_RUN
    from hybrid_qpr.search import HybridSearcher

    backend = LocalIndex.open(index)
    reranker = Reranker(reranker_dir, run_cost=args.run_cost)
    searcher = HybridSearcher(backend, Encoder.load(backend.model_dir), reranker=reranker)  # the index's model
    _, queries, qrels = load_beir(beir_dir, args.split)
    sample = sample_queries(queries, qrels, args.max_queries)
    tune_half, report_half = halves(sample, args.seed)
    filters = task_query_filters(beir_dir, args.task, None, list(sample)) or {}
    spec = get_task(args.task)
    start = time.perf_counter()
    fusion = tune(searcher, tune_half, qrels, task=args.task, query_filters=filters)
    chosen = tune_reranker(searcher, tune_half, qrels, fusion, depths=args.depths, task=args.task, query_filters=filters)

    def report(depth: int, setting: Interpolation) -> dict:
        run = {}
        for qid, text in report_half.items():
            hits = searcher.search(text, mode="hybrid", fusion=fusion.fusion, alpha=fusion.alpha, depth=fusion.depth,
                                   top_k=max(spec.retrieve, depth), filters=filters.get(qid), reranker_depth=0)
            if depth:
                hits = reranker.rerank(text, hits, depth, setting)
            run[qid] = [h.id for h in hits[:spec.retrieve]]
        return spec.score(run, qrels)

    per_norm = {}
    for norm in NORMS:
        rows = [r for r in chosen.grid if r["norm"] == norm or r["weight"] == 0]
        best = max(rows, key=lambda r: r[chosen.metric])
        per_norm[norm] = {"tuned_on_first_half": {k: best[k] for k in ("depth", "weight", chosen.metric)},
                          "second_half": report(best["depth"], Interpolation(best["weight"], norm))}
    rows = {"first stage": report(0, Interpolation()),
            "+reranker plain (depth 20, weight 0)": report(20, Interpolation()),
            f"+reranker tuned (depth {chosen.depth}, {chosen.norm} weight {chosen.weight:g})":
                report(chosen.depth, Interpolation(chosen.weight, chosen.norm))}
    return {"set": name, "beir": beir_dir, "split": args.split, "task": args.task, "metric": chosen.metric,
            "run_cost": "one" if reranker.run_cost == ONE_RUN else reranker.run_cost,
            "queries": len(sample), "tune_queries": len(tune_half), "report_queries": len(report_half),
            "fusion": {"fusion": fusion.fusion, "alpha": fusion.alpha, "depth": fusion.depth},
            "chosen": {"depth": chosen.depth, "norm": chosen.norm, "weight": chosen.weight},
            "first_half_without": chosen.without,
            "second_half": rows, "best_per_norm": per_norm, "grid_first_half": chosen.grid,
            "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    from hybrid_qpr.rerankers.cross_encoder import ONE_RUN

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reranker", required=True)
    parser.add_argument("--set", dest="sets", action="append", required=True, help="NAME=BEIR_DIR:INDEX")
    parser.add_argument("--task", default="answer-selection")
    parser.add_argument("--split", default="val")
    parser.add_argument("--max-queries", type=int, default=None)
    parser.add_argument("--depths", type=lambda s: [int(d) for d in s.split(",")], default=[10, 20, 50])
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--run-cost", default=None, type=lambda s: ONE_RUN if s == "one" else int(s),
                        help="Reranker run cost in padded tokens, 'one' = one run per query [default: the library's]")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    load_at_start = os.getloadavg()[0]
    results = []
    for spec in args.sets:
        name, _, rest = spec.partition("=")
        beir_dir, _, index = rest.rpartition(":")
        results.append(measure(name, beir_dir, index, args.reranker, args))
        print(json.dumps({k: v for k, v in results[-1].items() if k != "grid_first_half"}, indent=1), flush=True)
    write_json(args.out, {"command": command_line(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                          "machine": f"{os.cpu_count()} cores, load average {load_at_start:.1f} at the start and "
                                     f"{os.getloadavg()[0]:.1f} at the end", "results": results})


if __name__ == "__main__":
    main()
