"""``hybrid_qpr.backends.cluster.ties``: a cluster's list with ties broken by id, fetched deeper
until the tie at the cut is whole (the engine's own order of ties is arrival order)."""

from __future__ import annotations

from hybrid_qpr.backends.cluster.ties import TIE_MARGIN, top_with_ties_by_id
from hybrid_qpr.types import Hit


def engine(scores_by_id: dict[str, float], arrival: list[str]):
    """A ``fetch(size)`` answering as Lucene does: best score first, ties in ``arrival`` order."""
    asked = []

    def fetch(size):
        asked.append(size)
        ranked = sorted(arrival, key=lambda i: (-scores_by_id[i], arrival.index(i)))
        return [Hit(i, scores_by_id[i]) for i in ranked[:size]]

    return fetch, asked


def test_a_tie_inside_the_margin_is_cut_by_id_in_one_fetch():
    scores = {"a": 3.0, **{f"t{n}": 2.0 for n in range(6)}, "z": 1.0}
    fetch, asked = engine(scores, ["z", "t5", "t4", "a", "t3", "t2", "t1", "t0"])
    assert [h.id for h in top_with_ties_by_id(fetch, 3, 10_000)] == ["a", "t0", "t1"]
    assert asked == [3 + TIE_MARGIN]


def test_a_tie_longer_than_the_margin_is_fetched_again_deeper():
    scores = {f"t{n:03d}": 1.0 for n in range(200)}
    fetch, asked = engine(scores, sorted(scores, reverse=True))
    assert [h.id for h in top_with_ties_by_id(fetch, 5, 10_000)] == [f"t{n:03d}" for n in range(5)]
    assert asked[0] == 5 + TIE_MARGIN and asked[-1] >= 200 and asked == sorted(asked)


def test_the_engine_window_bounds_the_deeper_fetch_and_short_lists_are_whole():
    scores = {f"t{n:03d}": 1.0 for n in range(200)}
    fetch, asked = engine(scores, sorted(scores, reverse=True))
    assert len(top_with_ties_by_id(fetch, 5, 50)) == 5 and max(asked) == 50
    fetch, asked = engine({"b": 1.0, "a": 1.0}, ["b", "a"])
    assert [h.id for h in top_with_ties_by_id(fetch, 5, 10_000)] == ["a", "b"] and len(asked) == 1
    assert top_with_ties_by_id(fetch, 0, 10_000) == []
