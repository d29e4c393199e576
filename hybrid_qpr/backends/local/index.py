"""``LocalIndex``: the embedded backend over a local index directory of segments.

Layout::

    manifest.json   the commit point: format, model fingerprint/dim/distance/kind/path, live
                    count, generation, FAISS and BM25 settings, tuned fusion, and the list
                    of segments with each file's size and CRC32
    manifest.copy.json  the same manifest, written after each commit (``index repair`` rebuilds from it)
    write.lock      the single-writer lock (holds the writer's pid)
    segments/<name>/  one immutable segment per ingest (or merge); see ``segment.py``
    segments/v<gen>-<hex>/  the vector base: one HNSW graph over the large segments (``vectorbase.py``)
    damaged/<name>/ the files of a segment 'index optimize --drop-damaged' dropped (``recovery.py``)

An ingest appends a new segment (only new or changed texts are encoded; nothing existing is
rewritten) and writes tombstones for the rows it replaces; a delete writes tombstones only.
A search runs over every segment and merges the per-segment lists exactly: BM25 with
corpus-wide statistics (``bm25.py``), kNN by one search of the vector base plus an exact
``Flat`` search of each small segment (``hnsw``/``ivf`` indexes: FAISS per segment), ties broken by id. Small segments are merged by size tier after each
write (``merge.py``) and all at once by ``optimize``. See ``commit.py`` for how a write is
made atomic and how concurrent writers are kept apart, and ``matching.py`` for what a
metadata filter matches (filters select the rows first; BM25 and exact kNN rank only those).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np

from hybrid_qpr.artifacts import library_versions
from hybrid_qpr.backends.base import Capabilities, IngestReport
from hybrid_qpr.backends.local import bm25 as bm25_lib
from hybrid_qpr.backends.local.commit import (FORMAT, FORMAT_VERSION, MANIFEST, WriteLock, holds_other_files,
                                              read_manifest, referenced, remove_paths, remove_unreferenced, write_manifest)
from hybrid_qpr.backends.local.matching import index_fields
from hybrid_qpr.backends.local.merge import plan_merge
from hybrid_qpr.backends.local.reading import IndexReading
from hybrid_qpr.backends.local.snapshot import IndexSnapshot
from hybrid_qpr.backends.local.recovery import (LiveRows, Loss, add_missing_copies, has_second_copies,
                                                read_for_optimize, read_live_rows, set_aside)
from hybrid_qpr.backends.local.segment import BASE_FACTORY, SEGMENTS_DIR, Segment, file_problems, write_segment
from hybrid_qpr.backends.local.storage import access_refusal
from hybrid_qpr.backends.local.vectorbase import BASE_KEY, VectorBase, base_problems, next_base, unordered
from hybrid_qpr.backends.local.vectors import FAISS_KINDS, FLAT_THRESHOLD, FaissKind, SearchSettings, faiss_factory
from hybrid_qpr.backends.local.writer import IngestWriter, check_output_dim, knn_note, local_document_problem, with_deletions
from hybrid_qpr.distance import Distance, check_distance
from hybrid_qpr.errors import ConfigError, IndexDamagedError, IndexStorageError, ModelMismatchError
from hybrid_qpr.text.analysis import Analyzer, get_analyzer, legacy_note, refuse_another
from hybrid_qpr.types import Document

logger = logging.getLogger(__name__)

# "builtin": our own scorer over per-segment postings (bm25.py); "rank-bm25": the rank-bm25
# package, a slow reference kept for benchmarks. Indexes written before the scorer had its own
# name record "bm25s" (a package it never used), read as "builtin".
Bm25Impl = Literal["builtin", "rank-bm25"]
BM25_IMPLS: tuple[str, ...] = ("builtin", "rank-bm25")
OLD_BM25_NAMES = {"bm25s": "builtin"}
OPEN_ATTEMPTS = 50  # commits a reader may see replaced while it opens one (each open takes milliseconds)
SEGMENT_DOCS = 250_000  # an ingest flushes a segment every this many documents (bounds its memory; fewer segments, cheaper kNN)


def _versions() -> dict[str, str]:
    return library_versions(("hybrid-qpr", "faiss-cpu", "numpy"))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class LocalIndex(IndexReading):
    """``hybrid_qpr.backends.base.Backend`` over a local index directory (see the module docstring)."""

    # bm25_and_knn runs the two lists on two threads (both release the GIL while they score)
    capabilities = Capabilities(batched_bm25_and_knn=True, knn_search_settings=True)

    def __init__(self, path: Path, manifest: dict[str, Any], bm25: Bm25Impl | None = None, *, load: bool = True):
        self.path = Path(path)
        self.manifest = manifest
        self.distance: Distance = check_distance(manifest["model"]["distance"])
        self.dim = int(manifest["model"]["dim"])
        stored = manifest.get("bm25", {}).get("impl", "builtin")
        self.bm25_impl: Bm25Impl = bm25 or OLD_BM25_NAMES.get(stored, stored)
        if self.bm25_impl not in BM25_IMPLS:
            raise ConfigError(f"bm25={self.bm25_impl!r}: allowed values are {', '.join(BM25_IMPLS)}")
        self._lock = WriteLock(self.path)
        # the commit readers see: segments, the one HNSW graph over the large ones (vectorbase.py), BM25 tables
        self.snapshot = IndexSnapshot()
        self._search_override: SearchSettings | None = None
        self._locations = threading.local()  # per reader thread: where its last lists' ids live (reading.py)
        if load:
            self._load_segments()

    # ------------------------------------------------------------------ open / create
    @classmethod
    def open(cls, path: str | Path, *, bm25: Bm25Impl | None = None) -> "LocalIndex":
        """Open the last commit of an index directory written by ``create``/``ingest``.
        A damaged index raises ``IndexDamagedError`` with the file and the fix. Leftovers of
        dead writers are removed first when no writer holds the lock."""
        path = Path(path)
        read_manifest(path)  # a clear error before touching anything
        lock = WriteLock(path)
        if lock.try_acquire():
            try:
                remove_unreferenced(path, read_manifest(path))
            finally:
                lock.release()
        index = cls(path, read_manifest(path), bm25=bm25, load=False)
        index.refresh()
        return index

    @classmethod
    def open_for_repair(cls, path: str | Path) -> "LocalIndex":
        """The index at ``path`` with its segments not yet opened, for ``optimize`` on a
        damaged index (the manifest itself must be readable)."""
        path = Path(path)
        return cls(path, read_manifest(path), load=False)

    @classmethod
    def create(cls, path: str | Path, encoder, *, faiss: FaissKind = "auto", bm25: Bm25Impl = "builtin",
               flat_threshold: int = FLAT_THRESHOLD, search: SearchSettings | None = None,
               analyzer: str | None = None) -> "LocalIndex":
        """Open ``path`` if it holds an index (checking ``encoder`` matches it), else create
        an empty index for ``encoder`` there (a manifest with no segments). ``search``: the
        stored kNN search settings (default ``SearchSettings()``, chosen by measured recall).
        ``analyzer``: BM25's language analysis (``hybrid_qpr.text.analysis``, default English);
        an existing index keeps its own and refuses another (``LocalIndex.check_analyzer``)."""
        chosen = get_analyzer(analyzer)
        path = Path(path)
        if (path / MANIFEST).is_file():
            index = cls.open(path)
            index.check_encoder(encoder)
            if analyzer is not None:
                index.check_analyzer(chosen)
            return index
        if faiss not in FAISS_KINDS:
            raise ConfigError(f"faiss={faiss!r}: allowed values are {', '.join(FAISS_KINDS)}")
        if bm25 not in BM25_IMPLS:
            raise ConfigError(f"bm25={bm25!r}: allowed values are {', '.join(BM25_IMPLS)}")
        if path.exists() and not path.is_dir():
            raise ConfigError(f"--index {path}: exists and is not a directory; choose another index directory")
        if holds_other_files(path):
            raise ConfigError(f"--index {path}: exists, is not empty and has no {MANIFEST}; refusing to write into it "
                              "(choose another index directory or remove this one)")
        search = search or SearchSettings()
        check_output_dim(encoder)  # before anything is created: a model whose config lies leaves no empty index
        path.mkdir(parents=True, exist_ok=True)
        with WriteLock(path).held(wait=True):
            if not (path / MANIFEST).is_file():  # another process may have created it meanwhile
                created = _now()
                write_manifest(path, {
                    "format": FORMAT, "format_version": FORMAT_VERSION,
                    "model": {"fingerprint": encoder.fingerprint, "dim": int(encoder.dim), "distance": encoder.distance,
                              "kind": getattr(encoder, "kind", ""), "path": str(Path(encoder.model_dir).resolve())},
                    "count": 0, "generation": 0, "next_segment": 1,
                    "faiss": {"kind": faiss, "flat_threshold": int(flat_threshold), "factory": None,
                              "nprobe": search.nprobe, "ef_search": search.ef_search},
                    "bm25": {"impl": bm25, "k1": bm25_lib.BM25_K1, "b": bm25_lib.BM25_B,
                             "analyzer": chosen.record()},
                    "fusion": {}, "segments": [], "retained": [], "versions": _versions(),
                    "created": created, "updated": created,
                })
        index = cls.open(path)
        index.check_encoder(encoder)
        return index

    @property
    def analyzer(self) -> Analyzer:
        """BM25's analyzer, as the current commit records it (none recorded: ``legacy``); read
        once per commit record (every query asks)."""
        record = self.manifest.get("bm25", {}).get("analyzer")
        cached = getattr(self, "_analyzer", None)
        if cached is None or cached[0] is not record:
            cached = self._analyzer = (record, Analyzer.from_record(record, f"index {self.path}"))
        return cached[1]

    def check_analyzer(self, wanted: Analyzer) -> None:
        """Refuse to add documents analysed one way to an index whose BM25 terms are another's."""
        refuse_another(self.analyzer, wanted, f"index {self.path}",
                       f"move the index to {wanted.name} first: {migrate_command(self.path, wanted.name)}")

    def analyzer_note(self) -> str | None:
        """A line for an index still on the legacy analyzer: what it lacks and the command that moves it."""
        return legacy_note(f"index {self.path}", migrate_command(self.path)) if self.analyzer.legacy else None

    @property
    def search_settings(self) -> SearchSettings:
        """kNN search settings in force: ``set_search_settings``'s, else the stored ones."""
        return self._search_override or SearchSettings.from_manifest(self.manifest["faiss"])

    def set_search_settings(self, *, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """Override the stored kNN search settings for this reader (``query --nprobe/--ef-search``)."""
        current = self.search_settings
        self._search_override = SearchSettings(nprobe or current.nprobe, ef_search or current.ef_search)
        for seg in self.segments:
            seg.set_search(self._search_override)
        if self.base is not None:
            self.base.search = self._search_override

    def _load_segments(self) -> None:
        """(Re)build the segment readers for ``self.manifest``, keeping unchanged ones."""
        search = self.search_settings
        previous = {s.name: s for s in self.segments}
        kept, opened = [], []
        try:
            for entry in self.manifest["segments"]:
                old = previous.get(entry["name"])
                if old is not None and old.entry == entry:
                    kept.append(old)
                else:
                    opened.append(Segment(self.path, entry, self.dim, search))
        except BaseException:
            for seg in opened:
                seg.close()
            raise
        fresh = {s.name: s for s in kept + opened}
        for seg in self.segments:
            if fresh.get(seg.name) is not seg:
                seg.close()
        segments = [fresh[e["name"]] for e in self.manifest["segments"]]
        self.snapshot = IndexSnapshot(segments, VectorBase.open(self.path, self.manifest, segments, self.dim, search,
                                                                self.base))

    def refresh(self) -> None:
        """Re-read the manifest: see what other writers committed since this index was opened.
        Opening a commit races with writers: two commits after the manifest was read, the files
        only it names may be gone (a segment, once open, holds its files). A file missing
        while a newer commit exists is that race, not damage: open the newer commit instead."""
        for attempt in range(OPEN_ATTEMPTS):
            self.manifest = read_manifest(self.path)
            try:
                self._load_segments()
                return
            except PermissionError as exc:  # not damage: the file may be intact
                raise access_refusal(Path(exc.filename or self.path), writing=False) from None
            except IndexDamagedError:
                if attempt == OPEN_ATTEMPTS - 1 or read_manifest(self.path).get("generation") == self.manifest.get("generation"):
                    raise
                logger.debug("commit %s was replaced while it was opened; opening the next", self.manifest.get("generation"))

    # ------------------------------------------------------------------ model checks and defaults
    @property
    def model_dir(self) -> str | None:
        """Directory of the model the index was built with (the CLI's default ``--model``)."""
        return self.manifest["model"].get("path")

    @property
    def model_fingerprint(self) -> str | None:
        return self.manifest["model"].get("fingerprint")

    @property
    def fusion_defaults(self) -> dict[str, Any]:
        """Fusion settings stored by tuning, e.g. ``{"fusion": "minmax", "alpha": 0.3}``, or ``{}``."""
        return dict(self.manifest.get("fusion") or {})

    def set_fusion_defaults(self, defaults: Mapping[str, Any], *, wait: bool | float = False) -> None:
        """Store tuned fusion defaults in the manifest (a commit of its own)."""
        with self._writing(wait):
            self.commit(self.manifest["segments"], fusion=dict(defaults))

    def check_encoder(self, encoder) -> None:
        """Refuse an encoder whose fingerprint or dims differ from the index's model."""
        model = self.manifest["model"]
        problems = []
        if int(encoder.dim) != int(model["dim"]):
            problems.append(f"dim {encoder.dim} != {model['dim']}")
        if encoder.fingerprint != model["fingerprint"]:
            problems.append(f"fingerprint {encoder.fingerprint} != {model['fingerprint']}")
        if encoder.distance != model["distance"]:
            problems.append(f"distance {encoder.distance} != {model['distance']}")
        if problems:
            raise ModelMismatchError(
                f"index {self.path} was built with model {model.get('path')} but {encoder.model_dir} differs: "
                + "; ".join(problems) + f". Fix: pass --model {model.get('path')}, or ingest into a new --index "
                "directory to use this model")

    # ------------------------------------------------------------------ Backend protocol
    def exists(self) -> bool:
        return (self.path / MANIFEST).is_file()

    def count(self) -> int:
        return sum(s.live for s in self.segments)

    def empty_reason(self) -> str:
        """Why the index holds no documents, with the fix (for a query on an empty index)."""
        if int(self.manifest.get("generation", 0)) == 0:
            return (f"index {self.path} holds no documents: no ingest into it has committed (an interrupted or failed "
                    f"first ingest leaves it empty). Fix: hybrid-qpr ingest FILE --index {self.path}")
        return (f"index {self.path} holds no documents: every document in it was deleted (commit "
                f"{self.manifest.get('generation')}). Fix: hybrid-qpr ingest FILE --index {self.path}")

    @property
    def fields(self) -> list[str]:
        """Metadata fields present in the index (what filters can name)."""
        return index_fields(self.segments)

    def close(self) -> None:
        for seg in self.segments:
            seg.close()
        if self.base is not None:
            self.base.close()

    # ------------------------------------------------------------------ writes
    @contextlib.contextmanager
    def _writing(self, wait: bool | float) -> Iterator[None]:
        """Hold the write lock, on the latest commit, with dead writers' leftovers removed."""
        with self._lock.held(wait):
            self.refresh()
            remove_unreferenced(self.path, self.manifest)
            yield

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
        new["versions"] = _versions()
        new["updated"] = _now()
        now_used = referenced(new)
        new["retained"] = sorted(referenced(old) - now_used)
        write_manifest(self.path, new)
        remove_paths(self.path, [p for p in old.get("retained", []) if p not in now_used and p not in new["retained"]])
        self.manifest = new
        self._load_segments()

    def write_new_segment(self, counter: int, ids: list[str], texts: list[str], metadata: list[str],
                          vectors: np.ndarray) -> dict[str, Any]:
        """Write segment number ``counter`` of these rows, with the FAISS index the index's stored
        choice gives its size, and return its manifest entry (a later ``commit`` names it)."""
        factory = faiss_factory(len(ids), self.manifest["faiss"].get("kind", "auto"), self._flat_threshold)
        if factory != "Flat" and self.manifest["faiss"].get("kind", "auto") == "auto":
            factory = BASE_FACTORY  # searched through the index's vector base (vectorbase.py)
        return write_segment(self.path / SEGMENTS_DIR, f"s{counter:06d}-{secrets.token_hex(3)}", ids, texts, metadata,
                             vectors, self.distance, factory, self.analyzer.analyze)

    def document_problem(self, doc: Document) -> str | None:
        return local_document_problem(doc)

    def ingest(self, documents: Iterable[Document | tuple[int, Document]], encoder, *, batch_size: int = 256,
               show_progress: bool = True, wait: bool | float = False, rejects_path: str | Path | None = None,
               segment_docs: int = SEGMENT_DOCS) -> IngestReport:
        """Add or replace ``documents`` (``Document`` or ``(line, Document)``) as new segments,
        committed together at the end (a failure or kill before that leaves the previous
        commit). A document with an empty id or text is skipped and reported with its line;
        an id seen before (in the index or earlier in the input) is updated, never
        duplicated. Only new or changed texts are encoded. ``wait``: see ``WriteLock.acquire``.
        Nothing is ever rejected once committed, so ``rejects_path`` (the contract's) stays unwritten."""
        self.check_encoder(encoder)
        started = time.perf_counter()
        report = IngestReport()
        with self._writing(wait):
            self.check_encoder(encoder)
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
            self._merge_after_commit(f"this ingest (indexed {report.indexed}, updated {report.updated})")
        report.notes.extend(filter(None, [knn_note(self)]))
        report.seconds = time.perf_counter() - started
        logger.info("ingest: %d new, %d updated, %d skipped in %.1fs", report.indexed, report.updated,
                    len(report.skipped), report.seconds)
        return report

    def delete(self, ids: Sequence[str], *, wait: bool | float = False) -> int:
        """Delete documents by id (tombstones; no data is rewritten); return how many existed."""
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
            message = (f"{what} was committed (index {self.path} holds {self.count()} documents), but merging "
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
        """Merge every segment into one (tombstones expunged, FAISS and BM25 parts rebuilt).

        ``analyzer``: move the index to this BM25 analyzer (``hybrid_qpr.text.analysis``): the
        postings are rebuilt from the stored texts and committed with the new analyzer's record
        in one commit (a failure leaves the old analyzer and postings); vectors are kept.

        Also the repair tool: what is damaged in a segment is rebuilt from its second copies
        (``recovery.py``): FAISS and BM25 files from its documents and vectors, vectors by
        re-encoding with ``encoder`` (the index's model), documents and tombstones from their
        other copies. A segment that cannot be rebuilt is a ``Loss``; without ``drop_damaged``
        that raises ``IndexDamagedError`` and nothing changes; with it, ``confirm(losses)`` is
        asked first (``None``: yes; ``False`` keeps everything as it is), then each dropped
        segment's files are moved to ``damaged/`` and its documents whose older version is
        tombstoned in another segment get that version back. One healthy segment is left as it
        is, given what an earlier version did not write: its second copies (the text store, the
        ids file) and its vector base's locality order (``vectorbase.unordered``). Returns
        ``{"segments_before", "documents", "dropped": [Loss, ...], "declined": bool}``."""
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
            moving = analyzer is not None and get_analyzer(analyzer) != self.analyzer
            if moving:  # what the rebuilt segment is written with and committed under
                self.manifest = {**manifest, "bm25": {**manifest.get("bm25", {}),
                                                      "analyzer": get_analyzer(analyzer).record()}}
            untouched = (not moving and before == 1 and not losses and not manifest["segments"][0].get("deleted")
                         and not file_problems(self.path, manifest["segments"][0], checksums=True)
                         and not base_problems(self.path, manifest, checksums=True))
            self.close()
            self.snapshot = IndexSnapshot()  # the old readers may not open (damage); the commit reloads
            if before and not untouched:
                try:
                    self._write_merged(parts, [e["name"] for e in manifest["segments"]])
                except BaseException as exc:
                    if self.manifest.get("generation") == manifest.get("generation"):
                        self.manifest = manifest  # not committed: the old analyzer stays
                    if not isinstance(exc, IndexStorageError):
                        raise
                    with contextlib.suppress(IndexDamagedError):  # repairing: the old commit may not open
                        self._load_segments()  # this reader goes on with the commit that is still there
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
                self._load_segments()
            return {"segments_before": before, "documents": self.count(), "dropped": losses, "declined": False}

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


def migrate_command(path: Path | str, language: str = "english") -> str:
    """The one command that moves an index to another BM25 analyzer (its postings rebuilt from
    the stored texts; vectors kept, nothing re-encoded)."""
    return f"hybrid-qpr index optimize {path} --language {language}"

