"""Search modes over any ``Backend``: bm25, knn, hybrid (fused) and rescore (MSEM baseline).

The searcher is handed a backend that is already built (a ``LocalIndex``, an
``OpenSearchBackend`` or an ``ElasticsearchBackend``) and an encoder; it never builds either.

One query takes one path, down and back once: a surface builds a ``SearchRequest``
(``hybrid_qpr.search_request``; ``HybridSearcher.search`` builds one of its keyword arguments),
``HybridSearcher.run`` resolves it (``search_request.resolve``: checked, the index's tuned defaults
filled in; the query's encoding a ``QueryVector`` computed at most once, when a backend first
needs it) and answers with the page and the resolved request (``SearchAnswer``); the mode asks
the backend for ranked lists (ids and scores, ``RankedList``; a hybrid search's two are one
``Candidates``); ``hybrid_page`` composes a hybrid page from them (fusion, ``hybrid_qpr.fusion``;
business signals; autocut; offset), the one place that runs, for queries and tuning alike, so
every backend fuses identically; the
page's documents come with the lists (a cluster) or by one ``documents`` call (the embedded
index reads the rows it noted while ranking). Every list and document of one query is read
through one reader (``backends.base.reader_of``): the embedded index's holds one commit, so a
query never mixes two states of an index that is being written meanwhile.

Modes (``MODES``, from the ``Mode`` literal):

* ``bm25`` - the backend's BM25 list.
* ``knn`` - the backend's nearest neighbours of the encoded query.
* ``hybrid`` - both lists, each ``depth`` long (default: the tuned depth, else
  ``DEFAULT_DEPTH``; never less than ``offset + top_k``), fused with ``fusion`` (``FUSION_METHODS``;
  minmax optionally with ``bounds``) and ``alpha`` (weight of kNN; BM25 gets ``1 - alpha``), then
  re-scored by business ``signals`` (``hybrid_qpr.signals``) and cut by ``autocut`` when asked.
  Without arguments the index's tuned defaults are used.
* ``rescore`` - the MSEM paper's baseline flow (Kim et al. 2019): BM25 recalls
  ``rescore_depth`` candidates (30) which are re-ordered by encoder similarity. Its name
  before was ``rerank``, still accepted everywhere (``MODE_ALIASES``); the cross-encoder
  second stage below is the reranker.

Every result carries the BM25 and kNN score and rank behind it (``None`` when the document
was not in that list). Pages (``offset``) are slices of one deterministic ranking: with
the same ``depth`` the pages of a query never overlap or skip a document.

A **reranker** (``HybridSearcher(..., reranker=Reranker(dir))``, ``hybrid_qpr.rerankers``) is a
second stage after any mode: the top ``reranker_depth`` results of the mode (default 20) are
re-scored by a cross-encoder and re-ordered, the rest follow in first-stage order. A reranked
result keeps its first-stage ``score`` and gains ``first_stage_rank`` and ``cross_encoder``
(its cross-encoder score and rank; ``None`` beyond the depth). A reranker that fails raises
``RerankerError``: a query never returns first-stage results as if they had been re-ranked.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from hybrid_qpr.artifacts import lone_surrogate
from hybrid_qpr.backends.base import Backend, Reader, batches_lists, reader_of, runs_in_engine
from hybrid_qpr.types import (Candidates, Document, Filters, Hit, QueryVector, RankedList, ResultReranker,
                              TextEncoder)
from hybrid_qpr import fusion as fusion_lib
from hybrid_qpr.signals import Signals
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.search_request import (  # noqa: F401  (the modes and the request, as the library offers them)
    ACCEPTED_MODES, DEFAULT_ALPHA, DEFAULT_DEPTH, DEFAULT_FUSION, DEFAULT_MODE, FUSION_MODES, MODE_ALIASES, MODES,
    RESCORE_DEPTH, Mode, SearchRequest, check_mode, fusion_extras, resolve)

logger = logging.getLogger(__name__)

RERANK_DEPTH = RESCORE_DEPTH  # the name before the mode was called rescore
DEFAULT_RERANKER_DEPTH = 20  # hits re-scored by a cross-encoder reranker (hybrid_qpr.rerankers)


class RankedScore(NamedTuple):
    """A document's score in one retriever's list and its 1-based rank there."""

    score: float
    rank: int


class _SearchResultFields(NamedTuple):
    id: str
    text: str
    score: float
    metadata: dict[str, Any]
    bm25: RankedScore | None
    knn: RankedScore | None
    first_stage_rank: int | None  # set when a reranker ran
    cross_encoder: RankedScore | None  # the reranker's logit and final rank (None beyond its depth)
    reranked: Any  # hybrid_qpr.rerankers.Reranked: the final score = logit + weight * first-stage part
    # with business signals: the fused score before them and each signal's contribution
    fused_score: float | None
    signals: dict[str, float] | None


class SearchResult(_SearchResultFields):
    """One result of a search (immutable; a NamedTuple, cheap to build: ``hybrid_qpr.types``)."""

    __slots__ = ()

    def __new__(cls, id: str, text: str, score: float, metadata: dict[str, Any] | None = None,
                bm25: RankedScore | None = None, knn: RankedScore | None = None, first_stage_rank: int | None = None,
                cross_encoder: RankedScore | None = None, reranked: Any = None, fused_score: float | None = None,
                signals: dict[str, float] | None = None) -> "SearchResult":
        return tuple.__new__(cls, (id, text, score, {} if metadata is None else metadata, bm25, knn, first_stage_rank,
                                   cross_encoder, reranked, fused_score, signals))

    def with_cross_encoder(self, score: float | None, rank: int | None, first_stage_rank: int,
                           parts: Any = None) -> "SearchResult":
        """This result after a reranker: ``score`` stays the first-stage score."""
        return self._replace(first_stage_rank=first_stage_rank, reranked=parts,
                             cross_encoder=None if score is None or rank is None else RankedScore(score, rank))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, as printed by ``hybrid-qpr query --json``."""
        out = {"id": self.id, "text": self.text, "score": self.score, "metadata": self.metadata,
               "bm25": None if self.bm25 is None else {"score": self.bm25.score, "rank": self.bm25.rank},
               "knn": None if self.knn is None else {"score": self.knn.score, "rank": self.knn.rank}}
        if self.first_stage_rank is not None:
            out["first_stage_rank"] = self.first_stage_rank
            out["cross_encoder"] = None if self.cross_encoder is None else {
                "score": self.cross_encoder.score, "rank": self.cross_encoder.rank}
            if self.reranked is not None:  # both parts of the order the reranker chose
                out["cross_encoder"].update(first_stage=self.reranked.first_stage, weight=self.reranked.weight,
                                            final=self.reranked.score)
        if self.signals is not None:
            out["fused_score"], out["signals"] = self.fused_score, dict(self.signals)
        return out


