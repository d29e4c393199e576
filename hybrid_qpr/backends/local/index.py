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

One ``LocalIndex`` may serve many threads: each query reads through a reader (``reader()``,
``reading.py``) that holds one commit's snapshot (``snapshot.py``) from its first list to its
last document, while the index's writer (``writing.py``) holds the write lock, commits and
publishes each new commit; a segment a commit drops is closed when its last reader is done.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from hybrid_qpr.backends.base import IngestReport
from hybrid_qpr.backends.local import bm25 as bm25_lib
from hybrid_qpr.backends.local.commit import (FORMAT, FORMAT_VERSION, MANIFEST, WriteLock, holds_other_files,
                                              read_manifest, remove_unreferenced, write_manifest)
from hybrid_qpr.backends.local.matching import index_fields
from hybrid_qpr.backends.local.reading import CAPABILITIES, IndexReader
from hybrid_qpr.backends.local.recovery import Loss
from hybrid_qpr.backends.local.segment import Segment
from hybrid_qpr.backends.local.snapshot import IndexSnapshot, OpenFiles
from hybrid_qpr.backends.local.storage import access_refusal
from hybrid_qpr.backends.local.vectorbase import VectorBase
from hybrid_qpr.backends.local.vectors import FAISS_KINDS, FLAT_THRESHOLD, FaissKind, SearchSettings
from hybrid_qpr.backends.local.writer import check_output_dim, local_document_problem
from hybrid_qpr.backends.local.writing import IndexWriter, now, versions
from hybrid_qpr.distance import Distance, check_distance
from hybrid_qpr.errors import ConfigError, IndexDamagedError, ModelMismatchError
from hybrid_qpr.text.analysis import Analyzer, get_analyzer, legacy_note, refuse_another
from hybrid_qpr.types import Candidates, Document, Filters, Hit, QueryVector, TextEncoder

logger = logging.getLogger(__name__)

# "builtin": our own scorer over per-segment postings (bm25.py); "rank-bm25": the rank-bm25
# package, a slow reference kept for benchmarks. Indexes written before the scorer had its own
# name record "bm25s" (a package it never used), read as "builtin".
Bm25Impl = Literal["builtin", "rank-bm25"]
BM25_IMPLS: tuple[str, ...] = get_args(Bm25Impl)
OLD_BM25_NAMES = {"bm25s": "builtin"}
OPEN_ATTEMPTS = 50  # commits a reader may see replaced while it opens one (each open takes milliseconds)
SEGMENT_DOCS = 250_000  # an ingest flushes a segment every this many documents (bounds its memory; fewer segments, cheaper kNN)


