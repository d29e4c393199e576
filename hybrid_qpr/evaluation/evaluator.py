"""Evaluate search modes and tune fusion on a BEIR eval set: dicts in, dicts out.

Protocol (SDML paper, Bonadiman et al. 2019, section 5): for each judged query retrieve
``retrieve`` (20) documents, drop the query's own id (it is in the corpus), then compute
H@1, H@10, MRR@20, Recall@10/20, nDCG@10 and MAP with ``hybrid_qpr.evaluation.metrics``.
Latency is measured per query around ``HybridSearcher.search`` (encoding included) and
reported as p50/p95/p99 in milliseconds, with queries/s = queries / total seconds.

This module encodes nothing itself and writes no files: the searcher does the work and
``hybrid_qpr.evaluation.report`` writes the report.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.evaluation.metrics import drop_self
from hybrid_qpr.evaluation.tasks import TASKS, get_task
from hybrid_qpr.filters import merge_filters
from hybrid_qpr.fusion import DEFAULT_DEPTH, FUSION_METHODS, check_bounds
from hybrid_qpr.signals import SIGNAL_WEIGHTS
from hybrid_qpr.search import MODES, SearchRequest, check_mode, hybrid_page, resolve
from hybrid_qpr.types import Candidates, Filters, QueryVector

logger = logging.getLogger(__name__)

RETRIEVE = 20
# Untimed searches per mode before any mode is timed (see evaluate).
WARM_UP_QUERIES = 5
ALPHAS: tuple[float, ...] = tuple(round(0.1 * i, 1) for i in range(11))
METRIC_NAMES = TASKS["paraphrase"].metric_names


def sample_queries(queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], max_queries: int | None,
                   seed: int = 13, unanswerable: bool = False) -> dict[str, str]:
    """The judged queries (those with a relevant document; with ``unanswerable``, every query
    of ``qrels``, as a task that counts them as 0 needs), or a seeded sample of them."""
    judged = sorted(q for q in queries if q in qrels and (unanswerable or any(g > 0 for g in qrels[q].values())))
    if max_queries is not None and max_queries < len(judged):
        judged = sorted(random.Random(seed).sample(judged, max_queries))
    return {q: queries[q] for q in judged}


def score_run(run: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """All paraphrase-task metrics of a run whose queries' own ids are already dropped. Only the
    queries present in ``run`` are judged (the run was made for a sample of the queries)."""
    judged = {q: qrels[q] for q in run if q in qrels}
    return TASKS["paraphrase"].scorer(run, judged, RETRIEVE)


def exact_run(query_ids: Sequence[str], query_vectors: np.ndarray, doc_ids: Sequence[str], doc_vectors: np.ndarray,
              distance: str, retrieve: int = RETRIEVE, chunk: int = 1024) -> dict[str, list[str]]:
    """Exact nearest neighbours of every query by ``hybrid_qpr.distance.similarity``: the top
    ``retrieve + 1`` documents, the query's own id dropped (the BEIR convention), cut to ``retrieve``.
    Ties are broken by document position, so the run is deterministic. Vectors in, run out."""
    from hybrid_qpr.distance import check_distance, prepare_vectors, similarity

    distance = check_distance(distance)
    if retrieve < 1:
        raise ConfigError(f"retrieve={retrieve}: must be >= 1")
    if len(query_ids) != len(query_vectors) or len(doc_ids) != len(doc_vectors):
        raise ConfigError(f"{len(query_ids)} query ids for {len(query_vectors)} vectors, "
                          f"{len(doc_ids)} document ids for {len(doc_vectors)} vectors: counts must match")
    docs = prepare_vectors(doc_vectors, distance)
    run: dict[str, list[str]] = {}
    for start in range(0, len(query_ids), chunk):
        scores = similarity(query_vectors[start : start + chunk], docs, distance)
        for qid, top in zip(query_ids[start : start + chunk], top_k_indices(scores, retrieve + 1)):
            run[qid] = [doc_ids[j] for j in top]
    return {q: ranked[:retrieve] for q, ranked in drop_self(run).items()}


def top_k_indices(scores: np.ndarray, depth: int) -> list[np.ndarray]:
    """For each row of ``scores`` [queries, documents] (higher is better), the column indices
    of its ``depth`` best scores, best first; equal scores are ordered by column, also at the
    cut, so the result is the head of a stable sort. Partitioning first keeps it linear in
    the number of documents."""
    scores = np.asarray(scores)
    depth = min(depth, scores.shape[1])
    if depth < 1:
        return [np.zeros(0, dtype=np.int64) for _ in range(len(scores))]
    cut = -np.partition(-scores, depth - 1, axis=1)[:, depth - 1]  # each row's depth-th best score
    out = []
    for row, threshold in zip(scores, cut):
        above = np.flatnonzero(row > threshold)
        tied = np.flatnonzero(row == threshold)[: depth - len(above)]
        cand = np.concatenate([above, tied])
        out.append(cand[np.lexsort((cand, -row[cand]))])
    return out


def latency_summary(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/mean in ms and queries/s over the per-query times."""
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    if len(ms) == 0:
        return {"p50_ms": 0.0, "p95_ms": 0.0, "p99_ms": 0.0, "mean_ms": 0.0, "qps": 0.0}
    total = float(ms.sum()) / 1000.0
    return {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
            "p99_ms": float(np.percentile(ms, 99)), "mean_ms": float(ms.mean()),
            "qps": len(ms) / total if total > 0 else 0.0}


