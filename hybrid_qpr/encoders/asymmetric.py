"""An asymmetric encoder: one model for questions (queries), one for answers (documents).

Answer retrieval systems such as Cross-VAE (Yu et al. 2020) and dual encoders embed the two
sides with different networks into one space. The directory layout (``config.json`` with
``kind: "asymmetric"``, ``format_version: 2``)::

    model/config.json       {"kind": "asymmetric", "dim", "distance", "sides": {"query": "question", "document": "answer"}}
    model/question/         an ordinary model directory (model.onnx, tokenizer.json, config.json)
    model/answer/           the same for the answer side; "sides" may name one directory twice (shared weights)

Each side is loaded with ``Encoder.load`` (any kind), so this module only dispatches; like
every encoder here it runs on onnxruntime without torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from hybrid_qpr.encoders.base import SIDES, Encoder, Side, side_dirs
from hybrid_qpr.errors import ArtifactError, ConfigError


class AsymmetricEncoder(Encoder):
    kind = "asymmetric"

    def __init__(self, model_dir: Path, config: dict, threads: int | None = None):
        super().__init__(model_dir, config)
        loaded: dict[Path, Encoder] = {}
        self.sides: dict[str, Encoder] = {}
        for side, directory in side_dirs(model_dir, config).items():
            if directory not in loaded:
                loaded[directory] = Encoder.load(directory, threads=threads)
            encoder = self.sides[side] = loaded[directory]
            if encoder.kind == self.kind:
                raise ArtifactError(f"{directory}: a side of an asymmetric model cannot itself be asymmetric")
            if encoder.dim != self.dim or encoder.distance != self.distance:
                raise ArtifactError(f"{directory}: the {side} side gives dim {encoder.dim} / {encoder.distance}, but "
                                    f"{Path(model_dir) / 'config.json'} says dim {self.dim} / {self.distance}; "
                                    "both sides must embed into one space")
        self.shared = len(loaded) == 1

    def encode(self, texts: Sequence[str] | str, batch_size: int = 256, show_progress: bool = False,
               side: Side = "query") -> np.ndarray:
        """Encode ``texts`` with the question model (``side="query"``) or the answer model."""
        if side not in SIDES:
            raise ConfigError(f"side={side!r}: allowed values are {', '.join(SIDES)}")
        return self.sides[side].encode(texts, batch_size=batch_size, show_progress=show_progress)
