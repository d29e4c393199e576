"""What the workbench answers, free of any web framework: health, search, compare, judgments
and tune over one shared ``HybridSearcher``. ``hybrid_qpr.workbench.app`` maps HTTP onto it.

Every request-level problem raises ``RequestError`` with the HTTP status it deserves (400 a
malformed request, 403 an index write this server does not allow, 404 an unknown document, 409
a conflicting write, 413 a query or id too long, 422 a value out of range); library errors are
mapped by the app.

Sharing the searcher: searches run concurrently (the embedded index and the cluster clients
are read-safe from many threads); storing tuned fusion defaults changes what searches read,
so it waits for the searches in flight and holds new ones back (``ReadWriteLock``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hybrid_qpr import fusion as fusion_lib
from hybrid_qpr.artifacts import lone_surrogate
from hybrid_qpr.errors import ConfigError, HybridQPRError
from hybrid_qpr.search import HybridSearcher, SearchResult
from hybrid_qpr.search_request import (DEFAULT_TOP_K, FUSION_MODES, MODES, OPTIONS_BY_NAME, SEARCH_OPTIONS,
                                       SearchRequest, check_mode, resolve, search_defaults)
from hybrid_qpr.text.ids import id_problem
from hybrid_qpr.types import Filters, QueryVector
from hybrid_qpr.workbench.judgments import RELEVANCE_LEVELS, JudgmentStore, normalize_query, query_id

API_VERSION = "v1"
COMPARE_MODES: tuple[str, ...] = MODES  # one column each, in this order
COMPARE_OWN: tuple[str, ...] = ("mode", "offset")  # the options compare sets itself: one list per mode, from the top
READ_ONLY = "this workbench does not write to the index (start serve with --allow-index-writes to let tune store its winner)"
RERANKER_LIST = "reranker"  # the column of the searcher's cross-encoder over the hybrid's top hits, when it has one

# One more column of /api/compare: (query, vector, k, filters) -> results, best first. The
# reranker is added this way (``Workbench(..., extra_lists={"reranker": ...})``).
ListSource = Callable[[str, Any, int, "Filters | None"], list[SearchResult]]


class RequestError(HybridQPRError):
    """A request the workbench refuses: ``status`` is the HTTP status, ``str()`` the message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Limits:
    """Bounds on what one request may ask for (so one request cannot occupy the server)."""

    max_query_chars: int = 1000
    max_k: int = 100
    max_offset: int = 1000
    max_filters: int = 16
    max_filter_values: int = 64  # filter parameters in all, so one field repeated cannot grow a query without bound
    max_id_chars: int = 512
    min_tune_queries: int = 5


