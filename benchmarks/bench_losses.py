"""SDML vs softmax vs triplet (EUC/SSD, random/hard) vs MSEM: same CNN, same time cap, test-split metrics.

nice -n 5 python benchmarks/bench_losses.py --dataset /work/bench-data/quora --minutes 3

Every loss trains the committed model's configuration (onnx/sdml-cnn-quora/card.json: V=20k,
m=5k, emb 128, 256 channels, window 5, n=256, batch 512, Adam 1e-3, seed 13) under the same
training-time cap with early stopping on val MRR@20; the best checkpoint is exported to ONNX in
a temporary directory and evaluated on the TEST split by _common.exact_search_quality (as bench_encode.py): H@1, H@10,
MRR@20 (retrieve 20, own id dropped) of every test query against ALL questions of
beir/corpus.jsonl, exact search by the distance the loss trains for. Results are printed as a
table and written to benchmarks/results/losses-quora.json (rewritten after every loss).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from _common import command_line
from hybrid_qpr.artifacts import write_json
from _common import exact_search_quality
from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.data.splits import load_split
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.export.onnx import export_run
from hybrid_qpr.text.tokenizer import Vocabulary
from hybrid_qpr.training.cnn import TrainConfig, prepare_cnn_run, train

ARCH = dict(embedding_dim=128, channels=256, dim=256, layers=1)
LOSSES = {  # name -> (build_loss kind, options)
    "sdml": ("sdml", {"epsilon": 0.3}),
    "softmax": ("softmax", {}),
    "triplet-euc-random": ("triplet", {"margin": 0.5, "triplet_distance": "euclidean", "negatives": "random"}),
    "triplet-euc-hard": ("triplet", {"margin": 0.5, "triplet_distance": "euclidean", "negatives": "hard"}),
    "triplet-ssd-random": ("triplet", {"margin": 0.5, "triplet_distance": "squared", "negatives": "random"}),
    "triplet-ssd-hard": ("triplet", {"margin": 0.5, "triplet_distance": "squared", "negatives": "hard"}),
    "msem": ("msem", {"gamma": 10.0, "alpha": 0.5, "weight": 0.1, "min_cluster_size": 5, "max_classes": 1000}),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--minutes", type=float, default=3.0, help="training-time cap per loss")
    ap.add_argument("--losses", default=",".join(LOSSES), help="comma-separated subset of " + ",".join(LOSSES))
    ap.add_argument("--out", default="benchmarks/results/losses-quora.json")
    args = ap.parse_args()
    names = args.losses.split(",")
    unknown = [n for n in names if n not in LOSSES]
    if unknown:
        ap.error(f"unknown loss(es) {unknown}; allowed: {', '.join(LOSSES)}")
    torch.set_num_threads(2)
    tr, va = load_split(args.dataset, "train"), load_split(args.dataset, "val")
    corpus, queries, qrels = load_beir(f"{args.dataset}/beir", "test")
    vocab = Vocabulary.build((q.text for c in tr for q in c.questions), top_words=20000, hash_bins=5000)
    cfg = TrainConfig(batch_size=512, lr=1e-3, epochs=50, patience=3, seed=13, max_minutes=args.minutes, val_queries=1000)
    report = {"command": command_line(),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch threads",
              "config": {"vocab_top_words": 20000, "hash_bins": 5000, **ARCH, "window": 5, "batch_size": cfg.batch_size,
                         "optimizer": "Adam lr 1e-3", "seed": cfg.seed, "max_minutes": args.minutes,
                         "patience": cfg.patience, "val_queries": cfg.val_queries},
              "results": {}}
    for name in names:
        kind, options = LOSSES[name]
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp) / "run"
            model, loss_fn = prepare_cnn_run(run_dir, tr, vocab, architecture=ARCH, loss=kind, loss_options=options,
                                             seed=cfg.seed, dataset_dir=args.dataset)
            t0 = time.monotonic()
            result = train(model, loss_fn, tr, va, run_dir, cfg, show_progress=False)
            wall = time.monotonic() - t0
            export_run(run_dir, Path(tmp) / "onnx")
            quality = exact_search_quality(Encoder.load(Path(tmp) / "onnx", threads=2), corpus, queries, qrels)
        epoch_s = [h["epoch_seconds"] for h in result.history]
        report["results"][name] = {
            "loss": kind, "options": options, "test": quality, "best_epoch": result.best_epoch,
            "best_val_mrr@20": result.best_val_mrr, "epochs": len(result.history),
            "mean_epoch_seconds": sum(epoch_s) / len(epoch_s), "train_wall_seconds": wall, "history": result.history,
        }
        print(json.dumps({"loss": name, **{k: quality[k] for k in ("H@1", "H@10", "MRR@20")},
                          "best_epoch": result.best_epoch, "epochs": len(result.history)}), flush=True)
        write_json(args.out, report)
    print("\n| loss | test H@1 | test H@10 | test MRR@20 | best val MRR@20 | epochs (best) | s/epoch |")
    print("|---|---|---|---|---|---|---|")
    for name, r in report["results"].items():
        t = r["test"]
        print(f"| {name} | {t['H@1']:.3f} | {t['H@10']:.3f} | {t['MRR@20']:.3f} | {r['best_val_mrr@20']:.3f} | "
              f"{r['epochs']} ({r['best_epoch']}) | {r['mean_epoch_seconds']:.1f} |")


if __name__ == "__main__":
    main()
