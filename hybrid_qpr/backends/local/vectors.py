"""The FAISS part of a segment: which index type for how many vectors, how to build and search it.

FAISS index choice (``kind="auto"``), chosen by measured recall against exact search (every
size must keep >= 0.95 of the exact top 10; docs/search.md has the curves): exact ``Flat``
below ``flat_threshold`` vectors, else ``HNSW32``. ``"ivf"`` gives ``IVF{round(4·sqrt(N))},Flat``
probed with ``NPROBE`` lists, ``"hnsw"`` HNSW at every size, ``"flat"`` exact search at every
size. The metric comes from the encoder's training distance (``hybrid_qpr.distance``). Each
segment chooses for its own size, so small segments are exact.

HNSW ``efSearch`` is measured, not fixed: when a segment's graph is built, ``calibrate_ef``
searches it with ``EF_SAMPLE`` of its own vectors (seeded) and keeps the smallest efSearch of
``EF_LADDER`` at which each comes back first for ``EF_TARGET_FIRST`` of them (a Quora query
that is stored must find its own text first) and their exact top 10, own row left out, is
found at ``EF_TARGET_RECALL``. Both were set on Quora test queries (docs/search.md): at
123,725 questions a stored question's own text came first for 99.95% of real queries where
it did for 99.95% of the probes, with the CNN and MiniLM alike; at one million (numbered
copies of each question beside it) MiniLM's probes allowed one miss in 2,000 at an efSearch
where three test queries in 2,000 lost their text (MRR@20 0.0027 short of exact), so no probe
may miss now (``EF_TARGET_FIRST`` 1.0; ties count as found), except one that no step of the
ladder brings back: that node is lost to every search (no edge leads to it; one probe in 2,000
of a one-pass CNN graph over the 1M Quora copies corpus), so the target is lowered to the best
the ladder reached instead of sending every query to efSearch 512 (``chosen_ef``; a lowered
recall target within ``RECALL_PLATEAU`` of it). Recall@10
0.997 is where the CNN's kNN MRR@20 came within 0.002 of exact search at efConstruction 80
(efSearch 96); at efConstruction 160 it asks for 32-48 (CNN) and 24 (MiniLM, 192 before) at
124k, where both are within 0.0005 of exact. The earlier target, 0.97 on 256 vectors,
chose efSearch 16, where the CNN lost 0.0095 MRR@20 and 0.35% of queries their own text
from the first place. Noisy copies of stored vectors and held-out documents were measured
as probes too (neither predicts both models better). How hard a graph is to search
depends on the vectors, so one fixed number is either slow or short. A stored or per-query ``--ef-search`` overrides every segment's measured value
(``SearchSettings``); ``--nprobe`` sets IVF's lists.

Searches run on one thread (``one_thread``): a single query is too small a job to share,
and FAISS's OpenMP threads spin-wait for each other, which on a busy machine made one
search of a 24,000-vector Flat index take 56 ms instead of 0.8 ms (measured).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from hybrid_qpr.distance import Distance, faiss_metric
from hybrid_qpr.errors import ConfigError, require

logger = logging.getLogger(__name__)

FaissKind = Literal["auto", "flat", "ivf", "hnsw"]
FAISS_KINDS: tuple[str, ...] = get_args(FaissKind)
FLAT_THRESHOLD = 20_000
NPROBE = 10
TRAIN_PER_LIST = 40
HNSW_M, EF_SEARCH = 32, 96  # EF_SEARCH: segments built before calibration
# efConstruction 160 (80 before, 40 before that): a level-0 node keeps 64 neighbours chosen among
# efConstruction candidates. On Quora test (123,725 questions) the CNN graph at 160 is 0.0005 MRR@20
# short of exact at efSearch 32 where 80 is 0.0027 short, and calibrates to efSearch 32-48 instead
# of 96; MiniLM's to 24 instead of 192. It costs 2.5x the graph's build CPU (docs/search.md)
EF_CONSTRUCTION = 160
EF_LADDER: tuple[int, ...] = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
EF_TARGET_FIRST, EF_TARGET_RECALL, EF_SAMPLE = 1.0, 0.997, 2000
RECALL_PLATEAU = 0.0005  # a recall target no step meets is met this close to the best reached (chosen_ef)
EXACT_PART_VALUES = 20_000_000  # probes x vectors compared at a time (exact_neighbours)
ADD_PART = 20_000  # vectors added to a FAISS index at a time (add_vectors): what progress counts in


def metric_type(distance: Distance) -> int:
    """FAISS's metric constant for ``distance``: L2 for squared Euclidean, inner product for
    cosine (vectors normalised first) and dot."""
    faiss = require("faiss", feature="the local index")
    return faiss.METRIC_L2 if faiss_metric(distance) == "L2" else faiss.METRIC_INNER_PRODUCT


def faiss_factory(n: int, kind: FaissKind = "auto", flat_threshold: int = FLAT_THRESHOLD) -> str:
    """The FAISS factory string for ``n`` vectors (see the module docstring)."""
    if kind not in FAISS_KINDS:
        raise ConfigError(f"faiss={kind!r}: allowed values are {', '.join(FAISS_KINDS)}")
    if kind == "auto":
        kind = "flat" if n < flat_threshold else "hnsw"
    if kind == "hnsw":
        return f"HNSW{HNSW_M}"
    if kind == "ivf":
        nlist = max(1, round(4 * math.sqrt(max(n, 1))))
        if n < 39 * 4 or nlist > n:  # too few points to train the coarse quantiser
            logger.info("IVF needs more vectors than %d; using an exact Flat index", n)
            return "Flat"
        return f"IVF{nlist},Flat"
    return "Flat"


def build_faiss(vectors: np.ndarray, distance: Distance, factory: str, nprobe: int = NPROBE,
                ef_search: int = EF_SEARCH):
    """Train (IVF: k-means, 10 iterations, on at most 40 seeded sample vectors per list) and
    fill a FAISS index; return it."""
    faiss = require("faiss", feature="the local index")
    index = faiss.index_factory(vectors.shape[1], factory, metric_type(distance))
    if factory.startswith("IVF"):
        index.cp.niter = 10
        index.cp.seed = 13
    if hasattr(index, "hnsw"):
        index.hnsw.efConstruction = EF_CONSTRUCTION
    if not index.is_trained:
        sample = vectors
        nlist = getattr(index, "nlist", 0)
        if nlist and len(vectors) > TRAIN_PER_LIST * nlist:  # k-means needs ~40 points per centroid, not all
            rows = np.random.default_rng(13).choice(len(vectors), TRAIN_PER_LIST * nlist, replace=False)
            sample = np.ascontiguousarray(vectors[np.sort(rows)])
        index.train(sample)
    add_vectors(index, vectors, "HNSW graph" if hasattr(index, "hnsw") else f"FAISS {factory}")
    set_search_params(index, nprobe, ef_search)
    return index


def add_vectors(index, vectors: np.ndarray, what: str) -> None:
    """``index.add(vectors)``, in parts of ``ADD_PART`` vectors, each counted by the progress
    of ``progress.steps``: a graph over a million vectors takes many minutes to build."""
    from hybrid_qpr.progress import steps

    starts = range(0, len(vectors), ADD_PART)
    for start in steps(starts, len(vectors), f"{what}: documents added",
                       weight=lambda start: min(ADD_PART, len(vectors) - start)):
        index.add(vectors[start:start + ADD_PART])


def set_search_params(index, nprobe: int = NPROBE, ef_search: int = EF_SEARCH) -> None:
    """Lists probed (IVF) and candidate-list size (HNSW)."""
    if hasattr(index, "nprobe"):
        index.nprobe = nprobe
    if hasattr(index, "hnsw"):
        index.hnsw.efSearch = ef_search


def calibrate_ef(index, vectors: np.ndarray, distance: Distance, sample: int = EF_SAMPLE, seed: int = 13,
                 target_first: float = EF_TARGET_FIRST, target_recall: float = EF_TARGET_RECALL) -> int:
    """The smallest efSearch of ``EF_LADDER`` at which the HNSW ``index`` over ``vectors``,
    searched with ``sample`` of its own vectors (seeded), returns each one first for
    ``target_first`` of them and finds ``target_recall`` of their exact top 10 with their
    own row left out; when no step does, the first that does as well as the ladder can
    (``chosen_ef``)."""
    from hybrid_qpr.progress import steps

    faiss = require("faiss", feature="the local index")
    n = len(vectors)
    if n <= 11:
        return EF_LADDER[0]
    rows = np.sort(np.random.default_rng(seed).choice(n, min(sample, n), replace=False))
    probes = np.ascontiguousarray(vectors[rows], dtype=np.float32)
    metric = metric_type(distance)
    l2 = metric == faiss.METRIC_L2

    def recall10(scores: np.ndarray, found: np.ndarray) -> float:
        """Found neighbours (own row left out) at least as near as the exact 10th: a near-tie
        swapped (a numbered copy of a question) is not a miss. BLAS rounds the exact scores
        differently from the graph, hence the relative tolerance."""
        tol = 1e-4 * np.maximum(np.abs(tenth), 1e-3)
        near = scores <= (tenth + tol)[:, None] if l2 else scores >= (tenth - tol)[:, None]
        near &= (found != rows[:, None]) & (found >= 0)
        return float(np.minimum(near.sum(1), 10).sum() / (10 * len(rows)))

    with one_thread():
        exact_scores, exact_rows = exact_neighbours(probes, vectors, metric)
        own_in = (exact_rows[:, :11] == rows[:, None]).any(1)  # the 10th other is at 11 or 10
        tenth = np.where(own_in, exact_scores[:, 10], exact_scores[:, 9])
        before = index.hnsw.efSearch
        measured: list[tuple[int, float, float]] = []  # (efSearch, first, recall@10)

        def ladder() -> Iterator[int]:  # each step measured, up to the first that meets both targets
            for ef in EF_LADDER:
                index.hnsw.efSearch = ef
                scores, found = index.search(probes, 11)
                measured.append((ef, first_kept(probes, vectors, found[:, 0], rows, distance), recall10(scores, found)))
                logger.debug("efSearch %d: found first %.4f, recall@10 %.4f", *measured[-1])
                yield ef
                if measured[-1][1] >= target_first and measured[-1][2] >= target_recall:
                    return

        try:
            for _ in steps(ladder(), len(EF_LADDER), f"efSearch calibration: {len(rows):,} probes searched at each "
                           f"efSearch of {EF_LADDER[0]}-{EF_LADDER[-1]} (until one meets the targets)", documents=n):
                pass
        finally:
            index.hnsw.efSearch = before
    ef, first, recall = chosen_ef(measured, target_first, target_recall)
    logger.info("efSearch %d: %d of the graph's own vectors found first %.4f, recall@10 %.4f", ef, len(rows), first, recall)
    if first < target_first or recall < target_recall:  # what an operator needs to tell a lost node from a slow graph
        logger.info("no efSearch up to %d met the targets (found first %.4f, recall@10 %.4f); they were lowered to "
                    "the best the ladder reached: the graph has nodes (or neighbours) no search reaches", measured[-1][0],
                    target_first, target_recall)
    return ef


def exact_neighbours(probes: np.ndarray, vectors: np.ndarray, metric: int,
                     workers: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The exact top 11 of each probe among ``vectors`` (scores, rows), in parts of probes so
    that progress shows (``progress.steps``): at a million vectors it is the larger part of a
    calibration. The parts run on ``workers`` threads (default: one per CPU), each part's FAISS
    call on one OpenMP thread as before, so every score is the one a single thread computes;
    FAISS releases the GIL, and two cores take half the time."""
    from concurrent.futures import ThreadPoolExecutor

    from hybrid_qpr.progress import steps

    faiss = require("faiss", feature="the local index")
    part = max(1, EXACT_PART_VALUES // max(1, len(vectors)))
    starts = range(0, len(probes), part)
    workers = max(1, min(len(starts), workers or os.cpu_count() or 1))
    # OpenMP's thread count is each thread's own setting: a worker sets its own to one
    with ThreadPoolExecutor(workers, thread_name_prefix="exact-neighbours", initializer=faiss.omp_set_num_threads,
                            initargs=(1,)) as pool:
        running = [(start, pool.submit(faiss.knn, probes[start:start + part], vectors, 11, metric)) for start in starts]
        found = [future.result() for _, future in steps(
            running, len(probes), f"efSearch calibration: exact neighbours of probes among {len(vectors):,} documents",
            weight=lambda item: min(part, len(probes) - item[0]), documents=len(vectors))]
    return np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found])


