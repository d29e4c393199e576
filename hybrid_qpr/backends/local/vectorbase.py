"""The vector base: one HNSW graph over the vectors of every large segment of an index, so that
a kNN query costs one graph search however many segments hold the documents.

Why: an HNSW search costs about the same at 100,000 vectors as at 1,000,000 (the walk grows
with log N), so one graph per segment made a top-10 ``knn`` over ten segments cost about ten
searches (5.8x the merged index at 1M; docs/search.md has the measurements).

Which segments: in an ``auto`` index, every segment of at least the Flat threshold (20,000
documents) is written with factory ``"base"`` and no FAISS file of its own; its vectors are
nodes of the base. Smaller segments stay exact ``Flat`` segments searched one by one (the merge
policy keeps them under 20,000 documents together), so adding 1,000 documents writes a Flat
segment and never touches the base. ``hnsw``, ``ivf`` and ``flat`` indexes keep one FAISS index
per segment, as before.

Files and record: ``segments/v<generation>-<hex>/graph.faiss``, a FAISS ``IndexHNSWFlat``
(vectors included), and ``order.npy``, named by the manifest's ``vector_base``::

    {"name": ..., "ranges": [[segment name or null, rows], ...], "ef_search": N,
     "files": {"graph.faiss": {"bytes": ..., "crc32": ...}, "order.npy": {...}}}

Node ``i`` of the base is row ``i - start`` of the segment whose range holds ``i``; a range
named ``null`` is dead (its segment was merged away or lost all its rows). The graph stores
its nodes in locality order (``locality.py``: neighbours in the embedding space side by side
in memory): graph entry ``j`` is base node ``order[j]``. A graph built before the order was
kept, or too small to gain from one, has no ``order.npy`` (entry ``j`` is node ``j``).

Kept up to date at every commit (``next_base``, called by ``LocalIndex.commit`` before the
manifest is written, like the segments a commit names): a commit that names new base segments
reads the committed graph (checked against its CRC32), adds their vectors (HNSW insertion, the
work a segment's own graph cost before) and writes the result under a new name; the previous
graph stays for one more commit, so readers keep theirs. Nodes of segments that left the index
stay in the graph as dead nodes, walked but never returned (an ``IDSelectorBitmap`` over the live
nodes, which also hides tombstoned rows); once dead nodes are at least as many as live ones, or
none of the graph's segments is left (``index optimize``), the graph is rebuilt from the live
segments' vectors. A
damaged committed graph is rebuilt rather than extended. efSearch is measured on the graph at
every write (``vectors.calibrate_ef``).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hybrid_qpr.artifacts import load_npy
from hybrid_qpr.backends.local.hugepages import back_with_huge_pages
from hybrid_qpr.backends.local.locality import locality_order, store_in_order, worth_ordering
from hybrid_qpr.backends.local.ranking import SegmentCandidates
from hybrid_qpr.backends.local.segment import (BASE_FACTORY, SEGMENTS_DIR, VECTORS, Segment,
                                               checksum, damaged, file_record, fsync_path, read_faiss)
from hybrid_qpr.backends.local.storage import write_refusal
from hybrid_qpr.backends.local.vectors import (EF_CONSTRUCTION, SearchSettings, add_vectors, build_faiss, calibrate_ef,
                                               faiss_factory, one_thread)
from hybrid_qpr.distance import Distance, score_from_faiss
from hybrid_qpr.errors import require
from hybrid_qpr.progress import steps

logger = logging.getLogger(__name__)

GRAPH_FILE = "graph.faiss"
ORDER_FILE = "order.npy"  # graph entry j is base node order[j] (locality.py); absent: j is j
BASE_KEY = "vector_base"  # the manifest's record


def base_nodes(record: dict[str, Any]) -> int:
    """The graph's node count: every range of the base record, dead ones included."""
    return sum(int(count) for _, count in record["ranges"])


def base_fix(index_path: Path) -> str:
    return f"run 'hybrid-qpr index optimize {index_path}', which rebuilds the vector base from the segments' vectors"


