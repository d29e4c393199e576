"""The workbench's relevance views: is a difference real (``/api/significance``) and how much
do two configurations agree without judgments (``/api/overlap``).

``/api/significance`` searches the judged queries in each mode, tests every mode against a
baseline per query (``hybrid_qpr.evaluation.significance``) and lists each mode's wins and
losses, worst losses first, with the query texts. ``/api/overlap`` searches a list of queries
(a pasted query log) with two configurations and reports Jaccard and rank-biased overlap
(``hybrid_qpr.evaluation.overlap``). Both are framework-free functions of a ``Workbench``;
:func:`routes` maps them onto Starlette for ``hybrid_qpr.workbench.app``.
"""

from __future__ import annotations

from typing import Any

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.evaluation.overlap import DEPTH, PERSISTENCE
from hybrid_qpr.search_request import FUSION_MODES
from hybrid_qpr.workbench.service import RequestError, Workbench

SIGNIFICANCE_MODES = FUSION_MODES
MIN_QUERIES = 2
MAX_OVERLAP_QUERIES = 500
LISTED = 25  # per-query rows per comparison in an answer


def significance(workbench: Workbench, *, baseline: str = "bm25", metric: str | None = None) -> dict[str, Any]:
    """Each of ``SIGNIFICANCE_MODES`` against ``baseline`` on the judged queries."""
    from hybrid_qpr.evaluation.evaluator import evaluate
    from hybrid_qpr.evaluation.significance import compare_runs
    from hybrid_qpr.evaluation.tasks import get_task

    if baseline not in SIGNIFICANCE_MODES:
        raise RequestError(422, f"baseline={baseline!r}: must be one of {', '.join(SIGNIFICANCE_MODES)}")
    spec = get_task("paraphrase")
    if metric is not None and metric not in spec.metric_names:
        raise RequestError(422, f"metric={metric!r}: must be one of {', '.join(spec.metric_names)}")
    judgments = workbench.store.load()
    queries = judgments.judged_queries()
    if len(queries) < MIN_QUERIES:
        raise RequestError(422, f"the tests need at least {MIN_QUERIES} queries with a relevant (1 or 2) judgment; "
                                f"{len(queries)} have one so far. Judge the hits of more queries first")
    qrels = {q: judgments.qrels[q] for q in queries}
    runs: dict[str, dict[str, list[str]]] = {}
    order = (baseline, *(m for m in SIGNIFICANCE_MODES if m != baseline))
    with workbench.reading():
        results = evaluate(workbench.searcher, queries, qrels, modes=order, runs=runs)
    comparisons = compare_runs(runs, qrels, baseline=baseline, metric=metric)
    answer = []
    for c in comparisons:
        row = c.to_dict(rows=None)
        listed = [r for r in row["per_query"] if r["delta"] != 0][:LISTED]
        row["per_query"] = [{**r, "text": queries[r["query"]]} for r in listed]
        answer.append(row)
    return {"queries": len(queries), "baseline": baseline, "metric": comparisons[0].metric,
            "metrics": {mode: results[mode]["metrics"] for mode in order}, "comparisons": answer}


