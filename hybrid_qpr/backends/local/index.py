"""``LocalIndex``: the embedded backend over a local index directory of segments.

Layout::

    manifest.json   the commit point: format, model fingerprint/dim/distance/kind/path, live
                    count, generation, FAISS and BM25 settings, tuned fusion, and the list
                    of segments with each file's size and CRC32
    write.lock      the single-writer lock (holds the writer's pid)
    segments/<name>/  one immutable segment per ingest (or merge); see ``segment.py``

An ingest appends a new segment (only new or changed texts are encoded; nothing existing is
rewritten) and writes tombstones for the rows it replaces; a delete writes tombstones only.
A search runs over every segment and merges the per-segment lists exactly: BM25 with
corpus-wide statistics (``bm25.py``), kNN by FAISS per segment (exact ``Flat`` below 50,000
vectors per segment), ties broken by id. Small segments are merged by size tier after each
write (``merge.py``) and all at once by ``optimize``. See ``commit.py`` for how a write is
made atomic and how concurrent writers are kept apart.

Filters (``{"field": value}`` or ``{"field": [v1, v2]}``) match metadata exactly, compared
as text: strings as they are, numbers as JSON writes them (``3``, ``1.5``), booleans as
``true``/``false`` (so ``--filter flag=true`` matches JSON ``true``), and a list-valued
field matches when any element does. Several values for one field mean any of them;
several fields must all match. A field that no document has is refused with the known
fields listed. Filters select the matching rows first; BM25 ranks only those and kNN is
exact over them, so ``depth`` hits come back whenever that many documents match.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np

from hybrid_qpr.artifacts import library_versions
from hybrid_qpr.backends.base import Capabilities, IngestReport
from hybrid_qpr.backends.local import blockmax
from hybrid_qpr.backends.local import bm25 as bm25_lib
from hybrid_qpr.backends.local.commit import (FORMAT, FORMAT_VERSION, LOCK_FILE, MANIFEST, WriteLock, read_manifest,
                                              referenced, remove_paths, remove_unreferenced, write_manifest)
from hybrid_qpr.backends.local.merge import plan_merge
from hybrid_qpr.backends.local.segment import (DOCS_DB, SEGMENTS_DIR, VECTORS, Segment, checksum, damaged, file_problems,
                                               fix_for, write_deletions, write_segment)
from hybrid_qpr.backends.local.vectors import (FAISS_KINDS, FLAT_THRESHOLD, FaissKind, SearchSettings, faiss_factory,
                                               one_thread)
from hybrid_qpr.distance import Distance, check_distance, prepare_vectors, score_from_faiss, similarity
from hybrid_qpr.errors import ConfigError, IndexDamagedError, ModelMismatchError, require
from hybrid_qpr.text import tokenize
from hybrid_qpr.types import Document, Filters, Hit

logger = logging.getLogger(__name__)

Bm25Impl = Literal["bm25s", "rank-bm25"]
BM25_IMPLS: tuple[str, ...] = ("bm25s", "rank-bm25")
SEGMENT_DOCS = 250_000  # an ingest flushes a segment every this many documents (bounds its memory; fewer segments, cheaper kNN)


def _versions() -> dict[str, str]:
    return library_versions(("hybrid-qpr", "faiss-cpu", "bm25s", "numpy"))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _best_rows(scores: np.ndarray, rows: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``depth`` best of ``scores`` (aligned with segment ``rows``) plus every row tied
    with the last of them (ties are broken by id later, across segments)."""
    if len(scores) > depth:
        cutoff = np.partition(scores, len(scores) - depth)[len(scores) - depth]  # values only: cheaper than argpartition
        keep = scores >= cutoff
        scores, rows = scores[keep], rows[keep]
    return scores, rows


