"""Metric-learning losses: SDML (and softmax = SDML with epsilon 0), triplet, MSEM, siamese BCE,
and the answer-selection versions of triplet, siamese and SDML that also take labelled wrong
answers as negatives (``*-negatives``, ``labelled_negatives``).

A loss is an ``nn.Module`` called as ``loss(anchors, positives)``; one that sets
``wants_labels = True`` is also given ``labels=`` (each pair's training-cluster index), and
``search_distance`` (default ``"sqeuclidean"``) is the distance its embeddings are compared by.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from torch import nn

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.model.losses.labelled_negatives import SDMLNegativesLoss, SiameseNegativesLoss, TripletNegativesLoss
from hybrid_qpr.model.losses.msem import MSEMLoss, intent_classes
from hybrid_qpr.model.losses.sdml import SDMLLoss
from hybrid_qpr.model.losses.siamese import SiameseBCELoss
from hybrid_qpr.model.losses.triplet import TripletLoss

__all__ = ["ANSWER_LOSSES", "CNN_LOSSES", "LOSS_KINDS", "TRANSFORMER_LOSSES", "MSEMLoss", "SDMLLoss", "SDMLNegativesLoss",
           "SiameseBCELoss", "SiameseNegativesLoss", "TripletLoss", "TripletNegativesLoss", "build_loss", "intent_classes",
           "search_distance"]

LossKind = Literal["sdml", "softmax", "triplet", "msem", "siamese", "triplet-negatives", "siamese-negatives",
                   "sdml-negatives"]
LOSS_KINDS: tuple[str, ...] = ("sdml", "softmax", "triplet", "msem", "siamese", "triplet-negatives", "siamese-negatives",
                               "sdml-negatives")
CNN_LOSSES: tuple[str, ...] = ("sdml", "softmax", "triplet", "msem")  # what `hybrid-qpr train` offers
TRANSFORMER_LOSSES: tuple[str, ...] = ("sdml", "triplet", "siamese")  # what `hybrid-qpr finetune` offers
# what `hybrid-qpr asbert` offers (as triplet, siamese, sdml): called as loss(anchors, positives, negatives, owner)
ANSWER_LOSSES: tuple[str, ...] = ("triplet-negatives", "siamese-negatives", "sdml-negatives")


def search_distance(loss_fn: nn.Module) -> str:
    """The distance embeddings trained with ``loss_fn`` are compared by (see hybrid_qpr.distance)."""
    return getattr(loss_fn, "search_distance", "sqeuclidean")


def build_loss(kind: LossKind, *, epsilon: float = 0.3, margin: float = 0.5, triplet_distance: str = "euclidean",
               negatives: str = "random", dim: int | None = None, cluster_sizes: Sequence[int] | None = None,
               gamma: float = 10.0, alpha: float = 0.5, weight: float = 0.1, min_cluster_size: int = 5,
               max_classes: int | None = 1000, scale: float = 1.0) -> nn.Module:
    """The one registry of losses: the CNN trainer, the transformer fine-tuner, the CLI and the
    benchmarks all build theirs here. ``msem`` needs the encoder's ``dim`` and the size of every
    training cluster (in the order the trainer indexes them). The ``*-negatives`` kinds take
    ``negatives`` "hard" or "semi-hard" (the triplet's pick among labelled wrong answers)."""
    if kind == "sdml":
        return SDMLLoss(epsilon, scale)
    if kind == "softmax":
        return SDMLLoss(0.0, scale)
    if kind == "triplet":
        return TripletLoss(margin, triplet_distance, negatives)  # type: ignore[arg-type]
    if kind == "msem":
        if dim is None or cluster_sizes is None:
            raise ConfigError("loss 'msem' needs dim (encoder output size) and cluster_sizes (one per training cluster)")
        return MSEMLoss(dim, intent_classes(cluster_sizes, min_cluster_size, max_classes), gamma, alpha, weight)
    if kind == "siamese":
        return SiameseBCELoss()
    if kind == "triplet-negatives":
        return TripletNegativesLoss(margin, negatives)  # type: ignore[arg-type]
    if kind == "siamese-negatives":
        return SiameseNegativesLoss()
    if kind == "sdml-negatives":
        return SDMLNegativesLoss(epsilon)
    raise ConfigError(f"loss={kind!r}: allowed values are {', '.join(LOSS_KINDS)}")
