"""One exception tree for hybrid-qpr.

Every message names the value or file at fault, what is allowed, and how to fix it.
The CLI turns any ``HybridQPRError`` into a one-line ``click.ClickException``.
"""

from __future__ import annotations

from pathlib import Path


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
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


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
    "bm25s": ("bm25s", None),
    "opensearchpy": ("opensearch-py", None),
    "elasticsearch": ("elasticsearch", None),
    "rank_bm25": ("rank-bm25", "bench"),
    "matplotlib": ("matplotlib", "report"),
    "cryptography": ("cryptography", "secure"),
    "bcrypt": ("bcrypt", "secure"),
}


class MissingDependencyError(HybridQPRError, ImportError):
    """An optional package is needed for this feature; the message gives the pip command."""

    def __init__(self, package: str, extra: str | None = None, feature: str = "this feature"):
        distribution, default_extra = OPTIONAL_PACKAGES.get(package, (package, None))
        extra = extra or default_extra
        hint = f"pip install {distribution}" + (f" (or pip install 'hybrid-qpr[{extra}]')" if extra else "")
        super().__init__(f"{feature} needs the '{distribution}' package, which is not installed. Fix: {hint}")


def missing_dependency(exc: ModuleNotFoundError, feature: str) -> MissingDependencyError | None:
    """The ``MissingDependencyError`` for an optional package that failed to import, or None
    when ``exc`` is about some other module (a real bug, which should keep its traceback)."""
    root = (exc.name or "").split(".")[0]
    return MissingDependencyError(root, feature=feature) if root in OPTIONAL_PACKAGES else None


class BackendError(HybridQPRError):
    """A search backend (local index or OpenSearch) failed to do what was asked."""


class ClusterError(BackendError):
    """The OpenSearch node could not be reached, started or used."""


class BulkIndexError(BackendError):
    """Some documents were rejected by bulk indexing; they are listed, never dropped."""

    def __init__(self, message: str, failed: list[dict] | None = None):
        self.failed = failed or []
        super().__init__(message)


def require(module: str, extra: str | None = None, feature: str = "this feature"):
    """Import an optional module or raise ``MissingDependencyError`` with the install command."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(module.split(".")[0], extra, feature) from exc


class IndexDamagedError(ArtifactError):
    """A local index file does not match what its manifest recorded at commit (missing,
    truncated, wrong shape or checksum). The message names the file and the recovery."""


class IndexLockedError(BackendError):
    """Another process is writing the local index (one writer at a time)."""


def check_at_least(settings: object, names: tuple[str, ...], minimum: int = 1) -> None:
    """Raise ``ConfigError`` naming the first of ``settings``' fields ``names`` below ``minimum``
    (the shared check of training settings)."""
    for name in names:
        value = getattr(settings, name)
        if value < minimum:
            raise ConfigError(f"{name}={value}: must be >= {minimum}")
