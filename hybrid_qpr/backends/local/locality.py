"""Node order for an HNSW graph's memory: vectors near each other in the embedding space stored
near each other, so that a graph search, which walks one neighbourhood, reads fewer scattered
pages and cache lines.

Why: a search at efSearch 48 computes about a thousand distances, each to a 1 KB vector
somewhere in the graph's storage. The graph's nodes were stored in ingest order, which for a
question bank is random with respect to topic, so every vector a search reads lay on a page of
its own. Reordered by nested k-means cells (about ``LEAF`` vectors each), the same search over the
same graph took 8-10% less time at 124k vectors and 13-14% less at 1M (docs/search.md,
2026-11-26); the lists are the same (the graph's edges are only renumbered).

The order is computed when a graph is built from scratch (``vectorbase.next_base``), or by
``index optimize`` for a graph written before (no rebuild: its edges are renumbered), in about
a second at 124k vectors and 8 s at 1M: 64-way k-means (FAISS), then 64-way inside each cell,
until cells hold about ``LEAF`` vectors. Nodes added to a graph later keep their place at the end.
"""

from __future__ import annotations

import numpy as np

from hybrid_qpr.backends.local.vectors import one_thread
from hybrid_qpr.errors import require

LEAF = 64  # vectors per cell at the bottom of the nesting
FANOUT = 64  # cells per k-means split
ITERATIONS = 10
POINTS_PER_CELL = 64  # k-means trains on at most this many vectors per cell (a sample is enough to place cells)
SEED = 1


def worth_ordering(count: int) -> bool:
    """Whether ``count`` vectors make at least two cells (fewer: the stored order is as good)."""
    return count >= 2 * LEAF


def locality_order(vectors: np.ndarray) -> np.ndarray | None:
    """A permutation of ``range(len(vectors))`` that lists the vectors cell by cell (``None``
    where not ``worth_ordering``)."""
    if not worth_ordering(len(vectors)):
        return None
    faiss = require("faiss", feature="the local index")
    out: list[np.ndarray] = []
    everything = np.ascontiguousarray(vectors, dtype=np.float32)  # the graph's storage itself: no copy
    with one_thread():  # k-means jobs this small run as fast on one; OpenMP's spin-waits slow a busy machine
        _split(faiss, everything, np.arange(len(vectors), dtype=np.int64), out, everything)
    return np.concatenate(out)


def _split(faiss, vectors: np.ndarray, rows: np.ndarray, out: list[np.ndarray], points: np.ndarray | None = None) -> None:
    """Append ``rows`` to ``out`` cell by cell (depth first, so nested cells stay together);
    ``points``: ``vectors[rows]`` where the caller has them."""
    cells = min(FANOUT, len(rows) // LEAF)
    if cells < 2:
        out.append(rows)
        return
    if points is None:
        points = np.ascontiguousarray(vectors[rows])  # one cell's vectors (1/64 of its parent's)
    kmeans = faiss.Kmeans(points.shape[1], cells, niter=ITERATIONS, seed=SEED,
                          max_points_per_centroid=POINTS_PER_CELL, min_points_per_centroid=1)
    kmeans.train(points)
    _, assigned = kmeans.index.search(points, 1)
    del points
    assigned = assigned[:, 0]
    by_cell = np.argsort(assigned, kind="stable")
    bounds = np.searchsorted(assigned[by_cell], np.arange(cells + 1))
    if np.diff(bounds).max() == len(rows):  # one cell took them all (copies of one vector): no split can help
        out.append(rows)
        return
    for cell in range(cells):
        _split(faiss, vectors, rows[by_cell[bounds[cell]:bounds[cell + 1]]], out)


def store_in_order(graph, order: np.ndarray) -> None:
    """Renumber the HNSW ``graph`` (an ``IndexHNSWFlat``) so that entry ``j`` is its entry
    ``order[j]``: what FAISS's ``permute_entries`` does, but the stored vectors are moved in
    place (one row at a time along the permutation's cycles) instead of copied, which would
    hold them twice (1 GB more at 1M vectors, 5 GB at 5M); only the links are copied."""
    faiss = require("faiss", feature="the local index")
    storage = faiss.downcast_index(graph.storage)
    rows = faiss.rev_swig_ptr(storage.get_xb(), graph.ntotal * graph.d).reshape(graph.ntotal, graph.d)
    placed = np.zeros(len(order), dtype=bool)
    for start in np.flatnonzero(order != np.arange(len(order))):
        if placed[start]:
            continue
        first, at = rows[start].copy(), start  # row ``start`` is overwritten first; it goes last
        while True:
            placed[at] = True
            source = order[at]
            if source == start:
                rows[at] = first
                break
            rows[at] = rows[source]
            at = source
    graph.hnsw.permute_entries(faiss.swig_ptr(np.ascontiguousarray(order, dtype=np.int64)))