class LocalIndex:
    """``hybrid_qpr.backends.base.Backend`` over a local index directory (see the module docstring)."""

    capabilities = CAPABILITIES

    def __init__(self, path: Path, manifest: dict[str, Any], bm25: Bm25Impl | None = None, *, load: bool = True):
        self.path = Path(path)
        self.distance: Distance = check_distance(manifest["model"]["distance"])
        self.dim = int(manifest["model"]["dim"])
        stored = manifest.get("bm25", {}).get("impl", "builtin")
        self.bm25_impl: Bm25Impl = bm25 or OLD_BM25_NAMES.get(stored, stored)
        if self.bm25_impl not in BM25_IMPLS:
            raise ConfigError(f"bm25={self.bm25_impl!r}: allowed values are {', '.join(BM25_IMPLS)}")
        self._search_override: SearchSettings | None = None
        self._analyzer: tuple[Any, Analyzer] | None = None  # (manifest record, its analyzer)
        self._files = OpenFiles()  # the open segments and graphs, each closed when its last snapshot goes
        self._publishing = threading.Lock()  # one commit opened and published at a time, in commit order
        # the commit readers see now (segments not opened yet: ``load`` opens them)
        self._snapshot = IndexSnapshot(manifest, files=self._files)
        self._writer = IndexWriter(self, manifest)
        if load:
            self.publish(manifest)

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
    def create(cls, path: str | Path, encoder: TextEncoder, *, faiss: FaissKind = "auto", bm25: Bm25Impl = "builtin",
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
                created = now()
                write_manifest(path, {
                    "format": FORMAT, "format_version": FORMAT_VERSION,
                    "model": {"fingerprint": encoder.fingerprint, "dim": int(encoder.dim), "distance": encoder.distance,
                              "kind": encoder.kind, "path": str(Path(encoder.model_dir).resolve())},
                    "count": 0, "generation": 0, "next_segment": 1,
                    "faiss": {"kind": faiss, "flat_threshold": int(flat_threshold), "factory": None,
                              "nprobe": search.nprobe, "ef_search": search.ef_search},
                    "bm25": {"impl": bm25, "k1": bm25_lib.BM25_K1, "b": bm25_lib.BM25_B,
                             "analyzer": chosen.record()},
                    "fusion": {}, "segments": [], "retained": [], "versions": versions(),
                    "created": created, "updated": created,
                })
        index = cls.open(path)
        index.check_encoder(encoder)
        return index

    # ------------------------------------------------------------------ the current commit
    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest of the commit readers see now."""
        return self._snapshot.manifest

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The current commit's open segments (a query reads through ``reader()`` instead)."""
        return self._snapshot.segments

    @property
    def base(self) -> Any:
        """The vector base (``vectorbase.VectorBase``) of the current commit, or None."""
        return self._snapshot.base

    def reader(self) -> IndexReader:
        """A reader over the current commit, held until it is closed (use it in a ``with``
        block): every list and document it returns belongs to that commit, whatever this
        index or another process commits meanwhile."""
        while True:
            snapshot = self._snapshot
            if snapshot.acquire():  # else it was just replaced and let go: take the new one
                return IndexReader(snapshot, self.path, self.distance, self.dim, self.bm25_impl, self.capabilities,
                                   self.analyzer_of(snapshot.manifest))

    def publish(self, manifest: dict[str, Any]) -> None:
        """Open ``manifest``'s commit (keeping the segments and graph it shares with the current
        one) and make it the one new readers take."""
        with self._publishing:
            self._publish(manifest)

    def _publish(self, manifest: dict[str, Any]) -> None:
        search = self.search_settings
        current = self._snapshot
        previous = {s.name: s for s in current.segments}
        kept, opened = [], []
        try:
            for entry in manifest["segments"]:
                old = previous.get(entry["name"])
                if old is not None and old.entry == entry:
                    kept.append(old)
                else:
                    opened.append(Segment(self.path, entry, self.dim, search))
            fresh = {s.name: s for s in kept + opened}
            segments = [fresh[e["name"]] for e in manifest["segments"]]
            base = VectorBase.open(self.path, manifest, segments, self.dim, search, current.base)
        except BaseException:
            for seg in opened:
                seg.close()
            raise
        self._snapshot = IndexSnapshot(manifest, segments, base, self._files)
        current.release()  # its readers keep what it holds; the rest is closed now

    def refresh(self) -> None:
        """Re-read the manifest: see what other writers committed since this index was opened.
        Opening a commit races with writers: two commits after the manifest was read, the files
        only it names may be gone (a segment, once open, holds its files). A file missing
        while a newer commit exists is that race, not damage: open the newer commit instead."""
        with self._publishing:  # read and published in order: a slow refresh never publishes an older commit
            for attempt in range(OPEN_ATTEMPTS):
                manifest = read_manifest(self.path)
                try:
                    self._publish(manifest)
                    return
                except PermissionError as exc:  # not damage: the file may be intact
                    raise access_refusal(Path(exc.filename or self.path), writing=False) from None
                except IndexDamagedError:
                    if attempt == OPEN_ATTEMPTS - 1 or read_manifest(self.path).get("generation") == manifest.get("generation"):
                        raise
                    logger.debug("commit %s was replaced while it was opened; opening the next", manifest.get("generation"))

    @property
    def analyzer(self) -> Analyzer:
        """BM25's analyzer, as the current commit records it (none recorded: ``legacy``)."""
        return self.analyzer_of(self.manifest)

    def analyzer_of(self, manifest: dict[str, Any]) -> Analyzer:
        """The analyzer ``manifest`` records, made once per record (every query asks)."""
        record = manifest.get("bm25", {}).get("analyzer")
        cached = self._analyzer
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
        self._writer.set_fusion_defaults(defaults, wait)

    def check_encoder(self, encoder: TextEncoder) -> None:
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
        return sum(s.live for s in self._snapshot.segments)

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
        return index_fields(self._snapshot.segments)

    def close(self) -> None:
        """Let the current commit go: its files close now, or when the last reader still
        reading it is done."""
        with self._publishing:
            current, self._snapshot = self._snapshot, IndexSnapshot(self.manifest, files=self._files)
        current.release()

    # ------------------------------------------------------------------ reads: one reader each
    def bm25(self, query: str, depth: int, filters: Filters | None = None) -> list[Hit]:
        with self.reader() as reader:
            return reader.bm25(query, depth, filters)

    def knn(self, vector: np.ndarray, depth: int, filters: Filters | None = None) -> list[Hit]:
        with self.reader() as reader:
            return reader.knn(vector, depth, filters)

    def bm25_and_knn(self, query: str, vector: QueryVector, depth: int,
                     filters: Filters | None = None) -> Candidates:
        with self.reader() as reader:
            return reader.bm25_and_knn(query, vector, depth, filters)

    def vector_scores(self, vector: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        with self.reader() as reader:
            return reader.vector_scores(vector, ids)

    def documents(self, ids: Sequence[str], places: Sequence[tuple[Segment, int]] | None = None) -> dict[str, Document]:
        with self.reader() as reader:
            return reader.documents(ids, places)

    # ------------------------------------------------------------------ writes: the writer's
    def document_problem(self, doc: Document) -> str | None:
        return local_document_problem(doc)

    def ingest(self, documents: Iterable[Document | tuple[int, Document]], encoder: TextEncoder, *, batch_size: int = 256,
               show_progress: bool = True, wait: bool | float = False, rejects_path: str | Path | None = None,
               segment_docs: int = SEGMENT_DOCS) -> IngestReport:
        """Add or replace ``documents`` (``Document`` or ``(line, Document)``) as new segments,
        committed together at the end (a failure or kill before that leaves the previous
        commit). A document with an empty id or text is skipped and reported with its line;
        an id seen before (in the index or earlier in the input) is updated, never
        duplicated. Only new or changed texts are encoded. ``wait``: see ``WriteLock.acquire``.
        The report's ``generation`` is the commit that holds the ingest; Ctrl-C raises
        ``IngestInterrupted`` with the report so far. Nothing is ever rejected once committed,
        so ``rejects_path`` (the contract's) stays unwritten."""
        self.check_encoder(encoder)
        return self._writer.ingest(documents, encoder, batch_size=batch_size, show_progress=show_progress, wait=wait,
                                   segment_docs=segment_docs)

    def delete(self, ids: Sequence[str], *, wait: bool | float = False) -> int:
        """Delete documents by id (tombstones; no data is rewritten); return how many existed."""
        return self._writer.delete(ids, wait)

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
        return self._writer.optimize(encoder=encoder, drop_damaged=drop_damaged, confirm=confirm, wait=wait, analyzer=analyzer)


def migrate_command(path: Path | str, language: str = "english") -> str:
    """The one command that moves an index to another BM25 analyzer (its postings rebuilt from
    the stored texts; vectors kept, nothing re-encoded)."""
    return f"hybrid-qpr index optimize {path} --language {language}"