def evaluate(searcher, queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], *,
             modes: Sequence[str] = MODES, retrieve: int | None = None,
             task: str = "paraphrase", query_filters: Mapping[str, Filters] | None = None,
             show_progress: bool = False, runs: dict[str, dict[str, list[str]]] | None = None,
             complete_with: Mapping[str, Sequence[str]] | None = None,
             **search_kwargs: Any) -> dict[str, dict[str, Any]]:
    """``{mode: {"metrics": {...}, "latency": {...}, "queries": n, "settings": {...}}}``.

    Each query is searched one at a time (as a user would), so the latency includes
    encoding the query. Before any mode is timed, every query is searched once untimed in
    hybrid mode and each mode ``WARM_UP_QUERIES`` times, so the order of ``modes`` does not
    change the latency columns. ``task`` picks the metrics and the default depth
    (``hybrid_qpr.evaluation.tasks``); ``query_filters`` gives queries their own filter
    (merged with ``filters``), e.g. answer selection ranks each question's own candidates.
    ``search_kwargs`` go to ``HybridSearcher.search`` (fusion, alpha, filters...).
    ``show_progress``: progress per mode on stderr (``hybrid_qpr.progress``).
    ``runs``: when given, each mode's ranked ids per query are put there too (for paired tests).
    ``complete_with``: query id -> every candidate in a fallback order (community QA: the forum's
    ``ir_rank``); each list a mode returns is completed by the candidates it lacks, in that order."""
    spec = get_task(task)
    retrieve = spec.retrieve if retrieve is None else retrieve
    if retrieve < 1:
        raise ConfigError(f"retrieve={retrieve}: must be >= 1")
    modes = [check_mode(mode) for mode in modes]  # an old name (rerank) is reported as the mode it now is
    shared = search_kwargs.pop("filters", None)
    filters = {q: merge_filters(shared, (query_filters or {}).get(q)) for q in queries}
    # With a reranker each mode is reported alone and as "<mode>+reranker" (its top
    # reranker_depth re-scored by the cross-encoder).
    reranker = searcher.reranker
    stages = [(mode, 0) for mode in modes] if reranker is None else \
        [(mode, depth) for mode in modes for depth in (0, searcher.reranker_depth)]
    def search(qid: str, text: str, mode: str, depth: int):
        return searcher.search(text, mode=mode, top_k=retrieve, filters=filters[qid],
                               **({"reranker_depth": depth} if reranker is not None else {}), **search_kwargs)

    # Warm up before timing any mode, or the first one pays for all (on the bundled support
    # sample BM25's p99 was 9.8 ms when first and 0.3 ms when last after a warm-up of a few
    # queries per mode only). A search first touching a query's postings and vectors is slow,
    # so one untimed hybrid pass (which reads what every mode reads) goes over every query;
    # then each stage's one-off costs (loading the ONNX models, compiling the BM25 scorer, a
    # reranker) are paid by a few untimed searches of its own.
    warm_up = [(qid, text, "hybrid", 0) for qid, text in queries.items()] if len(stages) > 1 else []
    first = list(queries.items())[:WARM_UP_QUERIES]
    warm_up += [(qid, text, mode, depth) for mode, depth in stages for qid, text in first]
    for qid, text, mode, depth in warm_up:
        search(qid, text, mode, depth)
    out: dict[str, dict[str, Any]] = {}
    for mode, depth in stages:
        run: dict[str, list[str]] = {}
        times: list[float] = []
        for qid, text in _maybe_track(queries.items(), len(queries), f"evaluate {mode}", show_progress):
            start = time.perf_counter()
            results = search(qid, text, mode, depth)
            times.append(time.perf_counter() - start)
            run[qid] = [r.id for r in results]
        if complete_with is not None:
            from hybrid_qpr.evaluation.baselines import complete_runs

            run = complete_runs(run, complete_with)
        settings: dict[str, Any] = {"retrieve": retrieve, "task": spec.name}
        if mode == "hybrid":
            fusion, alpha = searcher.fusion_settings(search_kwargs.get("fusion"), search_kwargs.get("alpha"))
            settings.update(fusion=fusion, alpha=alpha)
        name = mode
        if depth:
            name = f"{mode}+reranker"
            settings.update(reranker=reranker.name, reranker_depth=depth)
        if runs is not None:
            runs[name] = run
        out[name] = {"metrics": spec.score(run, qrels), "latency": latency_summary(times),
                     "queries": len(run), "settings": settings}
        logger.info("%s: %s %.4f over %d queries", name, spec.main_metric, out[name]["metrics"][spec.main_metric], len(run))
    return out


