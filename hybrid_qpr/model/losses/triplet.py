"""Triplet loss with in-batch negatives (random, hard or semi-hard).

For anchor a_i, its positive p_i and one negative p_j (j ≠ i, the positive of another pair
of the batch, so from another cluster):

    L = 1/N Σ_i max(0, d(a_i, p_i) − d(a_i, p_j) + margin)

with d the Euclidean distance (``"euclidean"``, EUC in the SDML paper's Table 3) or the
squared Euclidean distance (``"squared"``, SSD; the ASBERT triplet network). Negatives:

* ``random``: a uniformly drawn j ≠ i (uses torch's global generator; seed it for repeatability);
* ``hard``: the closest j ≠ i, argmin_j d(a_i, p_j);
* ``semi-hard`` (Schroff, Kalenichenko & Philbin, "FaceNet", CVPR 2015): the closest negative
  that is still farther than the positive, d(a_i, p_j) > d(a_i, p_i); when there is none,
  the farthest negative (as in TensorFlow Addons' ``triplet_semihard_loss``). Hard negatives
  early in training can collapse the embedding; semi-hard ones are informative but safe.

References: Weinberger & Saul 2009 (margin loss); Bonadiman et al. 2019, SDML paper,
Table 3 baselines; Shonibare 2021, ASBERT (arXiv:2104.08558).

Example::

    loss = TripletLoss(margin=0.5, distance="squared", negatives="semi-hard")(model(q1), model(q2))
"""

from __future__ import annotations

import torch
from torch import nn

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.model.choices import NEGATIVES, TRIPLET_DISTANCES, LabelledNegatives, Negatives, TripletDistance
from hybrid_qpr.model.losses.sdml import squared_distances


def pick_among(dist: torch.Tensor, positive: torch.Tensor, allowed: torch.Tensor,
               negatives: LabelledNegatives) -> torch.Tensor:
    """Column of the negative of each row of ``dist`` [N, C] (anchor-to-candidate distances),
    among the ``allowed`` [N, C] columns (each row needs one): ``hard`` the closest,
    ``semi-hard`` the closest farther than the row's ``positive`` [N] distance, else the
    farthest allowed one (see the module docstring)."""
    d = dist.detach()
    if negatives == "hard":
        return d.masked_fill(~allowed, float("inf")).argmin(1)
    farther = (d > positive.detach()[:, None]) & allowed
    semi = d.masked_fill(~farther, float("inf")).argmin(1)
    easiest = d.masked_fill(~allowed, float("-inf")).argmax(1)
    return torch.where(farther.any(1), semi, easiest)


class TripletLoss(nn.Module):
    def __init__(self, margin: float = 0.5, distance: TripletDistance = "euclidean", negatives: Negatives = "random"):
        super().__init__()
        if margin < 0:
            raise ConfigError(f"margin={margin}: must be >= 0 (the SDML paper uses 0.5)")
        if distance not in TRIPLET_DISTANCES:
            raise ConfigError(f"distance={distance!r}: allowed values are {', '.join(TRIPLET_DISTANCES)}")
        if negatives not in NEGATIVES:
            raise ConfigError(f"negatives={negatives!r}: allowed values are {', '.join(NEGATIVES)}")
        self.margin = float(margin)
        self.distance = distance
        self.negatives = negatives

    def distances(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        sq = squared_distances(anchors, positives)
        return sq if self.distance == "squared" else (sq + 1e-12).sqrt()

    def pick_negatives(self, dist: torch.Tensor) -> torch.Tensor:
        """Index j ≠ i of the negative of each row of the [N, N] distance matrix."""
        n = dist.shape[0]
        eye = torch.eye(n, dtype=torch.bool, device=dist.device)
        if self.negatives == "random":
            offset = torch.randint(1, n, (n,), device=dist.device)
            return (torch.arange(n, device=dist.device) + offset) % n
        return pick_among(dist, dist.diagonal(), ~eye, self.negatives)  # type: ignore[arg-type]

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        if anchors.shape != positives.shape or anchors.dim() != 2:
            raise ConfigError(f"anchors {tuple(anchors.shape)} and positives {tuple(positives.shape)} must both be [N, d]")
        if anchors.shape[0] < 2:
            raise ConfigError("triplet loss needs at least 2 pairs per batch (negatives come from the other pairs)")
        dist = self.distances(anchors, positives)
        rows = torch.arange(dist.shape[0], device=dist.device)
        negative = dist[rows, self.pick_negatives(dist)]
        return (dist.diagonal() - negative + self.margin).clamp_min(0.0).mean()
