"""Baseline runs read from the eval set itself: a corpus field's order within each query's group.

SemEval-2016 Task 3 ships each related post with ``ir_rank``, its position in the forum's own
search results; ranking each question's candidates by it is the task's baseline, the figure a
system has to beat. The same order completes a run that ranks fewer than a question's candidates
(BM25 returns no post that shares no word with the question), as a task submission scores every
candidate. Pure reading: ids in, ranked ids out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from hybrid_qpr.errors import InputError


def field_order_run(beir_dir: str | Path, query_ids: Sequence[str], group_field: str,
                    order_field: str) -> dict[str, list[str]] | None:
    """For each query, the corpus documents of its group (``group_field`` in queries.jsonl and
    corpus.jsonl) by increasing ``order_field``, ties in corpus order; ``None`` when no document of
    those groups carries ``order_field`` (the set has no such baseline). A document of those groups
    without it, or with a value that is not a number, is an ``InputError`` naming its line."""
    from hybrid_qpr.data.beir import iter_beir_records, load_query_metadata

    beir_dir = Path(beir_dir)
    groups = load_query_metadata(beir_dir, group_field)
    wanted = {groups[q] for q in query_ids if q in groups}
    members: dict[str, list[tuple[float, int, str]]] = {}
    unordered: tuple[int, str] | None = None  # the first member without the field
    path = beir_dir / "corpus.jsonl"
    for line, ident, _, record in iter_beir_records(path, with_title=False):
        group = record.get(group_field)
        if group is None or str(group) not in wanted:
            continue
        value = record.get(order_field)
        if value is None:
            unordered = unordered or (line, ident)
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(path, line, f"{order_field} must be a number, found {value!r}")
        members.setdefault(str(group), []).append((float(value), line, ident))
    if not members:
        return None
    if unordered is not None:
        raise InputError(path, unordered[0], f"document {unordered[1]!r} has no {order_field!r} while others of the "
                         f"judged groups do; the {order_field} baseline needs it on every candidate")
    return {q: [ident for _, _, ident in sorted(members.get(groups.get(q, ""), []))] for q in query_ids}


def complete_run(ranked: Sequence[str], order: Sequence[str]) -> list[str]:
    """``ranked`` followed by the ids of ``order`` it lacks, in that order."""
    present = set(ranked)
    return [*ranked, *(doc for doc in order if doc not in present)]


def complete_runs(run: Mapping[str, Sequence[str]], orders: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Every query's list of ``run`` completed by its list in ``orders`` (``complete_run``)."""
    return {q: complete_run(ranked, orders.get(q, ())) for q, ranked in run.items()}
