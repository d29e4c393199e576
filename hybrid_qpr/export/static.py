"""Export the static encoder (``hybrid_qpr.model.static``) to an encoder directory.

The directory follows the transformer contract exactly (``kind: "transformer"``: inputs
``input_ids``/``attention_mask``, output ``embeddings`` pooled and L2-normalised in the graph,
MiniLM's ``tokenizer.json``), so ``Encoder.load`` serves it with onnxruntime and tokenizers
only, and ``hybrid-qpr mlcommons register`` runs it inside OpenSearch like MiniLM.

The token table is stored as int8 with one float scale per row (a quarter of the file: 8 MB
for MiniLM's 30,522 tokens at 256 dims); the graph turns the looked-up rows back into float32.
The torch weights are rounded the same way before the parity check, so the check compares the
very numbers that ship.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hybrid_qpr.artifacts import atomic_directory, read_encoder_config, write_encoder_config
from hybrid_qpr.encoders import CONFIG_FILE, TOKENIZER_FILE
from hybrid_qpr.export.transformer import EmbeddingGraph, export_record, parity, write_checked_onnx, write_dynamo_onnx
from hybrid_qpr.model.static import StaticEmbeddingModel, load_run


def int8_rows(weight: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric int8: ``table[i] * scales[i]`` approximates row ``i`` (error <= scale / 2)."""
    rows = weight.detach().numpy().astype(np.float32)
    scales = (np.abs(rows).max(axis=1) / 127.0).astype(np.float32)
    scales[scales == 0] = 1.0
    table = np.clip(np.rint(rows / scales[:, None]), -127, 127).astype(np.int8)
    return table, scales


def _int8_table(path: Path, weight: torch.Tensor) -> None:
    """Store the token table initializer as int8 rows + one float scale per row; the lookup
    becomes Gather(int8) -> Cast -> Mul(Gather(scales)), the same numbers as ``int8_rows``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    table, scales = int8_rows(weight)
    dequantized = table.astype(np.float32) * scales[:, None]
    name = next(t.name for t in graph.initializer
                if tuple(t.dims) == table.shape and np.allclose(numpy_helper.to_array(t), dequantized, atol=1e-6))
    init = next(t for t in graph.initializer if t.name == name)
    init.CopyFrom(numpy_helper.from_array(table, name))
    graph.initializer.extend([numpy_helper.from_array(scales, "hqpr_row_scales"),
                              numpy_helper.from_array(np.array([-1], dtype=np.int64), "hqpr_last_axis")])
    for node in [n for n in graph.node if n.op_type == "Gather" and n.input[0] == name]:
        ids, out = node.input[1], node.output[0]
        node.output[0] = out + "_int8"
        position = list(graph.node).index(node) + 1
        for offset, added in enumerate([
            helper.make_node("Cast", [out + "_int8"], [out + "_rows"], to=TensorProto.FLOAT),
            helper.make_node("Gather", ["hqpr_row_scales", ids], [out + "_scale"]),
            helper.make_node("Unsqueeze", [out + "_scale", "hqpr_last_axis"], [out + "_scale3"]),
            helper.make_node("Mul", [out + "_rows", out + "_scale3"], [out]),
        ]):
            graph.node.insert(position + offset, added)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def export_static(model: StaticEmbeddingModel, out_dir: str | Path, *, training: dict[str, Any] | None = None,
                  metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``out_dir`` (model.onnx, tokenizer.json, config.json) atomically; return the config."""
    out_dir = Path(out_dir)
    model.eval()
    table, scales = int8_rows(model.embedding.weight)
    with torch.no_grad():  # the torch side holds the shipped numbers, so parity checks those
        model.embedding.weight.copy_(torch.from_numpy(table.astype(np.float32) * scales[:, None]))

    def write(path: Path) -> None:
        sample = model.collate(["a short question ?", "another, somewhat longer question here"])
        write_dynamo_onnx(EmbeddingGraph(model), dict(sample), "embeddings", model.max_length, path)
        _int8_table(path, model.embedding.weight)

    with atomic_directory(out_dir, marker=CONFIG_FILE) as work:
        os.chmod(work, 0o755)
        diff = write_checked_onnx(work, write, lambda path: parity(model, path), False, out_dir)
        model.tokenizer.save(str(work / TOKENIZER_FILE))
        config = {"kind": "transformer", "dim": model.dim, "distance": "cosine", "max_length": model.max_length,
                  "pooling": "sum", "normalize": True, "architecture": {"static": model.hparams},
                  **export_record(False, diff, training, metrics), "quantization": "int8-rows"}
        config = write_encoder_config(work, config)
    return config


def export_static_run(run_dir: str | Path, out_dir: str | Path, metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """Export the best state of a ``distill_static`` run directory."""
    import json

    from hybrid_qpr.artifacts import load_checkpoint

    from hybrid_qpr.errors import ArtifactError

    run_dir = Path(run_dir)
    meta_file = run_dir / "model.json"
    meta = json.loads(meta_file.read_text(encoding="utf-8")) if meta_file.is_file() else {}
    if meta.get("loss") != "static-distill":
        raise ArtifactError(f"{run_dir}: not a static distillation run (its model.json should say loss "
                            "'static-distill'; train one with 'hybrid-qpr distill --student static')")
    best = load_checkpoint(run_dir / "best.pt", "train the run again")
    export_static(load_run(run_dir), out_dir, training={**meta, "best_epoch": best["epoch"]},
                  metrics={"val": best["metrics"], **(metrics or {})})
    return read_encoder_config(out_dir)
