"""Export a (fine-tuned or untouched) transformer sentence encoder to an ONNX model directory.

Writes ``model.onnx`` (inputs ``input_ids``/``attention_mask`` int64 [batch, seq] with
dynamic batch and sequence axes; output ``embeddings`` float32 [batch, dim], mean pooling
and L2 normalisation inside the graph), ``tokenizer.json`` (the WordPiece tokenizer for the
``tokenizers`` library, truncation and padding already set) and ``config.json`` with
``kind: "transformer"`` (see docs/ARCHITECTURE.md). Inference then needs onnxruntime and
tokenizers only (``hybrid_qpr.encoders.transformer``).

Every export is checked: the fp32 graph must reproduce the torch model on a set of
awkward sentences (empty, one word, very long, non-ASCII) within ``PARITY_TOLERANCE``,
or the export fails. int8 dynamic quantization (weights int8, activations quantized on
the fly by onnxruntime) is optional; its quality loss is measured by the benchmark
(``benchmarks/bench_transformer.py``), not assumed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hybrid_qpr.artifacts import atomic_directory, library_versions, recorded_path, write_encoder_config
from hybrid_qpr.encoders import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE
from hybrid_qpr.errors import ArtifactError
from hybrid_qpr.export.clean import clean_onnx_file
from hybrid_qpr.model.transformer import TransformerEmbedder, read_settings

logger = logging.getLogger(__name__)

PARITY_TOLERANCE = 1e-4
OPSET = 18

# Awkward inputs every export is checked on (no text from any data set).
PARITY_TEXTS = [
    "",
    "?",
    "python",
    "How do I reset my password?",
    "What is the fastest way to learn to play the guitar as an adult beginner?",
    "Ünïcödé çafé: ¿cómo estás? 東京はどこですか Привет мир 🙂",
    "why " * 300,
    "   leading and trailing spaces   ",
]


class EmbeddingGraph(torch.nn.Module):
    """The exported function: token ids and mask in, pooled embeddings out (any module with
    ``embed(input_ids, attention_mask)``: the transformer, the static token table)."""

    def __init__(self, embedder: torch.nn.Module):
        super().__init__()
        self.embedder = embedder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.embedder.embed(input_ids, attention_mask)


def write_dynamo_onnx(module: torch.nn.Module, inputs: dict[str, torch.Tensor], output: str, max_seq: int,
                      path: Path) -> None:
    """torch.export-based ONNX export of ``module(*inputs.values())`` with dynamic batch and
    sequence axes on every input (the TorchScript tracer bakes the mask shape into the graph
    and drifts by ~0.1 on other shapes, so it is not used)."""
    from torch.export import Dim

    batch, seq = Dim("batch", min=1, max=65536), Dim("seq", min=1, max=max_seq)
    with torch.no_grad():
        program = torch.onnx.export(
            module.eval(),
            tuple(inputs.values()),
            input_names=list(inputs),
            output_names=[output],
            dynamic_shapes={name: {0: batch, 1: seq} for name in inputs},
            opset_version=OPSET,
            dynamo=True,
            verbose=False,
        )
    program.save(str(path), external_data=False)


def _write_onnx(embedder: TransformerEmbedder, path: Path) -> None:
    sample = embedder.collate(["a short question ?", "another, somewhat longer question here"])
    write_dynamo_onnx(EmbeddingGraph(embedder), dict(sample), "embeddings", embedder.max_length, path)


def parity(embedder: TransformerEmbedder, model_path: Path, texts: list[str] | None = None) -> float:
    """Max abs difference between torch and onnxruntime embeddings on ``texts``."""
    import onnxruntime as ort

    from hybrid_qpr.encoders.transformer import tokenize_batch

    texts = list(texts or PARITY_TEXTS)
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    expected = embedder.encode(texts).numpy()
    ids, mask = tokenize_batch(embedder.tokenizer, texts)
    (got,) = session.run(["embeddings"], {"input_ids": ids, "attention_mask": mask})
    single = np.concatenate([session.run(["embeddings"], dict(zip(("input_ids", "attention_mask"),
                                                                  tokenize_batch(embedder.tokenizer, [t]))))[0]
                             for t in texts])
    return float(max(np.abs(expected - got).max(), np.abs(expected - single).max()))


def quantize_int8(src: Path, dst: Path, per_channel: bool = False) -> None:
    """Dynamic int8 quantization of the MatMul/Gemm weights (onnxruntime.quantization), one scale
    per weight tensor, or per output channel with ``per_channel``. Measured on the ASBERT triplet
    model (WikiQA dev MAP, each question's own candidates): fp32 0.747, per tensor 0.734, per
    channel 0.760, at the same size (docs/answers.md). Fused ``Attention`` nodes (``export.fused``)
    become ``QAttention``; the default tensor type stands in where onnx's shape inference cannot
    type the output of an onnxruntime-only operator (every tensor of these graphs is float)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8, per_channel=per_channel,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def write_checked_onnx(work: Path, write: Callable[[Path], None], check: Callable[[Path], float], quantize: bool,
                       out_dir: Path, per_channel: bool = False) -> float:
    """``write`` the fp32 graph in ``work``, ``check`` it against torch (the max abs difference
    must be <= ``PARITY_TOLERANCE``, or ``ArtifactError``), quantize it to int8 if asked, and
    leave ``work/model.onnx``; return the fp32 difference."""
    fp32 = work / ("model.fp32.onnx" if quantize else MODEL_FILE)
    write(fp32)
    diff = check(fp32)
    if not diff <= PARITY_TOLERANCE:
        raise ArtifactError(f"{out_dir}: ONNX export differs from torch by {diff:.2e} > {PARITY_TOLERANCE:.0e}")
    logger.info("ONNX parity with torch: max abs diff %.2e", diff)
    if quantize:
        quantize_int8(fp32, work / MODEL_FILE, per_channel)
        fp32.unlink()
    clean_onnx_file(work / MODEL_FILE)  # no stack traces naming this machine's paths in the shipped file
    return diff


def export_record(quantize: bool, diff: float, training: dict[str, Any] | None,
                  metrics: dict[str, Any] | None, per_channel: bool = False) -> dict[str, Any]:
    """The config fields every exported transformer graph carries: how it was made and checked."""
    return {
        "quantization": ("int8-dynamic-per-channel" if per_channel else "int8-dynamic") if quantize else None,
        "parity_max_abs_diff_fp32": diff,
        "versions": library_versions(("hybrid-qpr", "torch", "transformers", "onnx", "onnxruntime", "tokenizers")),
        "training": training or {},
        "metrics": metrics or {},
    }


def export_transformer(
    embedder: TransformerEmbedder,
    out_dir: str | Path,
    *,
    quantize: bool = False,
    training: dict[str, Any] | None = None,
    metrics: dict[str, Any] | None = None,
    per_channel: bool = False,
) -> dict[str, Any]:
    """Write ``out_dir`` (model.onnx, tokenizer.json, config.json) atomically; return the config.
    ``per_channel``: int8 scales per output channel (``quantize_int8``).

    Raises ``ArtifactError`` if the fp32 graph differs from torch by more than
    ``PARITY_TOLERANCE`` on ``PARITY_TEXTS``.
    """
    out_dir = Path(out_dir)
    embedder.eval()
    with atomic_directory(out_dir, marker=CONFIG_FILE) as work:
        os.chmod(work, 0o755)
        diff = write_checked_onnx(work, lambda path: _write_onnx(embedder, path), lambda path: parity(embedder, path),
                                  quantize, out_dir, per_channel)
        embedder.tokenizer.save(str(work / TOKENIZER_FILE))
        config = {
            "kind": "transformer",
            "dim": embedder.dim,
            "distance": embedder.distance,
            "max_length": embedder.max_length,
            "pooling": "mean",
            "normalize": embedder.normalize,
            "base_model": recorded_path(embedder.source) if embedder.source else "",  # never this machine's path
            **export_record(quantize, diff, training, metrics, per_channel),
        }
        config = write_encoder_config(work, config)
    return config


def export_transformer_dir(model_dir: str | Path | None, out_dir: str | Path, *, max_length: int | None = None,
                           normalize: bool | None = None, quantize: bool = False,
                           per_channel: bool = False) -> dict[str, Any]:
    """Load a base or fine-tuned model directory (None = bundled MiniLM) and export it."""
    embedder = TransformerEmbedder.from_dir(model_dir, max_length=max_length, normalize=normalize)
    training = read_settings(model_dir).get("training", {}) if model_dir is not None else {}
    return export_transformer(embedder, out_dir, quantize=quantize, training=training, per_channel=per_channel)
