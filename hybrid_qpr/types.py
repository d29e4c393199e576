"""The records passed between backends, fusion and search; no dependencies, so any module may import them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, runtime_checkable

Filters = Mapping[str, Any]  # field -> value (or list of values): exact match on metadata


# The records below are NamedTuples (tuple subclasses): a query builds dozens of them, and a
# tuple is built in one C call where a frozen dataclass's ``__init__`` sets each field through
# ``object.__setattr__`` (benchmarks/bench_records.py measures both). They stay immutable, and
# equal to, and printed as, what they were; a missing ``metadata`` is a new empty dict.
_new_tuple = tuple.__new__


class _DocumentFields(NamedTuple):
    id: str
    text: str
    metadata: dict[str, Any]


class Document(_DocumentFields):
    """A stored document: its id, its text and its metadata (field -> value)."""

    __slots__ = ()

    def __new__(cls, id: str, text: str, metadata: dict[str, Any] | None = None) -> "Document":
        return _new_tuple(cls, (id, text, {} if metadata is None else metadata))


class Hit(NamedTuple):
    """One document from one retriever, with that retriever's score. A cluster search returns
    the stored ``document`` with the hit (one request instead of search + fetch); ``None``
    means the caller fetches it (``Backend.documents``). Not part of equality or the repr."""

    id: str
    score: float
    document: Document | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Hit):
            return NotImplemented
        return self.id == other.id and self.score == other.score

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash((self.id, self.score))

    def __repr__(self) -> str:
        return f"Hit(id={self.id!r}, score={self.score!r})"

    @classmethod
    def many(cls, ids: Iterable[str], scores: Iterable[float]) -> list["Hit"]:
        """Hits without a document, ``[Hit(i, s) ...]``."""
        return list(map(cls, ids, scores))


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


class Candidates(NamedTuple):
    """The two ranked lists of one query, BM25 first and kNN second: what a backend's
    ``bm25_and_knn`` returns, what ``search.hybrid_page`` composes a hybrid page from, and what
    tuning keeps per query to compose every grid point's page from. A pair, so it unpacks as
    ``bm25, knn = ...``."""

    bm25: RankedList
    knn: RankedList

    @classmethod
    def of_hits(cls, bm25: Iterable[Hit], knn: Iterable[Hit]) -> "Candidates":
        """The lists of two ``Hit`` sequences (a repeated id keeps its first, best place)."""
        return cls(RankedList.of_hits(bm25), RankedList.of_hits(knn))


class TextEncoder(Protocol):
    """What search and the backends use of an encoder (``hybrid_qpr.encoders.Encoder`` and each
    of its kinds): the model's identity, which an index stores and checks, and ``encode``."""

    model_dir: Any  # a path
    kind: str
    dim: int
    distance: str
    fingerprint: str

    def encode(self, texts: Sequence[str], batch_size: int = 256, show_progress: bool = False,
               side: str = "query") -> Any:  # float32 [n, dim]
        ...


@runtime_checkable
class ResultReranker(Protocol):
    """A second stage over a first stage's results (``hybrid_qpr.rerankers.Reranker``): ``rerank``
    re-orders the top ``depth`` of ``hits``; ``name`` and ``fingerprint`` say which model it is."""

    name: str
    fingerprint: str

    def rerank(self, query: str, hits: Sequence[Any], depth: int) -> list[Any]:
        ...
