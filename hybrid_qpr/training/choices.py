"""The training commands' named choices, kept free of torch so the command line lists them
without importing it: losses, precision and batching."""

from __future__ import annotations

from typing import Literal, get_args

RerankerLoss = Literal["listwise", "bce", "listwise+bce"]
RERANKER_LOSSES: tuple[str, ...] = get_args(RerankerLoss)
Precision = Literal["fp32", "bf16"]
PRECISIONS: tuple[str, ...] = get_args(Precision)
AsbertLoss = Literal["triplet", "siamese", "sdml"]
ASBERT_LOSSES: tuple[str, ...] = get_args(AsbertLoss)
LossName = Literal["sdml", "triplet", "siamese"]  # the transformer fine-tune's
TRANSFORMER_LOSSES: tuple[str, ...] = get_args(LossName)
Batching = Literal["random", "topic"]
BATCHINGS: tuple[str, ...] = get_args(Batching)
