"""The static encoder: one learned vector per WordPiece token, summed and L2-normalised.

A text's vector is the normalised sum of its tokens' rows (``[CLS]`` and ``[SEP]`` included,
so an empty text still has a direction). There is no attention and no convolution: encoding
is a table lookup and a sum, so it runs tens of thousands of questions a second on one
thread. The tokenizer is MiniLM's own (``tokenizer.json``), so the model runs wherever
MiniLM runs, including inside OpenSearch through ml-commons.

The table starts from MiniLM itself (``hybrid_qpr.training.static.token_start``: every token
through the teacher alone, projected on the teacher's principal directions, weighted down by
how common the token is) and is then trained to reproduce the teacher's sentence vectors.

With ``window > 0`` a light contextual layer is added: one depthwise-separable convolution
over the token vectors (residual, masked), so a token can borrow from its neighbours
("new york", "not good") at a small fraction of a transformer's cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn


class StaticEmbeddingModel(nn.Module):
    """Token table [vocab, dim] (+ optional contextual convolution), sum pooling, L2 norm."""

    def __init__(self, tokenizer_path: str | Path, vocab_size: int, dim: int = 256, *, window: int = 0,
                 max_length: int = 64):
        super().__init__()
        from hybrid_qpr.encoders.transformer import wordpiece_tokenizer

        self.tokenizer_path = Path(tokenizer_path)
        self.tokenizer = wordpiece_tokenizer(self.tokenizer_path, max_length)
        self.max_length, self.dim, self.window = int(max_length), int(dim), int(window)
        self.hparams = {"dim": self.dim, "window": self.window, "vocab_size": int(vocab_size),
                        "max_length": self.max_length}
        self.embedding = nn.Embedding(vocab_size, dim)
        if window:
            self.context = nn.Conv1d(dim, dim, window, padding=window // 2, groups=dim)
            self.mix = nn.Linear(dim, dim)
            nn.init.zeros_(self.mix.weight)  # starts as the plain static model
            nn.init.zeros_(self.mix.bias)

    def collate(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Tokenize exactly as inference does (MiniLM's tokenizer, truncation at ``max_length``)."""
        encodings = self.tokenizer.encode_batch(list(texts))
        return {"input_ids": torch.tensor([e.ids for e in encodings], dtype=torch.long),
                "attention_mask": torch.tensor([e.attention_mask for e in encodings], dtype=torch.long)}

    def embed(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The computation exported to ONNX."""
        mask = attention_mask.to(torch.float32).unsqueeze(-1)  # [B, L, 1]
        tokens = self.embedding(input_ids) * mask
        if self.window:
            context = self.context(tokens.transpose(1, 2)).transpose(1, 2)
            tokens = tokens + self.mix(torch.tanh(context)) * mask
        return nn.functional.normalize(tokens.sum(1), p=2.0, dim=1, eps=1e-12)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.embed(batch["input_ids"], batch["attention_mask"])

    @torch.no_grad()
    def encode(self, texts: Sequence[str], batch_size: int = 1024) -> torch.Tensor:
        """Embeddings of ``texts`` in eval mode; for parity checks and evaluation."""
        parts = [self(self.collate(texts[i:i + batch_size])) for i in range(0, len(texts), batch_size)]
        return torch.cat(parts) if parts else torch.zeros((0, self.dim))


def load_run(run_dir: str | Path) -> StaticEmbeddingModel:
    """The best state of a ``distill_static`` run directory (``model.json`` + ``best.pt``)."""
    import json

    from hybrid_qpr.artifacts import load_checkpoint
    from hybrid_qpr.errors import ArtifactError

    run_dir = Path(run_dir)
    meta_file = run_dir / "model.json"
    if not meta_file.is_file():
        raise ArtifactError(f"{run_dir}: no model.json (is this a static distillation run directory?)")
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    arch = meta["architecture"]
    model = StaticEmbeddingModel(run_dir / "tokenizer.json", arch["vocab_size"], arch["dim"], window=arch["window"],
                                 max_length=arch["max_length"])
    model.load_state_dict(load_checkpoint(run_dir / "best.pt", "train the run again")["model"])
    return model.eval()
