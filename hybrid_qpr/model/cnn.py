"""The SDML CNN question encoder (Bonadiman et al., W-NUT 2019, arXiv:1905.12786, section 4.1).

embeddings (1 + V + m ids, 0 = padding) -> Conv1d(window 5, "same" padding) + tanh (one or
more layers) -> global max pooling over real tokens only -> linear projection to n dims.

Padding rows of the embedding table are zero, so a real token's convolution output is the
same whatever the padded length. Max pooling masks padded positions; an empty question (no
real token) pools to the zero vector, and its embedding is the projection bias.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from hybrid_qpr.text.tokenizer import PAD_ID, Vocabulary


class CNNModel(nn.Module):
    def __init__(
        self,
        vocabulary: Vocabulary,
        embedding_dim: int = 300,
        channels: int = 300,
        dim: int = 300,
        window: int = 5,
        layers: int = 1,
    ):
        super().__init__()
        self.vocabulary = vocabulary
        self.hparams = dict(embedding_dim=embedding_dim, channels=channels, dim=dim, window=window, layers=layers)
        self.embedding = nn.Embedding(vocabulary.size, embedding_dim, padding_idx=PAD_ID)
        convs, width = [], embedding_dim
        for _ in range(layers):
            convs.append(nn.Conv1d(width, channels, window, padding=window // 2))
            width = channels
        self.convs = nn.ModuleList(convs)
        self.projection = nn.Linear(channels, dim)
        self.dim = dim

    def collate(self, texts: Sequence[str]) -> torch.Tensor:
        """Texts -> int64 ids [batch, seq] with the shared vocabulary (same code as inference)."""
        return torch.from_numpy(self.vocabulary.encode_batch(list(texts)))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mask = (input_ids != PAD_ID).unsqueeze(1)  # [B, 1, L]
        h = self.embedding(input_ids).transpose(1, 2)  # [B, E, L]
        for conv in self.convs:
            h = torch.tanh(conv(h)) * mask  # keep padded positions at zero for the next layer
        pooled = h.masked_fill(~mask, -2.0).amax(dim=2)  # tanh <= 1, so -2 never wins over a real token
        pooled = pooled * mask.any(dim=2).to(pooled.dtype)  # empty question -> zero vector
        return self.projection(pooled)
