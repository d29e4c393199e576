"""The code both cluster engines share, without a node: connection options, error translation
by status code, the bulk writer's one retry layer (driven by a scripted transport that answers
like a busy or vanished node), and the pipeline and index bodies."""

from __future__ import annotations

import json
import re

import pytest

from hybrid_qpr.backends.cluster.bulk import BulkAction, BulkStats, RetryPolicy, write_bulk
from hybrid_qpr.backends.cluster.connection import HttpFailure, Transport, error_for, resolve_options
from hybrid_qpr.backends.elasticsearch import index_body as es_index_body
from hybrid_qpr.backends.opensearch import index_body as os_index_body, pipeline_body
from hybrid_qpr.errors import BackendError, ClusterError, ConfigError

FAST = RetryPolicy(max_retries=3, initial_backoff=0.0, max_backoff=0.0)


class ScriptedTransport(Transport):
    """Answers each ``_bulk`` with the next scripted reply: an ``HttpFailure`` to raise, or a
    function of the sent actions giving each one's status."""

    engine = "elasticsearch"

    def __init__(self, replies):
        super().__init__(client=None)
        self.replies = list(replies)
        self.sent: list[list[str]] = []

    def request(self, method, path, body=None, params=None, *, ndjson=False, timeout=None):
        lines = [json.loads(line) for line in body.splitlines()]
        ids = [next(iter(line.values()))["_id"] for line in lines if set(line) <= {"index", "delete"}]
        self.sent.append(ids)
        reply = self.replies.pop(0) if self.replies else (lambda i: 201)
        if isinstance(reply, HttpFailure):
            raise reply
        items = []
        for doc_id in ids:
            status = reply(doc_id)
            op = {"_id": doc_id, "status": status}
            if status < 300:
                op["result"] = "created"
            else:
                op["error"] = {"type": "es_rejected_execution_exception" if status == 429 else "mapper_parsing_exception",
                               "reason": "busy" if status == 429 else "bad field"}
            items.append({"index": op})
        return {"errors": any(s["index"]["status"] >= 300 for s in items), "items": items}


def actions(n):
    return [BulkAction("index", f"d{i}", {"text": f"q{i}"}) for i in range(n)]


def test_rejected_items_are_retried_and_permanent_errors_reported():
    transport = ScriptedTransport([lambda i: 429 if i in ("d1", "d3") else 400 if i == "d4" else 201])
    outcomes = list(write_bulk(transport, "idx", actions(5), chunk_size=10, retry=FAST))
    assert sorted(o.action.id for o in outcomes if o.ok) == ["d0", "d1", "d2", "d3"]
    failed = [o for o in outcomes if not o.ok]
    assert [(o.action.id, o.status) for o in failed] == [("d4", 400)] and "mapper_parsing" in failed[0].error
    assert transport.sent == [["d0", "d1", "d2", "d3", "d4"], ["d1", "d3"]]


def test_a_lost_request_is_sent_again_whole_and_gives_up_with_a_resume_hint():
    transport = ScriptedTransport([HttpFailure(None, None, "ConnectionError"), HttpFailure(503, {"error": "x"})])
    outcomes = list(write_bulk(transport, "idx", actions(4), chunk_size=2, retry=FAST))
    assert [o.action.id for o in outcomes] == ["d0", "d1", "d2", "d3"] and all(o.ok for o in outcomes)
    assert transport.sent == [["d0", "d1"], ["d0", "d1"], ["d0", "d1"], ["d2", "d3"]]

    down = ScriptedTransport([HttpFailure(None, None, "ConnectionError")] * 10)
    with pytest.raises(ClusterError, match="after 3 retries.*0 operations were acknowledged.*re-run the same ingest"):
        list(write_bulk(down, "idx", actions(2), retry=FAST))
    assert len(down.sent) == 4  # the first try and 3 retries, never more


def test_an_item_busy_too_long_becomes_a_failure_not_a_loop():
    transport = ScriptedTransport([lambda i: 429] * 10)
    outcomes = list(write_bulk(transport, "idx", actions(1), retry=FAST))
    assert [(o.ok, o.status) for o in outcomes] == [(False, 429)]
    assert len(transport.sent) == 4


def test_a_versioned_write_already_applied_is_superseded_not_failed():
    """A 409 version conflict for an externally versioned write means the index holds that
    version or a newer one (an earlier try was applied): ok, reported as superseded."""

    class Conflicts(ScriptedTransport):
        def request(self, method, path, body=None, params=None, *, ndjson=False, timeout=None):
            headers = [json.loads(line) for line in body.splitlines()][::2]
            assert all(h["index"]["version_type"] == "external" and h["index"]["version"] > 0 for h in headers)
            items = [{"index": {"_id": h["index"]["_id"], "status": 409,
                                "error": {"type": "version_conflict_engine_exception", "reason": "current [5]"}}}
                     for h in headers]
            return {"errors": True, "items": items}

    versioned = [BulkAction("index", "d0", {"text": "q"}, version=4)]
    outcomes = list(write_bulk(Conflicts([]), "idx", versioned, retry=FAST))
    assert [(o.ok, o.result, o.status) for o in outcomes] == [(True, "superseded", 409)]


