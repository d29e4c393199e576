"""The cluster query path without a node: what each search sends (``_source``, ``search_type``,
the kNN clause) and what the backend does with what comes back (documents taken from the hits,
failed shards searched again), driven by a transport that answers like a cluster."""

from __future__ import annotations

import json

import numpy as np
import pytest

import hybrid_qpr.backends.cluster.sending as cluster_sending
from hybrid_qpr.backends.cluster.connection import HttpFailure, Transport, compress_by_default
from hybrid_qpr.backends.elasticsearch import ElasticsearchBackend
from hybrid_qpr.backends.opensearch import OpenSearchBackend
from hybrid_qpr.errors import BackendError, ClusterError, ConfigError
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.types import QueryVector


class StubEncoder:
    dim, distance, fingerprint, kind, model_dir = 4, "cosine", "stub", "cnn", "stub-model"

    def encode(self, texts, batch_size=256, side="query"):
        return np.ones((len(texts), self.dim), dtype=np.float32)


class AnsweringTransport(Transport):
    """Records every request; answers settings, mapping and searches like a cluster whose index
    has ``shards`` primaries and holds ``docs`` (id -> text). ``failures`` is how many search
    answers in a row report a failed shard first."""

    engine = "opensearch"

    def __init__(self, docs: dict[str, str], shards: int = 1, failures: int = 0):
        super().__init__(client=None)
        self.docs, self.shards, self.failures = docs, shards, failures
        self.requests: list[tuple[str, str, object, dict]] = []

    def request(self, method, path, body=None, params=None, *, ndjson=False, timeout=None):
        self.requests.append((method, path, body, dict(params or {})))
        if path.endswith("/_settings"):
            return {"idx": {"settings": {"index": {"number_of_shards": str(self.shards)}},
                            "defaults": {"index": {"max_result_window": "10000"}}}}
        if path.endswith("/_mapping"):
            return {"idx": {"mappings": {"_meta": {"distance": "cosine", "dim": 4, "model_fingerprint": "stub"},
                                         "properties": {"embedding": {"type": "knn_vector", "dimension": 4},
                                                        "text": {"type": "text"}}}}}
        if path.endswith("/_search"):
            return self._answer(body)
        if path == "/_msearch":
            bodies = [json.loads(line) for line in body.splitlines()[1::2]]
            return {"responses": [self._answer(b) for b in bodies]}
        if path.endswith("/_mget"):
            return {"docs": [{"_id": i, "found": True, "_source": {"text": self.docs[i]}} for i in body["ids"]]}
        raise AssertionError(f"unexpected request {method} {path}")

    def _answer(self, body) -> dict:
        if self.failures:
            self.failures -= 1
            return {"_shards": {"failed": 1}, "hits": {"hits": []}}
        hits = []
        for rank, (doc_id, text) in enumerate(list(self.docs.items())[: body["size"]]):
            hit = {"_id": doc_id, "_score": 10.0 - rank}
            if body.get("_source"):
                hit["_source"] = {"text": text, "metadata": {"n": rank}}
            hits.append(hit)
        return {"_shards": {"failed": 0}, "hits": {"hits": hits}}

    def paths(self) -> list[str]:
        return [path for _, path, _, _ in self.requests]


def backend_over(transport: AnsweringTransport, cls=OpenSearchBackend, **options):
    backend = cls(None, "idx", **options)
    backend.transport = transport
    return backend


DOCS = {f"d{i}": f"question number {i}" for i in range(20)}


def test_results_come_with_their_documents_in_one_request_per_search():
    transport = AnsweringTransport(DOCS)
    backend = backend_over(transport)
    searcher = HybridSearcher(backend, StubEncoder())
    assert backend.shards == 1  # read once, then cached
    for mode in ("bm25", "knn", "hybrid"):
        transport.requests.clear()
        results = searcher.search("question", mode=mode, top_k=5, depth=10)
        assert [r.text for r in results] == [DOCS[r.id] for r in results] and len(results) == 5
        assert transport.paths() == (["/_msearch"] if mode == "hybrid" else ["/idx/_search"])  # no _mget
    searcher.search("question", mode="rerank", top_k=5)
    assert "/idx/_mget" not in transport.paths()


