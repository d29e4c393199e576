"""Benchmark MiniLM encoders against the SDML CNN: quality (alone and fused with BM25) and speed.

Quality, per dataset directory (written by ``hybrid-qpr dataset build``): test queries of
``beir/`` (a seeded sample of ``--queries``), searched against an **index subset** of the
corpus: every question of the sampled queries' clusters (queries and their paraphrases)
plus seeded random other questions up to ``--corpus`` documents. The same subset serves
every encoder and BM25, so rows are comparable; the subset keeps MiniLM encoding within the
compute budget of a 2-core box. Protocol of the CNN benchmark otherwise: retrieve 21, drop
the query's own id, H@1, H@10, MRR@20 (``hybrid_qpr.evaluation.metrics``).

Encoders: off-the-shelf all-MiniLM-L6-v2 (ONNX fp32 and int8), MiniLM fine-tuned on the
dataset's train split with SDML, triplet and siamese losses (``hybrid_qpr.training.transformer``, fixed
number of steps), and the committed SDML CNN (``onnx/sdml-cnn-quora``, trained on Quora).
kNN is exact (``hybrid_qpr.distance.similarity``); BM25 is bm25s over the same subset, with
the project tokenizer; fusion is ``hybrid_qpr.fusion`` RRF of the two top-``--depth`` lists.

Speed: encode throughput (questions/s, batches of 64) and single-query latency (median and
p95 over 200 queries) for CNN ONNX, MiniLM torch, MiniLM ONNX fp32 and MiniLM ONNX int8.

Fine-tuned models go to ``--models`` (outside the repository; too big to commit). Every
stage is cached there, so a rerun only does what is missing. Example (the numbers in
docs/transformer.md were taken like this, on a loaded 2-core box)::

    nice -n 10 python benchmarks/bench_transformer.py --data /work/bench-data \\
        --models /work/bench-models --datasets quora wikianswers --steps 150 --queries 1000 --corpus 20000
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from pathlib import Path

import numpy as np

from _common import REPO, relative_if_path, repo_relative
LOSSES = ("sdml", "triplet", "siamese")
CNN_NAME = "SDML CNN (Quora)"  # the committed CNN's row name in results and tables
logger = logging.getLogger("bench_transformer")


# ---------------------------------------------------------------- evaluation subset
def eval_subset(dataset_dir: Path, n_queries: int, n_corpus: int, seed: int):
    """(corpus subset, sampled queries, their qrels) of the test split; see module docstring."""
    from hybrid_qpr.data.beir import load_beir

    corpus, queries, qrels = load_beir(dataset_dir / "beir", "test")
    rng = random.Random(seed)
    qids = sorted(queries)
    rng.shuffle(qids)
    qids = sorted(qids[:n_queries])
    keep = set(qids)
    for q in qids:
        keep.update(qrels[q])
    others = sorted(set(corpus) - keep)
    rng.shuffle(others)
    keep.update(others[: max(0, n_corpus - len(keep))])
    sub = {i: corpus[i] for i in sorted(keep)}
    return sub, {q: queries[q] for q in qids}, {q: dict(qrels[q]) for q in qids}


def knn_run(doc_ids: list[str], vectors: np.ndarray, qids: list[str], distance: str, depth: int) -> dict[str, list[str]]:
    """Exact kNN of each query's own vector (queries are corpus documents) over the subset."""
    from hybrid_qpr.distance import similarity
    from hybrid_qpr.evaluation.evaluator import top_k_indices

    row = {d: i for i, d in enumerate(doc_ids)}
    q = vectors[[row[x] for x in qids]]
    run = {}
    for start in range(0, len(qids), 256):
        scores = similarity(q[start : start + 256], vectors, distance)  # type: ignore[arg-type]
        top = top_k_indices(scores, depth + 1)
        for qid, idx in zip(qids[start : start + 256], top):
            run[qid] = [doc_ids[i] for i in idx]
    return run


def bm25_run(doc_ids: list[str], texts: list[str], qids: list[str], query_texts: list[str], depth: int):
    import bm25s

    from hybrid_qpr.text.tokenizer import tokenize

    retriever = bm25s.BM25()
    retriever.index([tokenize(t) or ["\x00"] for t in texts], show_progress=False)
    ids, _ = retriever.retrieve([tokenize(t) or ["\x00"] for t in query_texts], k=depth + 1, show_progress=False)
    return {qid: [doc_ids[i] for i in row] for qid, row in zip(qids, ids)}


