"""One exception tree for hybrid-qpr.

Every message names the value or file at fault, what is allowed, and how to fix it.
The CLI turns any ``HybridQPRError`` into a one-line ``click.ClickException``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, get_args


class HybridQPRError(Exception):
    """Base class of every error hybrid-qpr raises on purpose."""


class ConfigError(HybridQPRError, ValueError):
    """A parameter or option has a value that is not allowed."""


class InputError(HybridQPRError, ValueError):
    """A line of an input file cannot be read.

    ``str(err)`` reads ``path:line: problem`` so editors and terminals can jump to it.
    """

    def __init__(self, path: str | Path, line: int | None, problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        super().__init__(_located(self.path, line, problem))


def _located(path: str | None, line: int | None, problem: str) -> str:
    """``path:line: problem``, leaving out what is not known."""
    where = ":".join(str(part) for part in (path, line) if part is not None)
    return f"{where}: {problem}" if where else problem


# ---------------------------------------------------------------- the bad-input rule
OnBadLine = Literal["error", "skip"]
ON_BAD_LINE: tuple[str, ...] = get_args(OnBadLine)


@dataclass(frozen=True)
class SkippedLine:
    """An input line (or record) passed over, and why: what ``InputError`` says in strict mode.

    ``path`` is the file as shown to the user; ``None`` where the writer knows the line of its
    input but not the file (a backend's ingest; its caller names the file with ``in_file``).
    ``line`` is 1-based; ``None`` for a record without a useful line (a SQuAD answer: the JSON
    location starts the ``reason``)."""

    path: str | None
    line: int | None
    reason: str

    def __str__(self) -> str:
        if self.path is None and self.line is not None:
            return f"line {self.line}: {self.reason}"
        return _located(self.path, self.line, self.reason)

    def in_file(self, path: str) -> "SkippedLine":
        return self if self.path is not None else replace(self, path=path)

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "reason": self.reason}

    @classmethod
    def from_record(cls, record: Any) -> "SkippedLine":
        """A record of a manifest: ``to_dict``'s, or the lists manifests held before it
        (``[line, reason]`` of a pairs or QA-log dataset, ``[file, location, problem]`` of an answer dataset)."""
        if isinstance(record, dict):
            return cls(record.get("path"), record.get("line"), str(record.get("reason", "")))
        if len(record) == 3:
            path, where, problem = record
            return cls(path, where, problem) if isinstance(where, int) else cls(path, None, f"{where}: {problem}")
        line, reason = record
        return cls(None, line, reason)


class BadLines:
    """The bad-input rule, in one place: every reader hands its bad lines to ``skip``.

    ``on_bad_line="error"`` (strict, the default) raises ``InputError(path, line, reason)``,
    the one-line error naming file, line and problem (with ``hint`` appended, e.g. the option
    that skips instead); ``"skip"`` records a ``SkippedLine`` in ``skipped`` and reading goes
    on. One collector may serve several files: each record names its own."""

    def __init__(self, on_bad_line: OnBadLine = "error", *, hint: str = ""):
        if on_bad_line not in ON_BAD_LINE:
            raise ConfigError(f"on_bad_line={on_bad_line!r}: must be {' or '.join(map(repr, ON_BAD_LINE))}")
        self.strict = on_bad_line == "error"
        self.hint = hint
        self.skipped: list[SkippedLine] = []

    def skip(self, path: str | Path, line: int | None, reason: str) -> None:
        """Raise (strict) or record that ``line`` of ``path`` is bad because of ``reason``."""
        if self.strict:
            raise InputError(path, line, f"{reason} ({self.hint})" if self.hint else reason)
        self.skipped.append(SkippedLine(str(path), line, reason))

    def to_list(self) -> list[dict[str, Any]]:
        """The skipped lines as a manifest stores them."""
        return [s.to_dict() for s in self.skipped]


class ArtifactError(HybridQPRError):
    """A model or index directory is missing a file, or a file is corrupt."""


class RerankerError(HybridQPRError):
    """A cross-encoder reranker failed while scoring a query's hits (the query fails; its
    first-stage results are never returned as if they had been re-ranked)."""


class ModelMismatchError(HybridQPRError):
    """An encoder does not match the index it is used with (fingerprint or dims)."""


# Import name -> (PyPI distribution, the hybrid-qpr extra that installs it). The install hint
# must name what pip knows: `import faiss` comes from faiss-cpu, `import opensearchpy` from opensearch-py.
OPTIONAL_PACKAGES: dict[str, tuple[str, str | None]] = {
    "torch": ("torch", "train"),
    "onnx": ("onnx", "train"),
    "onnxscript": ("onnxscript", "train"),
    "transformers": ("transformers", "transformer"),
    "safetensors": ("safetensors", "transformer"),
    "faiss": ("faiss-cpu", None),
    "opensearchpy": ("opensearch-py", None),
    "elasticsearch": ("elasticsearch", "elasticsearch"),
    "rank_bm25": ("rank-bm25", "bench"),
    "matplotlib": ("matplotlib", "report"),
    "cryptography": ("cryptography", "secure"),
    "bcrypt": ("bcrypt", "secure"),
    "starlette": ("starlette", "serve"),
    "uvicorn": ("uvicorn", "serve"),
}


class MissingDependencyError(HybridQPRError, ImportError):
    """Optional packages are needed for this feature; the message names every one that is
    missing (so one install fixes it) and gives the pip command."""

    def __init__(self, package: str | Sequence[str], extra: str | None = None, feature: str = "this feature"):
        packages = [package] if isinstance(package, str) else list(package)
        known = [OPTIONAL_PACKAGES.get(name, (name, None)) for name in packages]
        distributions = [distribution for distribution, _ in known]
        extra = extra or next((default for _, default in known if default), None)
        hint = f"pip install {' '.join(distributions)}" + (f" (or pip install 'hybrid-qpr[{extra}]')" if extra else "")
        named = " and ".join(", ".join(f"'{d}'" for d in distributions).rsplit(", ", 1))
        what = "package, which is" if len(distributions) == 1 else "packages, which are"
        super().__init__(f"{feature} needs the {named} {what} not installed. Fix: {hint}")


def missing_dependency(exc: ModuleNotFoundError, feature: str) -> MissingDependencyError | None:
    """The ``MissingDependencyError`` for an optional package that failed to import, or None
    when ``exc`` is about some other module (a real bug, which should keep its traceback)."""
    root = (exc.name or "").split(".")[0]
    return MissingDependencyError(root, feature=feature) if root in OPTIONAL_PACKAGES else None


class BackendError(HybridQPRError):
    """A search backend (local index or OpenSearch) failed to do what was asked."""


class ClusterError(BackendError):
    """The OpenSearch node could not be reached, started or used."""


def require(module: str, extra: str | None = None, feature: str = "this feature"):
    """Import an optional module or raise ``MissingDependencyError`` with the install command."""
    return require_all((module,), extra, feature)[0]


def require_all(modules: Sequence[str], extra: str | None = None, feature: str = "this feature") -> list:
    """Import several optional modules, or raise one ``MissingDependencyError`` naming every
    one that is missing (not the first only, which would send the user back to pip twice)."""
    import importlib

    imported, missing = [], []
    for module in modules:
        try:
            imported.append(importlib.import_module(module))
        except ImportError:
            missing.append(module.split(".")[0])
    if missing:
        raise MissingDependencyError(missing, extra, feature)
    return imported


class IndexDamagedError(ArtifactError):
    """A local index file does not match what its manifest recorded at commit (missing,
    truncated, wrong shape or checksum). The message names the file and the recovery."""


class IndexStorageError(BackendError):
    """The file system refused a read or write of a local index: a full disk, a file-size
    limit, a read-only mount, a permission. ``problem`` and ``fix`` are kept apart so that
    the index can say around them what was committed and what was not."""

    def __init__(self, message: str, *, problem: str = "", fix: str = ""):
        self.problem, self.fix = problem or message, fix
        super().__init__(message + (f". Fix: {fix}" if fix else ""))


class IndexLockedError(BackendError):
    """Another process is writing the local index (one writer at a time)."""


def check_at_least(settings: object, names: tuple[str, ...], minimum: int = 1) -> None:
    """Raise ``ConfigError`` naming the first of ``settings``' fields ``names`` below ``minimum``
    (the shared check of training settings)."""
    for name in names:
        value = getattr(settings, name)
        if value < minimum:
            raise ConfigError(f"{name}={value}: must be >= {minimum}")
