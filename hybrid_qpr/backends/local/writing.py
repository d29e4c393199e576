"""The write side of a local index: ``IndexWriter`` holds the index's write lock and makes every
commit (ingest, delete, merges, ``optimize``, stored fusion defaults), then hands each new
commit to its index to publish (``PublishingIndex.publish``); readers never wait for it and
keep the commit they took (``reading.py``). What one ingest writes is ``writer.IngestWriter``'s;
``commit.py`` makes the manifest write atomic and keeps concurrent writers apart."""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hybrid_qpr import progress
from hybrid_qpr.artifacts import library_versions
from hybrid_qpr.backends.base import IngestInterrupted, IngestReport
from hybrid_qpr.backends.local.commit import (FORMAT_VERSION, WriteLock, read_manifest, referenced, remove_paths,
                                              remove_unreferenced, write_manifest)
from hybrid_qpr.backends.local.merge import plan_merge
from hybrid_qpr.backends.local.recovery import (LiveRows, Loss, add_missing_copies, has_second_copies,
                                                read_for_optimize, read_live_rows, set_aside)
from hybrid_qpr.backends.local.segment import BASE_FACTORY, SEGMENTS_DIR, Segment, file_problems, write_segment
from hybrid_qpr.backends.local.vectorbase import BASE_KEY, base_problems, next_base, unordered
from hybrid_qpr.backends.local.vectors import FLAT_THRESHOLD, SearchSettings, faiss_factory
from hybrid_qpr.backends.local.writer import IngestWriter, knn_note, with_deletions
from hybrid_qpr.distance import Distance
from hybrid_qpr.errors import IndexDamagedError, IndexStorageError
from hybrid_qpr.text.analysis import Analyzer, get_analyzer
from hybrid_qpr.types import Document

logger = logging.getLogger(__name__)


def versions() -> dict[str, str]:
    return library_versions(("hybrid-qpr", "faiss-cpu", "numpy"))


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class PublishingIndex(Protocol):
    """What the writer uses of its ``LocalIndex`` (a protocol: ``index.py`` imports this module)."""

    path: Path
    dim: int
    distance: Distance

    @property
    def manifest(self) -> dict[str, Any]: ...

    @property
    def segments(self) -> Sequence[Segment]: ...

    @property
    def base(self) -> Any: ...

    @property
    def search_settings(self) -> SearchSettings: ...

    def check_encoder(self, encoder) -> None: ...

    def analyzer_of(self, manifest: dict[str, Any]) -> Analyzer: ...

    def refresh(self) -> None: ...

    def publish(self, manifest: dict[str, Any]) -> None: ...

    def count(self) -> int: ...