class SearchAnswer(NamedTuple):
    """What ``HybridSearcher.run`` answers: the page and the request as it was resolved (the
    settings that were used: ``request.settings()``)."""

    results: list[SearchResult]
    request: SearchRequest


class HybridPage(NamedTuple):
    """A hybrid page as ``hybrid_page`` composes it: its fused entries, best first; the documents
    known so far (those that came with the lists, and those business signals read); and, with
    signals, each entry's fused score before them and each signal's term."""

    fused: list[fusion_lib.Fused]
    documents: Mapping[str, Document]
    explained: Mapping[str, tuple[float, dict[str, float]]]


# Reads the documents of ``ids`` (with the lists' places for them, or ``None``): ``Reader.documents``.
DocumentSource = Callable[[list[str], "Sequence | None"], Mapping[str, Document]]


def hybrid_page(lists: Candidates, request: SearchRequest, documents: DocumentSource | None = None) -> HybridPage:
    """The page ``request`` (resolved, ``search_request.resolve``) asks for, composed from one
    query's two ranked lists: each list cut to ``request.list_depth``, fused
    (``fusion.fuse_ranked`` with the request's fusion, alpha and bounds), re-scored by its business
    signals, cut by its autocut, and from its offset. The one composition of a hybrid page: a
    query composes it from the lists its backend returns, tuning from the lists it keeps per
    query. ``documents`` reads the metadata signals need of documents the lists came without
    (signals with lists that carry no documents and no ``documents``: an empty metadata)."""
    bm25, knn = lists
    depth = request.list_depth
    if len(bm25.ids) > depth:
        bm25 = bm25._replace(ids=bm25.ids[:depth], scores=bm25.scores[:depth])
    if len(knn.ids) > depth:
        knn = knn._replace(ids=knn.ids[:depth], scores=knn.scores[:depth])
    signals = request.signals
    # with signals every fused document may climb onto the page: fuse them all
    fused = fusion_lib.fuse_ranked((bm25.ids, bm25.scores), (knn.ids, knn.scores), fusion=request.fusion,  # type: ignore[arg-type]
                                   alpha=request.alpha, rrf_k=fusion_lib.RRF_K,  # type: ignore[arg-type]
                                   top_k=None if signals else request.need, bounds=request.bounds)
    docs = {**bm25.documents, **knn.documents} if knn.documents else bm25.documents
    explained: dict[str, tuple[float, dict[str, float]]] = {}
    if signals:
        docs = dict(docs)
        missing = [f for f in fused if f.id not in docs]
        if missing and documents is not None:
            docs.update(documents([f.id for f in missing], _places(bm25, knn, missing)))
        fused, explained = apply_signals(fused, signals, docs)
        fused = fused[:request.need]
    if request.autocut:
        fused = fused[:fusion_lib.autocut([f.score for f in fused], request.autocut)]
    return HybridPage(fused[request.offset:], docs, explained)


