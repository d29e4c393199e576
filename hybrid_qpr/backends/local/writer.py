"""The writing side of a local index: the segments and tombstones of one ingest
(``IngestWriter``), tombstone entries (``with_deletions``) and the live rows a merge or
``optimize`` reads back from a segment's files (``read_live_rows``), every file checked
against its CRC32 first so that a merge never copies damage into a fresh segment."""

from __future__ import annotations

import json
import logging
import shutil
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hybrid_qpr.artifacts import load_npy
from hybrid_qpr.backends.base import IngestReport, document_problem
from hybrid_qpr.backends.local import textstore
from hybrid_qpr.backends.local.segment import (DOCS_DB, IDS_KEY, SEGMENTS_DIR, VECTORS, Segment, checksum, damaged,
                                               file_problems, fix_for, ids_checksum, lost_fix, map_npy, stored_rows,
                                               write_deletions)
from hybrid_qpr.backends.local.textstore import OFFSETS_FILE, TEXT_FILE, TextStore
from hybrid_qpr.backends.local.storage import access_refusal, unreadable
from hybrid_qpr.backends.local.vectorbase import unordered
from hybrid_qpr.distance import Distance, prepare_vectors
from hybrid_qpr.errors import ConfigError, IndexDamagedError, SkippedLine
from hybrid_qpr.types import Document

logger = logging.getLogger(__name__)


class WritableIndex(Protocol):
    """What the ingest writer and ``knn_note`` use of a ``LocalIndex`` (a protocol, so this
    module need not import ``index.py``, which imports it)."""

    path: Path
    manifest: dict[str, Any]
    @property
    def segments(self) -> Sequence[Segment]: ...

    @property
    def base(self) -> Any:
        """The vector base (``vectorbase.VectorBase``) or None."""
    dim: int
    distance: Distance

    @property
    def search_settings(self) -> Any: ...

    def write_new_segment(self, counter: int, ids: list[str], texts: list[str], metadata: list[str],
                          vectors: np.ndarray) -> dict[str, Any]: ...

    def commit(self, entries: list[dict[str, Any]], *, next_segment: int | None = None) -> None: ...


def with_deletions(seg: Segment, rows: Sequence[int], generation: int) -> dict[str, Any]:
    """``seg``'s manifest entry with ``rows`` added to its tombstones (file written now)."""
    deleted = np.zeros(seg.count, dtype=bool) if seg.deleted is None else seg.deleted.copy()
    deleted[np.asarray(rows, dtype=np.int64)] = True
    entry = dict(seg.entry)
    entry["deletions"] = write_deletions(seg.dir, generation, np.flatnonzero(deleted))
    entry["deleted"] = int(deleted.sum())
    return entry


def check_output_dim(encoder) -> None:
    """Encode one text now, so that a model whose ``config.json`` disagrees with the dims it
    outputs is refused (``ModelMismatchError``, by the encoder) before an index is created for it."""
    encoder.encode(["how many dimensions does this model output?"], show_progress=False, side="document")


@dataclass
class LiveRows:
    """The live rows of one segment, in row order, as a merge reads them."""

    ids: list[str]
    texts: list[str]
    metadata: list[str]  # JSON texts
    vectors: np.ndarray  # float32 [len(ids), dim]


