"""The records passed between backends, fusion and search; no dependencies, so any module may import them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Filters = Mapping[str, Any]  # field -> value (or list of values): exact match on metadata


def built(cls: type, **fields: Any) -> Any:
    """An instance of the frozen dataclass ``cls`` with ``fields`` (all of them), equal to
    ``cls(**fields)`` at about half the cost: a frozen dataclass's ``__init__`` sets each field
    through ``object.__setattr__``, and a query builds dozens of these records."""
    item = object.__new__(cls)
    item.__dict__.update(fields)
    return item


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Hit:
    """One document from one retriever, with that retriever's score. A cluster search returns
    the stored ``document`` with the hit (one request instead of search + fetch); ``None``
    means the caller fetches it (``Backend.documents``). Not part of equality."""

    id: str
    score: float
    document: Document | None = field(default=None, compare=False, repr=False)

    @classmethod
    def many(cls, ids: Iterable[str], scores: Iterable[float]) -> list["Hit"]:
        """Hits without a document, equal to ``[Hit(i, s) ...]``: ``built`` inlined (a call
        per hit costs a third more, and a hybrid query builds both of its candidate lists this way)."""
        new = object.__new__
        out = []
        for doc_id, score in zip(ids, scores):
            hit = new(cls)
            hit.__dict__.update(id=doc_id, score=score, document=None)
            out.append(hit)
        return out
