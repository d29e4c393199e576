"""A cross-encoder (monoBERT, Nogueira and Cho 2019): question and candidate read together.

``[CLS] question [SEP] candidate [SEP]`` (``hybrid_qpr.rerankers.pairs``) goes through a BERT-like
encoder (default: the bundled all-MiniLM-L6-v2) and a linear head turns a pooled vector into one
relevance score (a logit). Unlike a bi-encoder, every layer attends across both texts, which is
why it reranks well and why it only scores a few candidates per query.

Pooling, i.e. what the head reads (``pooling``):

* ``segments`` (the default): the mean vector of the question's tokens and of the candidate's
  tokens, each L2-normalised, multiplied elementwise; the head's weights start at
  ``SEGMENT_SCALE``, so the untrained model scores ``20 x cosine`` of the two segments, read
  *together* (every layer attends across both texts). all-MiniLM-L6-v2 was fine-tuned (1B
  sentence pairs) through exactly such mean vectors, so this start already ranks: WikiQA dev
  MAP 0.62 on 40 questions before any step, against 0.40 for ``mean`` with a random head
  (measured, docs/reranker.md). On a CPU budget of a few hundred steps that head start is
  the difference between a reranker and noise.
* ``mean``: the mean over all the pair's tokens, a random ``Linear(hidden, 1)`` on top.
* ``cls``: the ``[CLS]`` vector (monoBERT's choice; MiniLM's ``[CLS]`` got no training signal
  in its sentence-embedding fine-tuning).

Files of a saved model directory (:meth:`CrossEncoder.save`, read by :meth:`CrossEncoder.from_dir`
and exported by ``hybrid_qpr.export.cross_encoder``): the Hugging Face backbone files,
``tokenizer.json``, ``head.safetensors`` (the scoring head) and ``hybrid_qpr_cross_encoder.json``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hybrid_qpr.artifacts import atomic_directory
from hybrid_qpr.errors import ArtifactError, ConfigError
from hybrid_qpr.model.choices import POOLINGS, Pooling  # noqa: F401  (named here before)
from hybrid_qpr.model.transformer import TOKENIZER_FILE, load_backbone, mean_pool, read_settings
from hybrid_qpr.rerankers.pairs import DEFAULT_MAX_LENGTH, DEFAULT_QUERY_TOKENS, PairTokenizer

SETTINGS_FILE = "hybrid_qpr_cross_encoder.json"
HEAD_FILE = "head.safetensors"
SEGMENT_SCALE = 20.0  # the head's start: 20 x cosine, a logit range that suits a softmax over a group


class CrossEncoder(nn.Module):
    """Backbone + pooling + ``Linear(hidden, 1)``: pairs in, one score per pair out."""

    def __init__(self, backbone: nn.Module, tokenizer_path: str | Path, *, max_length: int = DEFAULT_MAX_LENGTH,
                 query_tokens: int = DEFAULT_QUERY_TOKENS, pooling: Pooling = "mean", source: str = ""):
        super().__init__()
        if pooling not in POOLINGS:
            raise ConfigError(f"pooling={pooling!r}: allowed values are {', '.join(POOLINGS)}")
        self.backbone = backbone
        self.pairs = PairTokenizer(tokenizer_path, max_length, query_tokens)
        self.pooling = pooling
        self.source = source
        hidden = int(backbone.config.hidden_size)
        self.dropout = nn.Dropout(float(getattr(backbone.config, "hidden_dropout_prob", 0.1)))
        self.head = nn.Linear(hidden, 1)
        if pooling == "segments":  # starts as SEGMENT_SCALE x cosine of the two segments' mean vectors
            nn.init.constant_(self.head.weight, SEGMENT_SCALE)
        else:
            nn.init.normal_(self.head.weight, std=0.02)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_dir(cls, model_dir: str | Path | None = None, *, max_length: int | None = None,
                 query_tokens: int | None = None, pooling: Pooling | None = None) -> "CrossEncoder":
        """A saved cross-encoder (with its head and settings), or a plain Hugging Face encoder
        (``None``: the bundled all-MiniLM-L6-v2) with a fresh head."""
        backbone, model_dir = load_backbone(model_dir)
        settings = read_settings(model_dir, SETTINGS_FILE)
        model = cls(backbone, model_dir / TOKENIZER_FILE,
                    max_length=max_length or int(settings.get("max_length", DEFAULT_MAX_LENGTH)),
                    query_tokens=query_tokens or int(settings.get("query_tokens", DEFAULT_QUERY_TOKENS)),
                    pooling=pooling or settings.get("pooling", "mean"),
                    source=str(settings.get("source", model_dir)))
        if (model_dir / HEAD_FILE).is_file():
            from safetensors.torch import load_file

            try:
                model.head.load_state_dict(load_file(str(model_dir / HEAD_FILE)))
            except Exception as exc:  # safetensors and load_state_dict raise several types
                raise ArtifactError(f"{model_dir / HEAD_FILE}: cannot load the scoring head ({exc})") from exc
        return model

    @property
    def tokenizer_path(self) -> Path:
        return self.pairs.path

    def collate(self, queries: Sequence[str], texts: Sequence[str]) -> dict[str, torch.Tensor]:
        ids, mask, types = self.pairs.encode_pairs(queries, texts)
        return {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask),
                "token_type_ids": torch.from_numpy(types)}

    def score(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        """The computation exported to ONNX: one logit per pair, shape [N]."""
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids).last_hidden_state
        if self.pooling == "segments":
            question = nn.functional.normalize(mean_pool(hidden, attention_mask * (1 - token_type_ids)), dim=-1)
            candidate = nn.functional.normalize(mean_pool(hidden, attention_mask * token_type_ids), dim=-1)
            pooled = question * candidate
        elif self.pooling == "mean":
            pooled = mean_pool(hidden, attention_mask)
        else:
            pooled = hidden[:, 0]
        return self.head(self.dropout(pooled)).squeeze(-1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.score(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])

    def score_pairs(self, queries: Sequence[str], texts: Sequence[str], buckets: int = 1) -> torch.Tensor:
        """One score per pair, in input order. ``buckets > 1`` sorts the pairs by length and
        scores them in that many chunks, each padded only to its own longest pair: the same
        scores (padding is masked) for fewer padded tokens, which is most of a step's cost
        when answer lengths vary (docs/training.md, "Step cost")."""
        pairs = self.pairs.pair_list(queries, texts)
        if buckets <= 1 or len(pairs) <= 1:
            ids, mask, types = self.pairs.pad(pairs)
            return self.score(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(types))
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))
        size = -(-len(pairs) // buckets)
        parts = []
        for start in range(0, len(order), size):
            ids, mask, types = self.pairs.pad([pairs[i] for i in order[start : start + size]])
            parts.append(self.score(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(types)))
        scores = torch.cat(parts)
        return scores[torch.argsort(torch.tensor(order))]  # back to input order

    @torch.no_grad()
    def predict(self, queries: Sequence[str], texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
        """Scores in eval mode (no dropout), for dev evaluation and parity checks."""
        was_training = self.training
        self.eval()
        try:
            parts = [self(self.collate(queries[i : i + batch_size], texts[i : i + batch_size]))
                     for i in range(0, len(texts), batch_size)]
        finally:
            self.train(was_training)
        return torch.cat(parts) if parts else torch.zeros(0)

    def settings(self) -> dict[str, Any]:
        return {"max_length": self.pairs.max_length, "query_tokens": self.pairs.query_tokens,
                "pooling": self.pooling, "source": self.source}

    def save(self, out_dir: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """Write a directory :meth:`from_dir` reads back, atomically."""
        from safetensors.torch import save_file

        out_dir = Path(out_dir)
        with atomic_directory(out_dir, marker=SETTINGS_FILE) as work:
            os.chmod(work, 0o755)
            self.backbone.save_pretrained(str(work), safe_serialization=True)
            (work / TOKENIZER_FILE).write_bytes(self.pairs.path.read_bytes())
            save_file({k: v.detach().contiguous() for k, v in self.head.state_dict().items()}, str(work / HEAD_FILE))
            settings = {**self.settings(), **(extra or {})}
            (work / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")
        return out_dir

