"""Which cut of long pairs a cross-encoder ranks best: token lengths and dev metrics per cut.

Forum posts (SemEval-2016 Task 3: a subject and a body) are longer than the pairs a reranker was
trained on, so the pair budget decides what it reads: ``--cut MAX_LENGTH/QUERY_TOKENS`` scores each
judged query's judged candidates with the question cut to QUERY_TOKENS word pieces (its subject
first, then its body's start) and the candidate given the rest of MAX_LENGTH (the rule of
``hybrid_qpr.rerankers.pairs``), and reports the task's metrics (``--task``, e.g. community-qa:
MAP over all questions). It also prints the untruncated word-piece lengths of the queries and the
candidates, the data the cut is chosen from.

Example (numbers in docs/reranker.md, "Community QA")::

    python benchmarks/bench_reranker_cut.py --beir ../shared/data/semeval2016-b --split val \\
        --reranker onnx/reranker-minilm-l6-int8 --task community-qa \\
        --cut 64/24 --cut 96/32 --cut 128/48 --cut 192/64 --cut 256/128 \\
        --out benchmarks/results/reranker_cut_semeval_val.json
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from _common import command_line
from hybrid_qpr.artifacts import write_json


def parse_cut(text: str) -> tuple[int, int]:
    try:
        length, query = (int(part) for part in text.split("/"))
    except ValueError:
        raise SystemExit(f"--cut {text}: give MAX_LENGTH/QUERY_TOKENS, e.g. 128/48") from None
    return length, query


def lengths(pairs, texts) -> dict:
    counts = np.array([len(ids) for ids in pairs.pieces(texts)])
    return {**{f"p{q}": int(np.percentile(counts, q)) for q in (25, 50, 75, 90, 95)}, "max": int(counts.max()),
            "mean": round(float(counts.mean()), 1), "texts": len(counts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beir", required=True, help="BEIR directory whose qrels list each query's candidates")
    parser.add_argument("--split", default="val", choices=("val", "test"))
    parser.add_argument("--reranker", required=True, help="cross-encoder directory")
    parser.add_argument("--task", default="community-qa")
    parser.add_argument("--cut", action="append", required=True, type=parse_cut, help="MAX_LENGTH/QUERY_TOKENS")
    parser.add_argument("--out", default=None, help="JSON result file")
    args = parser.parse_args()

    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.evaluation.tasks import get_task
    from hybrid_qpr.rerankers import Reranker

    spec = get_task(args.task)
    corpus, queries, qrels = load_beir(args.beir, args.split)
    candidates = {q: [d for d in grades if d in corpus] for q, grades in qrels.items()}
    base = Reranker(args.reranker)
    result = {"command": command_line(), "queries": len(queries), "task": spec.name,
              "trained_cut": f"{base.pairs.max_length}/{base.pairs.query_tokens}",
              "lengths": {"queries": lengths(base.pairs, list(queries.values())),
                          "candidates": lengths(base.pairs, [corpus[d] for ds in candidates.values() for d in ds])},
              "cuts": {}}
    print(f"word pieces, untruncated: {result['lengths']}")
    for length, query_tokens in args.cut:
        reranker = Reranker(args.reranker, max_length=length, query_tokens=query_tokens)
        started = time.perf_counter()
        run = {}
        for q, docs in candidates.items():
            scores = reranker.score(queries[q], [corpus[d] for d in docs])
            run[q] = [docs[i] for i in sorted(range(len(docs)), key=lambda i: (-scores[i], i))]
        metrics = spec.score(run, qrels)
        name = f"{length}/{query_tokens}"
        result["cuts"][name] = {**{k: round(v, 4) for k, v in metrics.items()},
                                "seconds": round(time.perf_counter() - started, 1)}
        print(f"cut {name:8s} " + "  ".join(f"{k} {v:.4f}" for k, v in metrics.items()), flush=True)
    if args.out:
        write_json(args.out, result)


if __name__ == "__main__":
    main()
