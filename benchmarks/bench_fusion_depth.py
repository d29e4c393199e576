"""How many candidates each list should hand to fusion: quality and latency per depth, one run.

Over a local index of a BEIR corpus and a seeded sample of judged queries of one split (val:
the depth is a setting, so it is chosen on validation queries), for each depth the engine's
own BM25 and kNN lists of that depth are fetched (``LocalIndex.bm25_and_knn``, the index's
vector search as stored), then scored as the paraphrase task does (retrieve 20, the query's
own id dropped):

* ``rrf``: equal-weight RRF, the untuned default;
* ``tuned``: the best (method, alpha) of ``tune``'s grid on these same queries (in-sample:
  it says how far tuning can go at that depth, not a held-out figure);
* ``hybrid p50 ms``: ``HybridSearcher.search(mode="hybrid", depth=d)`` end to end, one query
  at a time, encoding and the fetch of 10 documents included, rounds alternating between
  the depths so load bursts hit them all.

    python benchmarks/bench_fusion_depth.py --index data/q123k --beir data/quora/beir --split val \
        --queries 3000 --out benchmarks/results/fusion-depth-quora.json
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from _common import repo_relative
from hybrid_qpr.artifacts import write_json
from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.evaluation.evaluator import sample_queries, tune_candidates
from hybrid_qpr.evaluation.tasks import get_task
from hybrid_qpr.search import Candidates, HybridSearcher

TASK = get_task("paraphrase")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index", type=Path, required=True, help="local index holding the BEIR corpus")
    parser.add_argument("--beir", type=Path, required=True)
    parser.add_argument("--split", default="val")
    parser.add_argument("--queries", type=int, default=3000, help="seeded sample of judged queries")
    parser.add_argument("--depths", default="20,30,50,100")
    parser.add_argument("--latency-queries", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ef-search", type=int, default=None, help="HNSW efSearch for every segment [default: as stored]")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    depths = [int(d) for d in args.depths.split(",")]
    _, all_queries, qrels = load_beir(args.beir, args.split)
    queries = sample_queries(all_queries, qrels, args.queries)
    index = LocalIndex.open(args.index)
    if args.ef_search:
        index.set_search_settings(ef_search=args.ef_search)
    encoder = Encoder.load(index.model_dir)
    searcher = HybridSearcher(index, encoder)
    qids = list(queries)
    vectors = dict(zip(qids, encoder.encode([queries[q] for q in qids], show_progress=False)))
    result = {"index": repo_relative(args.index), "documents": index.count(), "model": repo_relative(index.model_dir),
              "split": args.split, "queries": len(qids), "cpus": os.cpu_count(),
              "search_settings": {"ef_search": index.search_settings.ef_search,
                                  "segments_ef_search": [seg.ef_search for seg in index.segments]},
              "load_average_at_start": os.getloadavg(), "depths": {}}
    for depth in depths:
        cands = {q: Candidates(*index.bm25_and_knn(queries[q], vectors[q], depth)) for q in qids}
        rrf_run = {q: [f.id for f in searcher.fuse(c, fusion="rrf", alpha=0.5, depth=depth, top_k=TASK.retrieve)]
                   for q, c in cands.items()}
        tuned = tune_candidates(cands, qrels, depth=depth)
        result["depths"][str(depth)] = {"rrf_mrr@20": round(TASK.score(rrf_run, qrels)["MRR@20"], 4),
                                        "tuned_mrr@20": round(tuned.mrr, 4), "tuned": [tuned.fusion, tuned.alpha],
                                        "bm25_mrr@20": round(tuned.bm25_mrr, 4), "knn_mrr@20": round(tuned.knn_mrr, 4)}
    texts = [queries[q] for q in qids[: args.latency_queries]]
    for text in texts[:100]:  # warm-up
        searcher.search(text, depth=depths[0], fusion="rrf", alpha=0.5)
    times: dict[int, list[float]] = {d: [] for d in depths}
    for _ in range(args.rounds):
        for depth in depths:
            for text in texts:
                start = time.perf_counter()
                searcher.search(text, mode="hybrid", depth=depth, fusion="rrf", alpha=0.5)
                times[depth].append(time.perf_counter() - start)
    for depth in depths:
        row = result["depths"][str(depth)]
        row["hybrid_p50_ms"] = round(float(np.percentile(times[depth], 50)) * 1e3, 3)
        row["hybrid_p95_ms"] = round(float(np.percentile(times[depth], 95)) * 1e3, 3)
    result["load_average_at_end"] = os.getloadavg()
    print(f"{result['documents']} documents, {len(qids)} {args.split} queries, model {result['model']}")
    print("| depth | RRF MRR@20 | tuned MRR@20 (method, alpha) | hybrid p50 ms | p95 ms |")
    print("|---:|---:|---:|---:|---:|")
    for depth in depths:
        row = result["depths"][str(depth)]
        print(f"| {depth} | {row['rrf_mrr@20']:.4f} | {row['tuned_mrr@20']:.4f} ({row['tuned'][0]}, {row['tuned'][1]}) "
              f"| {row['hybrid_p50_ms']:.3f} | {row['hybrid_p95_ms']:.3f} |")
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
