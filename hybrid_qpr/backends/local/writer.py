"""The writing side of a local index: the segments and tombstones of one ingest
(``IngestWriter``) and tombstone entries (``with_deletions``). What a merge or ``optimize``
reads back from a segment's files is ``recovery.py``'s."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from hybrid_qpr.backends.base import IngestReport, document_problem
from hybrid_qpr.backends.local.commit import remove_unreferenced
from hybrid_qpr.backends.local.matching import metadata_problem
from hybrid_qpr.backends.local.segment import Segment, write_deletions
from hybrid_qpr.backends.local.vectorbase import unordered
from hybrid_qpr.distance import Distance, prepare_vectors
from hybrid_qpr.errors import ConfigError, SkippedLine
from hybrid_qpr.types import Document

logger = logging.getLogger(__name__)


class WritableIndex(Protocol):
    """What the ingest writer and ``knn_note`` use of a local index's ``writing.IndexWriter``
    (a protocol, so this module need not import ``writing.py``, which imports it)."""

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


def local_document_problem(doc: Document) -> str | None:
    """Why a local index skips ``doc``: what every backend refuses, and metadata keys its filters could not match."""
    return document_problem(doc) or metadata_problem(doc.metadata or {})


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
            problem = local_document_problem(doc)
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
        """Remove what this ingest wrote (nothing of it was committed), a segment that Ctrl-C cut off
        between its writing and its recording here too: all the commit does not name."""
        for seg in self.new_segments:
            seg.close()
        remove_unreferenced(self.index.path, self.index.manifest)

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