def test_bare_hits_are_fetched_with_one_mget():
    transport = AnsweringTransport(DOCS)
    searcher = HybridSearcher(backend_over(transport, documents_in_hits=False), StubEncoder())
    results = searcher.search("question", mode="bm25", top_k=3)
    assert transport.paths()[-2:] == ["/idx/_search", "/idx/_mget"]
    assert [r.text for r in results] == ["question number 0", "question number 1", "question number 2"]


@pytest.mark.parametrize("shards, expected", [(1, "query_then_fetch"), (3, "dfs_query_then_fetch")])
def test_bm25_search_type_follows_the_shard_count(shards, expected):
    transport = AnsweringTransport(DOCS, shards=shards)
    backend = backend_over(transport)
    backend.bm25("question", 5)
    assert transport.requests[-1][3]["search_type"] == expected
    backend.bm25_and_knn("question", QueryVector.of(np.ones(4, dtype=np.float32)), 5)
    headers = [json.loads(line) for line in transport.requests[-1][2].splitlines()[0::2]]
    assert headers == [{"index": "idx", "search_type": expected}, {"index": "idx"}]  # kNN needs no term statistics
    backend.hybrid_server("question", np.ones(4, dtype=np.float32), 5)
    assert transport.requests[-1][3]["search_type"] == "query_then_fetch"  # neural-search skips its pipeline under dfs
    fixed = backend_over(transport, search_type="query_then_fetch")
    fixed.bm25("question", 5)
    assert transport.requests[-1][3]["search_type"] == "query_then_fetch"
    with pytest.raises(ConfigError, match="search_type='dfs'"):
        OpenSearchBackend(None, "idx", search_type="dfs")


def test_settings_read_again_after_the_index_is_dropped_and_created():
    """The shard count (hence the BM25 search type) is cached per index, so deleting or
    creating the index must forget it: a 3-shard index made after a 1-shard one uses dfs."""
    transport = AnsweringTransport(DOCS, shards=1)
    backend = backend_over(transport)
    assert backend.bm25_search_type() == "query_then_fetch"
    transport.shards = 3  # the index is replaced by one with three primaries
    backend._forget_index()  # what drop() and ensure_index() do around the DELETE / PUT
    assert backend.bm25_search_type() == "dfs_query_then_fetch"
    transport.shards = 1
    original = transport.request
    transport.request = lambda method, path, *a, **k: {} if method == "DELETE" else original(method, path, *a, **k)
    assert backend.drop() is True
    assert backend.bm25_search_type() == "query_then_fetch"


def test_a_search_that_lost_shards_is_sent_again_then_refused(monkeypatch):
    monkeypatch.setattr(cluster_sending.time, "sleep", lambda seconds: None)
    transport = AnsweringTransport(DOCS, failures=2)
    assert [h.id for h in backend_over(transport).bm25("question", 3)] == ["d0", "d1", "d2"]
    assert transport.paths().count("/idx/_search") == 3
    transport.failures = 4  # two tries of a two-search _msearch
    bm25, knn = backend_over(transport).bm25_and_knn("question", QueryVector.of(np.ones(4, dtype=np.float32)), 3)
    assert len(bm25.ids) == len(knn.ids) == 3 and transport.paths().count("/_msearch") == 3
    transport.failures = cluster_sending.PARTIAL_RETRIES + 1
    with pytest.raises(ClusterError, match=f"shard\\(s\\) failed on each of {cluster_sending.PARTIAL_RETRIES + 1} tries"):
        backend_over(transport).bm25("question", 3)