def base_problems(index_path: Path, manifest: dict[str, Any], checksums: bool) -> list[str]:
    """What is wrong with the manifest's vector base (record, file size, CRC32 with
    ``checksums``), or ``[]``; the fix for each is ``base_fix``."""
    record = manifest.get(BASE_KEY)
    wanted = {e["name"]: int(e["count"]) for e in manifest.get("segments", []) if e.get("factory") == BASE_FACTORY}
    if not record:
        return [f"segment {name} is searched through a vector base the manifest does not name" for name in wanted][:1]
    try:
        ranges = {name: int(count) for name, count in record["ranges"] if name is not None}
        files = {name: record["files"][name] for name in (GRAPH_FILE, ORDER_FILE) if name in record["files"]}
    except (KeyError, TypeError, ValueError):
        files = {}
    if GRAPH_FILE not in files:
        return [f"the manifest's {BASE_KEY} record is malformed"]
    if any(ranges.get(name) != count for name, count in wanted.items()):
        return [f"{SEGMENTS_DIR}/{record['name']}/{GRAPH_FILE} does not cover every segment searched through it"]
    for file, expected in files.items():
        rel = f"{SEGMENTS_DIR}/{record['name']}/{file}"
        path = index_path / rel
        if not path.is_file():
            return [f"{rel} is missing"]
        if path.stat().st_size != expected["bytes"]:
            return [f"{rel} has {path.stat().st_size} bytes, {expected['bytes']} at commit"]
        if checksums and checksum(path) != expected["crc32"]:
            return [f"{rel} has changed since it was written (CRC32 mismatch)"]
    return []


class _Graph:
    """A committed graph file: held open from the moment a reader opens the commit (so a later
    commit that removes it cannot pull it away), read and checked on first use with its node
    order (so a damaged file stops searches, not ``index optimize``, which repairs it)."""

    def __init__(self, path: Path, record: dict[str, Any], index_path: Path):
        self.path, self.record, self.index_path = path, record, index_path
        self.handle = open(path, "rb")
        self._loaded: tuple[Any, np.ndarray | None] | None = None
        self._lock = threading.Lock()

    def index(self, dim: int, nodes: int) -> tuple[Any, np.ndarray | None]:
        """The FAISS graph and its node order (``None``: entry j is node j)."""
        if self._loaded is None:
            with self._lock:
                if self._loaded is None:
                    graph = read_graph(self.handle, self.record, self.index_path, dim, nodes)
                    order = read_order(self.index_path, self.record)
                    # the reader's graph only: the writer's copy is grown and check's dropped
                    back_with_huge_pages(graph)
                    self._loaded = graph, order
        return self._loaded

    def close(self) -> None:
        self.handle.close()


def read_graph(handle, record: dict[str, Any], index_path: Path, dim: int, nodes: int):
    """The FAISS graph in the open file ``handle``, checked as a segment's index is (``read_faiss``)."""
    return read_faiss(handle, record["files"][GRAPH_FILE]["crc32"], index_path,
                      f"{SEGMENTS_DIR}/{record['name']}/{GRAPH_FILE}", base_fix(index_path), nodes, dim)


def read_order(index_path: Path, record: dict[str, Any]) -> np.ndarray | None:
    """The graph's node order (``ORDER_FILE``), checked against its CRC32 and the node count;
    ``None`` for a graph stored in node order."""
    expected = record["files"].get(ORDER_FILE)
    if expected is None:
        return None
    rel = f"{SEGMENTS_DIR}/{record['name']}/{ORDER_FILE}"
    nodes = base_nodes(record)
    try:
        if checksum(index_path / rel) != expected["crc32"]:
            raise damaged(index_path, f"{rel} has changed since it was written (CRC32 mismatch)", base_fix(index_path))
        order = load_npy(index_path / rel)
    except FileNotFoundError:
        raise damaged(index_path, f"{rel} is missing", base_fix(index_path)) from None
    except (OSError, ValueError) as exc:
        raise damaged(index_path, f"{rel} cannot be read ({exc})", base_fix(index_path)) from None
    if order.shape != (nodes,) or order.dtype != np.int64 or (nodes and not 0 <= order.min() <= order.max() < nodes):
        raise damaged(index_path, f"{rel} is not an order of the graph's {nodes} nodes", base_fix(index_path))
    return order