def overlap(workbench: Workbench, body: Any) -> dict[str, Any]:
    """``{"queries": [...] or "one per line", "a": "hybrid", "b": "bm25,fusion=rrf", "k": 10, "p": 0.9}``."""
    from hybrid_qpr.evaluation.overlap import Configuration, overlap_report, run_queries

    if not isinstance(body, dict) or set(body) - {"queries", "a", "b", "k", "p"}:
        raise RequestError(422, 'the body must be {"queries": [...], "a": "MODE[,fusion=F][,alpha=A]", "b": ..., '
                                '"k": 10, "p": 0.9}')
    raw = body.get("queries")
    texts = raw.splitlines() if isinstance(raw, str) else raw
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise RequestError(400, "queries must be a list of strings or one string with a query per line")
    texts = list(dict.fromkeys(t.strip() for t in texts if t.strip()))
    if not texts:
        raise RequestError(400, "queries is empty: give at least one query")
    if len(texts) > MAX_OVERLAP_QUERIES:
        raise RequestError(413, f"{len(texts)} queries; at most {MAX_OVERLAP_QUERIES} are compared per request "
                                "(use 'hybrid-qpr compare' for a whole log)")
    for text in texts:
        workbench.check_query(text)
    k, p = body.get("k", DEPTH), body.get("p", PERSISTENCE)
    if isinstance(k, bool) or not isinstance(k, int):
        raise RequestError(422, f"k={k!r}: must be an integer")
    workbench.check_page(k)
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 < p < 1:
        raise RequestError(422, f"p={p!r}: must be a number between 0 and 1 (exclusive)")
    try:
        configurations = [Configuration.parse(str(body.get(side, default))) for side, default in (("a", "hybrid"), ("b", "bm25"))]
    except ConfigError as exc:
        raise RequestError(422, str(exc)) from None
    if any(c.index for c in configurations):
        raise RequestError(422, "index=... is for 'hybrid-qpr compare'; the workbench compares on the index it serves")
    queries = {f"q{i}": text for i, text in enumerate(texts, start=1)}
    with workbench.reading():
        (run_a, run_b), seconds = run_queries([workbench.searcher] * 2, configurations, queries, k)
    report = overlap_report(run_a, run_b, queries, k=k, p=float(p))
    return {"a": configurations[0].label(), "b": configurations[1].label(), "seconds": seconds, **report}


def routes(workbench: Workbench, api, json_body) -> list:
    """The Starlette routes of this module; ``api`` and ``json_body`` are the app's wrappers
    (key check, JSON answer, errors; a size-checked JSON body)."""
    from starlette.concurrency import run_in_threadpool
    from starlette.routing import Route

    async def significance_endpoint(request) -> dict[str, Any]:
        params = request.query_params
        return await run_in_threadpool(significance, workbench, baseline=params.get("baseline") or "bm25",
                                       metric=params.get("metric") or None)

    async def overlap_endpoint(request) -> dict[str, Any]:
        body = await json_body(request, required=True)
        return await run_in_threadpool(overlap, workbench, body)

    return [Route("/api/significance", api(significance_endpoint), methods=["GET"]),
            Route("/api/overlap", api(overlap_endpoint), methods=["POST"])]


def openapi_paths() -> dict[str, Any]:
    """These routes in OpenAPI 3.1, merged into ``/api/openapi.json``."""
    def answer(text: str) -> dict[str, Any]:
        return {"description": text, "content": {"application/json": {"schema": {"type": "object"}}}}

    error = {"description": "error", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    return {
        "/api/significance": {"get": {
            "summary": f"Every mode ({', '.join(SIGNIFICANCE_MODES)}) against a baseline on the judged queries: paired "
                       "randomization test and t-test (Holm-corrected), wins/losses/ties, the worst losses first.",
            "parameters": [
                {"name": "baseline", "in": "query", "required": False, "description": "The mode the others are tested against.",
                 "schema": {"type": "string", "enum": list(SIGNIFICANCE_MODES), "default": "bm25"}},
                {"name": "metric", "in": "query", "required": False, "description": "Metric tested [default: MRR@20].",
                 "schema": {"type": "string"}}],
            "responses": {"200": answer("comparisons"), **{s: error for s in ("401", "422", "502")}}}},
        "/api/overlap": {"post": {
            "summary": "Two configurations on a list of queries, without judgments: Jaccard@k, rank-biased overlap, "
                       "the most changed queries first.",
            "requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object", "properties": {
                "queries": {"oneOf": [{"type": "array", "items": {"type": "string"}, "maxItems": MAX_OVERLAP_QUERIES},
                                      {"type": "string", "description": "one query per line"}]},
                "a": {"type": "string", "default": "hybrid", "description": "MODE[,fusion=F][,alpha=A]"},
                "b": {"type": "string", "default": "bm25"},
                "k": {"type": "integer", "default": DEPTH}, "p": {"type": "number", "default": PERSISTENCE}}}}}},
            "responses": {"200": answer("overlap"), **{s: error for s in ("400", "401", "413", "422", "502")}}}},
    }
