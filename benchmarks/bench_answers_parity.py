"""The same answer index on the embedded backend, OpenSearch and Elasticsearch: do the metrics agree?

For each eval set (answer datasets of ``hybrid-qpr dataset from-answers`` / ``from-squad``)
and each encoder:

1. ingest the BEIR corpus into a fresh index on every backend (the same documents, in the
   same order, through the same ``Backend.ingest``);
2. evaluate bm25, knn and hybrid on the report split (answer selection with the per-query
   filter on ``group``; answer retrieval over the whole corpus) with one fusion setting for
   all backends (``--fusion``/``--alpha``), so only the engines differ;
3. report each metric per backend and the largest difference from the embedded backend.

Example (numbers in docs/answers.md)::

    nice -n 10 python benchmarks/bench_answers_parity.py --data /work/data/answers --work /tmp/parity \\
        --opensearch http://127.0.0.1:9250 --elasticsearch http://127.0.0.1:9251 \\
        --model cnn=onnx/sdml-cnn-quora --out benchmarks/results/answers-parity.json
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
from pathlib import Path

from _common import repo_relative
from hybrid_qpr.artifacts import write_json

EVAL_SETS = {  # name: (task, report split, metrics shown)
    "wikiqa": ("answer-selection", "val", ("MAP", "MRR")),
    "trecqa": ("answer-selection", "val", ("MAP", "MRR")),
    "squad": ("answer-retrieval", "test", ("MRR", "R@1", "R@5")),
}
BACKENDS = ("embedded", "opensearch", "elasticsearch")
MODES = ("bm25", "knn", "hybrid")


def open_backend(kind: str, url: str | None, index_name: str, work: Path):
    if kind == "embedded":
        from hybrid_qpr.backends.local import LocalIndex

        path = work / index_name
        shutil.rmtree(path, ignore_errors=True)
        return path, LocalIndex
    if kind == "opensearch":
        from hybrid_qpr.backends.opensearch import OpenSearchBackend, connect

        backend = OpenSearchBackend(connect(url, timeout=120), index_name)
    else:
        from hybrid_qpr.backends.elasticsearch import ElasticsearchBackend, connect

        backend = ElasticsearchBackend(connect(url, timeout=120), index_name)
    backend.drop()
    return None, backend


def run_one(data: Path, work: Path, urls: dict[str, str], eval_set: str, name: str, model_dir: Path, fusion: str,
            alpha: float) -> dict:
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.data.documents import iter_documents
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.evaluation.evaluator import evaluate, sample_queries
    from hybrid_qpr.evaluation.tasks import task_query_filters
    from hybrid_qpr.search import HybridSearcher

    task_name, split, _ = EVAL_SETS[eval_set]
    beir = data / eval_set / "beir"
    encoder = Encoder.load(model_dir)
    _, queries, qrels = load_beir(beir, split)
    queries = sample_queries(queries, qrels, None)
    filters = task_query_filters(beir, task_name, None, list(queries))
    out: dict = {"eval_set": eval_set, "encoder": name, "model": repo_relative(model_dir), "task": task_name,
                 "split": split, "queries": len(queries), "fusion": fusion, "alpha": alpha, "results": {}}
    for kind in BACKENDS:
        if kind != "embedded" and not urls.get(kind):
            continue
        index_name = f"parity-{eval_set}-{name}".lower()
        path, backend = open_backend(kind, urls.get(kind), index_name, work)
        if path is not None:
            backend = backend.create(path, encoder)
        backend.ingest(iter_documents(beir / "corpus.jsonl"), encoder, show_progress=False)
        results = evaluate(HybridSearcher(backend, encoder), queries, qrels, modes=MODES, task=task_name,
                           query_filters=filters, fusion=fusion, alpha=alpha)
        out["results"][kind] = {mode: r["metrics"] for mode, r in results.items()}
        if path is None:
            backend.drop()
        backend.close()
        print(json.dumps({"eval_set": eval_set, "encoder": name, "backend": kind,
                          **{m: {k: round(v, 4) for k, v in r.items()} for m, r in out["results"][kind].items()}}),
              flush=True)
    embedded = out["results"]["embedded"]
    out["max_difference"] = max(abs(other[mode][metric] - embedded[mode][metric])
                                for kind, other in out["results"].items() if kind != "embedded"
                                for mode in MODES for metric in embedded[mode])
    return out


def markdown(results: dict) -> str:
    """One row per (eval set, encoder, mode): the shown metrics per backend and the largest difference."""
    lines = ["| set, encoder | mode | embedded | OpenSearch | Elasticsearch | max difference |", "|---|---|---|---|---|---:|"]
    for row in results["runs"].values():
        shown = EVAL_SETS[row["eval_set"]][2]
        for mode in MODES:
            cells = []
            for kind in BACKENDS:
                metrics = row["results"].get(kind, {}).get(mode)
                cells.append(" / ".join(f"{metrics[m]:.4f}" for m in shown) if metrics else "-")
            diff = max(abs(row["results"][k][mode][m] - row["results"]["embedded"][mode][m])
                       for k in row["results"] if k != "embedded" for m in row["results"]["embedded"][mode])
            label = f"{row['eval_set']} {'/'.join(shown)}, {row['encoder']}"
            lines.append(f"| {label} | {mode} | " + " | ".join(cells) + f" | {diff:.4f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="Folder holding wikiqa/, trecqa/, squad/ answer datasets.")
    parser.add_argument("--work", type=Path, required=True, help="Folder for the embedded indexes (rebuilt).")
    parser.add_argument("--opensearch", default=None, help="OpenSearch URL (left out: not measured).")
    parser.add_argument("--elasticsearch", default=None, help="Elasticsearch URL (left out: not measured).")
    parser.add_argument("--model", action="append", default=[], help="NAME=MODEL_DIR (repeatable).")
    parser.add_argument("--sets", nargs="+", default=list(EVAL_SETS), choices=list(EVAL_SETS))
    parser.add_argument("--fusion", default="l2", help="Fusion used on every backend (default l2).")
    parser.add_argument("--alpha", type=float, default=0.6, help="kNN weight used on every backend (default 0.6).")
    parser.add_argument("--table", action="store_true", help="Only print the markdown table of --out.")
    parser.add_argument("--out", type=Path, required=True, help="JSON results file (merged with an existing one).")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    results = json.loads(args.out.read_text()) if args.out.is_file() else {"runs": {}}
    if args.table:
        print(markdown(results))
        return
    urls = {"opensearch": args.opensearch, "elasticsearch": args.elasticsearch}
    args.work.mkdir(parents=True, exist_ok=True)
    for spec in args.model:
        name, _, model_dir = spec.partition("=")
        for eval_set in args.sets:
            row = run_one(args.data, args.work, urls, eval_set, name, Path(model_dir), args.fusion, args.alpha)
            results["runs"][f"{eval_set}/{name}"] = row
            write_json(args.out, results)
    print(markdown(results))


if __name__ == "__main__":
    main()