class ReadWriteLock:
    """Many readers or one writer; a waiting writer holds new readers back so it is not starved."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextlib.contextmanager
    def reading(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._writer and not self._writers_waiting)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            self._cond.wait_for(lambda: not self._writer and not self._readers)
            self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class Workbench:
    """The workbench over ``searcher`` with judgments in ``store`` (module docstring).

    ``index`` and ``backend`` name what is served (shown by health); ``extra_lists`` adds
    columns to compare after the four modes. ``index_writes`` lets tune store its winner in the
    index (``serve --allow-index-writes``); without it tune reports and stores nothing. Opening
    the workbench removes the temporary files a killed writer left in the judgments store."""

    def __init__(self, searcher: HybridSearcher, store: JudgmentStore, *, index: str, backend: str,
                 limits: Limits = Limits(), extra_lists: Mapping[str, ListSource] | None = None,
                 index_writes: bool = False):
        self.searcher = searcher
        self.store = store
        self.index_writes = index_writes
        store.remove_leftovers()
        self.index = index
        self.backend = backend
        self.limits = limits
        self.extra_lists = dict(extra_lists or {})
        clash = set(self.extra_lists) & {*COMPARE_MODES, RERANKER_LIST}
        if clash:
            raise ConfigError(f"extra compare lists {sorted(clash)} clash with the built-in modes")
        self._lock = ReadWriteLock()
        self._tuning = threading.Lock()

    def reading(self):
        """A context in which the index is only read: a tune that stores its winner waits for it
        to end (the panels beside the workbench's own endpoints take it too)."""
        return self._lock.reading()

    @property
    def list_names(self) -> list[str]:
        """The columns of compare: the four modes, the reranker's when configured, the extra lists."""
        return [*COMPARE_MODES, *([RERANKER_LIST] if self.searcher.reranker is not None else []), *self.extra_lists]

    # ------------------------------------------------------------------ checks
    def check_query(self, text: str | None) -> str:
        if text is None or not text.strip():
            raise RequestError(400, "the query is empty: give the question to search for, e.g. ?q=how+do+i+reset+my+password")
        if len(text) > self.limits.max_query_chars:
            raise RequestError(413, f"the query is {len(text):,} characters long; at most "
                                    f"{self.limits.max_query_chars:,} are accepted")
        check_unicode("the query", text)
        return text

    def check_page(self, k: int, offset: int = 0) -> None:
        if not 1 <= k <= self.limits.max_k:
            raise RequestError(422, f"k={k}: must be between 1 and {self.limits.max_k}")
        if not 0 <= offset <= self.limits.max_offset:
            raise RequestError(422, f"offset={offset}: must be between 0 and {self.limits.max_offset}")

    def check_filters(self, filters: Filters | None) -> None:
        if filters and len(filters) > self.limits.max_filters:
            raise RequestError(422, f"{len(filters)} filter fields: at most {self.limits.max_filters} are accepted")
        values = sum(len(v) if isinstance(v, (list, tuple, set)) else 1 for v in (filters or {}).values())
        if values > self.limits.max_filter_values:
            raise RequestError(422, f"{values} filter values: at most {self.limits.max_filter_values} are accepted")

    def check_id(self, doc_id: str) -> None:
        if not doc_id.strip():
            raise RequestError(422, "id is empty: give the id of a hit")
        if len(doc_id) > self.limits.max_id_chars:
            raise RequestError(413, f"the id is {len(doc_id):,} characters long; at most {self.limits.max_id_chars} are accepted")
        check_unicode("the id", doc_id)
        problem = id_problem(doc_id)
        if problem:
            raise RequestError(400, problem)

    # ------------------------------------------------------------------ endpoints
    def health(self) -> dict[str, Any]:
        judgments = self.store.load()
        with self._lock.reading():
            count = self.searcher.backend.count()
            stored, in_use = self.searcher.backend.fusion_defaults or {}, self.searcher.fusion_defaults
        # where an untuned hybrid's fusion comes from: this index's tune, its model (copied by ingest or
        # read at query time), or the package defaults
        source = "tune" if stored and not stored.get("from_model") else "model" if in_use else "package"
        used = resolve(SearchRequest(text="", mode="hybrid"), in_use)
        return {"status": "ok", "api": API_VERSION, "index": self.index, "backend": self.backend, "documents": count,
                "model": Path(str(self.searcher.encoder.model_dir)).name,
                "fusion_defaults": {k: stored[k] for k in ("fusion", "alpha", "depth") if k in stored},
                "fusion_in_use": {"fusion": used.fusion, "alpha": used.alpha, "depth": used.depth, "from": source},
                "modes": self.list_names, "fusions": list(fusion_lib.FUSION_METHODS), "defaults": search_defaults(),
                "judgments": judgments.count,
                "reranker": None if self.searcher.reranker is None else {
                    "model": Path(str(self.searcher.reranker.model_dir)).name, "depth": self.searcher.reranker_depth},
                "judged_queries": len(judgments.judged_queries()), "min_tune_queries": self.limits.min_tune_queries,
                "judgment_lines_skipped": len(judgments.skipped), "index_writes": self.index_writes,
                "limits": {"max_query_chars": self.limits.max_query_chars, "max_k": self.limits.max_k,
                           "max_offset": self.limits.max_offset}}

    def request(self, text: str | None, *, k: int = DEFAULT_TOP_K, filters: Filters | None = None,
                **options: Any) -> SearchRequest:
        """The ``SearchRequest`` of one API call, checked against this server's limits
        (``options``: ``SEARCH_OPTIONS`` by name, as ``parse_options`` reads them)."""
        text = self.check_query(text)
        unknown = sorted(set(options) - set(OPTIONS_BY_NAME))
        if unknown:
            raise RequestError(400, f"unknown search option(s) {', '.join(unknown)}")
        options.setdefault("top_k", k)
        try:
            request = SearchRequest(text=text, filters=filters, **options)
            check_mode(request.mode)
        except ConfigError as exc:
            raise RequestError(422, str(exc)) from None
        self.check_page(request.top_k, request.offset)  # the page within this server's limits
        try:
            for option in SEARCH_OPTIONS:  # every other declared range
                option.check(getattr(request, option.name))
        except ConfigError as exc:
            raise RequestError(422, str(exc)) from None
        self.check_filters(filters)
        return request

    def search(self, text: str | None, *, k: int = DEFAULT_TOP_K, filters: Filters | None = None,
               **options: Any) -> dict[str, Any]:
        """The hits of ``hybrid-qpr query --json`` for one mode and page, with the request as it
        was resolved (``request``) and the hybrid settings it implies (``settings``)."""
        request = self.request(text, k=k, filters=filters, **options)
        with self._lock.reading():
            results, used = self.searcher.run(request)
            settings = self._settings(request)
        return {"query": used.text, "mode": used.mode, "k": used.top_k, "offset": used.offset, "settings": settings,
                "request": used.settings(), "hits": [r.to_dict() for r in results], "judgments": self._judged(used.text)}

    def compare(self, text: str | None, *, k: int = DEFAULT_TOP_K, filters: Filters | None = None,
                **options: Any) -> dict[str, Any]:
        """One list per mode (and per extra list), each hit with its rank in every other list;
        ``request`` is the hybrid list's, resolved."""
        refused = sorted(set(options) & set(COMPARE_OWN))
        if refused:
            raise RequestError(400, f"compare sets {', '.join(refused)} itself (one list per mode, from the top)")
        request = self.request(text, k=k, filters=filters, **options)
        text = request.text
        with self._lock.reading():
            vector = QueryVector.encoding(self.searcher.encoder, text)  # once, for every list that needs it
            # the modes' own lists (reranker_depth 0), then the reranker's order of the hybrid's top hits
            answers = {mode: self.searcher.run(request.replace(mode=mode, vector=vector, reranker_depth=0))
                       for mode in COMPARE_MODES}
            lists = {mode: answer.results for mode, answer in answers.items()}
            if self.searcher.reranker is not None:
                lists[RERANKER_LIST] = self.searcher.run(request.replace(mode="hybrid", vector=vector)).results
            for name, source in self.extra_lists.items():
                lists[name] = source(text, vector.get(), k, filters)
            settings = self._settings(request)
        used = answers["hybrid"].request
        ranks = {name: {r.id: rank for rank, r in enumerate(results, start=1)} for name, results in lists.items()}
        out_lists = {}
        for name, results in lists.items():
            out_lists[name] = [{**r.to_dict(), "rank": rank,
                                "ranks": {other: ranks[other].get(r.id) for other in lists if other != name}}
                               for rank, r in enumerate(results, start=1)]
        return {"query": text, "k": used.top_k, "modes": list(lists), "settings": settings, "request": used.settings(),
                "lists": out_lists, "judgments": self._judged(text)}

    def judge(self, body: Any) -> dict[str, Any]:
        """Store one judgment ``{"query": str, "id": str, "relevance": 0|1|2}``."""
        if not isinstance(body, dict):
            raise RequestError(400, 'the body must be a JSON object like {"query": "...", "id": "...", "relevance": 1}')
        unknown = sorted(set(body) - {"query", "id", "relevance"})
        if unknown:
            raise RequestError(422, f"unknown field(s) {', '.join(unknown)}: expected query, id and relevance")
        missing = [f for f in ("query", "id", "relevance") if f not in body]
        if missing:
            raise RequestError(400, f"missing field(s) {', '.join(missing)}: expected query, id and relevance")
        query, doc_id, relevance = body["query"], body["id"], body["relevance"]
        if not isinstance(query, str) or not isinstance(doc_id, str):
            raise RequestError(422, "query and id must be strings")
        self.check_query(query)
        self.check_id(doc_id)
        if type(relevance) is not int or relevance not in RELEVANCE_LEVELS:  # 1.0 and True are not grades
            raise RequestError(422, f"relevance={relevance!r}: must be one of "
                                    f"{', '.join(map(str, RELEVANCE_LEVELS))} (0 not relevant, 1 relevant, 2 highly)")
        with self._lock.reading():
            found = self.searcher.backend.documents([doc_id])
        if doc_id not in found:
            raise RequestError(404, f"document {doc_id!r} is not in index {self.index}")
        qid, judgments = self.store.judge(query, doc_id, relevance, found[doc_id].text)
        return {"query": normalize_query(query), "query_id": qid, "id": doc_id, "relevance": relevance,
                "judgments": judgments.count, "judged_queries": len(judgments.judged_queries())}

    def judgments(self) -> dict[str, Any]:
        """Every stored judgment, grouped by query."""
        judgments = self.store.load()
        queries = [{"query_id": q, "query": judgments.queries.get(q, ""),
                    "judgments": [{"id": d, "relevance": g, "text": judgments.documents.get(d, "")}
                                  for d, g in sorted(docs.items())]}
                   for q, docs in sorted(judgments.qrels.items())]
        return {"count": judgments.count, "judged_queries": len(judgments.judged_queries()), "queries": queries,
                "skipped_lines": [str(s) for s in judgments.skipped], "unreadable_copies": self.store.unreadable_copies()}

    def tune(self, *, store: bool | None = None) -> dict[str, Any]:
        """``hybrid_qpr.evaluation.tuning.tune_index`` on the judged queries, then (``store``) the
        winner stored as the index's fusion default (``tuning.store``), as ``hybrid-qpr tune`` does; the metrics of
        bm25, knn and hybrid before and of the tuned hybrid after, on the same queries.
        ``store=None`` stores when index writes are allowed; ``store=True`` without them is a 403.
        The grid's winner replaces the untuned prior only when its gain is clearly real, by the
        rule ``hybrid-qpr tune`` follows (``evaluator.settle_against_prior``); ``decision`` says which was kept."""
        from hybrid_qpr.evaluation import significance
        from hybrid_qpr.evaluation.evaluator import decision_sentence, evaluate
        from hybrid_qpr.evaluation.tuning import store as store_tuned, tune_index

        if store and not self.index_writes:
            raise RequestError(403, READ_ONLY + ': send {"store": false} (or no body) to tune without storing')
        store = self.index_writes if store is None else store
        if not self._tuning.acquire(blocking=False):
            raise RequestError(409, "a tune is already running; wait for its answer")
        try:
            judgments = self.store.load()
            queries = judgments.judged_queries()
            need = self.limits.min_tune_queries
            if len(queries) < need:
                raise RequestError(422, f"tune needs at least {need} queries with a relevant (1 or 2) judgment; "
                                        f"{len(queries)} have one so far. Judge the hits of more queries first")
            qrels = {q: judgments.qrels[q] for q in queries}
            with self._lock.reading():
                before = evaluate(self.searcher, queries, qrels, modes=FUSION_MODES)
                result = tune_index(self.searcher, queries, qrels)
            if store:
                with self._lock.writing():
                    store_tuned(self.searcher, result)
            with self._lock.reading():
                after = evaluate(self.searcher, queries, qrels, modes=("hybrid",), fusion=result.fusion,
                                 alpha=result.alpha, depth=result.depth)["hybrid"]
        finally:
            self._tuning.release()
        grid = result.top_grid()
        single = result.single_mode
        gain = result.gain_over_single()
        gain.update(over=single, sentence=significance.gain_sentence(gain, "tuned hybrid", single, result.metric))
        decision = result.decision or {}
        return {"queries": result.queries, "metric": result.metric, "stored": store, "gain": gain,
                "decision": {"kept": decision.get("kept"), "prior": decision.get("prior"), "best": decision.get("best"),
                             "low": decision.get("gain", {}).get("low"), "sentence": decision_sentence(result)},
                "index_writes": self.index_writes,
                "before": {name: _scored(before[name]) for name in FUSION_MODES},
                "after": {"hybrid": _scored(after)},
                "chosen": {"fusion": result.fusion, "alpha": result.alpha, "depth": result.depth},
                "top_grid": [{"fusion": g["fusion"], "alpha": g["alpha"], result.metric: g[result.metric],
                              "allowed": g["allowed"]} for g in grid]}

    def warm_up(self, text: str = "warm up") -> None:
        """One compare before serving: lazily loaded parts (FAISS files, id arrays, BM25
        statistics) are loaded once here, not by the first concurrent requests at once."""
        self.compare(text, k=1)

    # ------------------------------------------------------------------ helpers
    def _settings(self, request: SearchRequest) -> dict[str, Any]:
        """The hybrid settings ``request`` implies, whichever its mode (the page's status line)."""
        hybrid = resolve(request.replace(mode="hybrid"), self.searcher.fusion_defaults)
        return {"fusion": hybrid.fusion, "alpha": hybrid.alpha, "depth": hybrid.list_depth}

    def _judged(self, text: str) -> dict[str, int]:
        """This query's stored judgments (document id -> relevance), for the page's buttons."""
        return dict(self.store.load().qrels.get(query_id(text), {}))


def _scored(run: Mapping[str, Any]) -> dict[str, Any]:
    """An ``evaluate`` entry cut to what the page shows: its settings and metrics."""
    settings = {k: run["settings"][k] for k in ("fusion", "alpha") if k in run["settings"]}
    return {**settings, "metrics": run["metrics"]}


def check_unicode(what: str, text: str) -> None:
    """Refuse a lone UTF-16 surrogate (JSON can escape one, ``\\ud800``): it is not text, and
    could be neither searched nor stored nor answered."""
    position = lone_surrogate(text)
    if position is not None:
        raise RequestError(400, f"{what} holds a lone surrogate {text[position]!r} at position {position}, "
                                "which is not valid Unicode text")


def parse_number(name: str, value: str | None, cast: type = int, default: Any = None) -> Any:
    """A query-string integer (``cast=int``) or number (``float``), ``default`` when absent; a
    malformed one is a 400 naming the parameter."""
    if value is None or value == "":
        return default
    try:
        return cast(value)
    except ValueError:
        kind = "an integer" if cast is int else "a number"
        raise RequestError(400, f"{name}={value!r}: must be {kind}") from None


BOOLEANS = {"true": True, "1": True, "false": False, "0": False}


def parse_options(params: Mapping[str, str], *, leave_out: Sequence[str] = ()) -> dict[str, Any]:
    """The search options of a query string (``SEARCH_OPTIONS``, each by its API name) by field
    name and typed, those absent left out (``resolve`` fills them); a malformed one is a 400."""
    out: dict[str, Any] = {}
    for option in SEARCH_OPTIONS:
        raw = params.get(option.api_name)
        if option.name in leave_out or raw is None or raw == "":
            continue
        if option.kind is bool:
            if raw.lower() not in BOOLEANS:
                raise RequestError(400, f"{option.api_name}={raw!r}: must be true or false")
            out[option.name] = BOOLEANS[raw.lower()]
        elif option.kind in (int, float):
            out[option.name] = parse_number(option.api_name, raw, option.kind)
        else:
            out[option.name] = raw
    return out


def parse_filters(values: Sequence[str]) -> Filters | None:
    """``filter=field=value`` parameters (repeatable) as a filter; the former ``field:value`` still works."""
    from hybrid_qpr.filters import parse_filter_items

    try:
        return parse_filter_items(values, option="filter", accept_colon=True)
    except ConfigError as exc:
        raise RequestError(400, str(exc)) from None
