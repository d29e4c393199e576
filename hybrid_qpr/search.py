"""Search modes over any ``Backend``: bm25, knn, hybrid (fused) and rerank (MSEM baseline).

The searcher is handed a backend that is already built (a ``LocalIndex``, an
``OpenSearchBackend`` or an ``ElasticsearchBackend``) and an encoder; it never builds either. Fusion is done by
``hybrid_qpr.fusion`` only, so every backend fuses identically.

Modes:

* ``bm25`` - the backend's BM25 list.
* ``knn`` - the backend's nearest neighbours of the encoded query.
* ``hybrid`` - both lists, each ``depth`` long (default: the tuned depth, else
  ``DEFAULT_DEPTH``; never less than ``offset + top_k``), fused with ``fusion`` (rrf, minmax, zscore, l2) and ``alpha`` (weight
  of kNN; BM25 gets ``1 - alpha``). Without arguments the index's tuned defaults are used.
* ``rerank`` - the MSEM paper's baseline flow (Kim et al. 2019): BM25 recalls
  ``rerank_depth`` candidates (30) which are re-ordered by encoder similarity.

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

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from hybrid_qpr.backends.base import Backend, batches_lists, fuses_pages, runs_in_engine
from hybrid_qpr.types import Document, Filters, Hit, built
from hybrid_qpr import fusion as fusion_lib
from hybrid_qpr.errors import ConfigError

logger = logging.getLogger(__name__)

Mode = Literal["hybrid", "bm25", "knn", "rerank"]
MODES: tuple[str, ...] = ("hybrid", "bm25", "knn", "rerank")
DEFAULT_DEPTH = fusion_lib.DEFAULT_DEPTH  # candidates per list (see hybrid_qpr.fusion)
RERANK_DEPTH = fusion_lib.RERANK_DEPTH
DEFAULT_RERANKER_DEPTH = 20  # hits re-scored by a cross-encoder reranker (hybrid_qpr.rerankers)
DEFAULT_FUSION, DEFAULT_ALPHA = fusion_lib.DEFAULT_FUSION, fusion_lib.DEFAULT_ALPHA


@dataclass(frozen=True)
class RankedScore:
    """A document's score in one retriever's list and its 1-based rank there."""

    score: float
    rank: int


@dataclass(frozen=True)
class SearchResult:
    id: str
    text: str
    score: float
    metadata: dict[str, Any] = field(default_factory=dict)
    bm25: RankedScore | None = None
    knn: RankedScore | None = None
    first_stage_rank: int | None = None  # set when a reranker ran
    cross_encoder: RankedScore | None = None  # the reranker's score and rank (None beyond its depth)

    def with_cross_encoder(self, score: float | None, rank: int | None, first_stage_rank: int) -> "SearchResult":
        """This result after a reranker: ``score`` stays the first-stage score."""
        return replace(self, first_stage_rank=first_stage_rank,
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
        return out


@dataclass(frozen=True)
class Candidates:
    """The first-stage lists of one query, kept so fusion can be re-run (tuning)."""

    bm25: list[Hit]
    knn: list[Hit]


def _ranked_score(score: float | None, rank: int | None) -> RankedScore | None:
    """A result's score and rank in one list (``None`` where it was not in that list), built
    without the frozen dataclass's ``__init__`` (``types.built``): a hybrid page needs two per result."""
    return None if rank is None else built(RankedScore, score=score, rank=rank)


def _ranked(hits: Sequence[Hit]) -> dict[str, RankedScore]:
    return {h.id: RankedScore(h.score, rank) for rank, h in enumerate(hits, start=1)}