def test_retry_after_is_honoured_and_counted(monkeypatch):
    slept = []
    monkeypatch.setattr("hybrid_qpr.backends.cluster.bulk.time.sleep", slept.append)
    busy = HttpFailure(429, {"error": {"type": "es_rejected_execution_exception", "reason": "busy"}}, "",
                       {"Retry-After": "3"})
    assert busy.retry_after == 3.0
    assert HttpFailure(429, None, "", {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}).retry_after == 0.0  # past
    assert HttpFailure(429, None, "").retry_after is None
    stats = BulkStats()
    transport = ScriptedTransport([busy, HttpFailure(503, {"error": "x"})])
    outcomes = list(write_bulk(transport, "idx", actions(2), retry=RetryPolicy(3, 0.5, 10.0), stats=stats))
    assert all(o.ok for o in outcomes)
    assert slept == [3.0, 1.0]  # Retry-After, then the backoff of the second consecutive failure
    assert (stats.retried_requests, stats.retried_actions, stats.throttled, stats.wait_seconds) == (2, 0, 1, 4.0)


def test_throttling_halves_the_request_and_success_grows_it_back():
    transport = ScriptedTransport([HttpFailure(429, None, ""), HttpFailure(429, None, "")])
    stats = BulkStats()
    outcomes = list(write_bulk(transport, "idx", actions(120), chunk_size=32, retry=FAST, stats=stats))
    assert len(outcomes) == 120 and all(o.ok for o in outcomes)
    assert [len(ids) for ids in transport.sent] == [32, 16, 8, 16, 32, 32, 32]
    assert stats.smallest_chunk == 8


