"""The contract every search backend offers to ``hybrid_qpr.search``, the CLI, the workbench
and evaluation.

A backend stores documents with their encoder vectors (write side: ``ingest``, ``delete``),
answers the two first-stage retrievals (BM25 and kNN), re-scores a given candidate set with
stored vectors (the MSEM rescore flow), returns stored documents, and keeps the fusion
settings tuned for it. Fusion, modes, pagination and result explanation live above it, in
code shared by all backends. Scores are "higher is better" (see ``hybrid_qpr.distance``).

``Backend`` is what every backend offers and all a caller may use. What only some backends
can do is declared in ``capabilities`` and typed by the small protocols below it
(``BatchedBackend``, ``ServerSideBackend``, ``KnnSettingsBackend``, ``SnapshotBackend``);
``batches_lists``, ``runs_in_engine``, ``takes_knn_settings`` and ``reads_snapshots`` read the
flag and narrow the type, so a caller never probes with ``getattr``/``hasattr``/``isinstance``.
A query reads through ``reader_of(backend)``: one state of the index where the backend keeps
snapshots. Opening or creating a backend is not part of the contract: the commands do it
through ``hybrid_qpr.cli._backend`` (docs/ARCHITECTURE.md names the few that name a class).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ContextManager, Protocol, TypeGuard, runtime_checkable

import numpy as np

from hybrid_qpr.errors import SkippedLine
from hybrid_qpr.artifacts import ENCODER_FUSION_DEFAULTS, json_value_problem
from hybrid_qpr.fusion import DEFAULT_ALPHA, DEFAULT_FUSION, RESCORE_DEPTH, RRF_K
from hybrid_qpr.text.analysis import Analyzer
from hybrid_qpr.text.ids import id_problem
from hybrid_qpr.types import Candidates, Document, Filters, Hit, QueryVector, TextEncoder


@dataclass(frozen=True)
class Capabilities:
    """Optional abilities of a backend (each one names the protocol it adds).

    * ``batched_bm25_and_knn`` - ``BatchedBackend.bm25_and_knn`` answers both lists in one
      round trip (a cluster's ``_msearch``); otherwise the searcher calls ``bm25`` then ``knn``.
    * ``server_side_hybrid`` - ``ServerSideBackend.hybrid_server`` fuses inside the engine with
      the same method, weights and depth as client-side fusion (OpenSearch neural-search).
    * ``server_side_rescore`` - ``ServerSideBackend.rescore_server`` runs the MSEM flow in one request.
    * ``knn_search_settings`` - ``KnnSettingsBackend.set_search_settings`` sets this reader's
      kNN speed/recall trade-off (the embedded index's efSearch / nprobe; a cluster index
      keeps the engine's own).
    * ``snapshot_reads`` - ``SnapshotBackend.reader`` hands out a reader over one state of the
      index (the embedded index's commit), so every list and document of one query comes from
      the same state while writes go on; a cluster's reads each see the index as it is then.
    """

    batched_bm25_and_knn: bool = False
    server_side_hybrid: bool = False
    server_side_rescore: bool = False
    knn_search_settings: bool = False
    snapshot_reads: bool = False


def document_problem(doc: Document) -> str | None:
    """Why no backend can index ``doc`` (an empty id, a padded one or one with a control
    character, an empty text, a lone surrogate anywhere, metadata nested too deeply), or ``None``. ``Backend.document_problem`` adds what one engine refuses besides."""
    doc_id = "" if doc.id is None else str(doc.id)
    if not doc_id.strip():
        return "empty id"
    problem = id_problem(doc_id) or json_value_problem(doc_id) or json_value_problem(doc.text) \
        or (json_value_problem(doc.metadata) if doc.metadata else None)
    if problem:
        return problem
    if not isinstance(doc.text, str) or not doc.text.strip():
        return "empty text"
    return None


class Reader(Protocol):
    """The read side of one index: what one query calls (a ``Backend`` is one; so is the
    embedded index's ``IndexReader``, which reads one commit)."""

    capabilities: Capabilities

    def bm25(self, query: str, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` documents by BM25, filters applied before ranking."""

    def knn(self, vector: np.ndarray, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` documents by vector similarity, filters applied before truncation."""

    def vector_scores(self, vector: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        """Exact similarity of ``vector`` to each stored document in ``ids`` (the rescore mode)."""

    def documents(self, ids: Sequence[str], places: Sequence[Any] | None = None) -> dict[str, Document]:
        """Stored text and metadata of ``ids`` (missing ids are absent from the result).
        ``places``: where this backend's lists found them (``RankedList.places``, aligned with ``ids``)."""


@runtime_checkable
class Backend(Reader, Protocol):
    """Read side, write side and settings of one index (embedded or in a cluster)."""

    # ---- the index and its model
    @property
    def distance(self) -> str:
        """The encoder distance the index was built for (``hybrid_qpr.distance.DISTANCES``)."""

    @property
    def model_dir(self) -> str | None:
        """The model directory the index was built with, as recorded at creation (the CLI's
        default ``--model``); None when none was recorded. It may no longer exist."""

    @property
    def model_fingerprint(self) -> str | None:
        """The fingerprint of the model the index was built with (named in mismatch errors)."""

    def check_encoder(self, encoder: TextEncoder) -> None:
        """Raise ``ModelMismatchError`` if ``encoder`` is not the model the index was built with."""

    @property
    def analyzer(self) -> "Analyzer":
        """BM25's language analysis (``hybrid_qpr.text.analysis``), as the index records it."""

    def analyzer_note(self) -> str | None:
        """A line for an index still on the legacy analyzer with the way to move it, else None."""

    def exists(self) -> bool:
        """Whether the index is there (a cluster index may be dropped under an open backend)."""

    def count(self) -> int:
        """Number of documents indexed."""

    def empty_reason(self) -> str:
        """Why the index holds no documents, with the fix (said when a query meets an empty index)."""

    # ---- read side: Reader's (bm25, knn, vector_scores, documents)

    # ---- write side
    def document_problem(self, doc: Document) -> str | None:
        """Why this backend would not index ``doc`` (``document_problem`` above, plus what the
        engine refuses, e.g. an id too long for a cluster), or ``None``. ``ingest`` skips such
        a document and reports it; ``ingest --strict`` stops at it."""

    def ingest(self, documents: Iterable[Document | tuple[int, Document]], encoder: TextEncoder, *, batch_size: int = 256,
               show_progress: bool = True, wait: bool | float = False,
               rejects_path: str | Path | None = None) -> "IngestReport":
        """Encode and store ``documents`` (``Document`` or ``(line, Document)``; a plain
        ``Document`` is numbered by its position, from 1); an id seen before is replaced, never
        duplicated. A document with a ``document_problem`` is skipped and listed in
        ``IngestReport.skipped`` as a ``SkippedLine`` (no path: the caller knows the file). ``wait``: where the backend keeps one
        writer at a time (a local index's write lock), wait for the lock instead of failing
        (``True``, or the seconds to wait); a cluster has no such lock. ``rejects_path``:
        documents the store rejected are written there as JSON lines (a local ingest commits
        all or nothing, so it never rejects one)."""

    def delete(self, ids: Sequence[str], *, wait: bool | float = False) -> int:
        """Remove ``ids``; returns how many existed. ``wait`` as for ``ingest``."""

    # ---- settings
    @property
    def fusion_defaults(self) -> dict[str, Any]:
        """Fusion settings stored by tuning (``fusion``, ``alpha``, ``depth``), or ``{}``."""

    def set_fusion_defaults(self, defaults: Mapping[str, Any]) -> None:
        """Store tuned fusion settings with the index."""

    def close(self) -> None:
        """Release files or connections; the backend is not used afterwards."""


class BatchedBackend(Backend, Protocol):
    """A backend whose ``capabilities.batched_bm25_and_knn`` is set."""

    def bm25_and_knn(self, query: str, vector: QueryVector, depth: int,
                     filters: Filters | None = None) -> Candidates:
        """The lists of ``bm25(query, depth, filters)`` and ``knn(vector.get(), depth, filters)``
        in one round trip. The backend asks for the vector when it needs it (the embedded index:
        while its BM25 list is scored on another thread)."""


class ServerSideBackend(Backend, Protocol):
    """A backend whose ``capabilities`` say ``server_side_hybrid`` / ``server_side_rescore``."""

    def hybrid_server(self, query: str, vector: np.ndarray, depth: int, filters: Filters | None = None, *,
                      fusion: str = DEFAULT_FUSION, alpha: float = DEFAULT_ALPHA, rrf_k: int = RRF_K) -> list[Hit]:
        """Fused top ``depth`` computed by the engine with the ``fusion`` method and weights ``(1 - alpha, alpha)``."""

    def rescore_server(self, query: str, vector: np.ndarray, depth: int = RESCORE_DEPTH,
                      filters: Filters | None = None) -> list[Hit]:
        """BM25 recall of ``depth`` re-ordered by vector similarity, in the engine."""


class SnapshotBackend(Backend, Protocol):
    """A backend whose ``capabilities.snapshot_reads`` is set."""

    def reader(self) -> ContextManager[Reader]:
        """A reader over the index's current state, held until the ``with`` block ends."""


class KnnSettingsBackend(Backend, Protocol):
    """A backend whose ``capabilities.knn_search_settings`` is set."""

    def set_search_settings(self, *, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """Override the stored kNN search settings for this reader (``query --nprobe/--ef-search``)."""


def batches_lists(backend: Reader) -> TypeGuard[BatchedBackend]:
    """True when ``backend`` answers ``bm25_and_knn`` (its capabilities say so)."""
    return backend.capabilities.batched_bm25_and_knn


def runs_in_engine(backend: Backend, mode: str) -> TypeGuard[ServerSideBackend]:
    """True when ``backend`` runs ``mode`` (hybrid or rescore) inside its engine: its
    capability ``server_side_<mode>`` says so."""
    return bool(getattr(backend.capabilities, f"server_side_{mode}", False))


def takes_knn_settings(backend: Backend) -> TypeGuard[KnnSettingsBackend]:
    """True when ``backend`` lets a reader set its kNN search settings."""
    return backend.capabilities.knn_search_settings


def reads_snapshots(backend: Backend) -> TypeGuard[SnapshotBackend]:
    """True when ``backend`` hands out readers over one state of the index."""
    return backend.capabilities.snapshot_reads


def reader_of(backend: Backend) -> ContextManager[Reader]:
    """What one query reads through: the backend's reader over one state of the index where its
    capabilities offer one (``snapshot_reads``), else the backend itself."""
    return backend.reader() if reads_snapshots(backend) else contextlib.nullcontext(backend)


def adopt_model_fusion_defaults(backend: Backend, encoder: TextEncoder) -> str:
    """Give an index that has no fusion defaults those its model directory carries (config.json
    ``fusion_defaults``, tuned on the model's own validation data by ``hybrid-qpr tune
    --save-to-model``), so an untuned hybrid starts from them instead of RRF 0.5; defaults the
    index has (its own ``tune``, or adopted before) are never replaced. Returns the line that
    says where the index's defaults come from (the ingest summary prints it)."""
    own = backend.fusion_defaults
    if own:
        source = f"model {own['from_model']}" if own.get("from_model") else "'hybrid-qpr tune' on this index"
        return f"fusion defaults: {_describe(own)}, from {source} (kept)"
    carried = encoder.config.get(ENCODER_FUSION_DEFAULTS)  # checked when the model was loaded
    if carried is None:
        return (f"fusion defaults: none, so hybrid uses {DEFAULT_FUSION} alpha {DEFAULT_ALPHA} until "
                "'hybrid-qpr tune' chooses them on labelled queries")
    defaults = {**carried, "from_model": f"{Path(encoder.model_dir).name} ({encoder.fingerprint})"}
    backend.set_fusion_defaults(defaults)
    return (f"fusion defaults: {_describe(defaults)}, from model {defaults['from_model']} (the index had none; "
            "'hybrid-qpr tune' on your own labelled queries replaces them)")


def _describe(defaults: Mapping[str, Any]) -> str:
    """``l2 alpha 0.6, depth 100, reranker depth 20, tuned on wikiqa/beir val (MAP 0.78; bm25 0.62, knn 0.76)``."""
    parts = [f"{defaults.get('fusion')} alpha {defaults.get('alpha')}"]
    if defaults.get("depth"):
        parts.append(f"depth {defaults['depth']}")
    if (defaults.get("reranker") or {}).get("depth"):
        parts.append(f"reranker depth {defaults['reranker']['depth']}")
    chosen = (defaults.get("chosen_on") or {}).get("domains") or {}
    if chosen:  # benchmarks/choose_fusion_default.py: each domain's margin over its better single mode
        worst = min(float(d.get("margin", 0.0)) for d in chosen.values())
        held = "at least the better of BM25 and kNN on each" if worst >= 0 else \
            f"within {-worst:.3f} of the better of BM25 and kNN on each"
        parts.append(f"chosen on {len(chosen)} development domains ({', '.join(chosen)}), {held}")
    tuned = defaults.get("tuned") or {}
    if tuned.get("metric") and tuned.get("value") is not None:
        on = f" on {tuned['on']}" if tuned.get("on") else ""
        parts.append(f"tuned{on} ({tuned['metric']} {tuned['value']:.4f}; bm25 {tuned.get('bm25', 0):.4f}, "
                     f"knn {tuned.get('knn', 0):.4f})")
    return ", ".join(parts)


@dataclass
class IngestReport:
    """What an ingest did. Every input line is accounted for: indexed (new), updated
    (same id seen before: replaced, never duplicated), skipped (with line and reason),
    or failed (rejected by the store, or not found as written when checked afterwards;
    written to ``rejects_path`` when one is given).

    A cluster ingest also says what its retries cost: whole requests sent again (no answer,
    429, 5xx), single documents sent again (answered 429 / 5xx inside a request), and the
    seconds spent waiting before them; ``verified`` counts the ids read back and found with
    the text this ingest wrote. ``notes`` are the lines a backend wants the user to read
    after an ingest (the local index's kNN settings, a cluster's verification and retries).
    ``generation``: the embedded index's commit that holds this ingest (``None`` while it has
    committed nothing, and on a cluster, which has no commits)."""

    indexed: int = 0
    updated: int = 0
    skipped: list[SkippedLine] = field(default_factory=list)  # path None: the caller knows the file
    failed: list[dict[str, Any]] = field(default_factory=list)  # {"id", "error", ...}
    seconds: float = 0.0
    rejects_path: str | None = None
    retried_requests: int = 0
    retried_documents: int = 0
    retry_wait_seconds: float = 0.0
    verified: int = 0
    notes: list[str] = field(default_factory=list)
    generation: int | None = None

    @property
    def retries(self) -> int:
        return self.retried_requests + self.retried_documents

    @property
    def docs_per_second(self) -> float:
        done = self.indexed + self.updated
        return done / self.seconds if self.seconds > 0 else 0.0


class IngestInterrupted(KeyboardInterrupt):
    """Ctrl-C during an ingest that commits all or nothing (the embedded index), with its
    ``report`` so far: ``report.generation`` says whether the ingest was committed before the
    interrupt (the commit) or not (``None``: the index holds its previous commit)."""

    def __init__(self, report: IngestReport):
        super().__init__()
        self.report = report