class HybridSearcher:
    """Answer queries over ``backend`` with ``encoder`` (see the module docstring)."""

    def __init__(self, backend: Backend, encoder, reranker=None, reranker_depth: int = DEFAULT_RERANKER_DEPTH):
        """``reranker``: an optional second stage (``hybrid_qpr.rerankers.Reranker``, or a model
        directory to load one from) applied to the top ``reranker_depth`` results of every search."""
        self.backend = backend
        self.encoder = encoder  # None: BM25 only (no model needed)
        if encoder is not None:
            backend.check_encoder(encoder)
        if reranker is not None and not hasattr(reranker, "rerank"):
            from hybrid_qpr.rerankers import Reranker

            reranker = Reranker(reranker)
        if reranker_depth < 1:
            raise ConfigError(f"reranker_depth={reranker_depth}: must be >= 1")
        self.reranker = reranker
        self.reranker_depth = int(reranker_depth)

    # ------------------------------------------------------------------ settings
    def fusion_settings(self, fusion: str | None, alpha: float | None) -> tuple[str, float]:
        """Explicit arguments win; else the index's tuned defaults; else RRF with alpha 0.5."""
        defaults = self.backend.fusion_defaults
        fusion = fusion or defaults.get("fusion") or DEFAULT_FUSION
        if alpha is None:
            alpha = defaults.get("alpha", DEFAULT_ALPHA) if fusion == defaults.get("fusion", fusion) else DEFAULT_ALPHA
        return fusion_lib.check_fusion(fusion), fusion_lib.check_alpha(alpha)

    @staticmethod
    def _check(mode: str, top_k: int, offset: int, depth: int | None, rerank_depth: int) -> None:
        if mode not in MODES:
            raise ConfigError(f"mode={mode!r}: allowed values are {', '.join(MODES)}")
        if top_k < 1:
            raise ConfigError(f"top_k={top_k}: must be >= 1")
        if offset < 0:
            raise ConfigError(f"offset={offset}: must be >= 0")
        if depth is not None and depth < 1:
            raise ConfigError(f"depth={depth}: must be >= 1")
        if rerank_depth < 1:
            raise ConfigError(f"rerank_depth={rerank_depth}: must be >= 1")

    # ------------------------------------------------------------------ search
    def candidates(self, query: str, vector, depth: int, filters: Filters | None = None) -> Candidates:
        """BM25 and kNN lists of ``depth`` hits for one query (``vector`` = its encoding, or a
        function returning it where the backend has ``vector_beside_bm25``)."""
        backend = self.backend
        if batches_lists(backend):  # one round trip where a backend offers it
            return Candidates(*backend.bm25_and_knn(query, vector, depth, filters))
        return Candidates(backend.bm25(query, depth, filters),
                          backend.knn(vector() if callable(vector) else vector, depth, filters))

    def search(self, query: str, *, mode: Mode = "hybrid", top_k: int = 10, offset: int = 0,
               fusion: str | None = None, alpha: float | None = None, filters: Filters | None = None,
               depth: int | None = None, rerank_depth: int = RERANK_DEPTH, vector=None,
               server_side: bool = False, reranker_depth: int | None = None) -> list[SearchResult]:
        """Results ``offset .. offset + top_k`` of ``query`` in ``mode``, best first.

        With a reranker, the first stage returns at least ``reranker_depth`` results (default:
        the searcher's; 0 skips the reranker for this search), the reranker re-orders them, and
        the page is cut from that order.

        ``server_side=True`` (backends whose ``capabilities`` offer it: OpenSearch) runs hybrid
        and rerank inside the engine (``hybrid_server`` with the same fusion method, alpha and depth
        as client-side fusion would use; ``rerank_server``); the engine then reports only the
        final score, so ``bm25``/``knn`` are ``None``."""
        self._check(mode, top_k, offset, depth, rerank_depth)
        if self.encoder is None and mode != "bm25" and vector is None:
            raise ConfigError(f"mode {mode!r} needs the index's model to encode the query; only bm25 works without one")
        if not isinstance(query, str) or not query.strip():
            raise ConfigError(f"query={query!r}: the query text is empty; give the question to search for")
        cut = self.reranker_depth if reranker_depth is None else reranker_depth
        if cut < 0:
            raise ConfigError(f"reranker_depth={cut}: must be >= 0 (0: no reranking for this search)")
        if self.reranker is not None and cut > 0:
            first = self._first_stage(query, mode, max(offset + top_k, cut), 0, fusion, alpha, filters, depth,
                                      rerank_depth, vector, server_side)
            return self.reranker.rerank(query, first, cut)[offset : offset + top_k]
        return self._first_stage(query, mode, top_k, offset, fusion, alpha, filters, depth, rerank_depth, vector,
                                 server_side)

    def _first_stage(self, query: str, mode: Mode, top_k: int, offset: int, fusion: str | None, alpha: float | None,
                     filters: Filters | None, depth: int | None, rerank_depth: int, vector,
                     server_side: bool) -> list[SearchResult]:
        need = offset + top_k
        if server_side and mode in ("hybrid", "rerank"):
            return self._server_side(query, mode, need, offset, fusion, alpha, filters, depth, rerank_depth, vector)
        if mode == "bm25":
            hits = self.backend.bm25(query, need, filters)[offset:need]
            return self._results([(h.id, h.score, _ranked_score(h.score, offset + i + 1), None) for i, h in enumerate(hits)],
                                 hits)
        if mode == "hybrid":
            return self._hybrid(query, need, offset, fusion, alpha, filters, depth, vector)
        if vector is None:
            vector = self.encoder.encode([query])[0]
        if mode == "knn":
            hits = self.backend.knn(vector, need, filters)[offset:need]
            return self._results([(h.id, h.score, None, _ranked_score(h.score, offset + i + 1)) for i, h in enumerate(hits)],
                                 hits)
        recalled = self.backend.bm25(query, max(rerank_depth, need), filters)  # rerank
        return self._results(self._rerank(recalled, vector)[offset:need], recalled)

    def _hybrid(self, query: str, need: int, offset: int, fusion: str | None, alpha: float | None,
                filters: Filters | None, depth: int | None, vector) -> list[SearchResult]:
        fusion, alpha = self.fusion_settings(fusion, alpha)
        depth = self.fusion_depth(depth, need)
        if vector is None:  # encoded beside the BM25 list where the backend can, else first
            vector = (lambda: self.encoder.encode([query])[0]) if self.backend.capabilities.vector_beside_bm25 \
                else self.encoder.encode([query])[0]
        if fuses_pages(self.backend):  # the same fusion, with no Hit per listed document
            page, docs = self.backend.fused_page(query, vector, depth, filters, fusion=fusion, alpha=alpha,
                                                 rrf_k=fusion_lib.RRF_K, top_k=need)
            return self._page(page[offset:need], docs)
        cands = self.candidates(query, vector, depth, filters)
        page = self.fuse(cands, fusion=fusion, alpha=alpha, depth=depth, top_k=need)[offset:need]
        return self._page(page, {hit.id: hit.document for hit in cands.bm25 + cands.knn if hit.document is not None})

    def _page(self, page: list[fusion_lib.Fused], docs: dict[str, Document]) -> list[SearchResult]:
        """Fused results as search results, each with its score and rank in both lists."""
        return self._results([(f.id, f.score, _ranked_score(f.scores[0], f.ranks[0]), _ranked_score(f.scores[1], f.ranks[1]))
                              for f in page], docs=docs)

    def fusion_depth(self, depth: int | None, need: int) -> int:
        """Candidates per list: explicit ``depth``, else the tuned one, else ``DEFAULT_DEPTH``;
        never less than the ``need`` results asked for."""
        return max(depth or int(self.backend.fusion_defaults.get("depth") or DEFAULT_DEPTH), need)

    def _server_side(self, query, mode, need, offset, fusion, alpha, filters, depth, rerank_depth,
                     vector) -> list[SearchResult]:
        backend = self.backend
        if not runs_in_engine(backend, mode):
            raise ConfigError(f"server_side=True for {mode} needs a backend that runs it in the engine "
                              f"(OpenSearch: --opensearch URL); {type(backend).__name__} fuses client-side only")
        if vector is None:
            vector = self.encoder.encode([query])[0]
        if mode == "rerank":
            hits = backend.rerank_server(query, vector, max(rerank_depth, need), filters)
        else:  # the same method, weights and depth the client side would use
            fusion, alpha = self.fusion_settings(fusion, alpha)
            hits = backend.hybrid_server(query, vector, self.fusion_depth(depth, need), filters,
                                         fusion=fusion, alpha=alpha, rrf_k=fusion_lib.RRF_K)
        return self._results([(h.id, h.score, None, None) for h in hits[offset:need]], hits)

    @staticmethod
    def fuse(cands: Candidates, *, fusion: str, alpha: float, depth: int | None = None,
             rrf_k: int = fusion_lib.RRF_K, top_k: int | None = None) -> list[fusion_lib.Fused]:
        """Fuse one query's candidate lists (BM25 first, kNN second)."""
        return fusion_lib.fuse(cands.bm25, cands.knn, fusion=fusion, alpha=alpha, rrf_k=rrf_k, depth=depth,  # type: ignore[arg-type]
                               top_k=top_k)

    def _rerank(self, recalled: list[Hit], vector) -> list[tuple[str, float, RankedScore | None, RankedScore | None]]:
        """MSEM flow: order the BM25 candidates by encoder similarity (ties by id)."""
        sims = self.backend.vector_scores(vector, [h.id for h in recalled])
        bm25 = _ranked(recalled)
        order = sorted(sims.items(), key=lambda item: (-item[1], item[0]))
        return [(doc_id, score, bm25.get(doc_id), RankedScore(score, rank)) for rank, (doc_id, score) in enumerate(order, 1)]

    def _results(self, rows: list[tuple[str, float, RankedScore | None, RankedScore | None]],
                 hits: Iterable[Hit] = (), docs: dict[str, Document] | None = None) -> list[SearchResult]:
        """``rows`` as results with text and metadata: taken from ``docs`` or from ``hits`` that
        carry their document (cluster searches), the others fetched in one ``documents`` call."""
        docs = dict(docs) if docs is not None else {h.id: h.document for h in hits if h.document is not None}
        missing = [r[0] for r in rows if r[0] not in docs]
        if missing:
            docs.update(self.backend.documents(missing))
        out = []
        for doc_id, score, bm25, knn in rows:
            doc = docs.get(doc_id)
            out.append(built(SearchResult, id=doc_id, text=doc.text if doc else "", score=float(score),
                             metadata=dict(doc.metadata) if doc else {}, bm25=bm25, knn=knn, first_stage_rank=None,
                             cross_encoder=None))
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
        mode = kwargs.get("mode", "hybrid")
        if mode == "bm25" or not queries or self.encoder is None:  # without an encoder, search() names the problem
            return [self.search(q, filters=f, **kwargs) for q, f in zip(queries, per_query)]
        vectors = self.encoder.encode(queries)
        return [self.search(q, vector=v, filters=f, **kwargs) for q, v, f in zip(queries, vectors, per_query)]