def fuse(run_a, run_b, depth: int):
    """RRF (k=60) of the top ``depth`` (+1 for the query itself, dropped later) of both runs."""
    from hybrid_qpr.types import Hit
    from hybrid_qpr.fusion import rrf

    return {q: [f.id for f in rrf([[Hit(d, 0.0) for d in run_a[q]], [Hit(d, 0.0) for d in run_b[q]]], depth=depth + 1)]
            for q in run_a}


def metrics(run, qrels) -> dict[str, float]:
    from hybrid_qpr.evaluation.metrics import drop_self, hits_at_k, mrr_at_k

    run = drop_self(run)
    return {"H@1": hits_at_k(run, qrels, 1), "H@10": hits_at_k(run, qrels, 10), "MRR@20": mrr_at_k(run, qrels, 20)}


# ---------------------------------------------------------------- models
def wanted(args, name: str) -> bool:
    """Whether ``--only`` selects the encoder called ``name`` (all of them without ``--only``)."""
    return not args.only or any(o.lower() in name.lower() for o in args.only)


def ensure_models(args, dataset: str, dataset_dir: Path) -> dict[str, Path]:
    """Export off-the-shelf MiniLM (fp32, int8) and fine-tune + export each loss; cached.
    Encoders not selected by ``--only`` are neither built nor returned."""
    from hybrid_qpr.export.transformer import export_transformer_dir

    models: Path = args.models
    out: dict[str, Path] = {}
    base = models / f"minilm-l{args.max_length}-onnx"
    if wanted(args, "MiniLM (off-the-shelf)"):
        if not (base / "config.json").exists():
            export_transformer_dir(None, base, max_length=args.max_length)
        out["MiniLM (off-the-shelf)"] = base
    base8 = models / f"minilm-l{args.max_length}-onnx-int8"
    if wanted(args, "MiniLM int8 (off-the-shelf)"):
        if not (base8 / "config.json").exists():
            export_transformer_dir(None, base8, max_length=args.max_length, quantize=True)
        out["MiniLM int8 (off-the-shelf)"] = base8
    for loss in args.losses:
        if not wanted(args, f"MiniLM + {loss}"):
            continue
        run_dir = models / f"{dataset}-{loss}"
        onnx_dir = models / f"{dataset}-{loss}-onnx"
        if not (onnx_dir / "config.json").exists():
            from hybrid_qpr.training.transformer import FinetuneSettings, finetune

            settings = FinetuneSettings(loss=loss, max_length=args.max_length, batch_size=args.batch_size,
                                        accumulate=args.accumulate, steps=args.steps, max_clusters=args.train_clusters,
                                        negatives=args.negatives, margin=args.margin, seed=args.seed)
            t0 = time.perf_counter()
            report = finetune(dataset_dir, run_dir, settings, resume=True, export_dir=onnx_dir)
            logger.info("%s/%s fine-tuned in %.0fs: %s", dataset, loss, time.perf_counter() - t0, report)
        out[f"MiniLM + {loss}"] = onnx_dir
    cnn = Path(args.cnn)
    if wanted(args, CNN_NAME) and (cnn / "config.json").exists():
        out[CNN_NAME] = cnn
    return out


def encode_cached(args, dataset: str, model_dir: Path, texts: list[str]) -> tuple[np.ndarray, float, str]:
    """Vectors of the subset, cached as .npy beside the models (keyed by model fingerprint)."""
    from hybrid_qpr.encoders import Encoder

    encoder = Encoder.load(model_dir)
    stem = args.models / "vectors" / f"{dataset}-{encoder.fingerprint}-{len(texts)}-{args.seed}"
    if stem.with_suffix(".npy").exists():
        meta = json.loads(stem.with_suffix(".json").read_text())
        return np.load(stem.with_suffix(".npy")), meta["seconds"], encoder.distance
    t0 = time.perf_counter()
    vectors = encoder.encode(texts, batch_size=64)
    seconds = time.perf_counter() - t0
    stem.parent.mkdir(parents=True, exist_ok=True)
    np.save(stem.with_suffix(".npy"), vectors)
    stem.with_suffix(".json").write_text(json.dumps({"seconds": seconds, "model": str(model_dir)}))
    return vectors, seconds, encoder.distance