class IndexWriter:
    """The lock and the commits of one ``LocalIndex``. ``manifest`` is the last commit this
    writer read (under the lock) or wrote; ``segments`` and ``base`` are its index's current
    ones, which under the lock are that commit's."""

    def __init__(self, index: PublishingIndex, manifest: dict[str, Any]):
        self.index = index
        self.path, self.dim, self.distance = index.path, index.dim, index.distance
        self.manifest = manifest
        self._lock = WriteLock(self.path)

    @property
    def segments(self) -> Sequence[Segment]:
        return self.index.segments

    @property
    def base(self) -> Any:
        return self.index.base

    @property
    def search_settings(self) -> SearchSettings:
        return self.index.search_settings

    @contextlib.contextmanager
    def _writing(self, wait: bool | float) -> Iterator[None]:
        """Hold the write lock, on the latest commit, with dead writers' leftovers removed."""
        with self._lock.held(wait):
            self.index.refresh()
            self.manifest = self.index.manifest
            remove_unreferenced(self.path, self.manifest)
            yield

    def set_fusion_defaults(self, defaults: Mapping[str, Any], wait: bool | float) -> None:
        with self._writing(wait):
            self.commit(self.manifest["segments"], fusion=dict(defaults))

    def commit(self, entries: list[dict[str, Any]], *, fusion: dict[str, Any] | None = None,
               next_segment: int | None = None, reorder_base: bool = False) -> None:
        """Write the next manifest naming ``entries`` (segments left without live rows are
        dropped); files only the previous commit used are kept one more commit. Called with the
        write lock held (``ingest``, ``delete``, ``optimize`` and merges take it).
        ``reorder_base``: store a vector base written before the locality order in that order."""
        old = self.manifest
        new = dict(old)
        new["segments"] = [e for e in entries if int(e["count"]) > int(e.get("deleted", 0))]
        new["generation"] = int(old.get("generation", 0)) + 1
        new["format_version"] = FORMAT_VERSION  # a commit writes what this version reads (commit.py)
        new["count"] = sum(int(e["count"]) - int(e.get("deleted", 0)) for e in new["segments"])
        new["faiss"] = dict(old["faiss"])
        largest = max(new["segments"], key=lambda e: int(e["count"]), default=None)
        new["faiss"]["factory"] = largest["factory"] if largest else None
        if fusion is not None:
            new["fusion"] = fusion
        if next_segment is not None:
            new["next_segment"] = next_segment
        new[BASE_KEY] = next_base(self.path, old.get(BASE_KEY), new["segments"], self.dim, self.distance, new["generation"],
                                  reorder=reorder_base)
        new["versions"] = versions()
        new["updated"] = now()
        now_used = referenced(new)
        new["retained"] = sorted(referenced(old) - now_used)
        write_manifest(self.path, new)
        remove_paths(self.path, [p for p in old.get("retained", []) if p not in now_used and p not in new["retained"]])
        self.manifest = new
        self.index.publish(new)

    def write_new_segment(self, counter: int, ids: list[str], texts: list[str], metadata: list[str],
                          vectors: np.ndarray) -> dict[str, Any]:
        """Write segment number ``counter`` of these rows, with the FAISS index the index's stored
        choice gives its size, and return its manifest entry (a later ``commit`` names it)."""
        factory = faiss_factory(len(ids), self.manifest["faiss"].get("kind", "auto"), self._flat_threshold)
        if factory != "Flat" and self.manifest["faiss"].get("kind", "auto") == "auto":
            factory = BASE_FACTORY  # searched through the index's vector base (vectorbase.py)
        return write_segment(self.path / SEGMENTS_DIR, f"s{counter:06d}-{secrets.token_hex(3)}", ids, texts, metadata,
                             vectors, self.distance, factory, self.index.analyzer_of(self.manifest).analyze)

    def ingest(self, documents: Iterable[Document | tuple[int, Document]], encoder, *, batch_size: int,
               show_progress: bool, wait: bool | float, segment_docs: int) -> IngestReport:
        """``LocalIndex.ingest`` (its docstring says what it does). Ctrl-C raises
        ``IngestInterrupted`` with the report so far (its ``generation`` set once committed)."""
        started = time.perf_counter()
        report = IngestReport()
        try:
            with self._writing(wait), progress.shown(show_progress):  # the commit's graph build and calibration too
                self.index.check_encoder(encoder)
                writer = IngestWriter(self, encoder, report, batch_size, show_progress)
                try:
                    writer.add(documents, segment_docs)
                except BaseException as exc:
                    writer.abandon()
                    raise self._not_committed("this ingest", exc) from exc
                try:
                    writer.commit()
                except IndexStorageError as exc:
                    raise self._not_committed("this ingest", exc) from exc
                report.generation = int(self.manifest.get("generation", 0))
                self._merge_after_commit(f"this ingest (indexed {report.indexed}, updated {report.updated})")
        except KeyboardInterrupt as exc:
            raise IngestInterrupted(report) from exc
        report.notes.extend(filter(None, [knn_note(self)]))
        report.seconds = time.perf_counter() - started
        logger.info("ingest: %d new, %d updated, %d skipped in %.1fs", report.indexed, report.updated,
                    len(report.skipped), report.seconds)
        return report

    def delete(self, ids: Sequence[str], wait: bool | float) -> int:
        """``LocalIndex.delete``."""
        wanted = list(dict.fromkeys(map(str, ids)))
        with self._writing(wait):
            entries, removed = [], 0
            generation = int(self.manifest.get("generation", 0)) + 1
            for seg in self.segments:
                rows = [pos for _, pos in seg.lookup(wanted)]
                entries.append(with_deletions(seg, rows, generation) if rows else seg.entry)
                removed += len(rows)
            if removed:
                try:
                    self.commit(entries)
                except IndexStorageError as exc:
                    raise self._not_committed(f"deleting {removed} documents", exc) from exc
                self._merge_after_commit(f"deleting {removed} documents")
        return removed

    def _not_committed(self, what: str, exc: BaseException) -> BaseException:
        """``exc``, and for a refusal of the file system the one line saying that ``what`` was
        not committed and what the index still holds."""
        if not isinstance(exc, IndexStorageError):
            return exc
        return IndexStorageError(f"{what} was not committed: {exc}".removesuffix(f". Fix: {exc.fix}") +
                                 f". Index {self.path} still holds its previous commit ({self.manifest.get('count')} documents)",
                                 problem=exc.problem, fix=exc.fix)

    def _merge_after_commit(self, what: str) -> None:
        """The merge policy, after ``what`` was committed: a merge that stops (damage found in a
        segment it reads, a full disk) must not hide that the commit happened."""
        try:
            self._merge_by_policy()
        except (IndexStorageError, IndexDamagedError) as exc:
            message = (f"{what} was committed (index {self.path} holds {self.index.count()} documents), but merging "
                       f"segments afterwards stopped: {exc}")
            if isinstance(exc, IndexStorageError):
                raise IndexStorageError(message.removesuffix(f". Fix: {exc.fix}"), problem=exc.problem,
                                        fix=exc.fix) from exc
            raise IndexDamagedError(message) from exc

    # ------------------------------------------------------------------ merges
    @property
    def _flat_threshold(self) -> int:
        return int(self.manifest["faiss"].get("flat_threshold", FLAT_THRESHOLD))

    def _merge_by_policy(self) -> None:
        flat_limit = self._flat_threshold if self.manifest["faiss"].get("kind") == "auto" else None
        while (names := plan_merge(self.manifest["segments"], flat_limit=flat_limit)) is not None:
            self._merge(names)

    def optimize(self, *, encoder=None, drop_damaged: bool = False,
                 confirm: Callable[[list[Loss]], bool] | None = None, wait: bool | float = False,
                 analyzer: str | None = None) -> dict[str, Any]:
        """``LocalIndex.optimize`` (its docstring says what it does). The index's readers keep
        the commit they have until the optimized one is published."""
        with self._lock.held(wait):
            manifest = read_manifest(self.path)
            remove_unreferenced(self.path, manifest)
            self.manifest = manifest
            before = len(manifest["segments"])
            parts, losses = read_for_optimize(self.path, manifest["segments"], self.dim, self.distance, encoder,
                                              drop_damaged)
            if losses and confirm is not None and not confirm(losses):
                return {"segments_before": before, "documents": int(manifest.get("count", 0)), "dropped": [],
                        "declined": True}
            for loss in losses:
                set_aside(self.path, loss)
            moving = analyzer is not None and get_analyzer(analyzer) != self.index.analyzer_of(manifest)
            if moving:  # what the rebuilt segment is written with and committed under
                self.manifest = {**manifest, "bm25": {**manifest.get("bm25", {}),
                                                      "analyzer": get_analyzer(analyzer).record()}}
            untouched = (not moving and before == 1 and not losses and not manifest["segments"][0].get("deleted")
                         and not file_problems(self.path, manifest["segments"][0], checksums=True)
                         and not base_problems(self.path, manifest, checksums=True))
            if before and not untouched:
                try:
                    self._write_merged(parts, [e["name"] for e in manifest["segments"]])
                except BaseException as exc:
                    if self.manifest.get("generation") == manifest.get("generation"):
                        self.manifest = manifest  # not committed: the old analyzer stays
                    if not isinstance(exc, IndexStorageError):
                        raise
                    with contextlib.suppress(IndexDamagedError):  # repairing: the old commit may not open
                        self.index.refresh()  # the index goes on with the commit that is still there
                    raise self._not_committed("optimize", exc) from exc
            elif moving:  # no documents: the record alone changes
                self.commit([])
            elif untouched and (unordered(manifest.get(BASE_KEY)) or not has_second_copies(manifest["segments"][0])):
                # one healthy segment written by an earlier version: add what this one writes
                # (the second copies, the graph's node order), no rebuild
                entry = manifest["segments"][0]
                if not has_second_copies(entry):
                    entry = add_missing_copies(self.path / SEGMENTS_DIR, entry)
                self.commit([entry], reorder_base=True)
            else:
                self.index.refresh()
            return {"segments_before": before, "documents": self.index.count(), "dropped": losses, "declined": False}

    def _merge(self, names: list[str]) -> None:
        entries = [e for e in self.manifest["segments"] if e["name"] in names]
        parts = [read_live_rows(self.path, e, self.dim, self.distance, None) for e in entries]
        self._write_merged(parts, names)

    def _write_merged(self, parts: list[LiveRows], names: list[str]) -> None:
        """Write the rows of ``parts`` as one segment replacing the segments ``names``."""
        ids = [i for p in parts for i in p.ids]
        texts = [t for p in parts for t in p.texts]
        metas = [m for p in parts for m in p.metadata]
        vectors = np.concatenate([p.vectors for p in parts]) if parts else np.zeros((0, self.dim), np.float32)
        parts.clear()  # the per-segment copies (the caller's list): a merge holds its vectors once
        counter = int(self.manifest.get("next_segment", 1))
        entries = [e for e in self.manifest["segments"] if e["name"] not in names]
        if ids:
            merged = self.write_new_segment(counter, ids, texts, metas, vectors)
            first = min((i for i, e in enumerate(self.manifest["segments"]) if e["name"] in names), default=0)
            entries.insert(min(first, len(entries)), merged)
        logger.info("merged %d segments (%d documents)", len(names), len(ids))
        self.commit(entries, next_segment=counter + 1)