class VectorBase:
    """Read access to the committed vector base, bound to the segments of the same commit."""

    is_base = True  # what ``ranking.faiss_candidates`` searches as one unit

    def __init__(self, index_path: Path, record: dict[str, Any], segments: Sequence[Segment], dim: int,
                 search: SearchSettings, graph: _Graph | None = None):
        problems = base_problems(index_path, {BASE_KEY: record, "segments": [s.entry for s in segments]}, False)
        if problems:
            raise damaged(index_path, problems[0], base_fix(index_path))
        self.record, self.dim, self.search = record, dim, search
        self.name = record["name"]
        counts = np.asarray([int(count) for _, count in record["ranges"]], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        by_name = {s.name: s for s in segments}
        self.segments = [by_name.get(name) if name else None for name, _ in record["ranges"]]
        live = np.zeros(int(self.starts[-1]), dtype=bool)
        for seg, start in zip(self.segments, self.starts):
            if seg is not None:
                live[start:start + seg.count] = True if seg.deleted is None else ~seg.deleted
        self.live = int(live.sum())
        self._graph = graph or _Graph(index_path / SEGMENTS_DIR / self.name / GRAPH_FILE, record, index_path)
        self._live_nodes = None if self.live == len(live) else live
        self._parameters: dict[int, Any] = {}  # efSearch -> FAISS search parameters (_search_parameters)
        self.index_path = index_path

    @classmethod
    def open(cls, index_path: Path, manifest: dict[str, Any], segments: Sequence[Segment], dim: int,
             search: SearchSettings, previous: "VectorBase | None") -> "VectorBase | None":
        """The base of ``manifest`` over ``segments`` (``None`` without one); the graph file of
        ``previous`` is reused when the commit names the same one. The caller closes a graph
        no snapshot holds any more (``snapshot.OpenFiles``): a reader may still search it."""
        record = manifest.get(BASE_KEY)
        kept = previous._graph if previous is not None and record and previous.name == record["name"] else None
        try:
            if record is None:
                problems = base_problems(index_path, manifest, False)
                if problems:
                    raise damaged(index_path, problems[0], base_fix(index_path))
                return None
            return cls(index_path, record, segments, dim, search, kept)
        except FileNotFoundError as exc:
            raise damaged(index_path, f"{exc.filename} is missing", base_fix(index_path)) from None

    @property
    def graph_file(self) -> _Graph:
        """The open graph file, shared by the bases of consecutive commits that name it."""
        return self._graph

    def owns(self, seg: Segment) -> bool:
        return seg.entry.get("factory") == BASE_FACTORY

    @property
    def ef_search(self) -> int:
        return self.search.ef_for(self.record.get("ef_search"), base_nodes(self.record))

    def _loaded(self) -> tuple[Any, np.ndarray | None]:
        """The FAISS graph and its node order, read (and checked) on first use."""
        return self._graph.index(self.dim, int(self.starts[-1]))

    def graph(self):
        """The FAISS graph, read (and checked) on first use."""
        return self._loaded()[0]

    @property
    def order(self) -> np.ndarray | None:
        """Graph entry j holds base node ``order[j]`` (``None``: node j); read with the graph."""
        return self._loaded()[1]

    def candidates(self, query: np.ndarray, depth: int, distance: Distance) -> list[SegmentCandidates]:
        """The live rows among the graph's top ``depth`` (tombstoned rows and dead nodes never
        returned), as one ``SegmentCandidates`` per segment."""
        k = min(depth, self.live)
        if k <= 0:
            return []
        graph, order = self._loaded()
        params = self._search_parameters(max(k, self.ef_search), order)
        with one_thread():
            raw, hits = graph.search(query, k, params=params)
        valid = hits[0] >= 0
        nodes, scores = hits[0][valid].astype(np.int64), score_from_faiss(raw[0][valid], distance)
        if order is not None:
            nodes = order[nodes]
        if len(self.segments) == 1:  # nodes are that segment's rows
            return [SegmentCandidates(self.segments[0], scores, nodes)]
        owner = np.searchsorted(self.starts, nodes, side="right") - 1
        out = []
        for part in np.unique(owner):
            mine = owner == part
            out.append(SegmentCandidates(self.segments[part], scores[mine], nodes[mine] - self.starts[part]))
        return out

    def _search_parameters(self, ef: int, order: np.ndarray | None):
        """FAISS's search parameters for efSearch ``ef`` (and the live-node selector), made once
        per value: a SWIG object per query cost a few microseconds of a 124k hybrid query's
        critical path. FAISS only reads them, so reader threads share them."""
        params = self._parameters.get(ef)
        if params is None:
            faiss = require("faiss", feature="the local index")
            params = faiss.SearchParametersHNSW()
            params.efSearch = ef
            if self._live_nodes is not None:
                # bit j for graph entry j, read as (bitmap[j >> 3] >> (j & 7)) & 1; the
                # parameters keep the bitmap alive, as the selector points into it
                entries = self._live_nodes if order is None else self._live_nodes[order]
                params.bitmap = np.packbits(entries, bitorder="little")
                params.sel = faiss.IDSelectorBitmap(len(params.bitmap), faiss.swig_ptr(params.bitmap))
            self._parameters[ef] = params
        return params

    def close(self) -> None:
        self._graph.close()


def knn_units(segments: Sequence[Segment], base: VectorBase | None) -> list[Segment | VectorBase]:
    """What a kNN list searches: the base once, and each segment outside it."""
    if base is None:
        return list(segments)
    return [base, *(seg for seg in segments if not base.owns(seg))]


# ---------------------------------------------------------------------- writing
def _segment_vectors(index_path: Path, entry: dict[str, Any], dim: int) -> np.ndarray:
    """A base segment's stored vectors, checked against their CRC32 (a graph must never be
    built from damaged vectors)."""
    path = index_path / SEGMENTS_DIR / entry["name"] / VECTORS
    record = entry["files"][VECTORS]
    rel = f"{SEGMENTS_DIR}/{entry['name']}/{VECTORS}"
    if not path.is_file() or path.stat().st_size != record["bytes"] or checksum(path) != record["crc32"]:
        raise damaged(index_path, f"{rel} is missing or has changed since it was written (size or CRC32)",
                      f"run 'hybrid-qpr index optimize {index_path}', which re-encodes the segment's texts")
    vectors = load_npy(path, mmap_mode="r")
    if vectors.shape != (int(entry["count"]), dim):
        raise damaged(index_path, f"{rel} has shape {vectors.shape}", base_fix(index_path))
    return vectors


def _committed_graph(index_path: Path, record: dict[str, Any], dim: int) -> tuple[Any, np.ndarray | None] | None:
    """The committed graph to extend and its node order, or ``None`` (missing or damaged: the
    caller rebuilds)."""
    path = index_path / SEGMENTS_DIR / record["name"] / GRAPH_FILE
    try:
        with open(path, "rb") as handle:
            return read_graph(handle, record, index_path, dim, base_nodes(record)), read_order(index_path, record)
    except Exception as exc:  # noqa: BLE001  (any failure to read it: rebuild instead)
        logger.warning("vector base %s is not usable (%s); rebuilding it", record["name"], exc)
        return None


def unordered(record: dict[str, Any] | None) -> bool:
    """Whether the committed base ``record`` is a graph stored without the locality order it
    would be given now (written before it was kept): ``index optimize`` reorders it."""
    return bool(record) and ORDER_FILE not in record["files"] and worth_ordering(base_nodes(record))


def next_base(index_path: Path, old: dict[str, Any] | None, entries: Sequence[dict[str, Any]], dim: int,
              distance: Distance, generation: int, reorder: bool = False) -> dict[str, Any] | None:
    """The ``vector_base`` record for a commit naming ``entries`` (the graph written now when
    it changes; see the module docstring); ``reorder``: also when only the graph's node order
    does (``unordered``). Called with the write lock held."""
    wanted = [e for e in entries if e.get("factory") == BASE_FACTORY]
    if not wanted:
        return None
    present = {e["name"] for e in wanted}
    ranges = [[name if name in present else None, int(count)] for name, count in (old or {}).get("ranges", [])]
    covered = {name for name, _ in ranges if name}
    new = [e for e in wanted if e["name"] not in covered]
    if old and not new and not (reorder and unordered(old)):
        return old if ranges == old["ranges"] else {**old, "ranges": ranges}
    started = time.perf_counter()
    dead = sum(count for name, count in ranges if name is None)
    committed = None
    if covered and dead < sum(int(e["count"]) for e in wanted):  # some of the graph is still live, most of it
        committed = _committed_graph(index_path, old, dim)
    graph, order = committed if committed is not None else (None, None)
    fresh = graph is None  # no graph yet, nothing of it live, dead nodes at least half, or the graph is unusable
    if fresh:
        ranges, new = [], wanted
    for entry in new:  # one segment at a time: the graph holds the only full copy of the vectors
        vectors = np.ascontiguousarray(_segment_vectors(index_path, entry, dim), dtype=np.float32)
        if graph is None:
            graph = build_faiss(vectors, distance, faiss_factory(len(vectors), "hnsw"))
        else:
            graph.hnsw.efConstruction = EF_CONSTRUCTION
            add_vectors(graph, vectors, "HNSW graph")
    ranges += [[e["name"], int(e["count"])] for e in new]
    faiss = require("faiss", feature="the local index")
    storage = faiss.downcast_index(graph.storage)
    nodes = faiss.rev_swig_ptr(storage.get_xb(), graph.ntotal * graph.d).reshape(graph.ntotal, graph.d)
    ef_search = calibrate_ef(graph, nodes, distance)
    if order is None and (fresh or reorder):  # nodes in locality order: the edges and efSearch stay
        for _ in steps([None], 1, f"HNSW graph: {graph.ntotal:,} documents put in locality order", documents=graph.ntotal):
            order = locality_order(nodes)
        if order is not None:
            store_in_order(graph, order)
    elif order is not None and len(order) < graph.ntotal:  # added nodes are stored after the others
        order = np.concatenate([order, np.arange(len(order), graph.ntotal, dtype=np.int64)])
    name = f"v{generation:06d}-{secrets.token_hex(3)}"
    files = _write_graph(index_path / SEGMENTS_DIR, name, graph, order)
    logger.info("vector base %s: %d nodes (%d dead), %d added in %.1f s, efSearch %d", name, graph.ntotal,
                sum(c for n, c in ranges if n is None), sum(int(e["count"]) for e in new),
                time.perf_counter() - started, ef_search)
    return {"name": name, "ranges": ranges, "ef_search": ef_search, "files": files}


def _write_graph(segments_dir: Path, name: str, graph, order: np.ndarray | None) -> dict[str, dict[str, int]]:
    """Write ``graph`` as ``segments_dir/name/graph.faiss`` and its node order as ``order.npy``
    (a temporary directory fsynced and renamed into place, as a segment is) and return their
    file records."""
    faiss = require("faiss", feature="the local index")
    tmp = segments_dir / f".{name}.tmp"
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        faiss.write_index(graph, str(tmp / GRAPH_FILE))
        if order is not None:
            np.save(tmp / ORDER_FILE, order)
        records = {}
        for file in (GRAPH_FILE, ORDER_FILE) if order is not None else (GRAPH_FILE,):
            fsync_path(tmp / file)
            records[file] = file_record(tmp / file)
        fsync_path(tmp)
        os.replace(tmp, segments_dir / name)
        fsync_path(segments_dir)
    except BaseException as exc:
        refusal = write_refusal(exc, tmp / GRAPH_FILE, graph.ntotal * graph.d * 4)
        shutil.rmtree(tmp, ignore_errors=True)
        if refusal is not None:
            raise refusal from exc
        raise
    return records
