"""Train the CNN with one loss under a time cap and report per-epoch val MRR@20 / ROC AUC and epoch time.

python benchmarks/bench_training.py --dataset /work/bench-data/quora --loss triplet-euc-random --minutes 2
Same small configuration for every loss: V=20k, m=5k, emb 128, 256 channels, n=256, batch 512, Adam 1e-3.
"""

from __future__ import annotations

import argparse
import json
import tempfile

import torch

from hybrid_qpr.data.splits import load_split
from hybrid_qpr.model.cnn import CNNModel
from hybrid_qpr.model.losses import build_loss
from hybrid_qpr.text.tokenizer import Vocabulary
from hybrid_qpr.train import TrainConfig, train

from bench_losses import LOSSES  # noqa: E402  (name -> build_loss kind and options)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--loss", choices=sorted(LOSSES), default="sdml")
    ap.add_argument("--minutes", type=float, default=2.0)
    args = ap.parse_args()
    torch.set_num_threads(2)
    tr, va = load_split(args.dataset, "train"), load_split(args.dataset, "val")
    vocab = Vocabulary.build((q.text for c in tr for q in c.questions), top_words=20000, hash_bins=5000)
    torch.manual_seed(13)
    model = CNNModel(vocab, embedding_dim=128, channels=256, dim=256)
    cfg = TrainConfig(batch_size=512, epochs=50, patience=2, max_minutes=args.minutes, val_queries=1000)
    with tempfile.TemporaryDirectory() as run_dir:
        kind, options = LOSSES[args.loss]
        loss_fn = build_loss(kind, dim=256, cluster_sizes=[len(c.questions) for c in tr], **options)
        result = train(model, loss_fn, tr, va, run_dir, cfg, show_progress=False)
    print(json.dumps({"loss": args.loss, "minutes": args.minutes, "best_val_mrr@20": result.best_val_mrr,
                      "history": result.history}))


if __name__ == "__main__":
    main()