@dataclass
class TuneResult:
    """The chosen fusion and the evidence: the tuning metric (``metric``, MRR@20 for paraphrase
    retrieval) of every grid point and of each single mode. ``mrr``, ``bm25_mrr`` and
    ``knn_mrr`` hold values of ``metric`` (named after the original metric)."""

    fusion: str
    alpha: float
    mrr: float
    bm25_mrr: float
    knn_mrr: float
    depth: int
    queries: int
    grid: list[dict[str, Any]] = field(default_factory=list)
    metric: str = "MRR@20"
    # query id -> ``metric`` of the chosen fusion ("tuned"), of BM25 and of kNN alone: for
    # telling a real gain from noise (``hybrid_qpr.evaluation.significance``)
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)
    # the chosen min-max bounds (list name -> Bounds) and business signals, where tuned
    bounds: dict[str, Any] = field(default_factory=dict)
    signals: Any = None
    # against the untuned prior (``settle_against_prior``): {"kept": "tuned" | "prior", "prior": its
    # fusion, "best": the grid winner, "gain": the winner's gain over the prior (significance.gain)}
    decision: dict[str, Any] | None = None
    # what ``tuning.tune_index`` chose after the fusion, when asked: the signal weight and the
    # reranker's depth and weight; ``on``: the queries tuned on, as stored ("<beir dir> <split>")
    signal_tuning: "SignalTuneResult | None" = None
    reranker_tuning: "RerankerTuneResult | None" = None  # the chosen reranker's
    reranker_choices: "list[RerankerTuneResult]" = field(default_factory=list)  # every reranker tuned, in order
    on: str | None = None

    @property
    def single_mode(self) -> str:
        """The better single mode on the tuning queries (``bm25`` on a tie)."""
        return "bm25" if self.bm25_mrr >= self.knn_mrr else "knn"

    def gain_over_single(self) -> dict[str, Any]:
        """The tuned hybrid's per-query gain over ``single_mode`` (``significance.gain``)."""
        from hybrid_qpr.evaluation.significance import gain

        return gain(self.per_query[self.single_mode], self.per_query["tuned"])

    def top_grid(self, count: int = 5) -> list[dict[str, Any]]:
        """The ``count`` best grid points by ``metric`` (a stable sort: ties stay in grid order)."""
        return sorted(self.grid, key=lambda g: -g[self.metric])[:count]

    @property
    def defaults(self) -> dict[str, Any]:
        """What is stored as the index's fusion defaults (with the reranker's, where it was tuned)."""
        out = {"fusion": self.fusion, "alpha": self.alpha, "depth": self.depth,
               "tuned": {"metric": self.metric, "value": self.mrr, "bm25": self.bm25_mrr, "knn": self.knn_mrr,
                         "queries": self.queries}}
        if self.bounds:
            out["bounds"] = {name: b.as_dict() for name, b in self.bounds.items()}
        if self.signals:
            out["signals"] = self.signals.as_dict()
        if self.decision is not None:
            out["tuned"]["kept"] = self.decision["kept"]
            out["tuned"]["gain_over_prior"] = {k: self.decision["gain"][k] for k in ("delta", "low", "high", "confidence")}
        on = {} if self.on is None else {"on": self.on}
        out["tuned"].update(on)
        if self.reranker_tuning is not None:
            out["reranker"] = {**self.reranker_tuning.defaults, **on}
        return out