# ---------------------------------------------------------------- speed
def speed(args, texts: list[str], results: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Fill ``results`` with the encoders not measured yet (a later run adds the CNN when it lands)."""
    from hybrid_qpr.encoders import Encoder

    texts = texts[: args.speed_texts]
    singles = texts[:200]

    def measure(name, encode_batch, encode_one):
        if name in results:
            return
        encode_batch(texts[:64])  # warm-up
        t0 = time.perf_counter()
        for i in range(0, len(texts), 64):
            encode_batch(texts[i : i + 64])
        rate = len(texts) / (time.perf_counter() - t0)
        lat = []
        for t in singles:
            s = time.perf_counter()
            encode_one(t)
            lat.append(time.perf_counter() - s)
        from hybrid_qpr.evaluation.evaluator import latency_summary

        summary = latency_summary(lat)
        results[name] = {"questions_per_s": rate, "latency_ms_median": summary["p50_ms"],
                         "latency_ms_p95": summary["p95_ms"]}
        logger.info("speed %s: %s", name, results[name])

    cnn = Path(args.cnn)
    if wanted(args, CNN_NAME) and (cnn / "config.json").exists():
        if args.only:  # a selective rerun re-measures the CNN (e.g. after the committed model changed)
            results.pop("CNN ONNX", None)
        enc = Encoder.load(cnn)
        measure("CNN ONNX", lambda b: enc.encode(b, batch_size=64), lambda t: enc.encode(t))
    if "MiniLM torch" not in results:
        import torch

        from hybrid_qpr.model.transformer import TransformerEmbedder

        embedder = TransformerEmbedder.from_dir(max_length=args.max_length).eval()
        with torch.inference_mode():
            measure("MiniLM torch", lambda b: embedder(embedder.collate(b)), lambda t: embedder(embedder.collate([t])))
        del embedder
    for name, d in (("MiniLM ONNX fp32", f"minilm-l{args.max_length}-onnx"), ("MiniLM ONNX int8", f"minilm-l{args.max_length}-onnx-int8")):
        if name in results:
            continue
        enc = Encoder.load(args.models / d)
        measure(name, lambda b: enc.encode(b, batch_size=64), lambda t: enc.encode(t))
    return results


# ---------------------------------------------------------------- report
def write_report(results: dict, out_dir: Path) -> None:
    from hybrid_qpr.artifacts import atomic_write

    with atomic_write(out_dir / "transformer-bench.json") as fh:
        json.dump(results, fh, indent=2)
    lines = []
    for dataset, rows in results["quality"].items():
        info = results["subsets"][dataset]
        lines.append(f"\n**{dataset}** (test: {info['queries']} queries, index subset of {info['corpus']} questions)\n")
        lines.append("| encoder | mode | H@1 | H@10 | MRR@20 | encode s |")
        lines.append("|---|---|---:|---:|---:|---:|")
        for name, row in rows.items():
            for mode in ("alone", "hybrid"):
                if mode not in row:
                    continue
                m = row[mode]
                lines.append(f"| {name} | {mode} | {m['H@1']:.3f} | {m['H@10']:.3f} | {m['MRR@20']:.3f} | "
                             f"{row.get('encode_seconds', 0):.0f} |")
    if results.get("speed"):
        lines.append("\n| encoder | questions/s (batch 64) | single-query ms (median) | p95 ms |")
        lines.append("|---|---:|---:|---:|")
        for name, s in results["speed"].items():
            lines.append(f"| {name} | {s['questions_per_s']:.0f} | {s['latency_ms_median']:.1f} | {s['latency_ms_p95']:.1f} |")
    with atomic_write(out_dir / "transformer-bench.md") as fh:
        fh.write("\n".join(lines) + "\n")
    plot(results, out_dir / "transformer-quality-speed.png")


def plot(results: dict, path: Path) -> None:
    """MRR@20 (kNN alone) against encode speed: one panel per dataset, one colour per encoder,
    BM25's MRR@20 as a dashed reference line (it is not an encoder, so it has no speed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    speed_of = {name: s["questions_per_s"] for name, s in results.get("speed", {}).items()}

    def rate(name: str) -> float | None:
        if "CNN" in name:
            return speed_of.get("CNN ONNX")
        return speed_of.get("MiniLM ONNX int8" if "int8" in name else "MiniLM ONNX fp32")

    datasets = list(results["quality"])
    encoders = sorted({n for rows in results["quality"].values() for n in rows if n != "BM25" and rate(n)})
    colours = {name: plt.get_cmap("tab10")(i) for i, name in enumerate(encoders)}
    markers = {name: ("s" if "CNN" in name else "D" if "int8" in name else "o") for name in encoders}
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.8), dpi=100, squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        rows = results["quality"][dataset]
        for name in encoders:
            if name in rows:
                ax.scatter(rate(name), rows[name]["alone"]["MRR@20"], color=colours[name], marker=markers[name],
                           s=36, label=name, edgecolors="black", linewidths=0.4, zorder=3)
        if "BM25" in rows:
            ax.axhline(rows["BM25"]["alone"]["MRR@20"], color="grey", linestyle="--", linewidth=1, label="BM25 (no encoder)")
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator([100, 300, 1000, 3000, 10000]))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_xlim(100, 15000)
        ax.grid(True, linewidth=0.3)
        ax.set_title(f"{dataset} test ({results['subsets'][dataset]['corpus']:,}-question index)", fontsize=9)
        ax.set_xlabel("encode throughput, questions/s (batch 64, 2 cores)", fontsize=8)
        ax.set_ylabel("MRR@20, kNN alone", fontsize=8)
        ax.tick_params(labelsize=7)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=7, frameon=False)
    fig.suptitle("Quality against encode speed (MiniLM variants at max_length 32; fine-tuned MiniLM shares fp32 speed)",
                 fontsize=8)
    fig.tight_layout(rect=(0, 0.12, 1, 0.95))
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)