def _ranked_score(fused: fusion_lib.Fused, which: int) -> RankedScore | None:
    """A fused result's score and rank in list ``which`` (``None`` where it was not in it)."""
    rank = fused.ranks[which]
    return None if rank is None else RankedScore(fused.scores[which], rank)


def _places(bm25: RankedList, knn: RankedList, fused: Sequence[fusion_lib.Fused]) -> list | None:
    """Where the backend found each fused document (``None`` where it keeps no places)."""
    if bm25.places is None or knn.places is None:
        return None
    return [bm25.places[f.ranks[0] - 1] if f.ranks[0] else knn.places[f.ranks[1] - 1] for f in fused]


def _ranked(hits: Sequence[Hit]) -> dict[str, RankedScore]:
    return {h.id: RankedScore(h.score, rank) for rank, h in enumerate(hits, start=1)}


def keyword_signature(method: Callable) -> Callable:
    """``method(self, query, **settings)`` shown (``help``, ``inspect.signature``, editors) with
    ``SearchRequest``'s fields as its keyword arguments: the signature is derived, never restated."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                  inspect.Parameter("query", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="str")]
    parameters += [inspect.Parameter(f.name, keyword, default=f.default, annotation=f.type)
                   for f in dataclasses.fields(SearchRequest) if f.name != "text"]
    parameters.append(inspect.Parameter("rerank_depth", keyword, default=None, annotation="int | None"))
    method.__signature__ = inspect.signature(method).replace(parameters=parameters)  # type: ignore[attr-defined]
    return method


class HybridSearcher:
    """Answer queries over ``backend`` with ``encoder`` (see the module docstring)."""

    def __init__(self, backend: Backend, encoder: TextEncoder | None,
                 reranker: ResultReranker | str | Path | None = None, reranker_depth: int = DEFAULT_RERANKER_DEPTH):
        """``reranker``: an optional second stage (``hybrid_qpr.rerankers.Reranker``, or a model
        directory to load one from) applied to the top ``reranker_depth`` results of every search."""
        self.backend = backend
        self.encoder = encoder  # None: BM25 only (no model needed)
        if encoder is not None:
            backend.check_encoder(encoder)
        if reranker is not None and not isinstance(reranker, ResultReranker):
            from hybrid_qpr.rerankers import Reranker

            reranker = Reranker(reranker)
        if reranker_depth < 1:
            raise ConfigError(f"reranker_depth={reranker_depth}: must be >= 1")
        self.reranker = reranker
        self.reranker_depth = int(reranker_depth)

    # ------------------------------------------------------------------ settings
    @property
    def fusion_defaults(self) -> Mapping[str, Any]:
        """What an untuned hybrid search of this index uses: the index's own defaults (its
        ``tune``, or those ``ingest`` adopted from the model); else, for an index built through the
        library that has none, the fusion defaults its model carries (``untuned_prior`` is the same
        rule); else none (RRF alpha 0.5)."""
        from hybrid_qpr.artifacts import carried_fusion_defaults

        return self.backend.fusion_defaults or carried_fusion_defaults(self.encoder)

    def resolve(self, request: SearchRequest) -> SearchRequest:
        """``request`` checked and resolved against this index's tuned defaults (read once) and
        this searcher's reranker (``search_request.resolve``), with the query's encoding attached
        (``request.vector``: one computed before, e.g. for a batch; else computed on first use)."""
        resolved = resolve(request, self.fusion_defaults,
                           reranker_depth=self.reranker_depth if self.reranker is not None else 0)
        if self.encoder is None and resolved.mode != "bm25" and request.vector is None:
            raise ConfigError(f"mode {resolved.mode!r} needs the index's model to encode the query; "
                              "only bm25 works without one")
        check_text(request.text)
        vector = request.vector
        if vector is None:
            vector = None if self.encoder is None else QueryVector.encoding(self.encoder, request.text)
        elif not isinstance(vector, QueryVector):
            vector = QueryVector.of(vector)
        return resolved.replace(vector=vector)

    def fusion_settings(self, fusion: str | None, alpha: float | None) -> tuple[str, float]:
        """The hybrid mode's fusion and alpha (``resolve``): explicit arguments win; else the
        index's tuned defaults; else RRF with alpha 0.5."""
        used = resolve(SearchRequest(text="", fusion=fusion, alpha=alpha), self.fusion_defaults)
        return used.fusion, used.alpha  # type: ignore[return-value]

    def fusion_extras(self, fusion: str, bounds: Mapping | None, signals: Signals | Mapping | None
                      ) -> tuple[dict[str, fusion_lib.Bounds], Signals | None]:
        """Min-max ``bounds`` and business ``signals`` as a hybrid search with ``fusion`` uses
        them (``search_request.fusion_extras`` over the index's tuned defaults)."""
        return fusion_extras(fusion, bounds, signals, self.fusion_defaults)

    def fusion_depth(self, depth: int | None, need: int) -> int:
        """Candidates per list: explicit ``depth``, else the tuned one, else ``DEFAULT_DEPTH``;
        never less than the ``need`` results asked for."""
        return resolve(SearchRequest(text="", depth=depth, top_k=max(need, 1)), self.fusion_defaults).list_depth

    @keyword_signature
    def request(self, query: str, **settings: Any) -> SearchRequest:
        """The resolved ``SearchRequest`` of ``search``'s arguments (``resolve(build_request(...))``)."""
        return self.resolve(build_request(query, **settings))

    # ------------------------------------------------------------------ search
    def candidates(self, query: str, vector: QueryVector, depth: int, filters: Filters | None = None) -> Candidates:
        """The BM25 and kNN lists, ``depth`` each, of one query (tuning keeps them and composes
        each grid point's page from them: ``hybrid_page``)."""
        with reader_of(self.backend) as reader:
            return self._lists(reader, query, vector, depth, filters)

    @keyword_signature
    def search(self, query: str, **settings: Any) -> list[SearchResult]:
        """Results ``offset .. offset + top_k`` of ``query`` in ``mode``, best first:
        ``run(request(query, **settings)).results``. ``settings`` are ``SearchRequest``'s fields
        (``mode``, ``top_k``, ``offset``, ``fusion``, ``alpha``, ``filters``, ``depth``,
        ``rescore_depth``, ``vector``, ``server_side``, ``reranker_depth``, ``bounds``, ``signals``,
        ``autocut``; ``rerank_depth`` is ``rescore_depth``'s name before).

        With a reranker, the first stage returns at least ``reranker_depth`` results (default:
        the searcher's; 0 skips the reranker for this search), the reranker re-orders them, and
        the page is cut from that order.

        ``server_side=True`` (backends whose ``capabilities`` offer it: OpenSearch) runs hybrid
        and rescore inside the engine (``hybrid_server`` with the same fusion method, alpha and depth
        as client-side fusion would use; ``rescore_server``); the engine then reports only the
        final score, so ``bm25``/``knn`` are ``None``.

        Hybrid extras: ``bounds`` for minmax (by list name, see ``fusion.check_bounds``),
        business ``signals`` (``hybrid_qpr.signals.Signals``) added to each fused score, and
        ``autocut`` (jumps; 0: off) dropping the tail after a score gap."""
        return self.run(build_request(query, **settings)).results

    def run(self, request: SearchRequest) -> "SearchAnswer":
        """The page ``request`` asks for, read through one reader, with the request as it was
        resolved (``resolve``: resolving a resolved request changes nothing)."""
        request = self.resolve(request)
        with reader_of(self.backend) as reader:
            if request.reranker_depth:
                first = self._first_stage(reader, request.first_stage())
                results = self.reranker.rerank(request.text, first, request.reranker_depth)[request.offset:request.need]
            else:
                results = self._first_stage(reader, request)
        return SearchAnswer(results, request)

    def _first_stage(self, reader: Reader, request: SearchRequest) -> list[SearchResult]:
        if request.server_side and request.mode in SERVER_SIDE_MODES:
            return self._server_side(request)
        return MODE_RUNNERS[request.mode](self, reader, request)

    def _bm25(self, reader: Reader, request: SearchRequest) -> list[SearchResult]:
        need, offset = request.need, request.offset
        hits = reader.bm25(request.text, need, request.filters)[offset:need]
        return self._results(reader, [(h.id, h.score, RankedScore(h.score, offset + i + 1), None)
                                      for i, h in enumerate(hits)], hits)

    def _knn(self, reader: Reader, request: SearchRequest) -> list[SearchResult]:
        need, offset = request.need, request.offset
        hits = reader.knn(request.vector.get(), need, request.filters)[offset:need]  # type: ignore[union-attr]
        return self._results(reader, [(h.id, h.score, None, RankedScore(h.score, offset + i + 1))
                                      for i, h in enumerate(hits)], hits)

    def _rescore_mode(self, reader: Reader, request: SearchRequest) -> list[SearchResult]:
        need = request.need
        recalled = reader.bm25(request.text, max(request.rescore_depth, need), request.filters)
        return self._results(reader, self._rescore(reader, recalled, request.vector)[request.offset:need],  # type: ignore[arg-type]
                             recalled)

    @staticmethod
    def _lists(reader: Reader, query: str, vector: QueryVector, depth: int, filters: Filters | None) -> Candidates:
        """The BM25 and kNN lists of one query, ``depth`` each: in one call where the backend
        offers it (one round trip; the embedded index's two threads), else one after the other."""
        if batches_lists(reader):
            return reader.bm25_and_knn(query, vector, depth, filters)
        return Candidates(RankedList.of_hits(reader.bm25(query, depth, filters)),
                          RankedList.of_hits(reader.knn(vector.get(), depth, filters)))

    def _hybrid(self, reader: Reader, request: SearchRequest) -> list[SearchResult]:
        """Both lists, the page composed from them (``hybrid_page``), its documents read."""
        lists = self._lists(reader, request.text, request.vector, request.list_depth,  # type: ignore[arg-type]
                            request.filters)
        page = hybrid_page(lists, request, reader.documents)
        results = self._results(reader, [(f.id, f.score, _ranked_score(f, 0), _ranked_score(f, 1)) for f in page.fused],
                                docs=page.documents, places=_places(*lists, page.fused))
        explained = page.explained
        if explained:
            results = [r._replace(fused_score=explained[r.id][0], signals=explained[r.id][1]) for r in results]
        return results

    def _server_side(self, request: SearchRequest) -> list[SearchResult]:
        backend, mode, need = self.backend, request.mode, request.need
        if not runs_in_engine(backend, mode):
            raise ConfigError(f"server_side=True for {mode} needs a backend that runs it in the engine "
                              f"(OpenSearch: --opensearch URL); {type(backend).__name__} fuses client-side only")
        if mode == "hybrid":
            refuse_in_engine(request)
        vector = request.vector.get()  # type: ignore[union-attr]
        if mode == "rescore":
            hits = backend.rescore_server(request.text, vector, max(request.rescore_depth, need), request.filters)
        else:  # the same method, weights and depth the client side would use
            hits = backend.hybrid_server(request.text, vector, request.list_depth, request.filters,
                                         fusion=request.fusion, alpha=request.alpha, rrf_k=fusion_lib.RRF_K)
        hits = hits[:need]
        if request.autocut and mode == "hybrid":
            hits = hits[:fusion_lib.autocut([h.score for h in hits], request.autocut)]
        return self._results(backend, [(h.id, h.score, None, None) for h in hits[request.offset:need]], hits)

    @staticmethod
    def _rescore(reader: Reader, recalled: list[Hit],
                 vector: QueryVector) -> list[tuple[str, float, RankedScore | None, RankedScore | None]]:
        """MSEM flow: order the BM25 candidates by encoder similarity (ties by id)."""
        sims = reader.vector_scores(vector.get(), [h.id for h in recalled])
        bm25 = _ranked(recalled)
        order = sorted(sims.items(), key=lambda item: (-item[1], item[0]))
        return [(doc_id, score, bm25.get(doc_id), RankedScore(score, rank)) for rank, (doc_id, score) in enumerate(order, 1)]

    @staticmethod
    def _results(reader: Reader, rows: list[tuple[str, float, RankedScore | None, RankedScore | None]],
                 hits: Iterable[Hit] = (), docs: Mapping[str, Document] | None = None,
                 places: Sequence | None = None) -> list[SearchResult]:
        """``rows`` as results with text and metadata: taken from ``docs`` or from ``hits`` that
        carry their document (cluster searches), the others fetched in one ``documents`` call
        (with their ``places``, aligned with ``rows``, where the lists had them)."""
        docs = dict(docs) if docs is not None else {h.id: h.document for h in hits if h.document is not None}
        missing = [i for i, row in enumerate(rows) if row[0] not in docs]
        if missing:
            docs.update(reader.documents([rows[i][0] for i in missing],
                                         None if places is None else [places[i] for i in missing]))
        out = []
        for doc_id, score, bm25, knn in rows:
            doc = docs.get(doc_id)
            out.append(SearchResult(doc_id, doc.text if doc else "", float(score), dict(doc.metadata) if doc else {},
                                    bm25, knn))
        return out

    def search_many(self, queries: Iterable[str], *, query_filters: Sequence[Filters | None] | None = None,
                    **kwargs) -> list[list[SearchResult]]:
        """``search`` for each query; the queries are encoded in one batch first.

        ``query_filters`` gives each query its own filter (or ``None``), merged with
        ``filters`` by ``hybrid_qpr.filters.merge_filters``: a query can narrow the shared
        filter, e.g. to its own group of candidate answers."""
        from hybrid_qpr.filters import merge_filters

        queries = list(queries)
        if query_filters is not None and len(query_filters) != len(queries):
            raise ConfigError(f"{len(query_filters)} query filters for {len(queries)} queries: give one per query")
        shared = kwargs.pop("filters", None)
        per_query = [merge_filters(shared, f) for f in (query_filters or [None] * len(queries))]
        mode = kwargs.get("mode", DEFAULT_MODE)
        if mode == "bm25" or not queries or self.encoder is None:  # without an encoder, search() names the problem
            return [self.search(q, filters=f, **kwargs) for q, f in zip(queries, per_query)]
        vectors = self.encoder.encode(queries)
        return [self.search(q, vector=v, filters=f, **kwargs) for q, v, f in zip(queries, vectors, per_query)]