def untuned_prior(encoder) -> dict[str, Any]:
    """The fusion a hybrid query uses before any tuning on this index: the fusion defaults the
    model directory carries (``tune --save-to-model``), else RRF at alpha 0.5."""
    from hybrid_qpr.artifacts import carried_fusion_defaults
    from hybrid_qpr.fusion import DEFAULT_ALPHA, DEFAULT_FUSION

    carried = carried_fusion_defaults(encoder)
    prior = {"fusion": carried.get("fusion", DEFAULT_FUSION), "alpha": float(carried.get("alpha", DEFAULT_ALPHA))}
    if carried.get("bounds"):
        prior["bounds"] = carried["bounds"]
    return prior


def settle_against_prior(result: TuneResult, prior_scores: Mapping[str, float], prior: Mapping[str, Any], *,
                         confidence: float = 0.95) -> TuneResult:
    """``result`` (the grid's winner) kept only when its gain over ``prior`` (the untuned
    fusion, whose per-query scores are ``prior_scores``) is clearly real by
    ``significance.clearly_better``: the bootstrap interval's lower bound above 0. Otherwise the
    prior's fusion is what ``result`` now holds, and stores. ``result.decision`` says which and why."""
    from hybrid_qpr.evaluation.significance import clearly_better

    best = {"fusion": result.fusion, "alpha": result.alpha, result.metric: result.mrr}
    clear, found = clearly_better(prior_scores, result.per_query["tuned"], confidence=confidence)
    result.decision = {"kept": "tuned" if clear else "prior", "prior": dict(prior), "best": best, "gain": found}
    if not clear:
        result.fusion, result.alpha = prior["fusion"], float(prior["alpha"])
        result.bounds = dict(check_bounds(prior.get("bounds"), "prior bounds"))
        result.per_query["tuned"] = dict(prior_scores)
        result.mrr = float(np.mean(list(prior_scores.values()))) if prior_scores else 0.0
    return result


def decision_sentence(result: TuneResult) -> str:
    """What ``settle_against_prior`` decided, in one line (``tune`` and the workbench print it)."""
    from hybrid_qpr.evaluation.significance import gain_sentence

    d = result.decision
    if d is None:
        return "no prior to weigh the grid's winner against"
    best, prior = d["best"], d["prior"]
    head = gain_sentence(d["gain"], f"best grid point ({best['fusion']} alpha {best['alpha']:.1f})",
                         f"the untuned prior ({prior['fusion']} alpha {prior['alpha']:.1f})", result.metric)
    if d["kept"] == "tuned":
        return head + f"; the interval's lower bound is above 0, so the tuned {best['fusion']} alpha " \
                      f"{best['alpha']:.1f} is kept"
    return head + f"; the interval's lower bound {d['gain']['low']:+.4f} is not above 0, so the prior " \
                  f"{prior['fusion']} alpha {prior['alpha']:.1f} is kept"


