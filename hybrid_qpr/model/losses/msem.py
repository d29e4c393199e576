"""MSEM multi-task loss: in-batch cosine matching plus intent (cluster) classification.

Huang et al., "MSEM: Multi-task Sentence Encoding Model for Semantic Retrieval in Question
Answering Systems", IJCNN 2019 (arXiv:1911.07405); a baseline in the SDML paper's Table 3
(Bonadiman, Kumar & Mittal, W-NUT 2019, arXiv:1905.12786).

A batch holds N paraphrase pairs (a_i, p_i) from N different clusters with cluster labels y_i.

Matching term, over the N×N in-batch pair matrix (diagonal = paraphrase, the rest negatives):

    p_ij    = σ(γ · (cos(a_i, p_j) − α))
    L_match = mean_i BCE(p_ii, 1) + mean_{i≠j} BCE(p_ij, 0)

(positives and negatives are averaged separately and added, so the N−1 negatives of each row
do not drown its one positive; this is ``SiameseBCELoss`` in its in-batch mode, reused as is).

Classification term: a linear layer W (d → C) on the embeddings predicts the intent class c(y)
of both questions of a pair:

    L_cls = ½ · [CE(W a_i, c(y_i)) + CE(W p_i, c(y_i))]   averaged over i

    L = L_match + λ · L_cls

Intent classes are the training clusters: the ``max_classes`` largest clusters with at least
``min_cluster_size`` questions each get a class; every other cluster is pooled into one
"other" class (the last index), since a class seen in one or two questions cannot be learnt
and would only make the softmax huge (``intent_classes``).

Defaults (our choices; the MSEM paper fixes the form, not these values for Quora):

* γ = 10, α = 0.5: the ``SiameseBCELoss`` defaults; γ = 10 lets the sigmoid span most of
  (0, 1) over the cosine range, α = 0.5 puts even odds at cosine 0.5.
* λ = 0.1: with ~1,000 classes the cross-entropy starts near ln 1001 ≈ 6.9 against ≈ 1.4 for
  the matching term; λ = 0.1 keeps matching (the retrieval objective) the larger part.
* min_cluster_size = 5, max_classes = 1000: on the Quora train split 1,855 clusters have ≥ 5
  questions; the 1,000 largest become classes, the other ~38.7k clusters are "other".

A model trained with this loss is compared by cosine (``search_distance = "cosine"``); the
trainer validates with it and the export writes ``"distance": "cosine"``.

Example::

    classes = intent_classes([len(c.questions) for c in train_clusters])
    loss_fn = MSEMLoss(dim=256, cluster_class=classes)
    loss = loss_fn(model(q1), model(q2), labels=cluster_indices)   # indices into train_clusters
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.model.losses.siamese import SiameseBCELoss


def intent_classes(cluster_sizes: Sequence[int], min_cluster_size: int = 5, max_classes: int | None = 1000) -> list[int]:
    """Class index of every cluster: the ``max_classes`` largest clusters of ``>= min_cluster_size``
    questions get 0..K−1 (largest first, ties by position), all others the "other" class K."""
    if min_cluster_size < 1:
        raise ConfigError(f"min_cluster_size={min_cluster_size}: must be >= 1")
    if max_classes is not None and max_classes < 0:
        raise ConfigError(f"max_classes={max_classes}: must be >= 0 (or None for no limit)")
    eligible = sorted((i for i, s in enumerate(cluster_sizes) if s >= min_cluster_size), key=lambda i: (-cluster_sizes[i], i))
    if max_classes is not None:
        eligible = eligible[:max_classes]
    other = len(eligible)
    out = [other] * len(cluster_sizes)
    for k, i in enumerate(eligible):
        out[i] = k
    return out


class MSEMLoss(nn.Module):
    """L = L_match + λ·L_cls (see the module docstring); ``labels`` are training-cluster indices."""

    wants_labels = True
    search_distance = "cosine"

    def __init__(self, dim: int, cluster_class: Sequence[int], gamma: float = 10.0, alpha: float = 0.5, weight: float = 0.1):
        super().__init__()
        if dim < 1:
            raise ConfigError(f"dim={dim}: must be the encoder's output dimension (>= 1)")
        if weight < 0:
            raise ConfigError(f"weight={weight}: the classification weight λ must be >= 0")
        if len(cluster_class) == 0 or min(cluster_class) < 0:
            raise ConfigError("cluster_class: needs one class index >= 0 per training cluster (see intent_classes)")
        self.matching = SiameseBCELoss(scale=gamma, threshold=alpha)
        self.weight = float(weight)
        self.register_buffer("cluster_class", torch.as_tensor(list(cluster_class), dtype=torch.long), persistent=True)
        self.num_classes = int(max(cluster_class)) + 1
        self.classifier = nn.Linear(dim, self.num_classes)

    def matching_loss(self, anchors: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
        return self.matching(anchors, positives)

    def classification_loss(self, anchors: torch.Tensor, positives: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        labels = torch.as_tensor(labels, dtype=torch.long, device=anchors.device)
        if labels.shape != (anchors.shape[0],):
            raise ConfigError(f"labels {tuple(labels.shape)}: need one training-cluster index per pair ({anchors.shape[0]})")
        if int(labels.min()) < 0 or int(labels.max()) >= len(self.cluster_class):
            raise ConfigError(f"labels: cluster indices must be in [0, {len(self.cluster_class)}), "
                              f"got [{int(labels.min())}, {int(labels.max())}]")
        target = self.cluster_class[labels]
        return 0.5 * (F.cross_entropy(self.classifier(anchors), target) + F.cross_entropy(self.classifier(positives), target))

    def forward(self, anchors: torch.Tensor, positives: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        if labels is None:
            raise ConfigError("MSEMLoss needs labels= (the training-cluster index of each pair) for its intent classifier")
        match = self.matching_loss(anchors, positives)
        if self.weight == 0.0:
            return match
        return match + self.weight * self.classification_loss(anchors, positives, labels)
