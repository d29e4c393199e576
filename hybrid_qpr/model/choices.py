"""The model's named choices, kept free of torch so the command line lists them without
importing it: the cross-encoder's pooling and the triplet loss's distance and negatives."""

from __future__ import annotations

from typing import Literal, get_args

Pooling = Literal["mean", "cls", "segments"]
POOLINGS: tuple[str, ...] = get_args(Pooling)
TripletDistance = Literal["euclidean", "squared"]
TRIPLET_DISTANCES: tuple[str, ...] = get_args(TripletDistance)
Negatives = Literal["random", "hard", "semi-hard"]
NEGATIVES: tuple[str, ...] = get_args(Negatives)
# the picks among labelled wrong answers (random is no pick there)
LabelledNegatives = Literal["hard", "semi-hard"]
LABELLED_NEGATIVES: tuple[str, ...] = get_args(LabelledNegatives)
