"""Where the files the code reads at run time live: the default model (``onnx/``), the
request bodies (``mappings/``) and the demo bank (``examples/``).

The repository's top-level ``onnx/``, ``mappings/`` and ``examples/`` are the one source of
these files. Building a wheel copies them whole into the package as ``hybrid_qpr/_data/``
(see ``setup.py``), so an installed package finds them through ``importlib.resources``; a
source checkout (an editable install, or ``PYTHONPATH`` on the tree) has no copy and reads
the top-level directories directly.
"""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

from hybrid_qpr.errors import ArtifactError

# The top-level directories shipped inside the package (whole directories, so a new model
# or mapping file needs no change here or in setup.py).
BUNDLED_DIRS: tuple[str, ...] = ("onnx", "mappings", "examples")
PACKAGED = "_data"
# Model names a user types instead of a directory (--model fast); every directory under onnx/
# is also known by its own name (--model distilled-cnn-quora).
MODEL_NAMES: dict[str, str] = {
    "fast": "static-minilm-l6",  # MiniLM's tokenizer and knowledge in a token table
    "quality": "minilm-l6-int8",  # the 6-layer transformer itself (int8): best quality, ~100x slower
}
DEFAULT_MODEL_NAME = "fast"
DEFAULT_MODEL = MODEL_NAMES[DEFAULT_MODEL_NAME]


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
    """A model directory shipped under ``onnx/`` (default: the ``fast`` model)."""
    return bundled("onnx", name)


def resolve_model(spec: str | Path | None) -> Path:
    """The model directory meant by ``--model``: ``None`` is the default (``fast``); an existing
    directory is itself; ``fast``/``quality`` or the name of a directory under ``onnx/`` is that
    bundled model. Anything else is returned as a path, for the loader to report as missing."""
    if spec is None:
        return model_dir()
    path = Path(spec)
    if path.is_dir():
        return path
    name = str(spec)
    if name in MODEL_NAMES:
        return model_dir(MODEL_NAMES[name])
    if "/" not in name and "\\" not in name and (model_dir(name) / "config.json").is_file():
        return model_dir(name)
    return path


def model_names() -> list[str]:
    """The names ``resolve_model`` knows: the aliases, then the bundled directories."""
    bundled_models = sorted(p.name for p in _root("onnx").iterdir() if (p / "config.json").is_file())
    return [*MODEL_NAMES, *bundled_models]


def unknown_model(spec: str | Path | None) -> str | None:
    """The error for a ``--model`` that is neither a directory nor a model name (a bare word
    like ``qualty``): the names known, and the nearest one; ``None`` for anything else (a path
    is left to the loader, which names what is missing there)."""
    if spec is None:
        return None
    name = str(spec)
    if Path(name).exists() or "/" in name or "\\" in name:
        return None
    names = model_names()
    if name in names:
        return None
    close = difflib.get_close_matches(name, names, n=1)
    nearest = f"did you mean {close[0]!r}? " if close else ""
    return (f"--model {name!r} is neither a model directory nor a model name; {nearest}the model names are "
            f"{', '.join(names)} (or give the directory of an exported model)")


def mapping_file(relative: str) -> Path:
    """A request body under ``mappings/``, e.g. ``opensearch/index.json``."""
    return bundled("mappings", relative)


def examples_dir() -> Path:
    """The sample banks: ``questions.jsonl`` and ``beir/``, and ``support/`` (the demo's)."""
    return bundled("examples")


# What choosing the other bundled model trades (measured: docs/models.md, a WikiAnswers sample
# the fast model never saw; one-thread encode speed measured side by side on a busy machine).
MODEL_TRADE = {
    "fast": "--model quality (MiniLM itself) ranks a little better on other domains (tuned hybrid MRR@20 "
            "{quality_wa} vs {fast_wa} on a WikiAnswers sample) but encodes ~{ratio}x slower",
    "quality": "--model fast encodes ~{ratio}x faster (tuned hybrid MRR@20 {fast_wa} vs {quality_wa} on a "
               "WikiAnswers sample)",
}
MEASURED = {"fast_wa": "0.831", "quality_wa": "0.851", "ratio": "100"}


def describe_model(model_dir: str | Path) -> str:
    """One line for ``ingest``: which model encodes, and what the other bundled choice would trade."""
    model_dir = Path(model_dir).resolve()
    for name, directory in MODEL_NAMES.items():
        if model_dir == bundled("onnx", directory).resolve():
            return f"model: {name} ({directory}); " + MODEL_TRADE[name].format(**MEASURED)
    return f"model: {model_dir} (the bundled choices are --model fast, the default, and --model quality)"
