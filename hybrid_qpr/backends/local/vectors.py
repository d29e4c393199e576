"""The FAISS part of a segment: which index type for how many vectors, and how to build it.

FAISS index choice (``kind="auto"``): exact ``Flat`` below ``flat_threshold`` vectors, else
``IVF{nlist},Flat`` with ``nlist = round(4·sqrt(N))`` probed with ``nprobe = 10`` (the SDML
paper used IVF2000,Flat with 10 probes); ``"hnsw"`` gives ``HNSW32``. The metric comes from
the encoder's training distance (``hybrid_qpr.distance``). Each segment chooses for its own
size, so small segments are exact and a merged large one becomes IVF.
"""

from __future__ import annotations

import logging
import math
from typing import Literal

import numpy as np

from hybrid_qpr.distance import Distance, faiss_metric
from hybrid_qpr.errors import ConfigError, require

logger = logging.getLogger(__name__)

FaissKind = Literal["auto", "flat", "ivf", "hnsw"]
FAISS_KINDS: tuple[str, ...] = ("auto", "flat", "ivf", "hnsw")
FLAT_THRESHOLD = 50_000
NPROBE = 10
TRAIN_PER_LIST = 40
HNSW_M, HNSW_EF_SEARCH = 32, 64


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
            logger.info("IVF needs more vectors than %d; using an exact Flat index", n)
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
    set_search_params(index, nprobe)
    return index


def set_search_params(index, nprobe: int) -> None:
    if hasattr(index, "nprobe"):
        index.nprobe = nprobe
    if hasattr(index, "hnsw"):
        index.hnsw.efSearch = HNSW_EF_SEARCH