def tune(searcher, queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], *,
         fusions: Sequence[str] = FUSION_METHODS, alphas: Sequence[float] = ALPHAS, depth: int | None = None,
         retrieve: int | None = None, task: str = "paraphrase",
         query_filters: Mapping[str, Filters] | None = None, show_progress: bool = False,
         bound_grid: Sequence[Mapping[str, Any]] = (), prior: Mapping[str, Any] | None | bool = True) -> TuneResult:
    """Choose the fusion method and ``alpha`` maximising the task's main metric on ``queries``
    (MRR@20 for paraphrase retrieval, MAP for answer selection, MRR for answer retrieval),
    among the grid points that are not below the better single mode (the one with the higher
    main metric) on any of the task's ``guarded`` metrics (answer selection: MAP and MRR, so a
    hybrid tuned on MAP cannot lose MRR; answer retrieval: MRR, R@1, R@5; paraphrase: MRR@20).

    The BM25 and kNN lists of every query are fetched once at ``depth`` (with the query's own
    filter, if any: ``query_lists``); each grid point composes its page from them
    (``search.hybrid_page``, as a query does), so tuning costs one retrieval per query. Queries
    are encoded one at a time, as ``evaluate`` and a user's search do: an int8 model's vector of a text depends on the batch it is encoded in
    (dynamic quantization scales each batch), so batched tuning would tune on other vectors.
    The grid always contains RRF at ``alpha = 0`` and ``alpha = 1``, which rank exactly like
    BM25 alone and kNN alone (documents from the other list only follow), so the better single
    mode is itself a candidate and the tuned hybrid is never worse than it on these queries;
    this is checked. Ties between grid points go to the earlier one (``fusions`` order, then smaller alpha).
    ``prior``: the fusion the index runs untuned (``True``: ``untuned_prior`` of the searcher's
    model; ``None``/``False``: none). The winner replaces it only when its gain is clearly real
    (``settle_against_prior``); else the prior is kept, which may rank below a single mode.
    ``bound_grid``: min-max bounds settings (``fusion.check_bounds`` form) each tried with minmax
    at every alpha, after the plain grid. ``show_progress``: progress of the retrieval and of the grid on stderr.
    """
    spec = get_task(task)
    retrieve = spec.retrieve if retrieve is None else retrieve
    depth = tuning_depth(depth, retrieve)
    if depth < retrieve:
        raise ConfigError(f"depth={depth}: must be >= retrieve ({retrieve}) so fusion sees every candidate")
    cands = query_lists(searcher, queries, depth, query_filters, show_progress)
    if prior is True:
        prior = untuned_prior(searcher.encoder)
    return tune_candidates(cands, qrels, fusions=fusions, alphas=alphas, depth=depth, retrieve=retrieve, task=task,
                           show_progress=show_progress, bound_grid=bound_grid, prior=prior or None)


def query_lists(searcher, queries: Mapping[str, str], depth: int, query_filters: Mapping[str, Filters] | None = None,
                show_progress: bool = False) -> dict[str, Candidates]:
    """Query id -> the BM25 and kNN lists of its text, ``depth`` each (with the query's own filter,
    if any): what tuning keeps. Queries are encoded one at a time (see ``tune``)."""
    own = query_filters or {}
    return {qid: searcher.candidates(text, QueryVector.encoding(searcher.encoder, text), depth, own.get(qid))
            for qid, text in _maybe_track(queries.items(), len(queries), "tune: BM25 and kNN lists", show_progress)}