def read_live_rows(index_path: Path, entry: dict[str, Any], dim: int, distance: Distance, encoder,
                   live_elsewhere: set[str] | None = None) -> LiveRows:
    """A segment's live rows, straight from its files, each file it reads (documents,
    tombstones, vectors) checked against its CRC32 first: a merge or ``optimize`` must never
    copy damage into a new segment with fresh checksums. What is damaged is rebuilt from an
    intact copy where one exists: the documents from the text store (``_documents``), the
    tombstones from ``live_elsewhere``, the ids live in the other segments (``_deleted_rows``),
    the vectors by re-encoding the texts with ``encoder``. What cannot be rebuilt raises
    ``IndexDamagedError``; its fix names ``--drop-damaged`` only then (``lost_fix``). FAISS
    and BM25 files are not read."""
    seg_dir = index_path / SEGMENTS_DIR / entry["name"]
    files = entry.get("files") or {}
    for file in (DOCS_DB, VECTORS, *textstore.FILES, (entry.get("deletions") or {}).get("file")):
        if file and unreadable(seg_dir / file):  # permissions, not damage: never a reason to drop the segment
            raise access_refusal(seg_dir / file, writing=False)
    rows = _documents(index_path, entry)
    live = np.ones(len(rows), dtype=bool)
    live[_deleted_rows(index_path, entry, rows, live_elsewhere)] = False
    keep = np.flatnonzero(live)
    vectors = None
    if VECTORS in files and intact(seg_dir / VECTORS, files[VECTORS]):
        try:
            stored = load_npy(seg_dir / VECTORS, mmap_mode="r")
            if stored.shape == (len(rows), dim):
                vectors = np.asarray(stored[keep], dtype=np.float32)
        except (OSError, ValueError):
            vectors = None
    if vectors is None:
        if encoder is None:
            raise damaged(index_path, f"{SEGMENTS_DIR}/{entry['name']}/{VECTORS} is damaged and no encoder was given "
                          "to re-encode it", fix_for(VECTORS, index_path))
        logger.warning("re-encoding %d texts of segment %s (its vectors are damaged)", len(keep), entry["name"])
        vectors = prepare_vectors(encoder.encode([rows[i][1] for i in keep], show_progress=False, side="document"),
                                  distance)
    return LiveRows([rows[i][0] for i in keep], [rows[i][1] for i in keep], [rows[i][2] for i in keep], vectors)


def intact(path: Path, record: dict[str, int] | None) -> bool:
    """Whether ``path`` has the size and CRC32 its manifest ``record`` holds."""
    return record is not None and path.is_file() and path.stat().st_size == record["bytes"] \
        and checksum(path) == record["crc32"]