def _merge_ranked(found: list[tuple["Segment", np.ndarray, np.ndarray]], depth: int) -> list[Hit]:
    """Best ``depth`` over every segment's ``(segment, scores, rows)`` candidates, ties broken
    by id. Exact: each segment contributes its own best ``depth`` and all ties with them. Ids
    are read only for the candidates that can still make the list."""
    if depth <= 0 or not found:
        return []
    all_scores = np.concatenate([scores for _, scores, _ in found])
    if len(all_scores) == 0:
        return []
    cutoff = -np.inf
    if len(all_scores) > depth:
        cutoff = np.partition(all_scores, len(all_scores) - depth)[len(all_scores) - depth]
    kept_scores, kept_ids = [], []
    for seg, scores, rows in found:
        keep = scores >= cutoff
        if keep.any():
            kept_scores.append(scores[keep])
            kept_ids.extend(seg.ids_at(rows[keep]))
    scores, ids = np.concatenate(kept_scores), np.asarray(kept_ids, dtype=object)
    order = np.lexsort((ids, -scores))[:depth]  # score descending, then id
    return Hit.many(ids[order].tolist(), scores[order].astype(np.float64).tolist())


# efSearch of a segment asked for its share k of a multi-segment kNN list: efSearch * (k / full
# k) ** SHARE_EF_POWER. Measured on ten 100,000-document HNSW32 segments (docs/engine.md): power 1
# (efSearch scaled like k) lost 3.5 points of recall@10 against full searches (0.989 -> 0.954),
# 0.75 keeps 0.967 and the merged index's recall@100 (0.892) at about half the FAISS time.
SHARE_EF_POWER = 0.75


def _full_k(seg: "Segment", depth: int) -> int:
    """Hits to ask a segment's FAISS index for so that ``depth`` live ones can remain: its
    deleted rows may be among them."""
    return min(depth + seg.count - seg.live, seg.count)


class _SegmentQueue:
    """Segments handed out one at a time to the threads that search them (a hybrid query's
    kNN worker and, once its BM25 list is done, the calling thread)."""

    def __init__(self, segments: Sequence["Segment"]):
        self._left = iter(segments)
        self._lock = threading.Lock()

    def take(self) -> "Segment | None":
        with self._lock:
            return next(self._left, None)


_WORKER: list[ThreadPoolExecutor] = []


def _worker() -> ThreadPoolExecutor:
    """The process's one thread for ``bm25_and_knn``'s kNN half (started on first use)."""
    if not _WORKER:
        _WORKER.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="hybrid-qpr-knn"))
    return _WORKER[0]


