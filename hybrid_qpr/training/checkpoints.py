"""Checkpoints of both training loops: plain state (tensors, numbers, strings, lists and dicts
of them - state dicts, never pickled objects), written atomically and read back with
``torch.load(weights_only=True)``, which refuses anything that would run code on load."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from hybrid_qpr.errors import ArtifactError


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """``torch.save`` to a temporary name, fsync, then rename: a crash never leaves half a checkpoint."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: str | Path, hint: str) -> dict[str, Any]:
    """The state saved by :func:`save_checkpoint`; a truncated, foreign or pickled-object file
    becomes ``ArtifactError`` naming the file and ``hint`` (what to do about it)."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError as exc:
        raise ArtifactError(f"{path}: missing; {hint}") from exc
    except Exception as exc:  # torch raises unpickling and zip errors of several types
        raise ArtifactError(f"{path}: cannot read the checkpoint ({exc}); {hint}") from exc
    if not isinstance(state, dict):
        raise ArtifactError(f"{path}: not a hybrid-qpr checkpoint (found {type(state).__name__}); {hint}")
    return state