def test_rejected_items_wait_their_backoff_while_new_ones_go_on(monkeypatch):
    """An item answered 429 goes back in line with its own delay; the writer sends the next
    actions meanwhile instead of sleeping, and only waits when nothing else is left."""
    clock = [0.0]
    monkeypatch.setattr("hybrid_qpr.backends.cluster.bulk.time.monotonic", lambda: clock[0])
    monkeypatch.setattr("hybrid_qpr.backends.cluster.bulk.time.sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    transport = ScriptedTransport([lambda i: 429 if i == "d0" else 201])
    stats = BulkStats()
    outcomes = list(write_bulk(transport, "idx", actions(6), chunk_size=2, retry=RetryPolicy(3, 1.0, 5.0), stats=stats))
    assert sorted(o.action.id for o in outcomes if o.ok) == [f"d{i}" for i in range(6)]
    assert transport.sent == [["d0", "d1"], ["d2", "d3"], ["d4", "d5"], ["d0"]]
    assert (stats.retried_actions, stats.wait_seconds) == (1, 1.0)


def test_a_request_refused_for_good_is_not_retried():
    transport = ScriptedTransport([HttpFailure(400, {"error": {"type": "parse_exception", "reason": "bad"}})])
    with pytest.raises(BackendError, match="answered 400 \\(parse_exception: bad\\)"):
        list(write_bulk(transport, "idx", actions(2), retry=FAST))
    assert len(transport.sent) == 1


@pytest.mark.parametrize("status, body, kind, text", [
    (None, None, ClusterError, "cannot reach Elasticsearch.*--engine elasticsearch"),
    (401, {"error": "x"}, ClusterError, "refused the credentials"),
    (403, {"error": {"type": "security_exception", "reason": "no"}}, ClusterError, "permission denied"),
    (404, {"error": {"type": "index_not_found_exception", "reason": "no such index"}}, BackendError,
     "index 'q' does not exist; create it with 'hybrid-qpr ingest FILE --elasticsearch"),
    (429, {"error": {"type": "es_rejected_execution_exception", "reason": "busy"}}, ClusterError, "overloaded"),
    (400, {"error": {"type": "parse_exception", "reason": "bad"}}, BackendError, "answered 400"),
])
def test_errors_are_chosen_by_status_and_type(status, body, kind, text):
    error = error_for(HttpFailure(status, body, "ConnectionError: refused"), "searching", "elasticsearch", "q")
    assert type(error) is kind
    assert __import__("re").search(text, str(error))


def test_connection_options_come_from_arguments_then_the_engine_environment(monkeypatch):
    monkeypatch.setenv("HYBRID_QPR_ELASTICSEARCH_URL", "https://es.example:9243")
    monkeypatch.setenv("HYBRID_QPR_ELASTICSEARCH_API_KEY", "c2VjcmV0")
    monkeypatch.setenv("HYBRID_QPR_ELASTICSEARCH_VERIFY", "false")
    options = resolve_options("elasticsearch")
    assert (options.url, options.api_key, options.verify_certs, options.username) == \
        ("https://es.example:9243", "c2VjcmV0", False, None)
    assert "c2VjcmV0" not in repr(options)
    inline = resolve_options("opensearch", "https://bob:pw@os.example:9200", username=None)
    assert (inline.url, inline.username, inline.password) == ("https://os.example:9200", "bob", "pw")
    monkeypatch.setenv("HYBRID_QPR_OPENSEARCH_USER", "admin")
    with pytest.raises(ConfigError, match="needs both a user and a password"):
        resolve_options("opensearch", "http://h:9200")  # $..._USER=admin without a password
    with pytest.raises(ConfigError, match="either --api-key or --user/--password"):
        resolve_options("elasticsearch", username="u", password="p")
    with pytest.raises(ConfigError, match="expected http"):
        resolve_options("elasticsearch", "es.example:9200")


def test_pipeline_weights_follow_alpha_for_every_method():
    rrf = pipeline_body("rrf", alpha=0.5)["phase_results_processors"][0]["score-ranker-processor"]["combination"]
    assert "parameters" not in rrf  # equal weights rank like unweighted RRF (works on 2.19)
    weighted = pipeline_body("rrf", alpha=0.2)["phase_results_processors"][0]["score-ranker-processor"]["combination"]
    assert weighted["parameters"] == {"weights": [0.8, 0.2]}
    l2 = pipeline_body("l2", alpha=0.7)["phase_results_processors"][0]["normalization-processor"]
    assert l2["combination"]["parameters"]["weights"] == [0.3, 0.7]


def test_shards_and_replicas_reach_both_index_bodies():
    for body in (os_index_body(8, "cosine", "f" * 16, "cnn", shards=3, replicas=1),
                 es_index_body(8, "cosine", "f" * 16, "cnn", shards=3, replicas=1)):
        assert (body["settings"]["index"]["number_of_shards"], body["settings"]["index"]["number_of_replicas"]) == (3, 1)
    with pytest.raises(ConfigError, match="shards=0"):
        es_index_body(8, "cosine", "f" * 16, "cnn", shards=0)
    assert es_index_body(8, "sqeuclidean", "f" * 16, "cnn", vector_index_type="int8_hnsw")[
        "mappings"]["properties"]["embedding"]["index_options"]["type"] == "int8_hnsw"


@pytest.mark.parametrize("failure, text, retryable", [
    (HttpFailure(None, None, "ConnectionTimeout: read timed out", cause="timeout"),
     "Elasticsearch did not answer in time .*raise --timeout", True),
    (HttpFailure(None, None, "TlsError: WRONG_VERSION_NUMBER", cause="tls"),
     "the TLS handshake with Elasticsearch failed .*use an http:// URL.*--ca-certs", False),
    (HttpFailure(404, None, "<html>", {"Content-Type": "text/html"}),
     "the server is not Elasticsearch: it answered 404 with text/html. Fix: point --elasticsearch", False),
    (HttpFailure(400, {"error": {"root_cause": [{"type": "query_shard_exception", "reason": "maxClauseCount is set to 1024"}],
                                 "failed_shards": [{"reason": {"caused_by": {"type": "too_many_clauses"}}}]}}),
     "more terms than Elasticsearch allows.*maxClauseCount is set to 1024.*max_clause_count", False),
])
def test_no_answer_tls_foreign_servers_and_clause_limits_are_named(failure, text, retryable):
    assert failure.retryable is retryable
    error = error_for(failure, "searching", "elasticsearch", "q")
    assert re.search(text, str(error)) and "\n" not in str(error)


def test_requests_in_flight_together_keep_every_outcome_and_the_retry_rules():
    """Three requests at once: every action answered once, a request lost on the way sent again
    whole, and no sender thread left when the writer ends."""
    import threading

    transport = ScriptedTransport([lambda i: 201, HttpFailure(None, None, "ConnectionError")])
    stats = BulkStats()
    outcomes = list(write_bulk(transport, "idx", actions(50), chunk_size=4, retry=FAST, stats=stats, in_flight=3))
    assert sorted(o.action.id for o in outcomes) == sorted(f"d{i}" for i in range(50)) and all(o.ok for o in outcomes)
    assert stats.retried_requests == 1 and stats.requests == len(transport.sent) == 14
    assert not [t for t in threading.enumerate() if t.name.startswith("hybrid-qpr-bulk")]
    with pytest.raises(ConfigError, match="in_flight=0"):
        list(write_bulk(transport, "idx", actions(1), in_flight=0))


def test_a_vector_is_written_as_text_that_reads_back_to_the_same_float32():
    import numpy as np

    from hybrid_qpr.backends.cluster.bulk import _stdlib_dumps, dumps

    vector = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    for write in (dumps, _stdlib_dumps):
        text = write({"embedding": vector, "text": "caf\u00e9 ?"})
        back = json.loads(text)
        assert np.array_equal(np.asarray(back["embedding"], dtype=np.float32), vector) and back["text"] == "caf\u00e9 ?"
    assert len(dumps({"v": vector})) <= len(_stdlib_dumps({"v": vector}))
    # what orjson refuses (a lone surrogate, an int over 64 bits) is written the stdlib's way
    assert json.loads(dumps({"t": "x\ud800", "n": 2 ** 70}).decode("utf-8", "surrogatepass")) == {"t": "x\ud800",
                                                                                                 "n": 2 ** 70}
