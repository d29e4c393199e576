"""The records passed between backends, fusion and search; no dependencies, so any module may import them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

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


class QueryVector:
    """One query's encoding, computed at most once and only when first asked for (``get``):
    a request carries it down to the backend, so a hybrid query can encode while its BM25
    list is scored and no layer encodes the same text twice."""

    __slots__ = ("_encode", "_value")

    def __init__(self, encode: Callable[[], Any] | None = None, value: Any = None):
        if encode is None and value is None:
            raise ValueError("QueryVector needs an encoding function or a value")
        self._encode, self._value = encode, value

    @classmethod
    def of(cls, value: Any) -> "QueryVector":
        """An encoding already computed (a batch of queries encoded together)."""
        return cls(value=value)

    @classmethod
    def encoding(cls, encoder: Any, text: str) -> "QueryVector":
        """``encoder``'s vector of ``text``, computed on first use."""
        return cls(lambda: encoder.encode([text])[0])

    def get(self) -> Any:
        if self._value is None:
            self._value = self._encode()  # type: ignore[misc]
            self._encode = None
        return self._value


class RankedList(NamedTuple):
    """One retriever's list for one query, best first, each id once: what a backend returns
    and ``hybrid_qpr.fusion`` reads. ``documents`` holds what came with the hits (a cluster
    search returns the stored documents); ``places`` (aligned with ``ids``) are where the
    backend found them, handed back to ``Backend.documents`` so a page is read by position
    (the embedded index: segment and row); ``None`` where a backend has no use for them."""

    ids: list[str]
    scores: list[float]
    documents: Mapping[str, Document] = MappingProxyType({})
    places: Sequence[Any] | None = None

    @classmethod
    def of_hits(cls, hits: Iterable[Hit]) -> "RankedList":
        """The list of ``hits`` (a repeated id keeps its first, best place)."""
        first: dict[str, Hit] = {}
        for hit in hits:
            first.setdefault(hit.id, hit)
        return cls(list(first), [hit.score for hit in first.values()],
                   {doc_id: hit.document for doc_id, hit in first.items() if hit.document is not None})

    def hits(self) -> list[Hit]:
        """The list as ``Hit`` records (with their documents where the list has them)."""
        docs = self.documents
        if not docs:
            return Hit.many(self.ids, self.scores)
        return [Hit(doc_id, score, docs.get(doc_id)) for doc_id, score in zip(self.ids, self.scores)]
