"""The one place where a model's training distance becomes index settings and scores.

Everywhere in hybrid-qpr a higher score is better. An encoder trained with SDML or
triplet loss on squared Euclidean distance is searched with L2 and scored ``-d²``;
a cosine-trained encoder (MSEM, MiniLM) is searched on normalised vectors by inner
product and scored ``cos``.
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

from hybrid_qpr.errors import ConfigError

Distance = Literal["sqeuclidean", "cosine", "dot"]
DISTANCES: tuple[str, ...] = get_args(Distance)


def check_distance(distance: str) -> Distance:
    if distance not in DISTANCES:
        raise ConfigError(f"distance={distance!r}: allowed values are {', '.join(DISTANCES)}")
    return distance  # type: ignore[return-value]


def prepare_vectors(vectors: np.ndarray, distance: Distance) -> np.ndarray:
    """float32, C-contiguous, L2-normalised for cosine (so inner product is cosine)."""
    out = np.ascontiguousarray(vectors, dtype=np.float32)
    if distance == "cosine":
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out = out / np.maximum(norms, 1e-12)
    return out


def similarity(queries: np.ndarray, docs: np.ndarray, distance: Distance) -> np.ndarray:
    """Scores [n_queries, n_docs], higher is better: -squared L2, cosine, or dot product."""
    q = prepare_vectors(queries, distance)
    d = prepare_vectors(docs, distance)
    if distance == "sqeuclidean":
        sq = (q * q).sum(1)[:, None] + (d * d).sum(1)[None, :] - 2.0 * q @ d.T
        return -np.maximum(sq, 0.0)
    return q @ d.T


def faiss_metric(distance: Distance) -> str:
    """'L2' or 'IP': the FAISS metric that ranks like ``similarity``."""
    return "L2" if distance == "sqeuclidean" else "IP"


def score_from_faiss(raw: np.ndarray, distance: Distance) -> np.ndarray:
    """FAISS returns squared L2 distances for L2 indexes and inner products for IP ones."""
    return -raw if distance == "sqeuclidean" else raw


def opensearch_space_type(distance: Distance) -> str:
    """k-NN space type; the Lucene engine reports 1/(1+d²) for l2 and (1+cos)/2 for cosine."""
    return {"sqeuclidean": "l2", "cosine": "cosinesimil", "dot": "innerproduct"}[distance]


def elasticsearch_similarity(distance: Distance) -> str:
    """``dense_vector`` similarity; ``dot_product`` would demand unit vectors, so an
    unnormalised dot-product model needs ``max_inner_product``."""
    return {"sqeuclidean": "l2_norm", "cosine": "cosine", "dot": "max_inner_product"}[distance]


def score_from_opensearch(raw: np.ndarray | float, distance: Distance) -> np.ndarray:
    """Undo the k-NN plugin's score transform, giving the same scores as ``similarity``.

    The Lucene-engine ``knn`` query and the ``knn_score`` script both report (verified on
    OpenSearch 2.19.6): l2 ``s = 1/(1+d²)``; cosinesimil ``s = (1+cos)/2``; innerproduct
    ``s = 1+ip`` for ``ip >= 0`` else ``1/(1-ip)``. Inverting them keeps fusion of OpenSearch
    results identical to fusion of embedded-index results (min-max and z-score are not
    invariant under these non-linear maps).
    """
    s = np.asarray(raw, dtype=np.float64)
    if distance == "sqeuclidean":
        return 1.0 - 1.0 / np.maximum(s, 1e-30)
    if distance == "cosine":
        return 2.0 * s - 1.0
    return np.where(s >= 1.0, s - 1.0, 1.0 - 1.0 / np.maximum(s, 1e-30))
