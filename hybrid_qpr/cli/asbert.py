"""``hybrid-qpr asbert``: fine-tune MiniLM for answer selection (ASBERT), early-stopped on dev MAP."""

from __future__ import annotations

import json

import click

from hybrid_qpr.cli._common import BATCH, SEED, FiniteFloatRange, friendly_errors
from hybrid_qpr.model.choices import LABELLED_NEGATIVES
from hybrid_qpr.training.choices import ASBERT_LOSSES


@click.command()
@click.argument("datasets", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--dev", "dev_dirs", required=True, multiple=True, type=click.Path(exists=True, file_okay=False),
              help="Answer dataset whose val split gives the dev MAP for early stopping (e.g. data/wikiqa). Repeat it "
                   "to select on several: each MAP is logged and their mean (dev_mean) decides.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Run directory (model/, checkpoint.pt, best.pt, log.jsonl, report.json).")
@click.option("--loss", type=click.Choice(ASBERT_LOSSES), default="triplet", show_default=True,
              help="triplet (margin, squared L2, hard/semi-hard negatives), siamese (BCE on cosine) or SDML.")
@click.option("--negatives", type=click.Choice(LABELLED_NEGATIVES), default="hard", show_default=True,
              help="Triplet: which negative each question gets among its labelled wrong candidates and the batch's other answers.")
@click.option("--negatives-per-question", type=click.IntRange(min=1), default=1, show_default=True, help="Labelled wrong sentences drawn per question.")
@click.option("--margin", type=FiniteFloatRange(min=0), default=1.0, show_default=True, help="Triplet margin on squared L2 of unit vectors.")
@click.option("--epsilon", type=FiniteFloatRange(0, 1), default=0.3, show_default=True, help="SDML label smoothing.")
@click.option("--max-length", type=click.IntRange(min=1), default=128, show_default=True, help="Tokens per text (ASBERT: 128).")
@click.option("--batch-size", type=BATCH, default=16, show_default=True, help="Questions per step.")
@click.option("--steps", type=click.IntRange(min=1), default=300, show_default=True)
@click.option("--lr", type=FiniteFloatRange(min=0, min_open=True), default=2e-5, show_default=True, help="AdamW learning rate (linear warm-up over 10%, then decay).")
@click.option("--eval-every", type=click.IntRange(min=1), default=50, show_default=True, help="Steps between dev-MAP evaluations.")
@click.option("--patience", type=click.IntRange(min=1), default=3, show_default=True, help="Evaluations without a better dev MAP before stopping.")
@click.option("--max-minutes", type=FiniteFloatRange(min=0, min_open=True), default=None, help="Stop (after a dev evaluation) once this time has passed.")
@click.option("--export", "export_dir", type=click.Path(file_okay=False), default=None, help="Export the best model to ONNX here.")
@click.option("--int8", "quantize", is_flag=True, help="Quantize the export to int8.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--resume", is_flag=True,
              help="Continue from OUT/checkpoint.pt (same settings; --steps, --patience, --max-minutes may change).")
@friendly_errors
def asbert(datasets, dev_dirs, out_dir, loss, negatives, negatives_per_question, margin, epsilon, max_length, batch_size,
           steps, lr, eval_every, patience, max_minutes, export_dir, quantize, seed, resume) -> None:
    """Fine-tune MiniLM on the question -> correct sentence pairs of DATASETS (written by
    'dataset from-answers' or 'from-squad') with the question's labelled wrong candidates as
    hard negatives [needs torch and transformers].

    \b
    Example:
      hybrid-qpr asbert data/wikiqa data/trecqa --dev data/wikiqa --out runs/asbert-triplet --loss triplet --export models/asbert-triplet
      hybrid-qpr asbert data/wikiqa data/trecqa --dev data/wikiqa --dev data/trecqa --out runs/asbert-mean
    """
    from hybrid_qpr.training.asbert import AsbertSettings, train_asbert

    settings = AsbertSettings(loss=loss, max_length=max_length, batch_size=batch_size,
                              negatives_per_question=negatives_per_question, steps=steps, lr=lr, margin=margin,
                              negatives=negatives, epsilon=epsilon, eval_every=eval_every, patience=patience,
                              max_minutes=max_minutes, seed=seed)
    report = train_asbert(list(datasets), list(dev_dirs), out_dir, settings, export_dir=export_dir, quantize=quantize,
                          resume=resume)
    click.echo(json.dumps({k: v for k, v in report.items() if k != "history"}, indent=2))
