"""Comparing scores that two separate searches of a cluster returned.

OpenSearch and Elasticsearch score in float32 and may sum in another order from one search to
the next (another shard copy, another segment merge state, another kNN graph entry), so the
same document's score can differ in the 7th significant digit: such scores are compared within
a tolerance, never with ``==``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

# float32 carries about 7 significant digits: allow a few units in the 6th
REL_TOLERANCE = 1e-5
ABS_TOLERANCE = 1e-6


def same_score(a: float | None, b: float | None, *, rel_tol: float = REL_TOLERANCE,
               abs_tol: float = ABS_TOLERANCE) -> bool:
    """True when ``a`` and ``b`` are the same score up to the engines' float32 noise (both None counts)."""
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)


def same_ranked(a, b) -> bool:
    """Two ``RankedScore`` values, or their JSON form (``{"score", "rank"}``), or None: equal
    rank and the same score."""
    if a is None or b is None:
        return a is b
    a, b = (dict(x) if isinstance(x, Mapping) else {"score": x.score, "rank": x.rank} for x in (a, b))
    return a["rank"] == b["rank"] and same_score(a["score"], b["score"])


def same_scores(a: Mapping[str, float], b: Mapping[str, float], *, rel_tol: float = REL_TOLERANCE,
                abs_tol: float = ABS_TOLERANCE) -> bool:
    """``{id: score}`` maps with the same ids and each score the same up to float32 noise."""
    return a.keys() == b.keys() and all(same_score(a[k], b[k], rel_tol=rel_tol, abs_tol=abs_tol) for k in a)