# ---------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("/work/bench-data"), help="folder of dataset dirs (default /work/bench-data)")
    parser.add_argument("--datasets", nargs="+", default=["quora", "wikianswers"])
    parser.add_argument("--models", type=Path, default=Path("/work/bench-models"), help="where models go (outside the repo)")
    parser.add_argument("--cnn", default=str(REPO / "onnx" / "sdml-cnn-quora"), help="SDML CNN model dir")
    parser.add_argument("--out", type=Path, default=REPO / "docs", help="report folder (default docs/)")
    parser.add_argument("--losses", nargs="*", default=list(LOSSES), choices=LOSSES)
    parser.add_argument("--steps", type=int, default=150, help="optimizer steps per fine-tuning run (default 150)")
    parser.add_argument("--batch-size", type=int, default=32, help="pairs per micro-batch (default 32)")
    parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step (default 1)")
    parser.add_argument("--train-clusters", type=int, default=8000, help="train clusters sampled (default 8000)")
    parser.add_argument("--negatives", default="hard", choices=["random", "hard", "semi-hard"],
                        help="triplet negatives (default hard: semi-hard ones gave zero loss on MiniLM)")
    parser.add_argument("--margin", type=float, default=1.0,
                        help="triplet margin on unit vectors, squared L2 (default 1.0: with 0.5 the loss was 0 from step 1)")
    parser.add_argument("--max-length", type=int, default=32, help="token cap (default 32)")
    parser.add_argument("--queries", type=int, default=1000, help="test queries sampled (default 1000)")
    parser.add_argument("--corpus", type=int, default=20000, help="index subset size; larger than the corpus = all of it (default 20000)")
    parser.add_argument("--depth", type=int, default=100, help="depth of each list fed to RRF (default 100)")
    parser.add_argument("--speed-texts", type=int, default=2000, help="texts for the throughput test (default 2000)")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--only", nargs="*", default=[], help="evaluate only encoders whose name contains one of these")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args.models.mkdir(parents=True, exist_ok=True)
    cache = args.models / f"bench-results-{args.corpus}.json"
    results = json.loads(cache.read_text()) if cache.exists() else {}
    results.setdefault("quality", {})
    results.setdefault("subsets", {})
    results["settings"] = {k: str(relative_if_path(v)) for k, v in vars(args).items()}
    speed_texts: list[str] = []
    for dataset in args.datasets:
        dataset_dir = args.data / dataset
        corpus, queries, qrels = eval_subset(dataset_dir, args.queries, args.corpus, args.seed)
        doc_ids, texts = list(corpus), list(corpus.values())
        qids = list(queries)
        speed_texts = speed_texts or texts
        results["subsets"][dataset] = {"queries": len(qids), "corpus": len(doc_ids), "seed": args.seed}
        rows = results["quality"].setdefault(dataset, {})
        bm25 = bm25_run(doc_ids, texts, qids, [queries[q] for q in qids], args.depth)
        rows["BM25"] = {"alone": metrics(bm25, qrels)}
        logger.info("%s BM25: %s", dataset, rows["BM25"]["alone"])
        for name, model_dir in ensure_models(args, dataset, dataset_dir).items():
            vectors, seconds, distance = encode_cached(args, dataset, model_dir, texts)
            knn = knn_run(doc_ids, vectors, qids, distance, args.depth)
            rows[name] = {"model": repo_relative(model_dir), "encode_seconds": seconds, "alone": metrics(knn, qrels)}
            rows[name]["hybrid"] = metrics(fuse(bm25, knn, args.depth), qrels)
            logger.info("%s %s: %s", dataset, name, rows[name])
            cache.write_text(json.dumps(results, indent=2))
    if not args.skip_speed:
        results["speed"] = speed(args, speed_texts, results.get("speed", {}))
    cache.write_text(json.dumps(results, indent=2))
    write_report(results, args.out)
    print((args.out / "transformer-bench.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
