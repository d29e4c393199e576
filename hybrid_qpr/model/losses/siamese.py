"""Siamese binary cross-entropy loss on pair labels (the ASBERT siamese objective).

ASBERT (Shonibare, "ASBERT: Siamese and Triplet network embedding for open question
answering", arXiv:2104.08558, 2021) encodes both texts of a pair with one shared network
and trains it to tell matching from non-matching pairs with binary cross-entropy on the
similarity of the two embeddings. With u, v the embeddings and y ∈ {0, 1} the pair label:

    s    = cos(u, v)
    p    = σ(γ · (s − α))                      (similarity → match probability)
    loss = −[ y · log p + (1 − y) · log(1 − p) ]

γ (``scale``) sharpens the sigmoid and α (``threshold``) is the cosine at which a pair is
even odds; the mapping of cosine to a probability is our choice (the paper fixes only the
binary cross-entropy over labelled pairs).

Pair labels come from one of two places:

* ``labels`` given: ``anchors[i]`` and ``positives[i]`` form pair i with label
  ``labels[i]`` (e.g. the ``is_duplicate`` column of Quora);
* ``labels`` omitted (the trainer's usual batches of paraphrase pairs, no two pairs from one
  cluster): every (i, j) in the batch is a pair, labelled 1 on the diagonal and 0 elsewhere
  (in-batch negatives). Positives and negatives are averaged separately and the two means
  added, so the N−1 negatives per anchor do not drown the one positive.

Example::

    loss = SiameseBCELoss()(model(batch_q1), model(batch_q2))
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from hybrid_qpr.errors import ConfigError


class SiameseBCELoss(nn.Module):
    def __init__(self, scale: float = 10.0, threshold: float = 0.5):
        super().__init__()
        if scale <= 0:
            raise ConfigError(f"scale={scale}: must be > 0 (it multiplies the cosine inside the sigmoid)")
        if not -1.0 < threshold < 1.0:
            raise ConfigError(f"threshold={threshold}: must be a cosine strictly between -1 and 1")
        self.scale = float(scale)
        self.threshold = float(threshold)

    def logits(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        """γ(cos(u_i, v_j) − α) for every pair in the batch: [N, N]."""
        cos = F.normalize(anchors, dim=1) @ F.normalize(positives, dim=1).T
        return self.scale * (cos - self.threshold)

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if anchors.shape != positives.shape or anchors.dim() != 2:
            raise ConfigError(f"anchors {tuple(anchors.shape)} and positives {tuple(positives.shape)} must both be [N, d]")
        if labels is not None:
            cos = F.cosine_similarity(anchors, positives, dim=1)
            return F.binary_cross_entropy_with_logits(self.scale * (cos - self.threshold), labels.to(cos.dtype))
        logits = self.logits(anchors, positives)
        n = logits.shape[0]
        eye = torch.eye(n, dtype=torch.bool, device=logits.device)
        target = eye.to(logits.dtype)
        per_pair = F.binary_cross_entropy_with_logits(logits, target, reduction="none")
        positive = per_pair[eye].mean()
        if n == 1:
            return positive
        return positive + per_pair[~eye].mean()
