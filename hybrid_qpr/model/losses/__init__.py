"""Metric-learning losses: SDML (and softmax = SDML with epsilon 0), triplet."""

from hybrid_qpr.model.losses.sdml import SDMLLoss
from hybrid_qpr.model.losses.triplet import TripletLoss

__all__ = ["SDMLLoss", "TripletLoss"]
