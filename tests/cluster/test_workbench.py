"""The workbench API (``hybrid-qpr serve``) over HTTP, on a real uvicorn server: every endpoint
with good and bad input, on the embedded index and (marked ``cluster``) on OpenSearch and
Elasticsearch nodes; judgments surviving a kill -9 of the CLI server; concurrent requests
during a tune; and the judgment flow (judge 30 queries of the examples/ bank, tune, compare)."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.parse
import uuid
from pathlib import Path

import pytest

from hybrid_qpr.data.beir import load_beir
from hybrid_qpr.testing.corpora import example_documents
from hybrid_qpr.testing.workbench import ServeProcess, call, examples_local_index, free_port, judge_bank, served

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

REPO = Path(__file__).resolve().parents[2]
HIT_KEYS = {"id", "text", "score", "metadata", "bm25", "knn"}  # hybrid-qpr query --json's hit object


def _cluster_backend(engine: str, url: str, encoder):
    import importlib

    module = importlib.import_module(f"hybrid_qpr.backends.{engine}")
    cls = module.OpenSearchBackend if engine == "opensearch" else module.ElasticsearchBackend
    backend = cls(module.connect(url), f"hqpr-test-wb-{uuid.uuid4().hex[:10]}")
    backend.ingest(example_documents(), encoder, show_progress=False)
    return backend


@pytest.fixture(scope="module", params=["local", pytest.param("opensearch", marks=pytest.mark.cluster),
                                        pytest.param("elasticsearch", marks=pytest.mark.cluster)])
def api(request, tmp_path_factory, committed_encoder):
    """Base URL of a workbench over the examples/ bank (270 questions: 30 held out as queries) on each backend."""
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"wb-{kind}")
    if kind == "local":
        backend = examples_local_index(tmp / "idx", committed_encoder)
    else:
        backend = _cluster_backend(kind, request.getfixturevalue(f"{kind}_url"), committed_encoder)
    try:
        with served(backend, committed_encoder, tmp / "judgments", index=getattr(backend, "index", "idx"),
                    kind=kind, min_tune_queries=3, index_writes=True) as url:
            yield url + "/api"
    finally:
        if kind != "local":
            backend.drop()


def get(api: str, path: str, **params):
    query = urllib.parse.urlencode(params, doseq=True)
    return call(f"{api}/{path}" + (f"?{query}" if query else ""))


def test_health(api):
    status, body = get(api, "health")
    assert status == 200
    assert body["documents"] == 270 and body["status"] == "ok"
    assert body["model"] and body["index"] and body["backend"] in ("local", "opensearch", "elasticsearch")
    assert body["modes"] == ["bm25", "knn", "hybrid", "rescore"]


@pytest.mark.parametrize("mode", ["bm25", "knn", "hybrid", "rescore", "rerank"])
def test_search_returns_the_query_json_hits(api, mode):
    """Every mode, and ``rerank`` (rescore's name before), answered as the mode it is."""
    status, body = get(api, "search", q="how do i reset my netflix password", mode=mode, k=5)
    assert status == 200 and body["mode"] == {"rerank": "rescore"}.get(mode, mode) and len(body["hits"]) == 5
    for hit in body["hits"]:
        assert set(hit) == HIT_KEYS
    assert body["hits"][0]["id"].startswith("netflix-password")
    scores = [h["score"] for h in body["hits"]]
    assert scores == sorted(scores, reverse=True)


def test_search_pages_and_filters(api):
    _, first = get(api, "search", q="cheap flights to europe", k=5)
    _, second = get(api, "search", q="cheap flights to europe", k=5, offset=5)
    _, both = get(api, "search", q="cheap flights to europe", k=10)
    assert [h["id"] for h in first["hits"] + second["hits"]] == [h["id"] for h in both["hits"]]
    status, body = get(api, "search", q="how do i change my password", k=10, filter=["topic:travel"])
    assert status == 200 and body["hits"]
    assert {h["metadata"]["topic"] for h in body["hits"]} == {"travel"}


def test_search_fusion_and_alpha_change_the_hybrid(api):
    _, pure_bm25 = get(api, "search", q="my laptop is slow", mode="bm25", k=5)
    _, alpha0 = get(api, "search", q="my laptop is slow", fusion="rrf", alpha=0, k=5)
    assert alpha0["settings"]["fusion"] == "rrf" and alpha0["settings"]["alpha"] == 0.0
    assert [h["id"] for h in alpha0["hits"]] == [h["id"] for h in pure_bm25["hits"]]


@pytest.mark.parametrize("params, status, words", [
    ({}, 400, "query is empty"),
    ({"q": "   "}, 400, "query is empty"),
    ({"q": "x" * 1001}, 413, "1,001 characters"),
    ({"q": "password", "k": 0}, 422, "k=0"),
    ({"q": "password", "k": 101}, 422, "k=101"),
    ({"q": "password", "k": "ten"}, 400, "must be an integer"),
    ({"q": "password", "offset": -1}, 422, "offset=-1"),
    ({"q": "password", "mode": "magic"}, 422, "mode='magic'"),
    ({"q": "password", "fusion": "avg"}, 422, "fusion='avg'"),
    ({"q": "password", "alpha": 1.5}, 422, "alpha=1.5"),
    ({"q": "password", "alpha": "nan"}, 422, "alpha=nan"),
    ({"q": "password", "alpha": "half"}, 400, "must be a number"),
    ({"q": "password", "filter": "topic"}, 400, "FIELD=VALUE"),
    ({"q": "password", "filter": "colour:red"}, 422, "colour"),
])
def test_search_refuses_bad_input_with_a_json_error(api, params, status, words):
    got, body = get(api, "search", **params)
    assert got == status, body
    assert body["status"] == status and words in body["error"]
    assert "Traceback" not in json.dumps(body)


def test_compare_lists_every_mode_with_cross_ranks(api):
    status, body = get(api, "compare", q="i can't remember my netflix login", k=5)
    assert status == 200 and body["modes"] == ["bm25", "knn", "hybrid", "rescore"]
    lists = body["lists"]
    for mode, hits in lists.items():
        assert [h["rank"] for h in hits] == list(range(1, len(hits) + 1)) and len(hits) == 5
        for hit in hits:
            assert set(hit["ranks"]) == set(lists) - {mode}
            for other, rank in hit["ranks"].items():
                ids = [h["id"] for h in lists[other]]
                assert (ids[rank - 1] == hit["id"]) if rank else (hit["id"] not in ids)
    _, hybrid = get(api, "search", q="i can't remember my netflix login", k=5)
    assert [h["id"] for h in lists["hybrid"]] == [h["id"] for h in hybrid["hits"]]
    assert get(api, "compare", q="x", k=500)[0] == 422
    assert get(api, "compare")[0] == 400


def test_judgments_are_stored_deduplicated_last_write_wins(api):
    query = f"is a hotel better than an airbnb {uuid.uuid4().hex[:6]}"
    assert call(f"{api}/judgments", "POST", {"query": query, "id": "airbnb-or-hotel-1", "relevance": 1})[0] == 200
    status, stored = call(f"{api}/judgments", "POST", {"query": f"  {query.replace(' ', '   ')} ", "id": "airbnb-or-hotel-1",
                                                       "relevance": 2})
    assert status == 200 and stored["relevance"] == 2
    call(f"{api}/judgments", "POST", {"query": query, "id": "netflix-password-0", "relevance": 0})
    _, everything = get(api, "judgments")
    mine = [q for q in everything["queries"] if q["query"] == query]
    assert len(mine) == 1
    assert {(j["id"], j["relevance"]) for j in mine[0]["judgments"]} == {("airbnb-or-hotel-1", 2), ("netflix-password-0", 0)}
    _, answer = get(api, "compare", q=query, k=3)
    assert answer["judgments"] == {"airbnb-or-hotel-1": 2, "netflix-password-0": 0}


@pytest.mark.parametrize("body, status, words", [
    ({"query": "q", "id": "no-such-doc", "relevance": 1}, 404, "no-such-doc"),
    ({"query": "q", "id": "amazon-email-0", "relevance": 3}, 422, "relevance=3"),
    ({"query": "q", "id": "amazon-email-0", "relevance": True}, 422, "relevance=True"),
    ({"query": "q", "id": "amazon-email-0", "relevance": "1"}, 422, "relevance='1'"),
    ({"query": "q", "id": "amazon-email-0"}, 400, "missing field(s) relevance"),
    ({"query": "q", "id": "amazon-email-0", "relevance": 1, "note": "x"}, 422, "unknown field(s) note"),
    ({"query": 5, "id": "amazon-email-0", "relevance": 1}, 422, "must be strings"),
    ({"query": "", "id": "amazon-email-0", "relevance": 1}, 400, "query is empty"),
    ({"query": "q" * 1001, "id": "amazon-email-0", "relevance": 1}, 413, "1,001 characters"),
    (["not", "an", "object"], 400, "JSON object"),
])
def test_judgments_refuse_bad_input(api, body, status, words):
    got, answer = call(f"{api}/judgments", "POST", body)
    assert got == status and words in answer["error"], answer


def test_judgments_refuse_malformed_and_huge_bodies(api):
    status, answer = call(f"{api}/judgments", "POST", raw=b"{not json")
    assert status == 400 and "not valid JSON" in answer["error"]
    status, answer = call(f"{api}/judgments", "POST", raw=b"")
    assert status == 400 and "empty" in answer["error"]
    status, answer = call(f"{api}/judgments", "POST", raw=b'{"query": "' + b"a" * 70_000 + b'"}')
    assert status == 413 and "at most 65,536" in answer["error"]
    status, answer = call(f"{api}/tune", "POST", {"store": "yes"})
    assert status == 422


def test_unknown_routes_and_methods_are_json_errors(api):
    status, body = call(f"{api}/nothing-here")
    assert status == 404 and "openapi.json" in body["error"]
    status, body = call(f"{api}/tune")  # GET on a POST route
    assert status == 405 and body["status"] == 405


def test_openapi_describes_every_route(api):
    status, spec = get(api, "openapi.json")
    assert status == 200 and spec["openapi"].startswith("3.")
    described = {(path, method.upper()) for path, ops in spec["paths"].items() for method in ops}
    assert described == {("/api/health", "GET"), ("/api/session", "GET"), ("/api/search", "GET"), ("/api/compare", "GET"),
                         ("/api/judgments", "GET"), ("/api/judgments", "POST"), ("/api/tune", "POST"),
                         ("/api/openapi.json", "GET"), ("/api/significance", "GET"), ("/api/overlap", "POST")}
    for path, method in described:  # served: anything but 404/405
        assert call(f"{api[:-4]}{path}", method, {} if method == "POST" else None)[0] not in (404, 405)


def test_tune_needs_judgments_then_stores_the_fusion(api):
    status, body = call(f"{api}/tune", "POST")
    assert status == 422 and "at least 3 queries" in body["error"]
    judge_bank(api, 4)
    status, body = call(f"{api}/tune", "POST", {})
    assert status == 200, body
    assert body["stored"] and body["metric"] == "MRR@20" and body["queries"] >= 4
    better = max(body["before"]["bm25"]["metrics"]["MRR@20"], body["before"]["knn"]["metrics"]["MRR@20"])
    assert body["after"]["hybrid"]["metrics"]["MRR@20"] >= better - 1e-9
    _, health = get(api, "health")
    assert health["fusion_defaults"] == body["chosen"]
    _, search = get(api, "search", q="hello", k=3)
    assert (search["settings"]["fusion"], search["settings"]["alpha"]) == (body["chosen"]["fusion"], body["chosen"]["alpha"])


def test_api_key_guards_the_api_but_not_its_description(tmp_path, committed_encoder):
    index = examples_local_index(tmp_path / "idx", committed_encoder)
    with served(index, committed_encoder, tmp_path / "j", index="idx", kind="local", api_key="s3cret") as url:
        status, body = call(f"{url}/api/health")
        assert status == 401 and "X-API-Key" in body["error"]
        assert call(f"{url}/api/health", headers={"X-API-Key": "wrong"})[0] == 401
        assert call(f"{url}/api/health", headers={"X-API-Key": "s3cret"})[0] == 200
        assert call(f"{url}/api/health", headers={"Authorization": "Bearer s3cret"})[0] == 200
        assert call(f"{url}/api/openapi.json")[0] == 200


def test_concurrent_requests_all_answer_while_a_tune_stores(tmp_path, committed_encoder):
    index = examples_local_index(tmp_path / "idx", committed_encoder)
    with served(index, committed_encoder, tmp_path / "j", index="idx", kind="local", min_tune_queries=3,
                index_writes=True) as url:
        api = url + "/api"
        judge_bank(api, 5)
        texts = [d.text for d in example_documents()[:64]]

        def ask(text):
            return get(api, "compare", q=text, k=10)[0]

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = pool.map(ask, texts * 2)
            tuned = pool.submit(call, f"{api}/tune", "POST", {})
            statuses = list(answers)
        assert tuned.result()[0] == 200
        assert statuses == [200] * len(statuses)


def _start_cli(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "hybrid_qpr.cli.main", "serve", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_judgments_survive_kill_9_of_the_server(tmp_path, committed_encoder):
    examples_local_index(tmp_path / "idx", committed_encoder)
    server = ServeProcess(tmp_path / "serve.log", "--index", str(tmp_path / "idx"))
    url, proc = server.url, server.proc
    acknowledged = {}
    try:
        docs = [d.id for d in example_documents()]

        answered = threading.Semaphore(0)

        def judge(i):
            body = {"query": f"query {i % 7}", "id": docs[i % len(docs)], "relevance": i % 3}
            status = call(f"{url}/api/judgments", "POST", body)[0]
            if status == 200:
                answered.release()
            return status

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = {pool.submit(judge, i): i for i in range(2000)}
            for _ in range(50):  # kill once 50 writes were answered, with the rest still to come
                assert answered.acquire(timeout=120), "the server stopped answering judgments"
            os.kill(proc.pid, signal.SIGKILL)  # mid-stream: some writes answered, the rest cut off
            for future, i in futures.items():
                try:
                    if future.result() == 200:
                        acknowledged[(f"query {i % 7}", docs[i % len(docs)])] = i % 3
                except (OSError, http.client.HTTPException):
                    continue
    finally:
        proc.kill()
        proc.wait()
    assert acknowledged, "no judgment was answered before the kill"
    print(f"\n{len(acknowledged)} judgments acknowledged before the kill")
    _, queries, qrels = load_beir(tmp_path / "idx" / "judgments", "val")  # whole, readable files
    text_of = {q: t for q, t in queries.items()}
    stored = {(text_of[q], d): g for q, docs in qrels.items() for d, g in docs.items()}
    assert all(stored.get(pair) == grade for pair, grade in acknowledged.items())


def test_cli_warns_when_bound_beyond_loopback(tmp_path, committed_encoder):
    examples_local_index(tmp_path / "idx", committed_encoder)
    port = free_port()
    proc = _start_cli(["--index", str(tmp_path / "idx"), "--port", str(port), "--host", "0.0.0.0",
                       "--server-api-key", "k"])
    try:
        line = proc.stderr.readline()  # printed before the server starts listening
        assert "warning: listening on 0.0.0.0, not loopback" in line
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_cli_refuses_an_empty_index_cleanly(tmp_path, committed_encoder):
    from hybrid_qpr.backends.local import LocalIndex

    LocalIndex.create(tmp_path / "empty", committed_encoder)
    proc = _start_cli(["--index", str(tmp_path / "empty"), "--port", str(free_port())])
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "holds no documents" in err and "Traceback" not in err


def test_judgment_flow_tune_keeps_a_clear_winner_or_the_prior(tmp_path, committed_encoder):
    """Judge the hits of 30 new questions (held out of the examples/ bank, one per val/test
    group) through the API, tune, then score bm25, knn and the hybrid on those judgments
    through /api/search: the grid's winner (never below the better single mode there) is
    served when its gain over the untuned prior is clear, else the prior is, unchanged."""
    from hybrid_qpr.evaluation.evaluator import score_run
    from hybrid_qpr.workbench.judgments import JudgmentStore

    index = examples_local_index(tmp_path / "idx", committed_encoder)
    with served(index, committed_encoder, tmp_path / "j", index="idx", kind="local", index_writes=True) as url:
        api = url + "/api"
        chosen = judge_bank(api, 30)
        status, tuned = call(f"{api}/tune", "POST", {})
        assert status == 200 and tuned["queries"] == 30, tuned
        judgments = JudgmentStore(tmp_path / "j").load()
        metrics = {}
        for mode in ("bm25", "knn", "hybrid"):
            run = {}
            for text in chosen.values():
                _, answer = get(api, "search", q=text, mode=mode, k=20)
                run[next(q for q, t in judgments.queries.items() if t == text)] = [h["id"] for h in answer["hits"]]
            metrics[mode] = score_run(run, judgments.qrels)
    print("\njudgment flow, 30 held-out queries of the examples/ bank:", json.dumps(
        {m: {k: round(v, 4) for k, v in metrics[m].items()} for m in metrics}), "chosen:", tuned["chosen"],
          "untuned hybrid:", json.dumps(tuned["before"]["hybrid"]))
    decision = tuned["decision"]
    assert decision["kept"] in ("tuned", "prior") and decision["sentence"]
    if decision["kept"] == "tuned":
        assert decision["low"] > 0
        assert metrics["hybrid"]["MRR@20"] >= max(metrics["bm25"]["MRR@20"], metrics["knn"]["MRR@20"]) - 1e-9
    else:
        from hybrid_qpr.evaluation.evaluator import untuned_prior

        prior = untuned_prior(committed_encoder)  # the model's fusion defaults
        assert decision["low"] <= 0 and f"so the prior {prior['fusion']} alpha {prior['alpha']:.1f} is kept" \
            in decision["sentence"]
        assert (tuned["chosen"]["fusion"], tuned["chosen"]["alpha"]) == (prior["fusion"], prior["alpha"])
        assert metrics["hybrid"]["MRR@20"] == pytest.approx(tuned["before"]["hybrid"]["metrics"]["MRR@20"])
    assert metrics["hybrid"]["MRR@20"] == pytest.approx(tuned["after"]["hybrid"]["metrics"]["MRR@20"])


def test_compare_adds_the_reranker_column_when_one_is_configured(tmp_path, committed_encoder):
    """With a reranker (the committed cross-encoder), compare shows the four modes unreranked and
    a fifth list: the reranker's order of the hybrid's top hits, each with its cross-encoder score."""
    reranker_dir = REPO / "onnx" / "reranker-minilm-l6-int8"
    backend = examples_local_index(tmp_path / "idx", committed_encoder)
    with served(backend, committed_encoder, tmp_path / "judgments", index="idx", kind="local",
                reranker=str(reranker_dir)) as url:
        api = url + "/api"
        status, health = get(api, "health")
        assert status == 200 and health["modes"] == ["bm25", "knn", "hybrid", "rescore", "reranker"]
        assert health["reranker"]["model"] == reranker_dir.name and health["reranker"]["depth"] == 20
        status, body = get(api, "compare", q="i can't remember my netflix login", k=5)
        assert status == 200 and body["modes"] == health["modes"]
        lists = body["lists"]
        assert all("cross_encoder" not in hit for hit in lists["hybrid"])  # the modes' own lists
        reranked = lists["reranker"]
        assert len(reranked) == 5 and [h["cross_encoder"]["rank"] for h in reranked] == [1, 2, 3, 4, 5]
        scores = [h["cross_encoder"]["score"] for h in reranked]
        assert scores == sorted(scores, reverse=True)
        assert all(set(h["ranks"]) == {"bm25", "knn", "hybrid", "rescore"} for h in reranked)
        status, spec = get(api, "openapi.json")
        assert status == 200 and "reranker" in json.dumps(spec)
