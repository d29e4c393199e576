"""Export a cross-encoder (``hybrid_qpr.model.cross_encoder``) to an ONNX reranker directory.

Writes ``model.onnx`` (inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` int64 [batch,
seq], dynamic axes; output ``scores`` float32 [batch], one logit per pair), ``tokenizer.json`` and
``config.json`` with ``kind: "cross-encoder"``, the pair truncation settings and the sha256 of
the tokenizer, which the loader (``hybrid_qpr.rerankers.cross_encoder``) checks. Every export is
checked: the fp32 graph must reproduce torch on awkward pairs within ``PARITY_TOLERANCE``
(batched and one pair at a time), or the export fails. int8 is dynamic quantization of the fp32
graph (``export.transformer.quantize_int8``); its quality is measured, not assumed
(docs/reranker.md).

Two ways to write the graph (``graph``): ``fused`` builds it from the weights with onnxruntime's
fused attention and layer-norm operators (``export.fused``; BERT backbones), ``torch`` traces the
model with ``torch.onnx.export`` (any backbone; attention left as a dozen small operators, slower:
docs/reranker.md, "Latency"). The default is ``fused`` where the backbone allows it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hybrid_qpr.artifacts import CROSS_ENCODER_KIND, atomic_directory, write_encoder_config
from hybrid_qpr.encoders import CONFIG_FILE, TOKENIZER_FILE
from hybrid_qpr.errors import ArtifactError
from hybrid_qpr.export.fused import unsupported, write_fused_cross_encoder
from hybrid_qpr.export.transformer import export_record, write_checked_onnx, write_dynamo_onnx
from hybrid_qpr.model.cross_encoder import CrossEncoder
from hybrid_qpr.rerankers.cross_encoder import INPUTS, OUTPUT  # the graph signature the loader checks
from hybrid_qpr.rerankers.pairs import tokenizer_sha256

KIND = CROSS_ENCODER_KIND
GRAPHS = ("fused", "torch")

# Awkward pairs every export is checked on (no text from any data set).
PARITY_PAIRS = [
    ("", ""),
    ("?", "python"),
    ("How do I reset my password?", "Open the settings page and choose 'forgot password'."),
    ("Ünïcödé çafé: ¿cómo estás?", "東京はどこですか Привет мир 🙂"),
    ("why " * 100, "because " * 300),
    ("what is the capital of france", "   Paris is the capital and largest city of France.   "),
]


class _Graph(torch.nn.Module):
    def __init__(self, model: CrossEncoder):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        return self.model.score(input_ids, attention_mask, token_type_ids)


def parity(model: CrossEncoder, model_path: Path, pairs: list[tuple[str, str]] | None = None) -> float:
    """Max |torch - onnxruntime| of the scores of ``pairs``, batched and one pair per run."""
    import onnxruntime as ort

    pairs = list(pairs or PARITY_PAIRS)
    queries, texts = [q for q, _ in pairs], [t for _, t in pairs]
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    expected = model.predict(queries, texts).numpy()

    def run(qs, ts):
        return session.run([OUTPUT], dict(zip(INPUTS, model.pairs.encode_pairs(qs, ts))))[0]

    batched = run(queries, texts)
    single = np.concatenate([run([q], [t]) for q, t in pairs])
    return float(max(np.abs(expected - batched).max(), np.abs(expected - single).max()))


def export_cross_encoder(model: CrossEncoder, out_dir: str | Path, *, quantize: bool = False,
                         training: dict[str, Any] | None = None, metrics: dict[str, Any] | None = None,
                         per_channel: bool = False, graph: str | None = None) -> dict[str, Any]:
    """Write ``out_dir`` (model.onnx, tokenizer.json, config.json) atomically; return the config.
    Raises ``ArtifactError`` if the fp32 graph differs from torch by more than ``PARITY_TOLERANCE``.
    ``per_channel``: int8 weight scales per output channel (``export.transformer.quantize_int8``);
    ``graph``: ``fused`` or ``torch`` (module docstring; None: fused where the backbone allows)."""
    if graph is None:
        graph = "torch" if unsupported(model) else "fused"
    if graph not in GRAPHS:
        raise ArtifactError(f"graph={graph!r}: allowed values are {', '.join(GRAPHS)}")
    out_dir = Path(out_dir)
    model.eval()

    def write(path: Path) -> None:
        if graph == "fused":
            write_fused_cross_encoder(model, path)
            return
        sample = model.collate(["a short question ?", "another question"], ["an answer .", "a longer answer sentence here"])
        write_dynamo_onnx(_Graph(model), {name: sample[name] for name in INPUTS}, OUTPUT, model.pairs.max_length, path)

    with atomic_directory(out_dir, marker=CONFIG_FILE) as work:
        os.chmod(work, 0o755)
        diff = write_checked_onnx(work, write, lambda path: parity(model, path), quantize, out_dir, per_channel)
        shutil.copyfile(model.pairs.path, work / TOKENIZER_FILE)
        config = {
            "kind": KIND,
            **model.settings(),
            "base_model": model.source,
            "vocab_size": model.pairs.vocab_size,
            "tokenizer_sha256": tokenizer_sha256(work / TOKENIZER_FILE),
            "graph": graph,
            **export_record(quantize, diff, training, metrics, per_channel),
        }
        config = write_encoder_config(work, config)
    return config


def export_cross_encoder_dir(model_dir: str | Path, out_dir: str | Path, *, quantize: bool = False,
                             per_channel: bool = False, graph: str | None = None) -> dict[str, Any]:
    """Export a saved cross-encoder (a run's ``model/``, or a run directory holding one)."""
    from hybrid_qpr.model.cross_encoder import SETTINGS_FILE
    from hybrid_qpr.model.transformer import read_settings

    model_dir = Path(model_dir)
    if (model_dir / "model" / SETTINGS_FILE).is_file():
        model_dir = model_dir / "model"
    if not (model_dir / SETTINGS_FILE).is_file():
        raise ArtifactError(f"{model_dir}: no {SETTINGS_FILE}; give a 'hybrid-qpr reranker train' run directory "
                            "or its model/")
    model = CrossEncoder.from_dir(model_dir)
    return export_cross_encoder(model, out_dir, quantize=quantize, per_channel=per_channel, graph=graph,
                                training=read_settings(model_dir, SETTINGS_FILE).get("training", {}))

