"""Answer selection and answer retrieval: every encoder, BM25 and their tuned hybrids on one engine.

For each eval set (answer datasets written by ``hybrid-qpr dataset from-answers`` /
``from-squad``) and each encoder (model directories, symmetric or asymmetric):

1. ingest the BEIR corpus into a local index (``LocalIndex``, documents encoded with the
   answer side), cached under ``--work``;
2. tune the BM25 + kNN fusion on the tuning split (``hybrid_qpr.evaluation.evaluator.tune``,
   the task's main metric: MAP for answer selection, MRR for answer retrieval);
3. evaluate bm25, knn and the tuned hybrid on the report split (``evaluate``, the task's
   metric set, per-query filter on ``group`` for answer selection).

WikiQA and TrecQA have only a dev split here, so their hybrid is tuned and reported on dev
(optimistic for the hybrid; the tuning guarantees it is never below its better side on that
data). SQuAD is tuned on the val articles and reported on the test articles.

Encode speed: sentences/s of each encoder on the SQuAD corpus (batches of 64, one warm-up
batch), measured in this process.

Example (numbers in docs/answers.md)::

    nice -n 10 python benchmarks/bench_answers.py --data /work/data/answers --work /work/data/answers/idx \\
        --model cnn=onnx/sdml-cnn-quora --model minilm=/work/data/minilm-int8 --out benchmarks/results/answers.json
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

from _common import repo_relative
from hybrid_qpr.artifacts import write_json

SHOWN = {"wikiqa": ("MAP", "MRR"), "trecqa": ("MAP", "MRR"), "squad": ("MRR", "R@1", "R@5")}  # main metric first
EVAL_SETS = {  # name: (dataset dir name, task, tuning split, report split)
    "wikiqa": ("wikiqa", "answer-selection", "val", "val"),
    "trecqa": ("trecqa", "answer-selection", "val", "val"),
    "squad": ("squad", "answer-retrieval", "val", "test"),
}


def run_one(data: Path, work: Path, eval_set: str, name: str, model_dir: Path) -> dict:
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.data.documents import iter_documents
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.evaluation.evaluator import evaluate, sample_queries, tune
    from hybrid_qpr.evaluation.tasks import get_task, task_query_filters
    from hybrid_qpr.search import HybridSearcher

    folder, task_name, tune_split, report_split = EVAL_SETS[eval_set]
    beir = data / folder / "beir"
    task = get_task(task_name)
    encoder = Encoder.load(model_dir)
    index_dir = work / f"{eval_set}-{name}"
    if (index_dir / "manifest.json").is_file():
        index = LocalIndex.open(index_dir)
    else:
        index = LocalIndex.create(index_dir, encoder)
        index.ingest(iter_documents(beir / "corpus.jsonl"), encoder, show_progress=False)
    searcher = HybridSearcher(index, encoder)

    def split_inputs(split):
        _, queries, qrels = load_beir(beir, split)
        queries = sample_queries(queries, qrels, None)
        return queries, qrels, task_query_filters(beir, task_name, None, list(queries))

    queries, qrels, filters = split_inputs(tune_split)
    tuned = tune(searcher, queries, qrels, task=task_name, query_filters=filters)
    index.set_fusion_defaults(tuned.defaults)
    queries, qrels, filters = split_inputs(report_split)
    results = evaluate(searcher, queries, qrels, modes=("bm25", "knn", "hybrid"), task=task_name, query_filters=filters)
    return {"eval_set": eval_set, "encoder": name, "model": repo_relative(model_dir), "task": task_name,
            "tune_split": tune_split, "report_split": report_split, "queries": len(queries),
            "tuned": {"fusion": tuned.fusion, "alpha": tuned.alpha, task.main_metric: tuned.mrr,
                      "bm25": tuned.bm25_mrr, "knn": tuned.knn_mrr},
            "results": {mode: r["metrics"] for mode, r in results.items()},
            "latency_p50_ms": {mode: r["latency"]["p50_ms"] for mode, r in results.items()}}


def encode_speed(data: Path, model_dir: Path, limit: int = 1000) -> float:
    from hybrid_qpr.data.documents import iter_documents
    from hybrid_qpr.encoders import Encoder

    encoder = Encoder.load(model_dir)
    texts = [doc.text for _, doc in iter_documents(data / "squad" / "beir" / "corpus.jsonl")][:limit]
    encoder.encode(texts[:64], batch_size=64, side="document")
    start = time.perf_counter()
    encoder.encode(texts, batch_size=64, side="document")
    return len(texts) / (time.perf_counter() - start)


def markdown(results: dict, names: list[str]) -> str:
    """The README table: BM25, then each encoder alone and its tuned hybrid with BM25."""
    runs = results["runs"]

    def cells(name: str, mode: str) -> list[str]:
        out = []
        for eval_set, metrics in SHOWN.items():
            row = runs.get(f"{eval_set}/{name}")
            out.append(" / ".join(f"{row['results'][mode][m]:.3f}" for m in metrics) if row else "-")
        return out

    head = "| method | WikiQA dev MAP / MRR | TrecQA dev MAP / MRR | SQuAD held-out MRR / R@1 / R@5 | encode sentences/s |"
    lines = [head, "|---|---|---|---|---:|", "| BM25 | " + " | ".join(cells(names[0], "bm25")) + " | - |"]
    for name in names:
        speed = results["encode_per_s"].get(name)
        lines.append(f"| {name} | " + " | ".join(cells(name, "knn")) + f" | {speed if speed else '-'} |")
        lines.append(f"| BM25 + {name} (tuned) | " + " | ".join(cells(name, "hybrid")) + " | |")
    return "\n".join(lines) + "\n\n" + below_better_side(results, names)


def below_better_side(results: dict, names: list[str]) -> str:
    """Every (set, encoder, metric) where the tuned hybrid is below its better side (the single
    mode with the higher main metric) on a reported metric; the README claims there is none."""
    found = []
    for name in names:
        for eval_set, metrics in SHOWN.items():
            row = results["runs"].get(f"{eval_set}/{name}")
            if not row:
                continue
            main = metrics[0]
            better = max(("bm25", "knn"), key=lambda mode: row["results"][mode][main])
            for m in metrics:
                if row["results"]["hybrid"][m] + 1e-9 < row["results"][better][m]:
                    found.append(f"{eval_set}/{name} {m}: hybrid {row['results']['hybrid'][m]:.4f} < {better} "
                                 f"{row['results'][better][m]:.4f}")
    return "tuned hybrid below its better side: " + ("; ".join(found) if found else "nowhere")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="Folder holding wikiqa/, trecqa/, squad/ answer datasets.")
    parser.add_argument("--work", type=Path, required=True, help="Folder for the indexes (reused when present).")
    parser.add_argument("--model", action="append", default=[], help="NAME=MODEL_DIR (repeatable).")
    parser.add_argument("--table", nargs="+", default=None, metavar="NAME",
                        help="Only print the markdown table of these encoders from --out.")
    parser.add_argument("--sets", nargs="+", default=list(EVAL_SETS), choices=list(EVAL_SETS))
    parser.add_argument("--out", type=Path, required=True, help="JSON results file (merged with an existing one).")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets itself to DEBUG on import
    results = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": {}, "encode_per_s": {}}
    if args.table:
        print(markdown(results, args.table))
        return
    for spec in args.model:
        name, _, model_dir = spec.partition("=")
        for eval_set in args.sets:
            row = run_one(args.data, args.work, eval_set, name, Path(model_dir))
            results["runs"][f"{eval_set}/{name}"] = row
            print(json.dumps({k: row[k] for k in ("eval_set", "encoder", "tuned", "results")}), flush=True)
            write_json(args.out, results)
        results["encode_per_s"][name] = round(encode_speed(args.data, Path(model_dir)), 1)
        write_json(args.out, results)


if __name__ == "__main__":
    main()
