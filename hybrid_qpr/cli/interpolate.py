"""``hybrid-qpr interpolate``: move a fine-tuned transformer back toward its base model (WiSE-FT), or
average two cross-encoders of one lineage."""

from __future__ import annotations

import json

import click

from hybrid_qpr.cli._common import FiniteFloatRange, friendly_errors


@click.command()
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Model directory to write (Hugging Face files + tokenizer + settings), as a finetune or reranker run's model/.")
@click.option("--weight", type=FiniteFloatRange(0.0, 1.0), default=0.5, show_default=True,
              help="Share of the fine-tuned weights: 1 keeps the fine-tuned model, 0 gives the base model back.")
@click.option("--base-model", type=click.Path(exists=True, file_okay=False), default=None,
              help="The model RUN_DIR was tuned from, or (a cross-encoder) the other reranker to average it with. "
                   "[default: the one its training settings record, else the bundled all-MiniLM-L6-v2]")
@click.option("--export", "export_dir", type=click.Path(file_okay=False), default=None,
              help="Also export the result to this ONNX model directory (as 'hybrid-qpr export' or 'reranker export').")
@click.option("--int8", is_flag=True, help="With --export: dynamic int8 quantization.")
@click.option("--checkpoint", type=click.Choice(["best", "last"]), default=None,
              help="A 'reranker train' RUN_DIR: take its best.pt or its last checkpoint.pt instead of its model/.")
@friendly_errors
def interpolate(run_dir: str, out_dir: str, weight: float, base_model: str | None, export_dir: str | None, int8: bool,
                checkpoint: str | None) -> None:
    """Mix a fine-tuned transformer's weights with its base model's (WiSE-FT), or average two
    cross-encoders (rerankers) trained from one another.

    Fine-tuning on one domain can cost quality on others (MiniLM tuned on Quora pairs loses
    on SQuAD answer retrieval). The straight line between the two sets of weights,
    (1 - w) x base + w x fine-tuned, keeps most of the in-domain gain and much of the base
    model's generality (Wortsman et al., CVPR 2022). For two rerankers of one lineage the
    midpoint can rank above both (a "model soup"). Choose --weight on validation data.

    RUN_DIR: a 'hybrid-qpr finetune' or 'hybrid-qpr reranker train' run (its model/ is used)
    or such a model directory.

    \b
    Examples:
      hybrid-qpr interpolate runs/minilm-ft --weight 0.5 --out models/minilm-ft-w50 --export models/minilm-ft-w50-onnx --int8
      hybrid-qpr interpolate runs/reranker-mined --checkpoint last --base-model runs/reranker --weight 0.5 \\
          --out models/rr-soup --export models/rr-soup-int8 --int8
    """
    from hybrid_qpr.training.interpolate import interpolate_model

    if int8 and export_dir is None:
        raise click.UsageError("--int8 needs --export DIR")
    settings = interpolate_model(run_dir, out_dir, weight, base_model, export_dir=export_dir, quantize=int8,
                                 checkpoint=checkpoint)
    report = {"out": out_dir, **settings["interpolation"]}
    if export_dir is not None:
        config = settings["export"]
        report["export"] = {"out": export_dir, "quantization": config["quantization"],
                            "parity_max_abs_diff_fp32": config["parity_max_abs_diff_fp32"]}
    click.echo(json.dumps(report, indent=2))
