"""hybrid-qpr side by side with the embedded hybrid engines a user would pick instead
(LanceDB, Milvus Lite, Qdrant's local mode), on the same vectors and the same queries.

Input: any BEIR-layout folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``),
e.g. ``<dataset>/beir`` from ``hybrid-qpr dataset build``. From ``--split`` (val by
default: keep withheld test parts out of benchmarks) it samples ``--queries`` judged
queries to score every engine on and ``--tune-queries`` others (disjoint) that tune
hybrid-qpr's fusion (``hybrid_qpr.evaluation.evaluator.tune``); the corpus is every
document those queries judge or are, plus seeded others up to ``--docs`` (never one judged
in another qrels file, so a test split stays unseen).

Every document is encoded once by ``--model`` (the default ``fast`` model) and each engine
indexes those vectors (hybrid-qpr's ingest through ``_peer_engines.PrecomputedEncoder``), so
only the lexical half and the fusion differ. For each engine and mode (BM25, kNN, hybrid
with the engine's default fusion; hybrid-qpr also tuned; LanceDB also its linear reranker):

* quality: ``RETRIEVE + 1`` results per query, the query's own id dropped where it is the
  same text in the corpus (paraphrase sets, where every query is a document: BEIR's rule),
  then H@1, MRR@20, nDCG@10, Recall@10/20 (``hybrid_qpr.evaluation.metrics``);
* p50/p95 latency per query, one query at a time, query encoding included, after
  ``--warmup`` untimed searches of tuning queries in every mode;
* build time (create, insert the vectors and texts, build the full-text index) and the size
  on disk of the engine's folder. The shared corpus encoding is reported once, apart.

Writes ``--out`` (JSON: settings, versions, load average, per engine and mode; written again
after each engine) and prints a Markdown table::

    hybrid-qpr dataset build ../shared/data/quora-pairs.tsv.gz --out data/quora
    python benchmarks/bench_peers.py data/quora/beir --docs 25000 --queries 1000 --tune-queries 1000 \\
        --out benchmarks/results/peers-quora-25k.json

``--engines hybrid-qpr`` runs without the peers installed; the others need
``pip install 'hybrid-qpr[peers]'``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from _common import command_line, repo_relative, select_subset, withheld_ids
from _peer_engines import ENGINES, PEERS, HybridQpr, missing_packages, version

from hybrid_qpr.artifacts import write_json
from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.errors import HybridQPRError
from hybrid_qpr.evaluation.evaluator import RETRIEVE, latency_summary, score_run, tune
from hybrid_qpr.resources import resolve_model

TABLE_METRICS = ("MRR@20", "nDCG@10", "Recall@10", "H@1")


def own_documents(queries: Mapping[str, str], corpus: Mapping[str, str]) -> set[str]:
    """The queries that are themselves corpus documents: same id, same text (a paraphrase
    set). A query id that only happens to equal a document id of another text is not one."""
    return {qid for qid, text in queries.items() if corpus.get(qid) == text}


def drop_own(run: Mapping[str, Sequence[str]], own: set[str], retrieve: int = RETRIEVE) -> dict[str, list[str]]:
    """Each list without its query's own id (for the queries in ``own``), cut to ``retrieve``."""
    return {qid: [doc for doc in ranked if not (qid in own and doc == qid)][:retrieve] for qid, ranked in run.items()}


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure(engine, modes: Sequence[str], queries: Mapping[str, str], warmup: Sequence[str]) -> dict[str, dict]:
    """Per mode: the ranked ids of every query (``RETRIEVE + 1`` of them) and each search's seconds,
    after the warm-up searches of every mode (compiling, first touches, an engine's caches)."""
    for mode in modes:
        for text in warmup:
            engine.search(mode, text, RETRIEVE + 1)
    out: dict[str, dict] = {}
    for mode in modes:
        run, seconds = {}, []
        for qid, text in queries.items():
            start = time.perf_counter()
            run[qid] = engine.search(mode, text, RETRIEVE + 1)
            seconds.append(time.perf_counter() - start)
        out[mode] = {"run": run, "seconds": seconds}
    return out


def run_engine(name: str, engine, where: Path, ids, texts, vectors, queries, qrels, own, warmup,
               tune_queries: Mapping[str, str] | None = None) -> dict:
    """Build ``engine`` in ``where``, measure every mode of it, and score the runs. hybrid-qpr
    with ``tune_queries``: after its untuned modes are measured, ``tune`` chooses a fusion on
    them (on the same index; nothing is stored in it) and that fusion is measured as ``hybrid-tuned``."""
    start = time.perf_counter()
    engine.build(where, ids, texts, vectors)
    build_seconds = time.perf_counter() - start
    extra: dict = {}
    if isinstance(engine, HybridQpr):
        engine.open(where)
        extra["defaults"] = engine.defaults_note
    print(f"{name}: built in {build_seconds:.1f} s", flush=True)
    measured = measure(engine, list(engine.modes), queries, warmup)
    if isinstance(engine, HybridQpr) and tune_queries:
        extra["tuned"] = tune_hybrid_qpr(engine, tune_queries, qrels)
        measured.update(measure(engine, ["hybrid-tuned"], queries, warmup))
    engine.close()
    modes = {}
    for mode, what in engine.modes.items():
        metrics = score_run(drop_own(measured[mode]["run"], own), qrels)
        modes[mode] = {"what": what, "metrics": {k: round(v, 4) for k, v in metrics.items()},
                       "latency": {k: round(v, 3) for k, v in latency_summary(measured[mode]["seconds"]).items()}}
        print(f"  {mode:14s} MRR@20 {metrics['MRR@20']:.4f}  nDCG@10 {metrics['nDCG@10']:.4f}  "
              f"p50 {modes[mode]['latency']['p50_ms']:.2f} ms", flush=True)
    return {"version": version(name), "build_seconds": round(build_seconds, 2), "disk_bytes": folder_bytes(where),
            **extra, "modes": modes}