class FailingTransport(AnsweringTransport):
    """Fails the first ``len(failures)`` searches with the given ``HttpFailure``s (``item=True``:
    as the item of an ``_msearch`` answer, the way the engines report one search's failure)."""

    def __init__(self, failures, item=False):
        super().__init__(DOCS)
        self.pending, self.item = list(failures), item

    def request(self, method, path, body=None, params=None, *, ndjson=False, timeout=None):
        answer = super().request(method, path, body, params, ndjson=ndjson, timeout=timeout)
        if self.pending and (path.endswith("/_search") or path in ("/_msearch", "/idx/_mget")):
            failure = self.pending.pop(0)
            if not self.item:
                raise failure
            answer["responses"][0] = {"status": failure.status, **failure.body}
        return answer


LOST_NODE = HttpFailure(500, {"error": {"type": "search_phase_execution_exception", "reason": ""}})
DROPPED = HttpFailure(None, None, "connection reset")


def test_a_read_failed_by_a_lost_node_is_sent_again(monkeypatch):
    """A node killed under a search fails it with a 500 of the search phase, or drops the
    connection: reads are repeated (after 0.25 s, 0.5 s, ...) until the surviving copies answer."""
    waits = []
    monkeypatch.setattr(cluster_sending.time, "sleep", waits.append)
    transport = FailingTransport([LOST_NODE, DROPPED])
    assert [h.id for h in backend_over(transport).bm25("question", 3)] == ["d0", "d1", "d2"]
    assert transport.paths().count("/idx/_search") == 3 and waits == [0.25, 0.5]
    transport = FailingTransport([LOST_NODE], item=True)
    bm25, knn = backend_over(transport).bm25_and_knn("question", QueryVector.of(np.ones(4, dtype=np.float32)), 3)
    assert len(bm25.ids) == len(knn.ids) == 3 and transport.paths().count("/_msearch") == 2
    transport = FailingTransport([DROPPED])
    assert set(backend_over(transport).documents(["d0", "d1"])) == {"d0", "d1"}
    transport = FailingTransport([LOST_NODE] * (cluster_sending.PARTIAL_RETRIES + 1))
    with pytest.raises(ClusterError, match="answered 500"):
        backend_over(transport).bm25("question", 3)


@pytest.mark.parametrize("failure", [
    HttpFailure(400, {"error": {"type": "parsing_exception", "reason": "unknown query"}}),
    HttpFailure(500, {"error": {"type": "script_exception", "reason": "bad script"}}),
    HttpFailure(None, None, "read timed out", cause="timeout")])
def test_a_read_that_would_fail_again_is_not_repeated(monkeypatch, failure):
    """A wrong request, an error of the engine's own, or a timeout (a second try would wait as
    long again) fail at once."""
    monkeypatch.setattr(cluster_sending.time, "sleep", lambda seconds: None)
    transport = FailingTransport([failure])
    with pytest.raises((ClusterError, BackendError, ConfigError)):
        backend_over(transport).bm25("question", 3)
    assert transport.paths().count("/idx/_search") == 1


def test_knn_asks_for_depth_hits_with_an_ef_search_floor():
    transport = AnsweringTransport(DOCS)
    backend = backend_over(transport, knn_candidates=60)
    clause = backend.knn_body(np.ones(4, dtype=np.float32), 10, None)["query"]["knn"]["embedding"]
    assert clause["k"] == 10 and clause["method_parameters"] == {"ef_search": 60}
    clause = backend.knn_body(np.ones(4, dtype=np.float32), 200, None)["query"]["knn"]["embedding"]
    assert clause["k"] == 200 and clause["method_parameters"] == {"ef_search": 200}
    es = backend_over(transport, ElasticsearchBackend, knn_candidates=60).knn_body(np.ones(4, dtype=np.float32), 10,
                                                                                   None)["knn"]
    assert es["k"] == 10 and es["num_candidates"] == 60
    with pytest.raises(ConfigError, match="knn_candidates=0"):
        OpenSearchBackend(None, "idx", knn_candidates=0)


@pytest.mark.parametrize("url, compress", [("http://127.0.0.1:9200", False), ("http://localhost:9200", False),
                                           ("http://[::1]:9200", False), ("https://search.internal:9200", True),
                                           ("http://10.0.0.5:9200", True)])
def test_http_compression_is_off_on_loopback_only(url, compress):
    assert compress_by_default(url) is compress