def _documents(index_path: Path, entry: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(id, text, metadata)`` of every row: from ``docs.sqlite`` when it matches its
    checksum; else the texts and metadata from the intact text store, with the ids read from
    what SQLite can still read of ``docs.sqlite`` and trusted only when they match the
    manifest's ``ids_crc32`` (a segment written before it: when every text and metadata
    SQLite returns is the text store's and the ids are distinct)."""
    seg_dir = index_path / SEGMENTS_DIR / entry["name"]
    rel, count, files = f"{SEGMENTS_DIR}/{entry['name']}/{DOCS_DB}", int(entry["count"]), entry.get("files") or {}
    stored: list[tuple] | None = None
    try:
        stored = stored_rows(seg_dir, "id, text, metadata")
    except sqlite3.Error as exc:
        unreadable_reason = str(exc)
    if intact(seg_dir / DOCS_DB, files.get(DOCS_DB)):
        if stored is None:
            raise damaged(index_path, f"{rel} cannot be read ({unreadable_reason})", fix_for(DOCS_DB, index_path))
        if len(stored) != count:
            raise damaged(index_path, f"{rel} holds {len(stored)} rows, expected {count}", fix_for(DOCS_DB, index_path))
        return stored
    # confirmed damaged (size or CRC32 against the manifest): rebuild it from the text store if that is intact
    texts = _text_store_rows(seg_dir, entry)
    what = f"{rel} is missing or has changed since it was written (size or CRC32)"
    if texts is None:
        raise damaged(index_path, f"{what}, and the segment has no intact text store to rebuild it from",
                      lost_fix(index_path))
    ids = [row[0] for row in stored] if stored is not None and len(stored) == count else None
    if ids is not None and IDS_KEY in entry:
        trusted = ids_checksum(ids) == entry[IDS_KEY]
    else:
        trusted = ids is not None and len(set(ids)) == count and all(isinstance(i, str) and i for i in ids) \
            and [tuple(row[1:]) for row in stored] == texts
    if not trusted:
        raise damaged(index_path, f"{what}; its texts are intact in docs.text but its ids cannot be read back and "
                      "verified", lost_fix(index_path))
    logger.warning("%s: rebuilding %s from the segment's text store (its ids verified)", index_path, rel)
    return [(doc_id, text, meta) for doc_id, (text, meta) in zip(ids, texts)]


def _text_store_rows(seg_dir: Path, entry: dict[str, Any]) -> list[tuple[str, str]] | None:
    """Every row's ``(text, metadata)`` from the text store, or ``None`` when the segment has
    none or it does not match its checksums or fit its row count."""
    files = entry.get("files") or {}
    if not all(intact(seg_dir / file, files.get(file)) for file in textstore.FILES):
        return None
    count = int(entry["count"])
    try:
        with open(seg_dir / TEXT_FILE, "rb") as text, open(seg_dir / OFFSETS_FILE, "rb") as offsets:
            store = TextStore(text, map_npy(offsets))
            try:
                return None if store.problem(count) else store.rows(range(count))
            finally:
                store.close()
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _deleted_rows(index_path: Path, entry: dict[str, Any], rows: list[tuple[str, str, str]],
                  live_elsewhere: set[str] | None) -> np.ndarray:
    """The segment's tombstoned rows: from its tombstone file when that matches its checksum;
    else rebuilt as the rows whose ids are live in another segment (``live_elsewhere``: an
    update tombstones the older row), when they account for every deleted row the manifest
    counts. Rows deleted by 'delete' have no other record, so then the tombstones are lost."""
    record = entry.get("deletions")
    if not record:
        return np.zeros(0, dtype=np.int64)
    seg_dir = index_path / SEGMENTS_DIR / entry["name"]
    rel, count, deleted = f"{SEGMENTS_DIR}/{entry['name']}/{record['file']}", len(rows), int(entry["deleted"])
    if intact(seg_dir / record["file"], record):
        found = load_npy(seg_dir / record["file"])
        if found.ndim != 1 or len(found) != deleted or (len(found) and (found.min() < 0 or found.max() >= count)):
            raise damaged(index_path, f"{rel} does not hold {deleted} rows below {count}", lost_fix(index_path))
        return found.astype(np.int64)
    what = f"{rel} (tombstones) is missing or has changed since it was written (size or CRC32)"
    if live_elsewhere is None:
        raise damaged(index_path, what, fix_for(record["file"], index_path))
    shadowed = np.asarray([row for row, (doc_id, _, _) in enumerate(rows) if doc_id in live_elsewhere], dtype=np.int64)
    if len(shadowed) != deleted:
        raise damaged(index_path, f"{what}; {len(shadowed)} of its {deleted} deleted rows can be rebuilt (the ones "
                      "updated in other segments), so keeping it would bring deleted documents back",
                      lost_fix(index_path))
    logger.warning("%s: rebuilding %s from the ids live in other segments (%d rows)", index_path, rel, deleted)
    return shadowed


def read_for_optimize(index_path: Path, entries: Sequence[dict[str, Any]], dim: int, distance: Distance, encoder,
                      drop_damaged: bool) -> tuple[list[LiveRows], list[str]]:
    """Every segment's live rows for ``optimize``, repaired where an intact copy allows, and the
    segments dropped (``"name (N documents)"``). Segments whose tombstones need rebuilding are
    read after the others, whose live ids rebuild them. A segment is dropped only with
    ``drop_damaged`` and only when an independent second check, its files' sizes and CRC32s
    against the manifest, confirms the damage; else the error is raised and nothing is dropped."""
    parts: dict[str, LiveRows] = {}
    dropped: list[str] = []

    def tombstones_intact(entry: dict[str, Any]) -> bool:
        record = entry.get("deletions")
        return not record or intact(index_path / SEGMENTS_DIR / entry["name"] / record["file"], record)

    later = [e for e in entries if not tombstones_intact(e)]
    for entry in [e for e in entries if tombstones_intact(e)] + later:
        live_elsewhere = {i for part in parts.values() for i in part.ids} if entry in later else None
        try:
            parts[entry["name"]] = read_live_rows(index_path, entry, dim, distance, encoder, live_elsewhere)
        except IndexDamagedError as exc:
            if not drop_damaged:
                raise
            if not file_problems(index_path, entry, checksums=True):
                raise IndexDamagedError(f"{exc} (not dropped: every file of segment {entry['name']} matches its size "
                                        "and CRC32, so the damage is not confirmed)") from None
            logger.warning("dropping segment %s: %s", entry["name"], exc)
            dropped.append(f"{entry['name']} ({int(entry['count']) - int(entry.get('deleted', 0))} documents)")
    return [parts[e["name"]] for e in entries if e["name"] in parts], dropped


class IngestWriter:
    """The segments and tombstones of one ingest, committed together by ``commit``."""

    def __init__(self, index: WritableIndex, encoder, report: IngestReport, batch_size: int, show_progress: bool):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ConfigError(f"batch_size={batch_size!r}: must be a whole number >= 1")
        self.index = index
        self.encoder = encoder
        self.report = report
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.counter = int(index.manifest.get("next_segment", 1))
        self.generation = int(index.manifest.get("generation", 0)) + 1
        self.new_segments: list[Segment] = []
        self.written: dict[str, tuple[int, int]] = {}  # id -> (new segment number, row) for ids written by this ingest
        self.tombstones: dict[str, set[int]] = {}  # segment name -> rows replaced by this ingest

    def add(self, documents: Iterable[Document | tuple[int, Document]], segment_docs: int) -> None:
        """Write ``documents`` (``Document`` or ``(line, Document)``) as segments of up to
        ``segment_docs``, the last version of a repeated id winning. Ids are kept exactly as
        given: an id with leading or trailing whitespace is skipped with its line (stripping it
        would silently replace the document with the stripped id)."""
        pending: dict[str, tuple[str, str]] = {}
        for number, item in enumerate(documents, start=1):
            line, doc = (number, item) if isinstance(item, Document) else item  # a Document is a tuple too
            problem = document_problem(doc)
            if problem:
                self.report.skipped.append(SkippedLine(None, line, problem))
                continue
            doc_id = str(doc.id)
            if doc_id in pending:
                self.report.updated += 1
                del pending[doc_id]  # keep the input order of the last version
            metadata = json.dumps(doc.metadata, ensure_ascii=False, sort_keys=True) if doc.metadata else "{}"
            pending[doc_id] = (doc.text, metadata)
            if len(pending) >= segment_docs:
                self.flush(pending)
                pending = {}
        self.flush(pending)

    def _existing(self, ids: list[str]) -> dict[str, tuple[Segment, int, str, str]]:
        """Live rows of ``ids`` already in the index or written earlier by this ingest."""
        found: dict[str, tuple[Segment, int, str, str]] = {}
        for seg in self.index.segments:
            replaced = self.tombstones.get(seg.name, set())
            for doc_id, pos, text, metadata in seg.lookup(ids, "id, pos, text, metadata"):
                if pos not in replaced:
                    found[doc_id] = (seg, pos, text, metadata)
        for doc_id in ids:
            if doc_id in self.written:
                number, pos = self.written[doc_id]
                seg = self.new_segments[number]
                if pos not in self.tombstones.get(seg.name, set()):
                    text, metadata = seg.sql("SELECT text, metadata FROM docs WHERE pos = ?", (pos,))[0]
                    found[doc_id] = (seg, pos, text, metadata)
        return found

    def flush(self, pending: dict[str, tuple[str, str]]) -> None:
        """Write ``pending`` (id -> (text, metadata JSON)) as one new segment."""
        if not pending:
            return
        existing = self._existing(list(pending))
        ids, texts, metas, reused, to_encode = [], [], [], {}, []
        for doc_id, (text, metadata) in pending.items():
            old = existing.get(doc_id)
            if old is None:
                self.report.indexed += 1
            else:
                self.report.updated += 1
                seg, pos, old_text, old_meta = old
                if old_text == text and old_meta == metadata:
                    continue  # unchanged: nothing to write
                self.tombstones.setdefault(seg.name, set()).add(pos)
                if old_text == text:
                    reused[len(ids)] = np.asarray(seg.vectors[pos], dtype=np.float32)
            if len(ids) not in reused:
                to_encode.append(len(ids))
            ids.append(doc_id)
            texts.append(text)
            metas.append(metadata)
        if not ids:
            return
        vectors = np.zeros((len(ids), self.index.dim), dtype=np.float32)
        for row, vector in reused.items():
            vectors[row] = vector
        if to_encode:
            started, cpu = time.perf_counter(), time.process_time()
            encoded = self.encoder.encode([texts[i] for i in to_encode], batch_size=self.batch_size,
                                          show_progress=self.show_progress, side="document")
            vectors[np.asarray(to_encode)] = prepare_vectors(encoded, self.index.distance)
            logger.info("encoded %d texts in %.1f s (CPU %.1f s)", len(to_encode), time.perf_counter() - started,
                        time.process_time() - cpu)
        entry = self.index.write_new_segment(self.counter, ids, texts, metas, vectors)
        self.counter += 1
        seg = Segment(self.index.path, entry, self.index.dim, self.index.search_settings, verify=False)
        number = len(self.new_segments)
        self.new_segments.append(seg)
        for row, doc_id in enumerate(ids):
            self.written[doc_id] = (number, row)

    def abandon(self) -> None:
        """Remove what this ingest wrote (nothing of it was committed)."""
        for seg in self.new_segments:
            seg.close()
            shutil.rmtree(seg.dir, ignore_errors=True)
        for name in self.tombstones:
            (self.index.path / SEGMENTS_DIR / name / f"deleted.{self.generation}.npy").unlink(missing_ok=True)

    def commit(self) -> None:
        """One manifest commit naming the new segments and the new tombstones."""
        if not self.new_segments and not self.tombstones:
            return
        entries = []
        for seg in [*self.index.segments, *self.new_segments]:
            rows = self.tombstones.get(seg.name)
            entries.append(with_deletions(seg, sorted(rows), self.generation) if rows else seg.entry)
        for seg in self.new_segments:
            seg.close()
        self.index.commit(entries, next_segment=self.counter)


def knn_note(index: WritableIndex) -> str | None:
    """The kNN speed/recall setting an ingest leaves in force, as a line for the user (None
    without HNSW graphs). Read from the manifest entries: loading each FAISS file (and its
    CRC check) only to say this would cost seconds."""
    graphs = [seg.ef_search for seg in index.segments if seg.entry["factory"].startswith("HNSW")]
    base = index.base
    if not graphs and base is None:
        return None
    stored = index.search_settings.ef_search
    if base is not None:
        shared = sum(base.owns(seg) for seg in index.segments)
        return (f"kNN: {shared} of {len(index.segments)} segments share one HNSW graph (the vector base, "
                f"{base.live} live vectors) searched with efSearch {base.ef_search}"
                + (" (stored)" if stored else ", measured on the graph") + "; the others are searched exactly"
                + (f"; its nodes are in ingest order: 'hybrid-qpr index optimize {index.path}' stores them in "
                   "locality order (faster kNN)" if unordered(base.record) else ""))
    how = f"stored efSearch {stored}" if stored else f"efSearch {', '.join(map(str, sorted(set(graphs))))}, " \
          "measured on each graph (0.97 of the exact top 10)"
    return f"kNN: {len(graphs)} of {len(index.segments)} segments are HNSW graphs searched with {how}"