def _filter_value(value: Any) -> str:
    """A filter value as the text it is compared with (see the module docstring)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# the text of one metadata value: booleans as true/false, numbers and strings as SQLite prints them
_VALUE_TEXT = "CASE type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE CAST(value AS TEXT) END"


class LocalIndex:
    """``hybrid_qpr.backends.base.Backend`` over a local index directory (see the module docstring)."""

    # bm25_and_knn runs the two lists on two threads (both release the GIL while they score)
    capabilities = Capabilities(batched_bm25_and_knn=True, vector_beside_bm25=True)

    def __init__(self, path: Path, manifest: dict[str, Any], bm25: Bm25Impl | None = None, *, load: bool = True):
        self.path = Path(path)
        self.manifest = manifest
        self.distance: Distance = check_distance(manifest["model"]["distance"])
        self.dim = int(manifest["model"]["dim"])
        self.bm25_impl: Bm25Impl = bm25 or manifest.get("bm25", {}).get("impl", "bm25s")
        if self.bm25_impl not in BM25_IMPLS:
            raise ConfigError(f"bm25={self.bm25_impl!r}: allowed values are {', '.join(BM25_IMPLS)}")
        self._lock = WriteLock(self.path)
        self.segments: list[Segment] = []
        self._search_override: SearchSettings | None = None
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
        return cls(path, read_manifest(path), bm25=bm25)

    @classmethod
    def open_for_repair(cls, path: str | Path) -> "LocalIndex":
        """The index at ``path`` with its segments not yet opened, for ``optimize`` on a
        damaged index (the manifest itself must be readable)."""
        path = Path(path)
        return cls(path, read_manifest(path), load=False)

    @classmethod
    def create(cls, path: str | Path, encoder, *, faiss: FaissKind = "auto", bm25: Bm25Impl = "bm25s",
               flat_threshold: int = FLAT_THRESHOLD, search: SearchSettings | None = None) -> "LocalIndex":
        """Open ``path`` if it holds an index (checking ``encoder`` matches it), else create
        an empty index for ``encoder`` there (a manifest with no segments). ``search``: the
        stored kNN search settings (default ``SearchSettings()``, chosen by measured recall)."""
        path = Path(path)
        if (path / MANIFEST).is_file():
            index = cls.open(path)
            index.check_encoder(encoder)
            return index
        if faiss not in FAISS_KINDS:
            raise ConfigError(f"faiss={faiss!r}: allowed values are {', '.join(FAISS_KINDS)}")
        if bm25 not in BM25_IMPLS:
            raise ConfigError(f"bm25={bm25!r}: allowed values are {', '.join(BM25_IMPLS)}")
        if path.exists() and not path.is_dir():
            raise ConfigError(f"--index {path}: exists and is not a directory; choose another index directory")
        if path.is_dir() and {p.name for p in path.iterdir()} - {LOCK_FILE, SEGMENTS_DIR}:
            raise ConfigError(f"--index {path}: exists, is not empty and has no {MANIFEST}; refusing to write into it "
                              "(choose another index directory or remove this one)")
        search = search or SearchSettings()
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
                             "tokenizer": "hybrid_qpr.text.tokenize"},
                    "fusion": {}, "segments": [], "retained": [], "versions": _versions(),
                    "created": created, "updated": created,
                })
        index = cls.open(path)
        index.check_encoder(encoder)
        return index

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

    def _load_segments(self) -> None:
        """(Re)build the segment readers for ``self.manifest``, keeping unchanged ones."""
        search = self.search_settings
        previous = {s.name: s for s in self.segments}
        fresh = []
        for entry in self.manifest["segments"]:
            old = previous.pop(entry["name"], None)
            if old is not None and old.entry == entry:
                fresh.append(old)
            else:
                if old is not None:
                    old.close()
                fresh.append(Segment(self.path, entry, self.dim, search))
        for gone in previous.values():
            gone.close()
        self.segments = fresh
        self._stats: bm25_lib.CorpusStats | None = None
        self._rank_bm25 = None

    def refresh(self) -> None:
        """Re-read the manifest: see what other writers committed since this index was opened."""
        self.manifest = read_manifest(self.path)
        self._load_segments()

    # ------------------------------------------------------------------ model checks and defaults
    @property
    def model_dir(self) -> str | None:
        """Directory of the model the index was built with (the CLI's default ``--model``)."""
        return self.manifest["model"].get("path")

    @property
    def fusion_defaults(self) -> dict[str, Any]:
        """Fusion settings stored by tuning, e.g. ``{"fusion": "minmax", "alpha": 0.3}``, or ``{}``."""
        return dict(self.manifest.get("fusion") or {})

    def set_fusion_defaults(self, defaults: Mapping[str, Any], *, wait: bool | float = False) -> None:
        """Store tuned fusion defaults in the manifest (a commit of its own)."""
        with self._writing(wait):
            self._commit(self.manifest["segments"], fusion=dict(defaults))

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
    def count(self) -> int:
        return sum(s.live for s in self.segments)

    @property
    def fields(self) -> list[str]:
        """Metadata fields present in the index (what filters can name)."""
        return sorted({f for s in self.segments for f in s.entry.get("fields", [])})

    def matching(self, filters: Filters | None) -> list[np.ndarray] | None:
        """Per segment, the live rows matching ``filters`` (``None`` = no filter)."""
        if not filters:
            return None
        known = set(self.fields)
        unknown = [f for f in filters if str(f) not in known]
        if unknown:
            listed = ", ".join(sorted(known)) if known else "none (the documents have no metadata)"
            raise ConfigError(f"filter field {unknown[0]!r} is not in any document of index {self.path}; "
                              f"known fields: {listed}")
        clauses, params = [], []
        for field, value in filters.items():
            values = list(value) if isinstance(value, (list, tuple, set)) else [value]
            values = [v for v in values if v is not None]
            if not values:
                return [np.zeros(0, dtype=np.int64) for _ in self.segments]
            clauses.append(f"EXISTS (SELECT 1 FROM json_each(metadata, ?) WHERE {_VALUE_TEXT} "
                           f"IN ({', '.join('?' * len(values))}))")
            params.append('$."' + str(field).replace('"', '\\"') + '"')
            params.extend(_filter_value(v) for v in values)
        out = []
        for seg in self.segments:
            rows = np.fromiter((r[0] for r in seg.sql(f"SELECT pos FROM docs WHERE {' AND '.join(clauses)} ORDER BY pos",
                                                      params)), dtype=np.int64)
            if seg.deleted is not None:
                rows = rows[~seg.deleted[rows]]
            out.append(rows)
        return out

    def _bm25_parts(self) -> list[tuple[Any, np.ndarray | None]]:
        """(postings, deleted mask) per segment, with the corpus statistics and term weights
        computed once per commit."""
        parts = [(s.postings, s.deleted) for s in self.segments]
        if self._stats is None:
            self._stats = bm25_lib.corpus_stats(parts)
            self._weights = bm25_lib.term_weights(parts, self._stats)
            # only the compiled scorer reads them (up to 8 columns of 4 bytes per document; 9 bytes per 64 postings)
            compiled = blockmax.has_compiled_scorer()
            self._dense = bm25_lib.dense_columns(parts, self._weights) if compiled else None
            self._blocks = [blockmax.block_maxima(p, w) for (p, _), w in zip(parts, self._weights)] if compiled else None
        return parts

    def _bm25_scores(self, tokens: list[str]) -> list[np.ndarray]:
        """BM25 score of every row of every segment (deleted rows 0)."""
        if self.bm25_impl == "rank-bm25":
            return self._rank_bm25_scores(tokens)
        return bm25_lib.score_segments(self._bm25_parts(), tokens, self._stats, self._weights)

    def _rank_bm25_scores(self, tokens: list[str]) -> list[np.ndarray]:
        """rank-bm25 (for benchmarks): one BM25Okapi over the live texts, rebuilt on open."""
        if self._rank_bm25 is None:
            rank_bm25 = require("rank_bm25", extra="bench", feature="rank-bm25 search")
            live = [np.flatnonzero(~s.deleted) if s.deleted is not None else np.arange(s.count) for s in self.segments]
            texts = [t for s, rows in zip(self.segments, live)
                     for t in np.asarray([r[0] for r in s.sql("SELECT text FROM docs ORDER BY pos")], dtype=object)[rows]]
            model = rank_bm25.BM25Okapi([tokenize(t) or [""] for t in texts], k1=bm25_lib.BM25_K1, b=bm25_lib.BM25_B)
            self._rank_bm25 = (model, live)
        model, live = self._rank_bm25
        flat = np.asarray(model.get_scores(tokens), dtype=np.float32) if sum(map(len, live)) else np.zeros(0, np.float32)
        out, start = [], 0
        for seg, rows in zip(self.segments, live):
            scores = np.zeros(seg.count, dtype=np.float32)
            scores[rows] = flat[start:start + len(rows)]
            start += len(rows)
            out.append(scores)
        return out

    def bm25(self, query: str, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` documents with a positive BM25 score, filters applied before ranking."""
        allowed = self.matching(filters)
        if not self.segments:
            return []
        if self.bm25_impl == "bm25s":
            parts = self._bm25_parts()
            best = blockmax.top_rows(parts, tokenize(query), self._stats, self._weights, depth, self._dense,
                                     self._blocks, allowed)
            if best is not None:
                return _merge_ranked([(seg, *found) for seg, found in zip(self.segments, best)], depth)
        found = []
        for i, (seg, scores) in enumerate(zip(self.segments, self._bm25_scores(tokenize(query)))):
            rows = np.flatnonzero(scores > 0) if allowed is None else allowed[i][scores[allowed[i]] > 0]
            found.append((seg, *_best_rows(scores[rows], rows, depth)))
        return _merge_ranked(found, depth)

    def knn(self, vector: np.ndarray, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` by similarity: FAISS per segment without filters; exact over the
        matching rows with them."""
        query = self._knn_query(vector)
        allowed = self.matching(filters)
        if allowed is None:
            found = self._faiss_candidates(query, depth, _SegmentQueue(self.segments))
            return _merge_ranked(self._settled(found, query, depth), depth)
        found = []
        for seg, rows in zip(self.segments, allowed):
            if len(rows):
                scores = similarity(query, np.asarray(seg.vectors[rows]), self.distance)[0]
                found.append((seg, *_best_rows(scores, rows, depth)))
        return _merge_ranked(found, depth)

    def _knn_query(self, vector: np.ndarray) -> np.ndarray:
        query = prepare_vectors(np.asarray(vector, dtype=np.float32).reshape(1, -1), self.distance)
        if query.shape[1] != self.dim:
            raise ModelMismatchError(f"query vector has {query.shape[1]} dims; index {self.path} has {self.dim}")
        return query

    def _faiss_candidates(self, query: np.ndarray, depth: int,
                          segments: "_SegmentQueue") -> list[tuple[Segment, np.ndarray, np.ndarray, bool]]:
        """``(segment, scores, rows, complete)`` of the live rows among each segment's FAISS
        hits, for the segments this thread takes from ``segments`` (several threads may share
        it). With one segment it is asked for ``depth`` (plus its deleted rows). With several,
        each is first asked only for its share (the optimistic per-segment k of Lucene 10's
        multi-segment kNN): twice ``depth`` times its fraction of the live documents, plus 10,
        with efSearch times (that k / the full k) ** ``SHARE_EF_POWER``. A segment whose whole
        answer lands in the merged top ``depth`` may hold more, so ``_settled`` searches it again
        in full (``complete`` is False until then)."""
        found = []
        live_total = max(1, sum(seg.live for seg in self.segments))
        while (seg := segments.take()) is not None:
            full = _full_k(seg, depth)
            k, ef = full, seg.ef_search
            if len(self.segments) > 1:
                k = min(full, math.ceil(2 * depth * seg.live / live_total) + 10 + seg.count - seg.live)
                if k < full:
                    ef = math.ceil(seg.ef_search * (k / full) ** SHARE_EF_POWER)
            found.append((*self._search_segment(seg, query, k, ef), k == full))
        return found

    def _search_segment(self, seg: Segment, query: np.ndarray, k: int,
                        ef: int | None = None) -> tuple[Segment, np.ndarray, np.ndarray]:
        """The live rows among ``seg``'s FAISS top ``k``. An HNSW graph is searched with
        efSearch ``ef`` (default: the segment's), never below ``k``: FAISS does not raise it
        itself, and a list longer than its candidate queue loses its tail (measured on Quora
        val, depth 30: equal-RRF MRR@20 0.854 at ef 16, 0.856 at ef 30)."""
        params = None
        if hasattr(seg.faiss, "hnsw"):
            wanted = max(k, ef or seg.ef_search)
            if wanted != seg.faiss.hnsw.efSearch:
                params = require("faiss", feature="the local index").SearchParametersHNSW(efSearch=wanted)
        with one_thread():
            raw, hits = seg.faiss.search(query, k, params=params)
        valid = hits[0] >= 0
        rows = hits[0][valid].astype(np.int64)
        scores = score_from_faiss(raw[0][valid], self.distance)
        if seg.deleted is not None:
            keep = ~seg.deleted[rows]
            rows, scores = rows[keep], scores[keep]
        return seg, scores, rows

    def _settled(self, found: list[tuple[Segment, np.ndarray, np.ndarray, bool]], query: np.ndarray,
                 depth: int) -> list[tuple[Segment, np.ndarray, np.ndarray]]:
        """``found`` with every partial answer that reaches the merged top ``depth`` whole
        (all its scores at or above the ``depth``-th best) replaced by a full search of its
        segment: only then could the segment hold more documents that belong in the list."""
        scores = np.concatenate([f[1] for f in found]) if found else np.zeros(0, np.float32)
        cutoff = np.partition(scores, len(scores) - depth)[len(scores) - depth] if len(scores) > depth else -np.inf
        out = []
        for seg, seg_scores, rows, complete in found:
            if not complete and len(seg_scores) and seg_scores.min() >= cutoff:
                seg, seg_scores, rows = self._search_segment(seg, query, _full_k(seg, depth))
            out.append((seg, *_best_rows(seg_scores, rows, depth)))
        return out

    def bm25_and_knn(self, query: str, vector: np.ndarray | Callable[[], np.ndarray], depth: int,
                     filters: Filters | None = None) -> tuple[list[Hit], list[Hit]]:
        """``bm25`` and ``knn`` at once: kNN on a worker thread while BM25 runs here. FAISS, the
        compiled BM25 scorer and onnxruntime release the GIL, so on two cores a hybrid query
        costs about the slower of the two lists instead of their sum. ``vector`` may be a
        function that returns it (the query's encoding): it is then called on the worker, so
        encoding overlaps the BM25 list too. With several segments, this thread takes the
        segments' FAISS searches the worker has not started once its BM25 list is done (one
        HNSW search per segment would otherwise all wait on the worker)."""
        vector_of = vector if callable(vector) else (lambda: vector)
        if not self.segments:
            return [], []
        if filters:  # filtered lists are exact scans over the matching rows: no FAISS call to overlap
            return self.bm25(query, depth, filters), self.knn(vector_of(), depth, filters)
        segments = _SegmentQueue(self.segments)
        ready: list[np.ndarray] = []  # the prepared query vector, once the worker has it

        def knn_half() -> list[tuple[Segment, np.ndarray, np.ndarray, bool]]:
            ready.append(self._knn_query(vector_of()))
            return self._faiss_candidates(ready[0], depth, segments)

        pending = _worker().submit(knn_half)
        helped: list[tuple[Segment, np.ndarray, np.ndarray, bool]] = []
        try:
            bm25_hits = self.bm25(query, depth)
            if ready:  # never wait for the encoding here: the worker searches whatever is left
                helped = self._faiss_candidates(ready[0], depth, segments)
        finally:
            found = pending.result()
        return bm25_hits, _merge_ranked(self._settled(found + helped, ready[0], depth), depth)

    def vector_scores(self, vector: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        """Exact similarity of ``vector`` to the stored vectors of ``ids`` (MSEM rerank)."""
        wanted = list(dict.fromkeys(ids))
        query = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        out: dict[str, float] = {}
        for seg in self.segments:
            rows = seg.lookup(wanted)
            if rows:
                scores = similarity(query, np.asarray(seg.vectors[[pos for _, pos in rows]]), self.distance)[0]
                out.update((doc_id, float(s)) for (doc_id, _), s in zip(rows, scores))
        return out

    def documents(self, ids: Sequence[str]) -> dict[str, Document]:
        wanted = list(dict.fromkeys(ids))
        out: dict[str, Document] = {}
        for seg in self.segments:
            for doc_id, text, metadata in seg.lookup(wanted, "id, text, metadata"):
                out[doc_id] = Document(doc_id, text, json.loads(metadata) if metadata else {})
        return out

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    # ------------------------------------------------------------------ writes
    @contextlib.contextmanager
    def _writing(self, wait: bool | float) -> Iterator[None]:
        """Hold the write lock, on the latest commit, with dead writers' leftovers removed."""
        with self._lock.held(wait):
            self.refresh()
            remove_unreferenced(self.path, self.manifest)
            yield

    def _commit(self, entries: list[dict[str, Any]], *, fusion: dict[str, Any] | None = None,
                next_segment: int | None = None) -> None:
        """Write the next manifest naming ``entries`` (segments left without live rows are
        dropped); files only the previous commit used are kept one more commit."""
        old = self.manifest
        new = dict(old)
        new["segments"] = [e for e in entries if int(e["count"]) > int(e.get("deleted", 0))]
        new["generation"] = int(old.get("generation", 0)) + 1
        new["count"] = sum(int(e["count"]) - int(e.get("deleted", 0)) for e in new["segments"])
        new["faiss"] = dict(old["faiss"])
        largest = max(new["segments"], key=lambda e: int(e["count"]), default=None)
        new["faiss"]["factory"] = largest["factory"] if largest else None
        if fusion is not None:
            new["fusion"] = fusion
        if next_segment is not None:
            new["next_segment"] = next_segment
        new["versions"] = _versions()
        new["updated"] = _now()
        now_used = referenced(new)
        new["retained"] = sorted(referenced(old) - now_used)
        write_manifest(self.path, new)
        remove_paths(self.path, [p for p in old.get("retained", []) if p not in now_used and p not in new["retained"]])
        self.manifest = new
        self._load_segments()

    def _new_segment_name(self, counter: int) -> str:
        return f"s{counter:06d}-{secrets.token_hex(3)}"

    def ingest(self, documents: Iterable[Document | tuple[int, Document]], encoder, *, batch_size: int = 256,
               show_progress: bool = True, wait: bool | float = False, segment_docs: int = SEGMENT_DOCS) -> IngestReport:
        """Add or replace ``documents`` (``Document`` or ``(line, Document)``) as new segments,
        committed together at the end (a failure or kill before that leaves the previous
        commit). A document with an empty id or text is skipped and reported with its line;
        an id seen before (in the index or earlier in the input) is updated, never
        duplicated. Only new or changed texts are encoded. ``wait``: see ``WriteLock.acquire``."""
        self.check_encoder(encoder)
        started = time.perf_counter()
        report = IngestReport()
        with self._writing(wait):
            self.check_encoder(encoder)
            writer = _IngestWriter(self, encoder, report, batch_size, show_progress)
            try:
                pending: dict[str, tuple[str, str]] = {}
                for number, item in enumerate(documents, start=1):
                    line, doc = item if isinstance(item, tuple) else (number, item)
                    doc_id = str(doc.id).strip() if doc.id is not None else ""
                    if not doc_id or not isinstance(doc.text, str) or not doc.text.strip():
                        report.skipped.append((line, "empty id" if not doc_id else "empty text"))
                        continue
                    if doc_id in pending:
                        report.updated += 1
                        del pending[doc_id]  # keep the input order of the last version
                    metadata = json.dumps(doc.metadata, ensure_ascii=False, sort_keys=True) if doc.metadata else "{}"
                    pending[doc_id] = (doc.text, metadata)
                    if len(pending) >= segment_docs:
                        writer.flush(pending)
                        pending = {}
                writer.flush(pending)
            except BaseException:
                writer.abandon()
                raise
            writer.commit()
            self._merge_by_policy()
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
                entries.append(_with_deletions(seg, rows, generation) if rows else seg.entry)
                removed += len(rows)
            if removed:
                self._commit(entries)
                self._merge_by_policy()
        return removed

    # ------------------------------------------------------------------ merges
    def _factory_for(self, n: int) -> str:
        """The FAISS factory of a new segment of ``n`` documents, by the index's stored choice."""
        return faiss_factory(n, self.manifest["faiss"].get("kind", "auto"), self._flat_threshold)

    @property
    def _flat_threshold(self) -> int:
        return int(self.manifest["faiss"].get("flat_threshold", FLAT_THRESHOLD))

    def _merge_by_policy(self) -> None:
        flat_limit = self._flat_threshold if self.manifest["faiss"].get("kind") == "auto" else None
        while (names := plan_merge(self.manifest["segments"], flat_limit=flat_limit)) is not None:
            self._merge(names)

    def optimize(self, *, encoder=None, drop_damaged: bool = False, wait: bool | float = False) -> dict[str, Any]:
        """Merge every segment into one (tombstones expunged, FAISS and BM25 parts rebuilt).

        Also the repair tool: a segment whose FAISS or BM25 files are damaged is rebuilt
        from its documents and vectors; one whose vectors are damaged is re-encoded with
        ``encoder`` (the index's model); one whose documents are unreadable is dropped only
        with ``drop_damaged=True`` (its ids are listed in the result when readable, else its
        count). Returns ``{"segments_before", "documents", "dropped": [...]}``."""
        with self._lock.held(wait):
            manifest = read_manifest(self.path)
            remove_unreferenced(self.path, manifest)
            self.manifest = manifest
            before = len(manifest["segments"])
            dropped: list[str] = []
            parts = []
            for entry in manifest["segments"]:
                try:
                    parts.append(_read_live_rows(self.path, entry, self.dim, self.distance, encoder))
                except IndexDamagedError as exc:
                    if not drop_damaged:
                        raise
                    logger.warning("dropping segment %s: %s", entry["name"], exc)
                    dropped.append(f"{entry['name']} ({int(entry['count']) - int(entry.get('deleted', 0))} documents)")
            untouched = (before == 1 and not dropped and not manifest["segments"][0].get("deleted")
                         and not file_problems(self.path, manifest["segments"][0], checksums=True))
            self.close()
            self.segments = []  # the old readers may not open (damage); the commit reloads
            if before and not untouched:
                self._write_merged(parts, [e["name"] for e in manifest["segments"]])
            else:
                self._load_segments()
            return {"segments_before": before, "documents": self.count(), "dropped": dropped}

    def _merge(self, names: list[str]) -> None:
        entries = [e for e in self.manifest["segments"] if e["name"] in names]
        parts = [_read_live_rows(self.path, e, self.dim, self.distance, None, verify=False) for e in entries]
        self._write_merged(parts, names)

    def _write_merged(self, parts: list[tuple[list[str], list[str], list[str], np.ndarray]], names: list[str]) -> None:
        """Write the rows of ``parts`` as one segment replacing the segments ``names``."""
        ids = [i for p in parts for i in p[0]]
        texts = [t for p in parts for t in p[1]]
        metas = [m for p in parts for m in p[2]]
        vectors = np.concatenate([p[3] for p in parts]) if parts else np.zeros((0, self.dim), np.float32)
        parts.clear()  # the per-segment copies (the caller's list): a merge holds its vectors once
        counter = int(self.manifest.get("next_segment", 1))
        entries = [e for e in self.manifest["segments"] if e["name"] not in names]
        if ids:
            merged = write_segment(self.path / SEGMENTS_DIR, self._new_segment_name(counter), ids, texts, metas,
                                   vectors, self.distance, self._factory_for(len(ids)))
            first = min((i for i, e in enumerate(self.manifest["segments"]) if e["name"] in names), default=0)
            entries.insert(min(first, len(entries)), merged)
        logger.info("merged %d segments (%d documents)", len(names), len(ids))
        self._commit(entries, next_segment=counter + 1)


def _with_deletions(seg: Segment, rows: Sequence[int], generation: int) -> dict[str, Any]:
    """``seg``'s manifest entry with ``rows`` added to its tombstones (file written now)."""
    deleted = np.zeros(seg.count, dtype=bool) if seg.deleted is None else seg.deleted.copy()
    deleted[np.asarray(rows, dtype=np.int64)] = True
    entry = dict(seg.entry)
    entry["deletions"] = write_deletions(seg.dir, generation, np.flatnonzero(deleted))
    entry["deleted"] = int(deleted.sum())
    return entry


def _read_live_rows(index_path: Path, entry: dict[str, Any], dim: int, distance: Distance, encoder,
                    verify: bool = True) -> tuple[list[str], list[str], list[str], np.ndarray]:
    """(ids, texts, metadata JSON, vectors) of a segment's live rows, straight from its
    files. With ``verify``, damaged vectors are re-encoded with ``encoder`` and damaged
    tombstones or documents raise ``IndexDamagedError``; FAISS and BM25 files are not read."""
    seg_dir = index_path / SEGMENTS_DIR / entry["name"]
    count = int(entry["count"])
    files = entry.get("files") or {}

    def intact(file: str, record: dict[str, int]) -> bool:
        path = seg_dir / file
        return path.is_file() and path.stat().st_size == record["bytes"] and (not verify or checksum(path) == record["crc32"])

    rel = f"{SEGMENTS_DIR}/{entry['name']}"
    try:
        db = sqlite3.connect(f"file:{seg_dir / DOCS_DB}?mode=ro&immutable=1", uri=True)
        try:
            rows = db.execute("SELECT id, text, metadata FROM docs ORDER BY pos").fetchall()
        finally:
            db.close()
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
        live[np.load(seg_dir / record["file"], allow_pickle=False)] = False
    keep = np.flatnonzero(live)
    vectors = None
    if VECTORS in files and intact(VECTORS, files[VECTORS]):
        try:
            stored = np.load(seg_dir / VECTORS, mmap_mode="r", allow_pickle=False)
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
    return ([rows[i][0] for i in keep], [rows[i][1] for i in keep], [rows[i][2] for i in keep], vectors)


class _IngestWriter:
    """The segments and tombstones of one ingest, committed together by ``commit``."""

    def __init__(self, index: LocalIndex, encoder, report: IngestReport, batch_size: int, show_progress: bool):
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
        entry = write_segment(self.index.path / SEGMENTS_DIR, self.index._new_segment_name(self.counter), ids, texts,
                              metas, vectors, self.index.distance, self.index._factory_for(len(ids)))
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
            entries.append(_with_deletions(seg, sorted(rows), self.generation) if rows else seg.entry)
        for seg in self.new_segments:
            seg.close()
        self.index._commit(entries, next_segment=self.counter)
