"""Model directories zipped in ml-commons' custom-model layout: an encoder (``package_model``,
``TEXT_EMBEDDING``) or a cross-encoder reranker (``package_cross_encoder``, ``TEXT_SIMILARITY``),
each zip's bytes a function of the files alone, with the ``model_config`` ml-commons reads."""

from __future__ import annotations

import hashlib
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid_qpr.encoders import MODEL_FILE, TOKENIZER_FILE, read_config
from hybrid_qpr.errors import ArtifactError, ConfigError
from hybrid_qpr.mlcommons.graph import adapt_graph, save_for_ml_commons

# not "bert": that would make ml-commons feed a token_type_ids input the graph does not have
MODEL_TYPE = "minilm"


@dataclass(frozen=True)
class ModelPackage:
    """A zip ready for ``register``: its path, size, sha256 and the ml-commons ``model_config``."""

    path: Path
    size: int
    sha256: str
    dim: int
    model_config: dict[str, Any]
    function_name: str = "TEXT_EMBEDDING"


def ml_model_config(config: dict[str, Any]) -> dict[str, Any]:
    """The ml-commons ``model_config`` for a hybrid-qpr transformer ``config.json``."""
    return {
        "model_type": MODEL_TYPE,
        "embedding_dimension": int(config["dim"]),
        "framework_type": "sentence_transformers",
        "pooling_mode": "mean",
        "normalize_result": bool(config.get("normalize", False)),
        "all_config": json.dumps({"hybrid_qpr": {k: config.get(k) for k in ("dim", "distance", "max_length")}}),
    }


def _write_zip(out_zip: Path, files: dict[str, Path]) -> None:
    """A zip whose bytes depend on the files' contents only (fixed timestamps), so the same model
    always has the same sha256 and ``find_model`` recognises it on a second ``setup``."""
    from hybrid_qpr.artifacts import atomic_write

    with atomic_write(out_zip, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, path in files.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            archive.writestr(info, Path(path).read_bytes())


def package_model(model_dir: str | Path, out_zip: str | Path) -> ModelPackage:
    """Zip an exported transformer directory in the ml-commons custom-model layout
    (``model.onnx`` with the adapted graph, ``tokenizer.json``) atomically at ``out_zip``."""
    import tempfile

    model_dir, out_zip = Path(model_dir), Path(out_zip)
    config = read_config(model_dir)
    if config.get("kind") != "transformer":
        raise ConfigError(f"{model_dir}: kind {config.get('kind')!r}; ml-commons text embedding needs a transformer "
                          "encoder (export one with hybrid_qpr.export.transformer); the CNN uses hybrid-qpr's own "
                          "tokenizer, which ml-commons cannot run")
    for name in (MODEL_FILE, TOKENIZER_FILE):
        if not (model_dir / name).is_file():
            raise ArtifactError(f"{model_dir / name}: missing")
    out_zip.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_zip.parent) as work:
        adapted = Path(work) / MODEL_FILE
        adapt_graph(model_dir / MODEL_FILE, adapted)
        _write_zip(out_zip, {MODEL_FILE: adapted, TOKENIZER_FILE: model_dir / TOKENIZER_FILE})
    data = out_zip.read_bytes()
    return ModelPackage(out_zip, len(data), hashlib.sha256(data).hexdigest(), int(config["dim"]),
                        ml_model_config(config))


def package_cross_encoder(model_dir: str | Path, out_zip: str | Path) -> ModelPackage:
    """Zip a reranker directory (``hybrid-qpr reranker export``) as an ml-commons
    ``TEXT_SIMILARITY`` model: ml-commons tokenizes ``(query, document)`` as a BERT pair with
    ``tokenizer.json`` and feeds ``input_ids``, ``attention_mask`` and ``token_type_ids``, which
    is our graph's signature; its first output is the score. Only the IR version is lowered.
    ml-commons' tokenizer truncates with the tokenizer file's own rule, not hybrid-qpr's
    question-keeping one, so scores agree while a pair fits ``max_length`` (docs/reranker.md)."""
    import onnx

    from hybrid_qpr.rerankers.cross_encoder import read_reranker_config

    model_dir, out_zip = Path(model_dir), Path(out_zip)
    config = read_reranker_config(model_dir)
    out_zip.parent.mkdir(parents=True, exist_ok=True)
    import tempfile

    with tempfile.TemporaryDirectory(dir=out_zip.parent) as work:
        graph = Path(work) / MODEL_FILE
        save_for_ml_commons(onnx.load(str(model_dir / MODEL_FILE)), model_dir / MODEL_FILE, graph)
        _write_zip(out_zip, {MODEL_FILE: graph, TOKENIZER_FILE: model_dir / TOKENIZER_FILE})
    data = out_zip.read_bytes()
    model_config = {"model_type": "bert", "embedding_dimension": 1, "framework_type": "huggingface_transformers",
                    "all_config": json.dumps({"hybrid_qpr": {k: config.get(k) for k in ("kind", "max_length", "query_tokens")}})}
    return ModelPackage(out_zip, len(data), hashlib.sha256(data).hexdigest(), 1, model_config, "TEXT_SIMILARITY")
