"""Paths in benchmark results are recorded relative to the repository root, so a committed
result does not carry the directories of the machine it ran on (``onnx/sdml-cnn-quora``,
``../shared/data/quora-pairs.tsv.gz``)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def repo_relative(path: str | Path) -> str:
    """``path`` relative to the repository root, with ``/`` separators."""
    return Path(os.path.relpath(Path(path).resolve(), REPO)).as_posix()


def relative_if_path(value: object) -> object:
    """``repo_relative(value)`` for an absolute path (a ``Path`` or a string starting with
    ``/``); any other value unchanged. For recording argparse settings."""
    if isinstance(value, Path) or (isinstance(value, str) and os.path.isabs(value)):
        return repo_relative(value)
    return value


def command_line() -> str:
    """The command that ran this benchmark, for its result file, with absolute paths made
    repository-relative."""
    import sys

    return "python " + " ".join(str(relative_if_path(arg)) for arg in sys.argv)