def build_request(query: str, *, rerank_depth: int | None = None, vector: QueryVector | np.ndarray | None = None,
                  rescore_depth: int | None = None, **settings: Any) -> SearchRequest:
    """``search``'s keyword arguments as a ``SearchRequest`` (``settings``: its fields by name;
    ``rerank_depth`` is ``rescore_depth``'s name before; ``vector`` may be a plain array)."""
    if rescore_depth is None:
        rescore_depth = RESCORE_DEPTH if rerank_depth is None else rerank_depth
    if vector is not None and not isinstance(vector, QueryVector):
        vector = QueryVector.of(vector)
    return SearchRequest(text=query, vector=vector, rescore_depth=rescore_depth, **settings)


def check_text(query: object) -> str:
    """The query text, refused in one line when it is empty or not valid Unicode."""
    if not isinstance(query, str) or not query.strip():
        raise ConfigError(f"query={query!r}: the query text is empty; give the question to search for")
    surrogate = lone_surrogate(query)
    if surrogate is not None:  # a command-line argument that is not UTF-8 reads as one
        raise ConfigError(f"the query {query[:60]!r} holds {query[surrogate]!r} at position {surrogate}, which is "
                          "not valid Unicode text (bytes that are not UTF-8?); give the query as UTF-8 text")
    return query


