"""Export the SDML CNN to an encoder directory (model.onnx, tokenizer.json, config.json).

The directory is built beside the target and renamed into place
(``hybrid_qpr.artifacts.atomic_directory``), so a reader never sees a half-written model. After export, torch and onnxruntime outputs are compared (parity check).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from hybrid_qpr.artifacts import (atomic_directory, library_versions, load_checkpoint, read_encoder_config,
                                  write_encoder_config)
from hybrid_qpr.encoders import CONFIG_FILE, MODEL_FILE, TOKENIZER_FILE
from hybrid_qpr.export.clean import clean_onnx_file
from hybrid_qpr.model.cnn import CNNModel

PARITY_TEXTS = ["", "hello", "How do I learn Python?", "Что такое машинное обучение?", "why " * 200, "¿Qué es? 日本語の質問"]


def export_cnn(model: CNNModel, out_dir: str | Path, training: dict | None = None, metrics: dict | None = None,
               distance: str = "sqeuclidean") -> Path:
    """Write model.onnx, tokenizer.json and config.json; ``distance`` is the one the model was
    trained for (``"cosine"`` for MSEM; see hybrid_qpr.distance)."""
    from hybrid_qpr.distance import check_distance

    distance = check_distance(distance)
    out_dir = Path(out_dir)
    model.eval()
    with atomic_directory(out_dir, marker=CONFIG_FILE) as tmp:
        os.chmod(tmp, 0o755)
        example = model.collate(["how do i export a model ?", "hi"])
        torch.onnx.export(
            model, (example,), str(tmp / MODEL_FILE), input_names=["input_ids"], output_names=["embeddings"],
            dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "embeddings": {0: "batch"}}, opset_version=17,
            dynamo=False,
        )
        clean_onnx_file(tmp / MODEL_FILE)
        model.vocabulary.save(tmp / TOKENIZER_FILE)
        config = {
            "kind": "cnn", "dim": model.dim, "distance": distance,
            "max_length": model.vocabulary.max_length, "architecture": model.hparams,
            "vocabulary": {"words": len(model.vocabulary.words), "hash_bins": model.vocabulary.hash_bins},
            "versions": library_versions(("hybrid-qpr", "torch", "onnx", "onnxruntime")),
            "training": training or {}, "metrics": metrics or {},
        }
        write_encoder_config(tmp, config)  # parity loads the directory through Encoder.load
        write_encoder_config(tmp, {**config, "parity_max_abs_diff": parity(model, tmp)})
    return out_dir


@torch.no_grad()
def parity(model: CNNModel, model_dir: str | Path, texts: Sequence[str] = PARITY_TEXTS) -> float:
    """Max |torch - onnxruntime| over ``texts`` (encoded as one padded batch)."""
    from hybrid_qpr.encoders import Encoder

    model.eval()
    expected = model(model.collate(texts)).numpy()
    got = Encoder.load(model_dir).encode(list(texts))
    return float(np.abs(expected - got).max())


def export_run(run_dir: str | Path, out_dir: str | Path) -> dict:
    """Export the best checkpoint of a ``hybrid-qpr train`` run directory; returns config.json."""
    from hybrid_qpr.errors import ArtifactError
    from hybrid_qpr.text.tokenizer import Vocabulary

    run_dir = Path(run_dir)
    if not (run_dir / "best.pt").exists():
        raise ArtifactError(f"{run_dir}: no best.pt (is this a 'hybrid-qpr train' run directory?)")
    meta = json.loads((run_dir / "model.json").read_text(encoding="utf-8"))
    model = CNNModel(Vocabulary.load(run_dir / TOKENIZER_FILE), **meta["architecture"])
    best = load_checkpoint(run_dir / "best.pt", "train the run again with 'hybrid-qpr train'")
    model.load_state_dict(best["model"])
    # runs written before model.json recorded a distance were all squared-Euclidean (SDML/triplet)
    out = export_cnn(model, out_dir, training={**meta, "best_epoch": best["epoch"]}, metrics={"val": best["metrics"]},
                     distance=meta.get("distance", "sqeuclidean"))
    return read_encoder_config(out)
