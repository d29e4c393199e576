"""Ties broken by id on a cluster, as the embedded index breaks them.

Lucene orders documents with equal scores by their internal doc number, which is the order the
bulk requests happened to arrive in (several run at once), so two ingests of the same documents
can rank tied documents differently, and a tie at the end of a list decides which of them makes
it. The embedded index keeps the smallest ids (``backends.local.ranking``). A BM25 list is
therefore fetched ``TIE_MARGIN`` hits deeper, ordered by (score descending, id) and cut to its
depth; when the deeper list still ends inside the tie at the cut, it is fetched again, deeper.
Duplicate texts are common in question banks, and every copy of a text scores the same.
"""

from __future__ import annotations

from collections.abc import Callable

from hybrid_qpr.types import Hit

TIE_MARGIN = 10  # hits fetched beyond the depth; ties longer than this fetch again
DEEPER = 4  # how much deeper each fetch again goes


def by_score_then_id(hits: list[Hit]) -> list[Hit]:
    """``hits`` best first, equal scores in id order."""
    return sorted(hits, key=lambda hit: (-hit.score, hit.id))


def top_with_ties_by_id(fetch: Callable[[int], list[Hit]], depth: int, window: int,
                        first: list[Hit] | None = None) -> list[Hit]:
    """The ``depth`` best hits with ties broken by id. ``fetch(size)`` returns the engine's
    ``size`` best (at most ``window``, the most the engine returns); ``first`` is an answer of
    ``fetch(fetch_size(depth, window))`` already in hand."""
    size = fetch_size(depth, window)
    hits = fetch(size) if first is None else first
    while True:
        ordered = by_score_then_id(hits)
        complete = len(hits) < size or size >= window
        if complete or len(ordered) <= depth or ordered[-1].score != ordered[depth - 1].score:
            return ordered[:depth]
        size = min(size * DEEPER, window)
        hits = fetch(size)


def fetch_size(depth: int, window: int) -> int:
    """Hits to ask for first for a list of ``depth``."""
    return min(depth + TIE_MARGIN, window) if depth > 0 else 0
