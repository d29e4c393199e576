"""Assemble an asymmetric model directory from two exported model directories (or one, shared).

The layout is described in ``hybrid_qpr.encoders.asymmetric``. Nothing is re-exported: the
side directories are copied as they are (each already parity-checked by its exporter), and
the top ``config.json`` is written last inside a directory that is swapped into place
atomically. No torch needed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from hybrid_qpr.artifacts import (ASYMMETRIC_KIND, ENCODER_CONFIG_FILE, SINGLE_MODEL_KINDS, atomic_directory, read_encoder_config,
                                  write_encoder_config)
from hybrid_qpr.errors import ArtifactError

QUESTION_SUBDIR, ANSWER_SUBDIR, SHARED_SUBDIR = "question", "answer", "shared"
ASYMMETRIC_FORMAT_VERSION = 2  # the config layout that introduced kind "asymmetric"


def assemble_asymmetric(out_dir: str | Path, query_dir: str | Path, document_dir: str | Path | None = None,
                        extra: dict[str, Any] | None = None) -> Path:
    """Write ``out_dir`` holding ``query_dir`` as the question side and ``document_dir`` as the
    answer side (``None`` or the same directory: one shared subdirectory). Both sides must
    give vectors of the same dimension and distance. ``extra`` is merged into config.json."""
    query_dir = Path(query_dir)
    shared = document_dir is None or Path(document_dir).resolve() == query_dir.resolve()
    q_config = read_encoder_config(query_dir)
    d_config = q_config if shared else read_encoder_config(document_dir)  # type: ignore[arg-type]
    for key in ("dim", "distance"):
        if q_config[key] != d_config[key]:
            raise ArtifactError(f"{query_dir} has {key} {q_config[key]!r} but {document_dir} has {d_config[key]!r}; "
                                "the two sides must embed into one space")
    if ASYMMETRIC_KIND in (q_config["kind"], d_config["kind"]):
        raise ArtifactError(f"a side of an asymmetric model must be a single model directory "
                            f"({' or '.join(SINGLE_MODEL_KINDS)})")
    sides = ({"query": SHARED_SUBDIR, "document": SHARED_SUBDIR} if shared
             else {"query": QUESTION_SUBDIR, "document": ANSWER_SUBDIR})
    config = {"format_version": ASYMMETRIC_FORMAT_VERSION, "kind": ASYMMETRIC_KIND,
              "dim": q_config["dim"], "distance": q_config["distance"], "sides": sides, "shared": shared,
              "side_kinds": {"query": q_config["kind"], "document": d_config["kind"]}, **(extra or {})}
    with atomic_directory(out_dir, ENCODER_CONFIG_FILE) as tmp:
        shutil.copytree(query_dir, tmp / sides["query"])
        if not shared:
            shutil.copytree(document_dir, tmp / sides["document"])  # type: ignore[arg-type]
        write_encoder_config(tmp, config)  # last: the commit point
    return Path(out_dir)