def tune_hybrid_qpr(engine: HybridQpr, tune_queries: Mapping[str, str], qrels) -> dict:
    """``tune`` (its grid and rules as ``hybrid-qpr tune`` runs them) on ``tune_queries``; the
    chosen fusion becomes the engine's ``hybrid-tuned`` mode."""
    assert engine.searcher is not None
    chosen = tune(engine.searcher, tune_queries, qrels)
    engine.set_tuned(chosen.fusion, chosen.alpha, chosen.depth)
    print(f"hybrid-qpr tuned on {len(tune_queries)} queries: {chosen.fusion} alpha {chosen.alpha} depth {chosen.depth} "
          f"(MRR@20 {chosen.mrr:.4f}; bm25 {chosen.bm25_mrr:.4f}, knn {chosen.knn_mrr:.4f})", flush=True)
    return {"fusion": chosen.fusion, "alpha": chosen.alpha, "depth": chosen.depth, "queries": len(tune_queries),
            "MRR@20": round(chosen.mrr, 4), "bm25_MRR@20": round(chosen.bm25_mrr, 4), "knn_MRR@20": round(chosen.knn_mrr, 4)}


def markdown(result: dict) -> str:
    head = ["engine", "mode", *TABLE_METRICS, "p50 ms", "p95 ms", "build s", "disk MB"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * (len(head) - 2)]
    for name, engine in result["engines"].items():
        for mode, row in engine["modes"].items():
            cells = [f"{name} {engine['version']}", mode, *(f"{row['metrics'][m]:.3f}" for m in TABLE_METRICS),
                     f"{row['latency']['p50_ms']:.2f}", f"{row['latency']['p95_ms']:.2f}",
                     f"{engine['build_seconds']:.1f}", f"{engine['disk_bytes'] / 1e6:.1f}"]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("beir", type=Path, help="BEIR-layout folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)")
    parser.add_argument("--split", default="val", choices=("val", "test"), help="queries scored and tuned on [default: val]")
    parser.add_argument("--queries", type=int, default=1000, help="judged queries every engine is scored on")
    parser.add_argument("--tune-queries", type=int, default=1000, help="other judged queries hybrid-qpr is tuned on (0: no tuning)")
    parser.add_argument("--docs", type=int, default=25_000, help="corpus documents (at least those the queries judge or are)")
    parser.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated, of {', '.join(ENGINES)}")
    parser.add_argument("--model", default=None, help="encoder directory or bundled name [default: fast]")
    parser.add_argument("--warmup", type=int, default=20, help="untimed searches per mode before timing")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--work", type=Path, default=None, help="folder for the engines' stores [default: a temporary one, removed]")
    parser.add_argument("--out", type=Path, default=None, help="write the results here as JSON")
    args = parser.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in engines if e not in ENGINES]
    if unknown or not engines:
        parser.error(f"--engines {args.engines}: known engines are {', '.join(ENGINES)}")
    missing = missing_packages(engines)
    if missing:
        sys.exit(f"bench_peers: not installed: {'; '.join(missing)} (pip install 'hybrid-qpr[peers]', "
                 "or --engines hybrid-qpr)")
    try:
        result = run(args, engines)
    except HybridQPRError as exc:
        sys.exit(f"bench_peers: {exc}")
    print(markdown(result))
    if args.out:
        write_json(args.out, result)


def run(args, engines: list[str]) -> dict:
    corpus, queries, qrels = load_beir(args.beir, args.split)
    withheld = withheld_ids(args.beir, {args.split})
    corpus, eval_ids, tune_ids = select_subset(corpus, queries, qrels, n_queries=args.queries, n_tune=args.tune_queries,
                                        n_docs=args.docs, withheld=withheld, seed=args.seed)
    eval_queries = {q: queries[q] for q in eval_ids}
    own = own_documents(queries, corpus)
    ids, texts = list(corpus), list(corpus.values())
    encoder = Encoder.load(resolve_model(args.model))
    start = time.perf_counter()
    vectors = encoder.encode(texts, batch_size=512, side="document")
    encode_seconds = time.perf_counter() - start
    print(f"{len(ids):,} documents encoded in {encode_seconds:.1f} s; {len(eval_ids)} queries scored, "
          f"{len(tune_ids)} for tuning", flush=True)
    warmup = [queries[q] for q in tune_ids[:args.warmup]] or list(eval_queries.values())[:args.warmup]
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-peers-"))
    result: dict = {
        "command": command_line(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "beir": repo_relative(args.beir), "split": args.split, "corpus": len(ids), "queries": len(eval_ids),
        "tune_queries": len(tune_ids), "own_ids_dropped": len(own & set(eval_ids)), "model": repo_relative(encoder.model_dir),
        "distance": encoder.distance, "corpus_encode_seconds": round(encode_seconds, 2), "retrieve": RETRIEVE,
        "cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in os.getloadavg()], "engines": {},
    }
    try:
        for name in engines:
            where = work / name
            if where.exists():
                shutil.rmtree(where)
            if name == "hybrid-qpr":
                engine = HybridQpr(encoder, texts, vectors)
            else:
                engine = PEERS[name](lambda text: encoder.encode(text), encoder.distance)
            result["engines"][name] = run_engine(name, engine, where, ids, texts, vectors, eval_queries, qrels, own,
                                                 warmup, {q: queries[q] for q in tune_ids})
            if args.out:  # after each engine: a run stopped later keeps the engines measured
                write_json(args.out, {**result, "load_average_after": [round(x, 2) for x in os.getloadavg()]})
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return result


if __name__ == "__main__":
    main()
