"""``hybrid-qpr train``: train the SDML CNN (or a baseline loss) on a dataset directory."""

from __future__ import annotations

import click

from hybrid_qpr.cli._common import BATCH, SEED, cnn_size_options, FiniteFloatRange, friendly_errors
from hybrid_qpr.model.choices import NEGATIVES, TRIPLET_DISTANCES


@click.command()
@click.argument("dataset_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "run_dir", required=True, type=click.Path(file_okay=False), help="Run directory (checkpoints, best.pt).")
@click.option("--loss", type=click.Choice(["sdml", "softmax", "triplet", "msem"]), default="sdml", show_default=True,
              help="sdml (eps smoothing), softmax (= sdml with eps 0), triplet, msem (cosine matching + intent "
                   "classification; the model is then searched by cosine).")
@click.option("--epsilon", type=FiniteFloatRange(0, 1), default=0.3, show_default=True, help="SDML label smoothing.")
@click.option("--margin", type=FiniteFloatRange(min=0), default=0.5, show_default=True, help="Triplet margin.")
@click.option("--triplet-distance", type=click.Choice(TRIPLET_DISTANCES), default="euclidean", show_default=True)
@click.option("--negatives", type=click.Choice(NEGATIVES), default="random", show_default=True,
              help="Triplet in-batch negatives.")
@click.option("--msem-gamma", type=FiniteFloatRange(min=0, min_open=True), default=10.0, show_default=True, help="MSEM sigmoid scale γ.")
@click.option("--msem-alpha", type=FiniteFloatRange(-1, 1), default=0.5, show_default=True, help="MSEM cosine at even odds α.")
@click.option("--msem-weight", type=FiniteFloatRange(min=0), default=0.1, show_default=True, help="MSEM classification weight λ.")
@click.option("--msem-min-cluster-size", type=click.IntRange(min=1), default=5, show_default=True,
              help="MSEM: smaller clusters are pooled into the 'other' intent class.")
@click.option("--msem-max-classes", type=click.IntRange(min=1), default=1000, show_default=True,
              help="MSEM: only the largest N clusters get their own intent class.")
@cnn_size_options(vocab=50_000, hash_bins=5000, embedding_dim=300, channels=300, dim=300, layers=1)
@click.option("--batch-size", type=BATCH, default=512, show_default=True)
@click.option("--epochs", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--patience", type=click.IntRange(min=1), default=3, show_default=True, help="Epochs without val MRR gain before stopping.")
@click.option("--max-minutes", type=FiniteFloatRange(min=0, min_open=True), default=None, help="Stop after this much training time.")
@click.option("--seed", type=SEED, default=13, show_default=True)
@click.option("--resume", is_flag=True, help="Continue from RUN_DIR/checkpoint.pt.")
@friendly_errors
def train(dataset_dir, run_dir, loss, epsilon, margin, triplet_distance, negatives, msem_gamma, msem_alpha, msem_weight,
          msem_min_cluster_size, msem_max_classes, vocab, hash_bins, embedding_dim, channels,
          dim, layers, batch_size, epochs, patience, max_minutes, seed, resume) -> None:
    """Train on DATASET_DIR (written by 'hybrid-qpr dataset build'); best model in RUN_DIR/best.pt.

    \b
    Example:
      hybrid-qpr train data/quora --out runs/sdml --vocab 20000 --embedding-dim 128 --channels 256 --dim 256
      hybrid-qpr train data/quora --out runs/msem --loss msem --msem-weight 0.1
      hybrid-qpr export runs/sdml --kind cnn --out models/my-model
    """
    import json
    from pathlib import Path

    from hybrid_qpr.data.splits import load_split
    from hybrid_qpr.text.tokenizer import Vocabulary
    from hybrid_qpr.training.cnn import TrainConfig, prepare_cnn_run, train as run_training

    tr, va = load_split(dataset_dir, "train"), load_split(dataset_dir, "val")
    vocab_path = Path(run_dir) / "tokenizer.json"
    vocabulary = Vocabulary.load(vocab_path) if resume and vocab_path.exists() else Vocabulary.build(
        (q.text for c in tr for q in c.questions), top_words=vocab, hash_bins=hash_bins)
    arch = dict(embedding_dim=embedding_dim, channels=channels, dim=dim, layers=layers)
    options = {"sdml": {"epsilon": epsilon}, "softmax": {},
               "triplet": {"margin": margin, "triplet_distance": triplet_distance, "negatives": negatives},
               "msem": {"gamma": msem_gamma, "alpha": msem_alpha, "weight": msem_weight,
                        "min_cluster_size": msem_min_cluster_size, "max_classes": msem_max_classes}}[loss]
    model, loss_fn = prepare_cnn_run(run_dir, tr, vocabulary, architecture=arch, loss=loss, loss_options=options,
                                     seed=seed, dataset_dir=dataset_dir)
    config = TrainConfig(batch_size=batch_size, epochs=epochs, patience=patience, seed=seed, max_minutes=max_minutes)
    result = run_training(model, loss_fn, tr, va, run_dir, config, resume=resume,
                          on_epoch=lambda entry: click.echo(json.dumps(entry)))
    click.echo(json.dumps({"best_epoch": result.best_epoch, "best_val_mrr@20": result.best_val_mrr}))
