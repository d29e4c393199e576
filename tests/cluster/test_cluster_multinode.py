"""hybrid-qpr on a real three-node OpenSearch cluster (the ``three_nodes`` fixture, conftest.py).

* Sharded BM25: with the default ``search_type`` (``auto``: ``dfs_query_then_fetch`` on an
  index of several shards, chosen by the measurement in docs/opensearch.md), every BM25 score
  on a 3-shard index equals the score on a 1-shard index of the same documents, in plain
  BM25 and in client-side hybrid's ``_msearch``; ``query_then_fetch`` on the same index does
  not (so the test has teeth). Server-side hybrid stays ``query_then_fetch`` and still fuses.
* Node loss with one replica: one node is SIGKILLed while an ingest is running and while a
  query loop is running. The ingest ends with exactly the input: every id with its text, no
  more; every query answers, the BM25 ones with exactly the answers given before the kill.

This file runs before tests/cluster/test_cluster_node.py, whose last test stops the cluster.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
import uuid

import pytest

from hybrid_qpr.testing.scores import same_scores
from hybrid_qpr.types import Document, QueryVector

pytestmark = [pytest.mark.cluster, pytest.mark.multinode]


def _get(url: str):
    with urllib.request.urlopen(url, timeout=90) as response:
        return json.loads(response.read().decode("utf-8"))


@pytest.fixture()
def make_backend(trio):
    """``make_backend(**options)``: an ``OpenSearchBackend`` on the cluster's first node over a
    fresh index name (one name per call with ``new=True``); every index is dropped afterwards."""
    from hybrid_qpr.backends.opensearch import OpenSearchBackend, connect

    client = connect(trio.url, timeout=120)
    names: list[str] = []

    def make(index: str | None = None, **options):
        if index is None:
            index = f"hqpr-multi-{uuid.uuid4().hex[:10]}"
            names.append(index)
        return OpenSearchBackend(client, index, **options)

    yield make
    for name in names:
        OpenSearchBackend(client, name).drop()


def _scores(hits) -> dict[str, float]:
    return {h.id: h.score for h in hits}


def _same(a: dict[str, float], b: dict[str, float]) -> bool:
    """Equal up to float32 noise and the order of the sums (dfs gathers statistics from 3 shards)."""
    return same_scores(a, b, rel_tol=1e-5, abs_tol=1e-4)


def test_sharded_bm25_scores_equal_one_shard_by_default(make_backend, committed_encoder, question_bank,
                                                        held_out_queries):
    sharded, single = make_backend(), make_backend()
    sharded.ingest(question_bank, committed_encoder, shards=3, replicas=0, show_progress=False)
    single.ingest(question_bank, committed_encoder, shards=1, replicas=0, show_progress=False)
    assert (sharded.shards, single.shards) == (3, 1)
    assert sharded.bm25_search_type() == "dfs_query_then_fetch" and single.bm25_search_type() == "query_then_fetch"
    per_shard = make_backend(sharded.index, search_type="query_then_fetch")
    queries = held_out_queries + [doc.text for doc in question_bank[::25]]
    everything = len(question_bank)  # every match, so no tie sits at a cut-off
    differs = 0
    for query in queries:
        expected = _scores(single.bm25(query, everything))
        assert expected and _same(_scores(sharded.bm25(query, everything)), expected), query
        vector = committed_encoder.encode([query])[0]
        bm25_list, _ = sharded.bm25_and_knn(query, QueryVector.of(vector), everything)
        assert _same(_scores(bm25_list.hits()), expected), query
        differs += not _same(_scores(per_shard.bm25(query, everything)), expected)
    assert differs >= len(queries) // 2  # per-shard statistics really change the scores on this corpus
    # server-side hybrid runs query_then_fetch (under dfs neural-search skips its pipeline and
    # returns raw delimiter scores): fused scores, distinct ids, the exact question first
    for doc in question_bank[::50]:
        vector = committed_encoder.encode([doc.text])[0]
        fused = sharded.hybrid_server(doc.text, vector, 30)
        assert fused[0].id == doc.id and len({h.id for h in fused}) == len(fused) == 30
        assert all(0.0 < h.score < 1.0 for h in fused)
        assert sharded.rescore_server(doc.text, vector, 30)[0].id == doc.id


def _node_pid(trio, position: int) -> int:
    pid = trio.status().nodes[position]["pid"]
    assert pid, f"node {position + 1} of the cluster is not running"
    return pid


def _corpus(n: int) -> list[Document]:
    subjects = ["password", "email", "invoice", "order", "account", "phone", "address", "card"]
    return [Document(f"doc-{i:05d}", f"how do i change the {subjects[i % len(subjects)]} of item {i} in week {i // 50}?",
                     {"n": i}) for i in range(n)]


def test_a_node_killed_during_ingest_and_queries_loses_nothing(trio, make_backend, committed_encoder, question_bank,
                                                               held_out_queries):
    """One SIGKILL hits both: a running ingest (3 shards, 1 replica) and a query loop over a
    second replicated index. The node killed is the third; the client talks to the first."""
    from hybrid_qpr.search import HybridSearcher

    from hybrid_qpr.backends.opensearch import OpenSearchBackend, connect

    filled = make_backend()
    filled.ingest(question_bank, committed_encoder, shards=3, replicas=1, show_progress=False)
    # the query loop is another application: a client of its own
    searcher = HybridSearcher(OpenSearchBackend(connect(trio.url, timeout=120), filled.index), committed_encoder)
    bm25_queries = held_out_queries
    expected = {q: [(r.id, round(r.score, 4)) for r in searcher.search(q, mode="bm25")] for q in bm25_queries}
    exact_questions = question_bank[::20]

    killed = threading.Event()
    stop = threading.Event()
    answers_after_kill: list[int] = [0]
    problems: list[str] = []

    def query_loop() -> None:
        while not stop.is_set():
            for q in bm25_queries:
                try:
                    got = [(r.id, round(r.score, 4)) for r in searcher.search(q, mode="bm25")]
                except Exception as exc:  # every failure is a finding: the loop reports it
                    problems.append(f"bm25 {q!r}: {type(exc).__name__}: {exc}")
                    continue
                if got != expected[q]:
                    problems.append(f"bm25 {q!r}: {got[:3]}... != {expected[q][:3]}...")
                answers_after_kill[0] += killed.is_set()
            for doc in exact_questions:
                try:
                    top = searcher.search(doc.text, mode="hybrid", top_k=10)
                except Exception as exc:
                    problems.append(f"hybrid {doc.text!r}: {type(exc).__name__}: {exc}")
                    continue
                if len(top) != 10 or top[0].id != doc.id or top[0].text != doc.text:
                    problems.append(f"hybrid {doc.text!r}: first result {top[0].id if top else None}")
                answers_after_kill[0] += killed.is_set()

    corpus = _corpus(3000)
    victim = _node_pid(trio, 2)

    def documents():
        for i, doc in enumerate(corpus):
            if i == 1000:  # a third of the way: several bulk requests acknowledged, most still to come
                os.kill(victim, signal.SIGKILL)
                killed.set()
            yield doc

    loop = threading.Thread(target=query_loop, daemon=True)
    loop.start()
    ingested = make_backend()
    try:
        report = ingested.ingest(documents(), committed_encoder, batch_size=100, shards=3, replicas=1,
                                 show_progress=False, max_retries=8, initial_backoff=0.5, max_backoff=8.0)
        deadline = time.monotonic() + 60  # the query loop keeps going until the cluster has seen the loss
        while time.monotonic() < deadline and _get(trio.url + "/_cluster/health")["number_of_nodes"] != 2:
            time.sleep(0.5)
        time.sleep(2)
    finally:
        stop.set()
        loop.join(timeout=120)
    assert killed.is_set() and not loop.is_alive()
    assert _get(trio.url + "/_cluster/health")["number_of_nodes"] == 2
    assert problems == []
    assert answers_after_kill[0] >= len(bm25_queries)
    # the ingest: exactly the input ids with the input texts, nothing lost, nothing extra
    assert report.failed == [] and report.indexed + report.updated == len(corpus)
    assert ingested.count() == len(corpus)
    stored = ingested.documents([d.id for d in corpus])
    assert {d.id: d.text for d in stored.values()} == {d.id: d.text for d in corpus}
    every_id = ingested.request("POST", f"/{ingested.index}/_search", {"size": 10000, "_source": False,
                                                                       "query": {"match_all": {}}},
                                {"filter_path": "hits.hits._id"}, what="listing ids")
    assert sorted(h["_id"] for h in every_id["hits"]["hits"]) == [d.id for d in corpus]
    # the dead node comes back and the replicas heal; the documents are still exactly these
    trio.start(timeout=300)
    health = _get(trio.url + f"/_cluster/health/{ingested.index}?wait_for_status=green&timeout=120s")
    assert health["status"] == "green" and health["number_of_nodes"] == 3
    assert ingested.count() == len(corpus)