def tuning_request(fusion: str, alpha: float, depth: int, retrieve: int, bounds: Mapping[str, Any] | None = None,
                   signals=None) -> SearchRequest:
    """The resolved hybrid request of one grid point: its page is the top ``retrieve`` fused from
    lists ``depth`` long (``hybrid_page``), exactly what a query with these settings ranks."""
    return resolve(SearchRequest(text="tune", mode="hybrid", top_k=retrieve, fusion=fusion, alpha=float(alpha),
                                 depth=depth, bounds=bounds or None, signals=signals or None), {})


def _page_ids(lists: Candidates, request: SearchRequest) -> list[str]:
    return [f.id for f in hybrid_page(lists, request).fused]


def _maybe_track(items, total: int, description: str, show: bool):
    if not show:
        return items
    from hybrid_qpr.progress import track

    return track(items, total=total, description=description)


def tuning_depth(depth: int | None, retrieve: int) -> int:
    """``depth``, else the search default, or the task's retrieve depth where that is larger."""
    return max(DEFAULT_DEPTH, retrieve) if depth is None else depth


def tune_candidates(cands: Mapping[str, Candidates], qrels: Mapping[str, Mapping[str, int]], *,
                    fusions: Sequence[str] = FUSION_METHODS, alphas: Sequence[float] = ALPHAS, depth: int | None = None,
                    retrieve: int | None = None, task: str = "paraphrase", show_progress: bool = False,
                    bound_grid: Sequence[Mapping[str, Any]] = (), prior: Mapping[str, Any] | None = None) -> TuneResult:
    """The grid search of :func:`tune` on lists already fetched (query id -> ``types.Candidates``
    of ``depth`` each: ``query_lists``, or a batched benchmark's); with ``prior``
    (``{"fusion", "alpha", "bounds"?}``) settled against it (``settle_against_prior``)."""
    spec = get_task(task)
    retrieve = spec.retrieve if retrieve is None else retrieve
    depth = tuning_depth(depth, retrieve)
    bm25_run = {q: list(c.bm25.ids[:retrieve]) for q, c in cands.items()}
    knn_run = {q: list(c.knn.ids[:retrieve]) for q, c in cands.items()}
    bm25_metrics, knn_metrics = spec.score(bm25_run, qrels), spec.score(knn_run, qrels)
    best_run: dict[str, list[str]] = {}
    main = spec.main_metric
    better = bm25_metrics if bm25_metrics[main] >= knn_metrics[main] else knn_metrics
    guarded = spec.guarded or (main,)
    no_bounds: dict[str, Any] = {}
    grid_points = [(m, float(a), no_bounds) for m in fusions for a in alphas]
    for forced in (("rrf", 0.0, no_bounds), ("rrf", 1.0, no_bounds)):
        if forced not in grid_points:
            grid_points.append(forced)
    grid_points += [("minmax", float(a), check_bounds(b, "bound grid")) for b in bound_grid for a in alphas]
    grid = []
    best: tuple[float, str, float, dict[str, Any]] | None = None
    for fusion, alpha, bounds in _maybe_track(grid_points, len(grid_points), "tune: fusion grid", show_progress):
        request = tuning_request(fusion, alpha, depth, retrieve, bounds)
        run = {q: _page_ids(c, request) for q, c in cands.items()}
        metrics = spec.score(run, qrels)
        allowed = all(metrics[m] + 1e-12 >= better[m] for m in guarded)
        point = {"fusion": fusion, "alpha": alpha}
        if bounds:
            point["bounds"] = {name: b.as_dict() for name, b in bounds.items()}
        grid.append({**point, **metrics, "allowed": allowed})
        if allowed and (best is None or metrics[main] > best[0]):
            best = (metrics[main], fusion, alpha, bounds)
            best_run = run
    if best is None:  # cannot happen with the forced points; kept as a check
        raise ConfigError(f"no fusion setting is at least the better single mode on "
                          f"{', '.join(f'{k} {better[k]:.4f}' for k in guarded)}; report this as a bug")
    value, fusion, alpha, bounds = best
    bm25_value, knn_value = bm25_metrics[main], knn_metrics[main]
    per_query = {name: spec.per_query(r, qrels, main) for name, r in (("tuned", best_run), ("bm25", bm25_run), ("knn", knn_run))}
    result = TuneResult(fusion, alpha, value, bm25_value, knn_value, depth, len(cands), grid, spec.main_metric, per_query,
                        dict(bounds))
    if prior is None:
        return result
    request = tuning_request(prior["fusion"], prior["alpha"], depth, retrieve, check_bounds(prior.get("bounds"), "prior"))
    prior_run = {q: _page_ids(c, request) for q, c in cands.items()}
    return settle_against_prior(result, spec.per_query(prior_run, qrels, main), prior)


