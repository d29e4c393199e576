"""The embedded backend: a local index directory searched without a server.

Layout of an index directory (every file written aside and swapped in atomically)::

    manifest.json   format, model fingerprint/dim/distance/kind/path, counts, FAISS factory
                    string and nprobe, BM25 implementation, library versions, tuned fusion
    docs.sqlite     table docs(pos, id, text, metadata JSON): pos is the row of the document
                    in vectors.npy, in the FAISS index and in the BM25 index
    vectors.npy     float32 [n, dim] encoder vectors (prepared for the distance), no pickle
    vectors.faiss   the FAISS index (Flat, IVF{nlist},Flat or HNSW32)
    bm25/           the bm25s index (sparse matrix as .npy + vocabulary JSON)

Why rebuild instead of update in place: an ingest or delete writes a complete new directory
beside the old one and renames it into place (``hybrid_qpr.artifacts.atomic_directory``), so
a crash or a bad input line can never leave a half-written index, and re-ingesting an id
replaces its row instead of adding a second one. Only new or changed texts are re-encoded;
BM25 and FAISS are rebuilt from the stored tokens and vectors (seconds for 100k questions).

FAISS index choice (``faiss="auto"``): exact ``Flat`` below ``flat_threshold`` documents,
else ``IVF{nlist},Flat`` with ``nlist = round(4·sqrt(N))`` probed with ``nprobe = 10`` (the
SDML paper used IVF2000,Flat with 10 probes); ``"hnsw"`` gives ``HNSW32``. The metric comes
from the encoder's training distance (``hybrid_qpr.distance``).

Filters (``{"field": value}`` or ``{"field": [v1, v2]}``, exact match on metadata, compared
as text) select the matching rows first; BM25 then ranks only those rows and kNN is exact
over them, so ``depth`` hits come back whenever that many documents match.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np

from hybrid_qpr.artifacts import library_versions, read_manifest
from hybrid_qpr.backends.base import Capabilities, IngestReport
from hybrid_qpr.types import Document, Filters, Hit
from hybrid_qpr.distance import Distance, check_distance, faiss_metric, prepare_vectors, score_from_faiss, similarity
from hybrid_qpr.errors import ArtifactError, BackendError, ConfigError, ModelMismatchError, require
from hybrid_qpr.text import tokenize

logger = logging.getLogger(__name__)

FORMAT = "hybrid-qpr-local-index"
FORMAT_VERSION = 1
MANIFEST, DOCS_DB, VECTORS, FAISS_FILE, BM25_DIR = "manifest.json", "docs.sqlite", "vectors.npy", "vectors.faiss", "bm25"
FaissKind = Literal["auto", "flat", "ivf", "hnsw"]
Bm25Impl = Literal["bm25s", "rank-bm25"]
FAISS_KINDS: tuple[str, ...] = ("auto", "flat", "ivf", "hnsw")
BM25_IMPLS: tuple[str, ...] = ("bm25s", "rank-bm25")
FLAT_THRESHOLD = 50_000
NPROBE = 10
TRAIN_PER_LIST = 40
HNSW_M, HNSW_EF_SEARCH = 32, 64
BM25_K1, BM25_B = 1.5, 0.75


def faiss_factory(n: int, kind: FaissKind = "auto", flat_threshold: int = FLAT_THRESHOLD) -> str:
    """The FAISS factory string for ``n`` vectors (see the module docstring)."""
    if kind not in FAISS_KINDS:
        raise ConfigError(f"faiss={kind!r}: allowed values are {', '.join(FAISS_KINDS)}")
    if kind == "auto":
        kind = "flat" if n < flat_threshold else "ivf"
    if kind == "hnsw":
        return f"HNSW{HNSW_M}"
    if kind == "ivf":
        nlist = max(1, round(4 * math.sqrt(max(n, 1))))
        if n < 39 * 4 or nlist > n:  # too few points to train the coarse quantiser
            logger.warning("IVF needs more vectors than %d; using an exact Flat index", n)
            return "Flat"
        return f"IVF{nlist},Flat"
    return "Flat"


def build_faiss(vectors: np.ndarray, distance: Distance, factory: str, nprobe: int = NPROBE):
    """Train (IVF: k-means, 10 iterations, on at most 40 seeded sample vectors per list) and
    fill a FAISS index; return it."""
    faiss = require("faiss", feature="the local index")
    metric = faiss.METRIC_L2 if faiss_metric(distance) == "L2" else faiss.METRIC_INNER_PRODUCT
    index = faiss.index_factory(vectors.shape[1], factory, metric)
    if factory.startswith("IVF"):
        index.cp.niter = 10
        index.cp.seed = 13
    if not index.is_trained:
        sample = vectors
        nlist = getattr(index, "nlist", 0)
        if nlist and len(vectors) > TRAIN_PER_LIST * nlist:  # k-means needs ~40 points per centroid, not all
            rows = np.random.default_rng(13).choice(len(vectors), TRAIN_PER_LIST * nlist, replace=False)
            sample = np.ascontiguousarray(vectors[np.sort(rows)])
        index.train(sample)
    if len(vectors):
        index.add(vectors)
    _set_search_params(index, nprobe)
    return index


def _set_search_params(index, nprobe: int) -> None:
    if hasattr(index, "nprobe"):
        index.nprobe = nprobe
    if hasattr(index, "hnsw"):
        index.hnsw.efSearch = HNSW_EF_SEARCH


class _Bm25:
    """One BM25 over the shared tokenizer, by bm25s (sparse matrix, saved as .npy) or
    rank-bm25 (scores every document; no file format, so rebuilt from the texts on open)."""

    def __init__(self, impl: Bm25Impl, model: Any):
        self.impl = impl
        self.model = model

    @classmethod
    def build(cls, impl: Bm25Impl, token_lists: list[list[str]]) -> "_Bm25":
        if impl == "bm25s":
            bm25s = require("bm25s", feature="BM25 search")
            model = bm25s.BM25(k1=BM25_K1, b=BM25_B)
            model.index(token_lists, show_progress=False)
            return cls(impl, model)
        if impl == "rank-bm25":
            rank_bm25 = require("rank_bm25", extra="bench", feature="rank-bm25 search")
            return cls(impl, rank_bm25.BM25Okapi([t or [""] for t in token_lists], k1=BM25_K1, b=BM25_B))
        raise ConfigError(f"bm25={impl!r}: allowed values are {', '.join(BM25_IMPLS)}")

    def save(self, directory: Path) -> None:
        if self.impl == "bm25s":
            self.model.save(str(directory), show_progress=False)

    @classmethod
    def load(cls, directory: Path) -> "_Bm25":
        bm25s = require("bm25s", feature="BM25 search")
        return cls("bm25s", bm25s.BM25.load(str(directory), mmap=False, show_progress=False))

    def scores(self, tokens: list[str]) -> np.ndarray:
        """BM25 score of every document for the query ``tokens``."""
        if self.impl == "bm25s":
            known = [t for t in tokens if t in self.model.vocab_dict]
            if not known:
                return np.zeros(self.model.scores["num_docs"], dtype=np.float32)
            return self.model.get_scores(known)
        return np.asarray(self.model.get_scores(tokens), dtype=np.float32)


def _top(scores: np.ndarray, positions: np.ndarray | None, ids: Sequence[str], depth: int, positive_only: bool) -> list[Hit]:
    """Best ``depth`` of ``scores`` (aligned with ``positions``; ``None`` = row numbers),
    ties broken by id: every document tied with the last one kept competes on its id."""
    if len(scores) == 0 or depth <= 0:
        return []
    if len(scores) > depth:
        cutoff = scores[np.argpartition(scores, len(scores) - depth)[len(scores) - depth]]
        rows = np.flatnonzero(scores >= cutoff)
    else:
        rows = np.arange(len(scores))
    if positive_only:
        rows = rows[scores[rows] > 0]
    picked = scores[rows].tolist()
    where = rows.tolist() if positions is None else positions[rows].tolist()
    ranked = sorted(zip(picked, where), key=lambda sp: (-sp[0], ids[sp[1]]))
    return [Hit(ids[p], float(s)) for s, p in ranked[:depth]]


class LocalIndex:
    """``hybrid_qpr.backends.base.Backend`` over a local index directory."""

    capabilities = Capabilities()  # everything runs in-process: no batching or server side to offer

    def __init__(self, path: Path, manifest: dict[str, Any], bm25: Bm25Impl | None = None):
        self.path = Path(path)
        self.manifest = manifest
        self.distance: Distance = check_distance(manifest["model"]["distance"])
        self.dim = int(manifest["model"]["dim"])
        self._db = sqlite3.connect(f"file:{self.path / DOCS_DB}?mode=ro", uri=True, check_same_thread=False)
        self._ids: list[str] = [row[0] for row in self._db.execute("SELECT id FROM docs ORDER BY pos")]
        self._pos: dict[str, int] | None = None
        n = len(self._ids)
        if n != manifest.get("count"):
            raise ArtifactError(f"{self.path}: {DOCS_DB} holds {n} documents but {MANIFEST} says {manifest.get('count')}; "
                                "the index is corrupt - rebuild it with 'hybrid-qpr ingest'")
        self._vectors = np.load(self.path / VECTORS, mmap_mode="r") if n else np.zeros((0, self.dim), np.float32)
        self._faiss = None
        self._bm25: _Bm25 | None = None
        self.bm25_impl: Bm25Impl = bm25 or manifest.get("bm25", {}).get("impl", "bm25s")
        if n:
            faiss = require("faiss", feature="the local index")
            self._faiss = faiss.read_index(str(self.path / FAISS_FILE))
            _set_search_params(self._faiss, int(manifest["faiss"].get("nprobe", NPROBE)))
            if self.bm25_impl == "bm25s" and (self.path / BM25_DIR).is_dir():
                self._bm25 = _Bm25.load(self.path / BM25_DIR)
            else:
                texts = [row[0] for row in self._db.execute("SELECT text FROM docs ORDER BY pos")]
                self._bm25 = _Bm25.build(self.bm25_impl, [tokenize(t) for t in texts])

    # ------------------------------------------------------------------ open / create
    @classmethod
    def open(cls, path: str | Path, *, bm25: Bm25Impl | None = None) -> "LocalIndex":
        """Open an index directory written by ``create``/``ingest``."""
        path = Path(path)
        manifest = read_manifest(path / MANIFEST, FORMAT, FORMAT_VERSION, what="hybrid-qpr local index",
                                 missing=f"{path}: not a hybrid-qpr index ({MANIFEST} missing); build one with "
                                         f"'hybrid-qpr ingest FILE --index {path}'", fix="rebuild the index")
        return cls(path, manifest, bm25=bm25)

    @classmethod
    def create(cls, path: str | Path, encoder, *, faiss: FaissKind = "auto", bm25: Bm25Impl = "bm25s",
               flat_threshold: int = FLAT_THRESHOLD) -> "LocalIndex":
        """Open ``path`` if it holds an index (checking ``encoder`` matches it), else create
        an empty index for ``encoder`` there."""
        path = Path(path)
        if (path / MANIFEST).is_file():
            index = cls.open(path)
            index.check_encoder(encoder)
            return index
        if faiss not in FAISS_KINDS:
            raise ConfigError(f"faiss={faiss!r}: allowed values are {', '.join(FAISS_KINDS)}")
        if bm25 not in BM25_IMPLS:
            raise ConfigError(f"bm25={bm25!r}: allowed values are {', '.join(BM25_IMPLS)}")
        manifest = {
            "format": FORMAT, "format_version": FORMAT_VERSION,
            "model": {"fingerprint": encoder.fingerprint, "dim": int(encoder.dim), "distance": encoder.distance,
                      "kind": getattr(encoder, "kind", ""), "path": str(Path(encoder.model_dir).resolve())},
            "count": 0,
            "faiss": {"kind": faiss, "flat_threshold": int(flat_threshold), "factory": None, "nprobe": NPROBE},
            "bm25": {"impl": bm25, "k1": BM25_K1, "b": BM25_B, "tokenizer": "hybrid_qpr.text.tokenize"},
            "fusion": {},
        }
        _write_directory(path, manifest, [], [], [], np.zeros((0, int(encoder.dim)), np.float32))
        return cls.open(path)

    # ------------------------------------------------------------------ model checks and defaults
    @property
    def model_dir(self) -> str | None:
        """Directory of the model the index was built with (the CLI's default ``--model``)."""
        return self.manifest["model"].get("path")

    @property
    def fusion_defaults(self) -> dict[str, Any]:
        """Fusion settings stored by tuning, e.g. ``{"fusion": "minmax", "alpha": 0.3}``, or ``{}``."""
        return dict(self.manifest.get("fusion") or {})

    def set_fusion_defaults(self, defaults: Mapping[str, Any]) -> None:
        """Store tuned fusion defaults in ``manifest.json`` (written aside, then renamed)."""
        from hybrid_qpr.artifacts import atomic_write

        self.manifest["fusion"] = dict(defaults)
        with atomic_write(self.path / MANIFEST) as fh:
            json.dump(self.manifest, fh, indent=2)

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
        return len(self._ids)

    def _positions(self, ids: Sequence[str]) -> list[int]:
        if self._pos is None:
            self._pos = {doc_id: i for i, doc_id in enumerate(self._ids)}
        return [self._pos[i] for i in ids if i in self._pos]

    def matching(self, filters: Filters | None) -> np.ndarray | None:
        """Positions of the documents matching ``filters`` (``None`` = no filter)."""
        if not filters:
            return None
        clauses, params = [], []
        for field, value in filters.items():
            values = list(value) if isinstance(value, (list, tuple, set)) else [value]
            if not values:
                return np.zeros(0, dtype=np.int64)
            clauses.append(f"CAST(json_extract(metadata, ?) AS TEXT) IN ({', '.join('?' * len(values))})")
            params.append('$."' + str(field).replace('"', '\\"') + '"')
            params.extend(_as_text(v) for v in values)
        rows = self._db.execute(f"SELECT pos FROM docs WHERE {' AND '.join(clauses)} ORDER BY pos", params)
        return np.fromiter((r[0] for r in rows), dtype=np.int64)

    def bm25(self, query: str, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` documents with a positive BM25 score, filters applied before ranking."""
        if self._bm25 is None:
            return []
        scores = self._bm25.scores(tokenize(query))
        allowed = self.matching(filters)
        if allowed is not None:
            scores = scores[allowed]
        return _top(scores, allowed, self._ids, depth, positive_only=True)

    def knn(self, vector: np.ndarray, depth: int, filters: Filters | None = None) -> list[Hit]:
        """Top ``depth`` by similarity: FAISS without filters; exact over the matching rows with them."""
        if self._faiss is None:
            return []
        query = prepare_vectors(np.asarray(vector, dtype=np.float32).reshape(1, -1), self.distance)
        if query.shape[1] != self.dim:
            raise ModelMismatchError(f"query vector has {query.shape[1]} dims; index {self.path} has {self.dim}")
        allowed = self.matching(filters)
        if allowed is not None:
            if len(allowed) == 0:
                return []
            scores = similarity(query, np.asarray(self._vectors[allowed]), self.distance)[0]
            return _top(scores, allowed, self._ids, depth, positive_only=False)
        raw, found = self._faiss.search(query, min(depth, self.count()))
        keep = found[0] >= 0
        scores = score_from_faiss(raw[0][keep], self.distance)
        return _top(scores, found[0][keep].astype(np.int64), self._ids, depth, positive_only=False)

    def vector_scores(self, vector: np.ndarray, ids: Sequence[str]) -> dict[str, float]:
        """Exact similarity of ``vector`` to the stored vectors of ``ids`` (MSEM rerank)."""
        positions = self._positions(list(dict.fromkeys(ids)))
        if not positions:
            return {}
        query = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        scores = similarity(query, np.asarray(self._vectors[positions]), self.distance)[0]
        return {self._ids[p]: float(s) for p, s in zip(positions, scores)}

    def documents(self, ids: Sequence[str]) -> dict[str, Document]:
        ids = list(dict.fromkeys(ids))
        out: dict[str, Document] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            rows = self._db.execute(f"SELECT id, text, metadata FROM docs WHERE id IN ({', '.join('?' * len(chunk))})", chunk)
            for doc_id, text, metadata in rows:
                out[doc_id] = Document(doc_id, text, json.loads(metadata) if metadata else {})
        return out

    def close(self) -> None:
        self._db.close()

    # ------------------------------------------------------------------ writes
    def _state(self) -> tuple[list[str], list[str], list[str], np.ndarray]:
        rows = self._db.execute("SELECT id, text, metadata FROM docs ORDER BY pos").fetchall()
        return ([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
                np.array(self._vectors, dtype=np.float32))

    def ingest(self, documents: Iterable[Document | tuple[int, Document]], encoder, *, batch_size: int = 256,
               show_progress: bool = True) -> IngestReport:
        """Add or replace ``documents`` (``Document`` or ``(line, Document)``) and rebuild the
        index aside, then swap it in. A document with an empty id or text is skipped and
        reported with its line; an id seen before (in the index or earlier in the input)
        is updated, never duplicated. Only new or changed texts are encoded."""
        self.check_encoder(encoder)
        started = time.perf_counter()
        report = IngestReport()
        ids, texts, metas, vectors = self._state()
        position = {doc_id: i for i, doc_id in enumerate(ids)}
        to_encode: list[int] = []
        pending: set[int] = set()
        for number, item in enumerate(documents, start=1):
            line, doc = item if isinstance(item, tuple) else (number, item)
            doc_id = str(doc.id).strip() if doc.id is not None else ""
            if not doc_id or not isinstance(doc.text, str) or not doc.text.strip():
                report.skipped.append((line, "empty id" if not doc_id else "empty text"))
                continue
            metadata = json.dumps(doc.metadata or {}, ensure_ascii=False, sort_keys=True)
            if doc_id in position:
                i = position[doc_id]
                report.updated += 1
                if texts[i] != doc.text and i not in pending:
                    to_encode.append(i)
                    pending.add(i)
                texts[i], metas[i] = doc.text, metadata
            else:
                position[doc_id] = len(ids)
                ids.append(doc_id)
                texts.append(doc.text)
                metas.append(metadata)
                to_encode.append(len(ids) - 1)
                pending.add(len(ids) - 1)
                report.indexed += 1
        if report.indexed + report.updated == 0:
            report.seconds = time.perf_counter() - started
            return report
        new_vectors = encoder.encode([texts[i] for i in to_encode], batch_size=batch_size, show_progress=show_progress)
        full = np.zeros((len(ids), self.dim), dtype=np.float32)
        full[: len(vectors)] = vectors
        if to_encode:
            full[np.asarray(to_encode)] = prepare_vectors(new_vectors, self.distance)
        self._rewrite(ids, texts, metas, full)
        report.seconds = time.perf_counter() - started
        logger.info("ingest: %d new, %d updated, %d skipped in %.1fs", report.indexed, report.updated,
                    len(report.skipped), report.seconds)
        return report

    def delete(self, ids: Sequence[str]) -> int:
        """Delete documents by id; return how many existed. The index is rebuilt aside."""
        gone = set(map(str, ids))
        old_ids, texts, metas, vectors = self._state()
        keep = [i for i, doc_id in enumerate(old_ids) if doc_id not in gone]
        removed = len(old_ids) - len(keep)
        if removed:
            self._rewrite([old_ids[i] for i in keep], [texts[i] for i in keep], [metas[i] for i in keep],
                          vectors[np.asarray(keep, dtype=np.int64)] if keep else vectors[:0])
        return removed

    def _rewrite(self, ids: list[str], texts: list[str], metas: list[str], vectors: np.ndarray) -> None:
        manifest = dict(self.manifest)
        manifest["faiss"] = dict(manifest["faiss"])
        _write_directory(self.path, manifest, ids, texts, metas, vectors, bm25_impl=self.bm25_impl)
        self.close()
        fresh = LocalIndex.open(self.path, bm25=self.bm25_impl)
        self.__dict__.update(fresh.__dict__)


def _as_text(value: Any) -> str:
    """How SQLite's ``CAST(json_extract(...) AS TEXT)`` renders a JSON value."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _write_directory(path: Path, manifest: dict[str, Any], ids: list[str], texts: list[str], metas: list[str],
                     vectors: np.ndarray, bm25_impl: str = "bm25s") -> None:
    """Write a complete index directory aside and rename it over ``path``."""
    from hybrid_qpr.artifacts import atomic_directory

    n = len(ids)
    faiss_info = manifest["faiss"]
    factory = faiss_factory(n, faiss_info.get("kind", "auto"), int(faiss_info.get("flat_threshold", FLAT_THRESHOLD)))
    with atomic_directory(path, marker=MANIFEST) as tmp:
        db = sqlite3.connect(tmp / DOCS_DB)
        try:
            db.execute("CREATE TABLE docs (pos INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, text TEXT NOT NULL, "
                       "metadata TEXT NOT NULL)")
            db.executemany("INSERT INTO docs VALUES (?, ?, ?, ?)", zip(range(n), ids, texts, metas))
            db.commit()
        except sqlite3.Error as exc:
            raise BackendError(f"{path}: writing the document store failed ({exc})") from exc
        finally:
            db.close()
        if n:
            np.save(tmp / VECTORS, np.ascontiguousarray(vectors, dtype=np.float32), allow_pickle=False)
            faiss = require("faiss", feature="the local index")
            distance = check_distance(manifest["model"]["distance"])
            faiss.write_index(build_faiss(np.ascontiguousarray(vectors, dtype=np.float32), distance, factory,
                                          int(faiss_info.get("nprobe", NPROBE))), str(tmp / FAISS_FILE))
            if bm25_impl == "bm25s":
                (tmp / BM25_DIR).mkdir()
                _Bm25.build("bm25s", [tokenize(t) for t in texts]).save(tmp / BM25_DIR)
        manifest["count"] = n
        manifest["faiss"]["factory"] = factory
        manifest["versions"] = library_versions(("hybrid-qpr", "faiss-cpu", "bm25s", "numpy"))
        manifest["updated"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        manifest.setdefault("created", manifest["updated"])
        with open(tmp / MANIFEST, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