def chosen_ef(measured: Sequence[tuple[int, float, float]], target_first: float,
              target_recall: float) -> tuple[int, float, float]:
    """The first ``(efSearch, first, recall@10)`` of ``measured`` (the ladder, in order) that
    meets both targets. When none does, each target is lowered to the best the ladder reached:
    a probe that no efSearch brings back is a node the graph lost (no search reaches it; one
    in 2,000 probes of a one-pass CNN graph over the 1M Quora copies corpus), and searching
    every query at efSearch 512 would not find it either. A lowered recall target is met
    within ``RECALL_PLATEAU`` of the best: at 5M documents recall@10 crept 0.9950 -> 0.9953
    -> 0.9953 from efSearch 256 to 384 and 512, each step half as dear again (measured)."""
    best_first = max(first for _, first, _ in measured)
    best_recall = max(recall for _, _, recall in measured)
    recall_needed = target_recall if best_recall >= target_recall else best_recall - RECALL_PLATEAU
    for step in measured:
        if step[1] >= min(target_first, best_first) and step[2] >= recall_needed:
            return step
    return measured[-1]  # the best first and the best recall at different steps: the largest


def first_kept(queries: np.ndarray, vectors: np.ndarray, found: np.ndarray, exact: np.ndarray,
               distance: Distance) -> float:
    """The share of ``queries`` whose ``found`` first row is the ``exact`` first row or one
    exactly as near (recomputed in float64: BLAS and the graph round differently)."""
    differ = np.flatnonzero(found != exact)
    if not len(differ):
        return 1.0
    q = queries[differ].astype(np.float64)
    got, best = vectors[np.maximum(found[differ], 0)].astype(np.float64), vectors[exact[differ]].astype(np.float64)
    if faiss_metric(distance) == "L2":
        tied = ((got - q) ** 2).sum(1) <= ((best - q) ** 2).sum(1) + 1e-9
    else:
        tied = (got * q).sum(1) >= (best * q).sum(1) - 1e-9
    lost = np.count_nonzero(~tied | (found[differ] < 0))
    return 1.0 - lost / len(queries)


