"""Where the files the code reads at run time live: the default model (``onnx/``), the
request bodies (``mappings/``) and the demo bank (``examples/``).

The repository's top-level ``onnx/``, ``mappings/`` and ``examples/`` are the one source of
these files. Building a wheel copies them whole into the package as ``hybrid_qpr/_data/``
(see ``setup.py``), so an installed package finds them through ``importlib.resources``; a
source checkout (an editable install, or ``PYTHONPATH`` on the tree) has no copy and reads
the top-level directories directly.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from hybrid_qpr.errors import ArtifactError

# The top-level directories shipped inside the package (whole directories, so a new model
# or mapping file needs no change here or in setup.py).
BUNDLED_DIRS: tuple[str, ...] = ("onnx", "mappings", "examples")
PACKAGED = "_data"
DEFAULT_MODEL = "distilled-cnn-quora"


def _root(name: str) -> Path:
    if name not in BUNDLED_DIRS:
        raise ArtifactError(f"{name!r} is not a bundled directory (bundled: {', '.join(BUNDLED_DIRS)})")
    package = resources.files("hybrid_qpr")
    if not isinstance(package, Path):  # zipimport: onnxruntime and the readers need real files
        raise ArtifactError("hybrid_qpr is installed inside a zip archive; install it as files (pip install hybrid-qpr)")
    packaged = package / PACKAGED / name
    if packaged.is_dir():
        return packaged
    return package.parent / name  # a source checkout


def bundled(name: str, *parts: str) -> Path:
    """The path of ``<name>/<parts...>`` (``name`` one of ``BUNDLED_DIRS``), inside the
    installed package or the source checkout. The path may not exist; callers report that
    with their own context."""
    return _root(name).joinpath(*parts)


def model_dir(name: str = DEFAULT_MODEL) -> Path:
    """A model directory shipped under ``onnx/`` (default: the committed distilled CNN)."""
    return bundled("onnx", name)


def mapping_file(relative: str) -> Path:
    """A request body under ``mappings/``, e.g. ``opensearch/index.json``."""
    return bundled("mappings", relative)


def examples_dir() -> Path:
    """The sample banks: ``questions.jsonl`` and ``beir/``, and ``support/`` (the demo's)."""
    return bundled("examples")