@dataclass
class SignalTuneResult:
    """The business-signal weight chosen for the tuned fusion (``weight`` 0: the signals do not
    help on these queries and are not stored) and the main metric at each weight tried."""

    weight: float
    metric: str
    by_weight: dict[float, dict[str, Any]]


def tune_signals(searcher, queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], tuned: TuneResult,
                 signals, *, weights: Sequence[float] = SIGNAL_WEIGHTS, retrieve: int | None = None,
                 task: str = "paraphrase", query_filters: Mapping[str, Filters] | None = None,
                 lists: Mapping[str, Candidates] | None = None) -> SignalTuneResult:
    """Choose the weight of ``signals``' decay term (``hybrid_qpr.signals.Signals``) on the tuned
    fusion: each weight's page is composed from the same lists exactly as a query's would
    (``search.hybrid_page``: the signals re-score the fused lists on the documents' metadata,
    fetched once per query). ``lists``: each query's lists at ``tuned.depth`` where they were
    kept (``query_lists``), else fetched. A weight is allowed when no guarded metric falls
    below weight 0; the best allowed main metric wins (ties: the smaller weight), and 0 when
    no weight beats the fusion without signals."""
    spec = get_task(task)
    retrieve = spec.retrieve if retrieve is None else retrieve
    if lists is None:
        lists = query_lists(searcher, queries, tuned.depth, query_filters)
    with_documents = {}
    for qid in queries:
        bm25, knn = lists[qid]
        docs = searcher.backend.documents(list(dict.fromkeys([*bm25.ids, *knn.ids])))
        with_documents[qid] = Candidates(bm25._replace(documents=docs), knn._replace(documents={}))
    main, guarded = spec.main_metric, spec.guarded or (spec.main_metric,)
    by_weight: dict[float, dict[str, Any]] = {}
    for weight in sorted({0.0, *map(float, weights)}):
        request = tuning_request(tuned.fusion, tuned.alpha, tuned.depth, retrieve, tuned.bounds,
                                 signals.with_weight(weight))
        run = {q: _page_ids(c, request) for q, c in with_documents.items()}
        by_weight[weight] = spec.score(run, qrels)
    base = by_weight[0.0]
    best = 0.0
    for weight, metrics in by_weight.items():
        metrics["allowed"] = all(metrics[m] + 1e-12 >= base[m] for m in guarded)
        if weight and metrics["allowed"] and metrics[main] > by_weight[best][main] + 1e-12:
            best = weight
    return SignalTuneResult(best, main, by_weight)


RERANKER_DEPTHS: tuple[int, ...] = (10, 20, 50)
# Weights of the first stage's normalised score added to the cross-encoder's logit (0: the
# cross-encoder alone); logits of the committed reranker spread over about 10 within a query.
RERANKER_WEIGHTS: tuple[float, ...] = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


@dataclass
class RerankerTuneResult:
    """Whether the reranker helps the tuned hybrid on the tuning queries, and at which depth,
    norm and weight (``depth`` 0: it does not; stored so that a query says so)."""

    depth: int
    metric: str
    without: dict[str, float]
    by_depth: dict[int, dict[str, Any]]  # per depth: its best (norm, weight) and metrics
    model: str
    norm: str = "minmax"
    weight: float = 0.0
    grid: list[dict[str, Any]] = field(default_factory=list)  # every (depth, norm, weight) tried
    reranker: Any = field(default=None, repr=False, compare=False)  # the reranker tuned (never stored)

    @property
    def value(self) -> float:
        """The main metric of the chosen setting (without the reranker where depth is 0)."""
        return self.by_depth[self.depth][self.metric] if self.depth else self.without[self.metric]

    @property
    def defaults(self) -> dict[str, Any]:
        """What is stored beside the index's fusion defaults (``"reranker"``)."""
        return {"depth": self.depth, "model": self.model, "metric": self.metric, "value": self.value,
                "without": self.without[self.metric], "norm": self.norm, "weight": self.weight}