@dataclass(frozen=True)
class SearchSettings:
    """How approximate segments are searched: IVF lists probed, HNSW ``efSearch`` (``None``:
    each segment's calibrated value, see the module docstring)."""

    nprobe: int = NPROBE
    ef_search: int | None = None

    def __post_init__(self) -> None:
        for name in ("nprobe", "ef_search"):
            value = getattr(self, name)
            if value is not None and int(value) < 1:
                raise ConfigError(f"{name}={value}: must be >= 1")

    @classmethod
    def from_manifest(cls, faiss_info: Mapping[str, Any]) -> "SearchSettings":
        """The stored settings (``ef_search`` absent or null: calibrated per segment)."""
        ef = faiss_info.get("ef_search")
        return cls(int(faiss_info.get("nprobe") or NPROBE), int(ef) if ef else None)

    def ef_for(self, calibrated: int | None, vectors: int | None = None) -> int:
        """efSearch for a segment whose graph measured ``calibrated`` (``None``: built before
        calibration): the explicit setting wins. Never above the graph's ``vectors``: a larger
        candidate list finds nothing more, and FAISS allocates for it per query (efSearch 1e9
        took 32 s and 8 GB on a 30k index)."""
        ef = self.ef_search or calibrated or EF_SEARCH
        return ef if vectors is None else max(1, min(ef, int(vectors)))

    def apply(self, index, calibrated: int | None = None) -> None:
        """Set these settings on the FAISS ``index``: efSearch bounded by its vectors, nprobe by its lists."""
        nprobe = min(self.nprobe, int(index.nlist)) if hasattr(index, "nlist") else self.nprobe
        set_search_params(index, max(1, nprobe), self.ef_for(calibrated, index.ntotal))


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run the FAISS calls inside on one OpenMP thread (see the module docstring)."""
    faiss = require("faiss", feature="the local index")
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)
