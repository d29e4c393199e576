"""The three fine-tuning losses with labelled wrong answers as extra negatives (answer selection).

In answer selection every question comes with candidate sentences labelled wrong (WikiQA,
TrecQA), or the other sentences of its paragraph (SQuAD). ASBERT (Shonibare 2021,
arXiv:2104.08558) trains its triplet network on question -> correct sentence pairs with
negatives drawn from those candidates; the in-batch positives of the other questions are
negatives too. Each loss here takes

* ``anchors`` [N, d]: the questions, ``positives`` [N, d]: a correct sentence of each;
* ``negatives`` [M, d]: labelled wrong sentences, ``owner`` [M]: the question (row of
  ``anchors``) each one belongs to. M may be 0: the losses then equal the in-batch ones of
  ``hybrid_qpr.model.losses`` (triplet, siamese, SDML).

Candidates of anchor i are the positives j ≠ i and every labelled negative: its own
(``owner == i``, the hard negatives) and the other questions' (certainly not its answer in
ReQA/WikiQA practice, as they come from other questions' candidate lists).

* ``TripletNegativesLoss``: ``1/N Σ_i max(0, d(a_i, p_i) − d(a_i, n_i) + margin)``, d the squared
  Euclidean distance, n_i the hard (closest) or semi-hard (closest farther than p_i; FaceNet)
  candidate (``losses.triplet.pick_among``).
* ``SiameseNegativesLoss``: binary cross-entropy on ``γ(cos(u, v) − α)`` (``losses.siamese``)
  for the N aligned pairs (label 1) and every (anchor, candidate) pair (label 0); the means of
  the two groups are added so the batch size does not tilt them.
* ``SDMLNegativesLoss``: SDML (Bonadiman et al. 2019): a softmax over ``−‖a_i − c_j‖²`` for all
  N + M candidates c, target ``(1 − ε)·[c = p_i] + ε / (N + M)``, KL divergence.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.model.choices import LABELLED_NEGATIVES, LabelledNegatives
from hybrid_qpr.model.losses.sdml import squared_distances
from hybrid_qpr.model.losses.triplet import pick_among


def _candidates(anchors: torch.Tensor, positives: torch.Tensor, negatives: torch.Tensor | None,
                owner: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """All candidates [N + M, d] and the mask [N, N + M] of those that are negatives of each anchor."""
    if anchors.shape != positives.shape or anchors.dim() != 2:
        raise ConfigError(f"anchors {tuple(anchors.shape)} and positives {tuple(positives.shape)} must both be [N, d]")
    n = anchors.shape[0]
    if negatives is None or negatives.shape[0] == 0:
        candidates = positives
        allowed = ~torch.eye(n, dtype=torch.bool, device=anchors.device)
    else:
        if owner is None or owner.shape != (negatives.shape[0],):
            raise ConfigError("owner must give, for each labelled negative, the row of the anchor it belongs to")
        candidates = torch.cat([positives, negatives])
        allowed = torch.cat([~torch.eye(n, dtype=torch.bool, device=anchors.device),
                             torch.ones(n, negatives.shape[0], dtype=torch.bool, device=anchors.device)], 1)
    if not bool(allowed.any(1).all()):
        raise ConfigError("every anchor needs a negative: give at least 2 pairs or a labelled negative")
    return candidates, allowed


class TripletNegativesLoss(nn.Module):
    def __init__(self, margin: float = 1.0, negatives: LabelledNegatives = "hard"):
        super().__init__()
        if margin < 0:
            raise ConfigError(f"margin={margin}: must be >= 0")
        if negatives not in LABELLED_NEGATIVES:
            raise ConfigError(f"negatives={negatives!r}: allowed values are hard, semi-hard")
        self.margin, self.negatives = float(margin), negatives

    def forward(self, anchors, positives, negatives=None, owner=None) -> torch.Tensor:
        candidates, allowed = _candidates(anchors, positives, negatives, owner)
        dist = squared_distances(anchors, candidates)
        rows = torch.arange(anchors.shape[0], device=anchors.device)
        positive = dist[rows, rows]
        negative = dist[rows, pick_among(dist, positive, allowed, self.negatives)]  # type: ignore[arg-type]
        return (positive - negative + self.margin).clamp_min(0.0).mean()


class SiameseNegativesLoss(nn.Module):
    def __init__(self, scale: float = 10.0, threshold: float = 0.5):
        super().__init__()
        if scale <= 0 or not -1.0 < threshold < 1.0:
            raise ConfigError(f"scale={scale} must be > 0 and threshold={threshold} a cosine in (-1, 1)")
        self.scale, self.threshold = float(scale), float(threshold)

    def forward(self, anchors, positives, negatives=None, owner=None) -> torch.Tensor:
        candidates, allowed = _candidates(anchors, positives, negatives, owner)
        logits = self.scale * (F.normalize(anchors, dim=1) @ F.normalize(candidates, dim=1).T - self.threshold)
        rows = torch.arange(anchors.shape[0], device=anchors.device)
        positive = F.binary_cross_entropy_with_logits(logits[rows, rows], torch.ones_like(logits[rows, rows]))
        negative = F.binary_cross_entropy_with_logits(logits[allowed], torch.zeros_like(logits[allowed]))
        return positive + negative


class SDMLNegativesLoss(nn.Module):
    def __init__(self, epsilon: float = 0.3):
        super().__init__()
        if not 0.0 <= epsilon < 1.0:
            raise ConfigError(f"epsilon={epsilon}: must be in [0, 1)")
        self.epsilon = float(epsilon)

    def forward(self, anchors, positives, negatives=None, owner=None) -> torch.Tensor:
        candidates, _ = _candidates(anchors, positives, negatives, owner)
        log_probs = F.log_softmax(-squared_distances(anchors, candidates), dim=1)
        n, c = log_probs.shape
        targets = torch.full_like(log_probs, self.epsilon / c)
        targets[torch.arange(n), torch.arange(n)] += 1.0 - self.epsilon
        return F.kl_div(log_probs, targets, reduction="batchmean")
