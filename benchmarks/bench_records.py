"""Nanoseconds to build each record a query builds (``Document``, ``Hit``, ``Fused``,
``SearchResult``): the package's NamedTuples by their constructors, against the frozen
dataclasses they replaced, built by ``__init__`` and by the old shortcut that skipped it
(``object.__new__`` and a ``__dict__`` update). Best of ``--repeat`` runs of ``--number``
constructions each::

    python benchmarks/bench_records.py --number 200000 --repeat 7
"""

from __future__ import annotations

import argparse
import timeit
from dataclasses import dataclass, field
from typing import Any

from hybrid_qpr.fusion import Fused
from hybrid_qpr.search import RankedScore, SearchResult
from hybrid_qpr.types import Document, Hit


# The frozen dataclasses as they were, the reference the NamedTuples are measured against.
@dataclass(frozen=True)
class DataclassDocument:
    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DataclassHit:
    id: str
    score: float
    document: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class DataclassFused:
    id: str
    score: float
    scores: tuple
    ranks: tuple


@dataclass(frozen=True)
class DataclassSearchResult:
    id: str
    text: str
    score: float
    metadata: dict[str, Any] = field(default_factory=dict)
    bm25: Any = None
    knn: Any = None
    first_stage_rank: Any = None
    cross_encoder: Any = None


def bypassing_init(cls: type, **fields: Any) -> Any:
    """The shortcut the dataclasses were built with: no ``__init__``, the fields set at once."""
    item = object.__new__(cls)
    item.__dict__.update(fields)
    return item


FIELDS = {
    "Document": ({"id": "q1", "text": "how do i learn python ?", "metadata": {}}, DataclassDocument, Document),
    "Hit": ({"id": "q1", "score": 2.5, "document": None}, DataclassHit, Hit),
    "Fused": ({"id": "q1", "score": 0.03, "scores": (2.5, None), "ranks": (1, None)}, DataclassFused, Fused),
    "SearchResult": ({"id": "q1", "text": "t", "score": 0.03, "metadata": {}, "bm25": RankedScore(2.5, 1), "knn": None,
                      "first_stage_rank": None, "cross_encoder": None}, DataclassSearchResult, SearchResult),
}


def nanoseconds(build: Any, number: int, repeat: int) -> float:
    return min(timeit.repeat(build, number=number, repeat=repeat)) / number * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--number", type=int, default=200_000, help="constructions per run (default 200000)")
    parser.add_argument("--repeat", type=int, default=7, help="runs; the best is reported (default 7)")
    args = parser.parse_args()
    print(f"{'record':14s} {'dataclass()':>12s} {'bypass':>9s} {'NamedTuple(by place)':>21s} {'(by name)':>10s}  ns each")
    for name, (fields, old, new) in FIELDS.items():
        values = tuple(fields.values())
        timings = [nanoseconds(lambda: old(**fields), args.number, args.repeat),
                   nanoseconds(lambda: bypassing_init(old, **fields), args.number, args.repeat),
                   nanoseconds(lambda: new(*values), args.number, args.repeat),
                   nanoseconds(lambda: new(**fields), args.number, args.repeat)]
        print(f"{name:14s} {timings[0]:12.0f} {timings[1]:9.0f} {timings[2]:21.0f} {timings[3]:10.0f}")


if __name__ == "__main__":
    main()