def apply_signals(fused: Sequence[fusion_lib.Fused], signals: Signals, docs: Mapping[str, Document]
                  ) -> tuple[list[fusion_lib.Fused], dict[str, tuple[float, dict[str, float]]]]:
    """``fused`` re-scored by the business-signal formula on each document's metadata and
    re-sorted (score, then id), with each document's fused score and the formula's terms
    (``boost:<field>``, ``decay:<field>``) for explanations."""
    origin = signals.origin()
    rescored, explained = [], {}
    for f in fused:
        doc = docs.get(f.id)
        terms = signals.contributions(doc.metadata if doc is not None else {}, origin)
        named = {f"boost:{name}": value for name, value in terms.boosts.items()}
        if signals.decay is not None:
            named[f"decay:{signals.decay.field}"] = terms.decay
        explained[f.id] = (f.score, named)
        rescored.append(f._replace(score=f.score + terms.total))
    rescored.sort(key=lambda f: (-f.score, f.id))
    return rescored, explained


def refuse_in_engine(request: SearchRequest) -> None:
    """One line for what a server-side hybrid search cannot do: the engine's pipelines know no
    DBSF, no min-max bounds and no business signals (they run client-side only)."""
    from hybrid_qpr.backends.opensearch import CLIENT_SIDE_ONLY

    if request.fusion in CLIENT_SIDE_ONLY:
        raise ConfigError(f"--server-side: fusion {request.fusion} runs client-side only (no search pipeline "
                          "offers it); drop --server-side")
    if request.bounds:
        raise ConfigError("--server-side: min-max bounds run client-side only; drop --server-side or the bounds")
    if request.signals:
        raise ConfigError("--server-side: business signals (--boost, --decay) run client-side only; drop --server-side "
                          "or the signals")


# What runs each mode (a mode missing here fails the registry test, never falls through to another);
# the modes an engine can run whole with ``server_side=True``.
MODE_RUNNERS: dict[str, Callable[[HybridSearcher, Reader, SearchRequest], list[SearchResult]]] = {
    "bm25": HybridSearcher._bm25, "knn": HybridSearcher._knn, "hybrid": HybridSearcher._hybrid,
    "rescore": HybridSearcher._rescore_mode}
SERVER_SIDE_MODES: tuple[str, ...] = ("hybrid", "rescore")
