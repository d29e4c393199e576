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
from hybrid_qpr.backends.local.segment import (DOCS_DB, SEGMENTS_DIR, VECTORS, Segment, checksum, damaged, fix_for,
                                               stored_rows, write_deletions)
from hybrid_qpr.backends.local.storage import access_refusal, unreadable
from hybrid_qpr.backends.local.vectorbase import unordered
from hybrid_qpr.distance import Distance, prepare_vectors
from hybrid_qpr.errors import SkippedLine
from hybrid_qpr.types import Document

logger = logging.getLogger(__name__)


class WritableIndex(Protocol):
    """What the ingest writer and ``knn_note`` use of a ``LocalIndex`` (a protocol, so this
    module need not import ``index.py``, which imports it)."""

    path: Path
    manifest: dict[str, Any]
    segments: list[Segment]
    base: Any  # the vector base (vectorbase.VectorBase) or None
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


def read_live_rows(index_path: Path, entry: dict[str, Any], dim: int, distance: Distance, encoder) -> LiveRows:
    """A segment's live rows, straight from its files, each file it reads (documents,
    tombstones, vectors) checked against its CRC32 first: a merge or ``optimize`` must never
    copy damage into a new segment with fresh checksums. Damaged vectors are re-encoded with
    ``encoder`` when one is given; damaged documents or tombstones raise ``IndexDamagedError``
    (whose fix names ``--drop-damaged``). FAISS and BM25 files are not read."""
    seg_dir = index_path / SEGMENTS_DIR / entry["name"]
    count = int(entry["count"])
    files = entry.get("files") or {}
    rel = f"{SEGMENTS_DIR}/{entry['name']}"

    def intact(file: str, record: dict[str, int]) -> bool:
        path = seg_dir / file
        return path.is_file() and path.stat().st_size == record["bytes"] and checksum(path) == record["crc32"]

    for file in (DOCS_DB, VECTORS, (entry.get("deletions") or {}).get("file")):
        if file and unreadable(seg_dir / file):  # permissions, not damage: never a reason to drop the segment
            raise access_refusal(seg_dir / file, writing=False)
    if DOCS_DB not in files or not intact(DOCS_DB, files[DOCS_DB]):
        raise damaged(index_path, f"{rel}/{DOCS_DB} is missing or has changed since it was written (size or CRC32)",
                      fix_for(DOCS_DB, index_path))
    try:
        rows = stored_rows(seg_dir, "id, text, metadata")
    except sqlite3.Error as exc:
        raise damaged(index_path, f"{rel}/{DOCS_DB} cannot be read ({exc})", fix_for(DOCS_DB, index_path)) from None
    if len(rows) != count:
        raise damaged(index_path, f"{rel}/{DOCS_DB} holds {len(rows)} rows, expected {count}", fix_for(DOCS_DB, index_path))
    live = np.ones(count, dtype=bool)
    if entry.get("deletions"):
        record = entry["deletions"]
        if not intact(record["file"], record):
            raise damaged(index_path, f"{rel}/{record['file']} (tombstones) is missing or changed",
                          fix_for(DOCS_DB, index_path))
        live[load_npy(seg_dir / record["file"])] = False
    keep = np.flatnonzero(live)
    vectors = None
    if VECTORS in files and intact(VECTORS, files[VECTORS]):
        try:
            stored = load_npy(seg_dir / VECTORS, mmap_mode="r")
            if stored.shape == (count, dim):
                vectors = np.asarray(stored[keep], dtype=np.float32)
        except (OSError, ValueError):
            vectors = None
    if vectors is None:
        if encoder is None:
            raise damaged(index_path, f"{rel}/{VECTORS} is damaged and no encoder was given to re-encode it",
                          fix_for(VECTORS, index_path))
        logger.warning("re-encoding %d texts of segment %s (its vectors are damaged)", len(keep), entry["name"])
        vectors = prepare_vectors(encoder.encode([rows[i][1] for i in keep], show_progress=False, side="document"),
                                  distance)
    return LiveRows([rows[i][0] for i in keep], [rows[i][1] for i in keep], [rows[i][2] for i in keep], vectors)


class IngestWriter:
    """The segments and tombstones of one ingest, committed together by ``commit``."""

    def __init__(self, index: WritableIndex, encoder, report: IngestReport, batch_size: int, show_progress: bool):
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
            line, doc = item if isinstance(item, tuple) else (number, item)
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
