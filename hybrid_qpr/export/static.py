"""Export the static encoder (``hybrid_qpr.model.static``) to an encoder directory.

The directory follows the transformer contract exactly (``kind: "transformer"``: inputs
``input_ids``/``attention_mask``, output ``embeddings`` pooled and L2-normalised in the graph,
MiniLM's ``tokenizer.json``), so ``Encoder.load`` serves it with onnxruntime and tokenizers
only, and ``hybrid-qpr mlcommons register`` runs it inside OpenSearch like MiniLM.

The token table is stored as float16 (half the file; the graph casts it back to float32 after
the lookup). The torch weights are rounded to float16 before the parity check, so the check
compares the very numbers that ship.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from hybrid_qpr.artifacts import atomic_directory, read_encoder_config, write_encoder_config
from hybrid_qpr.encoders import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE
from hybrid_qpr.export.transformer import export_record, parity, write_checked_onnx, write_dynamo_onnx
from hybrid_qpr.model.static import StaticEmbeddingModel, load_run


class _Graph(torch.nn.Module):
    def __init__(self, model: StaticEmbeddingModel):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model.embed(input_ids, attention_mask)


def _half_table(path: Path, weight: torch.Tensor) -> None:
    """Store the token table initializer as float16 and cast the lookup's rows back to float32."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    table = weight.detach().numpy()
    name = next(t.name for t in graph.initializer
                if tuple(t.dims) == table.shape and np.array_equal(numpy_helper.to_array(t), table))
    init = next(t for t in graph.initializer if t.name == name)
    init.CopyFrom(numpy_helper.from_array(table.astype(np.float16), name))
    gathers = [n for n in graph.node if n.op_type == "Gather" and n.input[0] == name]
    for node in gathers:
        half = node.output[0] + "_fp16"
        cast = helper.make_node("Cast", [half], [node.output[0]], to=TensorProto.FLOAT)
        node.output[0] = half
        graph.node.insert(list(graph.node).index(node) + 1, cast)
    onnx.save(model, str(path))


def export_static(model: StaticEmbeddingModel, out_dir: str | Path, *, training: dict[str, Any] | None = None,
                  metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write ``out_dir`` (model.onnx, tokenizer.json, config.json) atomically; return the config."""
    out_dir = Path(out_dir)
    model.eval()
    with torch.no_grad():
        model.embedding.weight.copy_(model.embedding.weight.half().float())

    def write(path: Path) -> None:
        sample = model.collate(["a short question ?", "another, somewhat longer question here"])
        write_dynamo_onnx(_Graph(model), dict(sample), "embeddings", model.max_length, path)
        _half_table(path, model.embedding.weight)

    with atomic_directory(out_dir, marker=CONFIG_FILE) as work:
        os.chmod(work, 0o755)
        diff = write_checked_onnx(work, write, lambda path: parity(model, path), False, out_dir)
        model.tokenizer.save(str(work / TOKENIZER_FILE))
        config = {"kind": "transformer", "dim": model.dim, "distance": "cosine", "max_length": model.max_length,
                  "pooling": "sum", "normalize": True, "architecture": {"static": model.hparams},
                  **export_record(False, diff, training, metrics)}
        config = write_encoder_config(work, config)
    return config


def export_static_run(run_dir: str | Path, out_dir: str | Path, metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """Export the best state of a ``distill_static`` run directory."""
    import json

    from hybrid_qpr.artifacts import load_checkpoint

    run_dir = Path(run_dir)
    meta = json.loads((run_dir / "model.json").read_text(encoding="utf-8"))
    best = load_checkpoint(run_dir / "best.pt", "train the run again")
    export_static(load_run(run_dir), out_dir, training={**meta, "best_epoch": best["epoch"]},
                  metrics={"val": best["metrics"], **(metrics or {})})
    return read_encoder_config(out_dir)