def tune_reranker(searcher, queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], tuned: TuneResult, *,
                  depths: Sequence[int] = RERANKER_DEPTHS, weights: Sequence[float] = RERANKER_WEIGHTS,
                  norms: Sequence[str] | None = None, retrieve: int | None = None, task: str = "paraphrase",
                  query_filters: Mapping[str, Filters] | None = None) -> RerankerTuneResult:
    """Re-score the tuned hybrid's top ``d`` for each ``d`` in ``depths`` with ``searcher.reranker``,
    ordered by the logit plus ``w`` times the normalised first-stage score for each ``w`` in
    ``weights`` and each norm, and choose the setting with the best main metric among those
    not below the hybrid without the reranker on any guarded metric (as :func:`tune` guards
    fusion); none such, or no gain on the main metric: depth 0 (no reranker). The cross-encoder
    scores each query's top ``d`` once per depth, exactly as a query would (one run per query
    for an int8 model); the first stage is fetched once per query."""
    from hybrid_qpr.rerankers.cross_encoder import NORMS, Interpolation

    if searcher.reranker is None:
        raise ConfigError("tune_reranker needs a searcher with a reranker")
    spec = get_task(task)
    retrieve = spec.retrieve if retrieve is None else retrieve
    depths = sorted({int(d) for d in depths})
    if not depths or depths[0] < 1:
        raise ConfigError(f"reranker depths {depths}: give depths >= 1")
    settings = [Interpolation.of({"weight": w, "norm": n}, "tune") for n in (norms or NORMS)
                for w in sorted({float(w) for w in weights})]
    settings = list(dict.fromkeys(Interpolation(s.weight, "minmax" if s.weight == 0 else s.norm) for s in settings))
    own = query_filters or {}
    reranker = searcher.reranker
    firsts = {qid: searcher.search(text, mode="hybrid", fusion=tuned.fusion, alpha=tuned.alpha, depth=tuned.depth,
                                   top_k=max(retrieve, depths[-1]), filters=own.get(qid), reranker_depth=0)
              for qid, text in queries.items()}
    without = spec.score({q: [r.id for r in hits[:retrieve]] for q, hits in firsts.items()}, qrels)
    main, guarded = spec.main_metric, spec.guarded or (spec.main_metric,)
    by_depth: dict[int, dict[str, Any]] = {}
    grid: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    for depth in depths:
        logits = {q: reranker.score(queries[q], [h.text for h in hits[:depth]]) for q, hits in firsts.items()}
        for setting in settings:
            run = {q: [r.id for r in reranker.reorder(hits, depth, logits[q], setting)[:retrieve]]
                   for q, hits in firsts.items()}
            metrics = spec.score(run, qrels)
            allowed = all(metrics[m] + 1e-12 >= without[m] for m in guarded) and metrics[main] > without[main] + 1e-12
            row = {**metrics, "depth": depth, "norm": setting.norm, "weight": setting.weight, "allowed": allowed}
            grid.append(row)
            if depth not in by_depth or metrics[main] > by_depth[depth][main]:
                by_depth[depth] = row
            if allowed and (best is None or metrics[main] > best[main] + 1e-12):
                best = row
    if best is None:
        return RerankerTuneResult(0, main, without, by_depth, reranker.fingerprint, grid=grid, reranker=reranker)
    return RerankerTuneResult(best["depth"], main, without, by_depth, reranker.fingerprint, best["norm"],
                              best["weight"], grid, reranker)
