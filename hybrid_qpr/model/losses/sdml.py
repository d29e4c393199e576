"""Smoothed deep metric learning (SDML) loss.

Bonadiman, Kumar & Mittal, "Large Scale Question Paraphrase Retrieval with Smoothed Deep
Metric Learning", W-NUT 2019 (arXiv:1905.12786), section 3.

A batch holds N paraphrase pairs (q1_i, q2_i) from N different clusters. Every q2_j is a
candidate for every q1_i; the logits are the negative squared Euclidean distances

    z_ij = −‖q1_i − q2_j‖²

and the target distribution of row i is the one-hot label smoothed by ε:

    t_ij = (1 − ε)·[i = j] + ε / N

(N=3, ε=0.3 gives 0.8 on the diagonal and 0.1 elsewhere, the paper's Figure 2). The loss is
the Kullback–Leibler divergence between targets and softmax(z), averaged over rows:

    L = 1/N Σ_i Σ_j t_ij · (log t_ij − log softmax(z_i)_j)

ε = 0 is the plain softmax (N-pair) baseline. An optional ``scale`` s multiplies the logits,
z_ij = −s·‖q1_i − q2_j‖²: the paper's unnormalised CNN needs none (s = 1), but on unit vectors
‖a − b‖² = 2 − 2cos lies in [0, 4], too narrow a range for a sharp softmax over hundreds of
candidates; s = 10 there equals the cosine scale 20 MiniLM was pre-trained with. Smoothing keeps the model from pushing the
true paraphrase infinitely far ahead of the other in-batch questions, some of which are
unlabelled paraphrases in real data.

Example::

    loss = SDMLLoss(epsilon=0.3)(model(batch_q1), model(batch_q2))
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from hybrid_qpr.errors import ConfigError


def squared_distances(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """‖a_i − b_j‖² for all i, j: [N, M], clamped at 0 against rounding."""
    return ((a * a).sum(1, keepdim=True) + (b * b).sum(1)[None, :] - 2.0 * a @ b.T).clamp_min(0.0)


class SDMLLoss(nn.Module):
    def __init__(self, epsilon: float = 0.3, scale: float = 1.0):
        super().__init__()
        if not 0.0 <= epsilon < 1.0:
            raise ConfigError(f"epsilon={epsilon}: must be in [0, 1) (the SDML paper uses 0.3; 0 = plain softmax)")
        if not scale > 0:
            raise ConfigError(f"scale={scale}: must be > 0")
        self.epsilon = float(epsilon)
        self.scale = float(scale)

    def targets(self, n: int, device=None, dtype=torch.float32) -> torch.Tensor:
        """The smoothed target matrix t [N, N] (rows sum to 1)."""
        eye = torch.eye(n, device=device, dtype=dtype)
        return (1.0 - self.epsilon) * eye + self.epsilon / n

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        if anchors.shape != positives.shape or anchors.dim() != 2:
            raise ConfigError(f"anchors {tuple(anchors.shape)} and positives {tuple(positives.shape)} must both be [N, d]")
        logits = -self.scale * squared_distances(anchors, positives)
        log_probs = F.log_softmax(logits, dim=1)
        targets = self.targets(anchors.shape[0], anchors.device, log_probs.dtype)
        return F.kl_div(log_probs, targets, reduction="batchmean")
