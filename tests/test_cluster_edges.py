"""Edges of the cluster backends, each a one-line message naming the value and the fix.

Without a node: another kind of server at the URL, https against a plain-HTTP server,
credentials over plain http. On a real node, once per engine: a blank query, filters (an
unknown field, booleans, numbers, lists), the result window and kNN k limits, too many query
clauses, and the index remembering the model it was built with.
"""

from __future__ import annotations

import importlib
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hybrid_qpr.backends.cluster.connection import resolve_options
from hybrid_qpr.errors import ClusterError, ConfigError
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.types import Document

ENGINES = {"opensearch": "OpenSearch", "elasticsearch": "Elasticsearch"}


@pytest.fixture()
def web_server():
    """A plain web server answering every GET with an HTML page (status 200 for /, else 404)."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<html><body>It works!</body></html>"
            self.send_response(200 if self.path == "/" or self.path.startswith("/_cluster") else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("engine", list(ENGINES))
def test_a_server_that_is_not_the_engine_and_a_tls_mismatch_are_named(engine, web_server):
    if engine == "elasticsearch":
        pytest.importorskip("elasticsearch")  # the elasticsearch extra
    module = importlib.import_module(f"hybrid_qpr.backends.{engine}")
    with pytest.raises(ClusterError, match=f"the server is not {ENGINES[engine]}: it answered 200 with text/html.*"
                                           f"Fix: point --{engine} at the node's HTTP address") as caught:
        module.connect(f"http://{web_server}", timeout=5)
    assert "\n" not in str(caught.value)
    with pytest.raises(ClusterError, match=f"the TLS handshake with {ENGINES[engine]} failed .*use an http:// URL"):
        module.connect(f"https://{web_server}", timeout=5)


def test_credentials_over_plain_http_are_warned_about(caplog):
    with caplog.at_level(logging.WARNING):
        resolve_options("opensearch", "http://127.0.0.1:9", username="u", password="secret-pw")
        resolve_options("elasticsearch", "http://127.0.0.1:9", api_key="secret-key")
        resolve_options("opensearch", "https://127.0.0.1:9", username="u", password="secret-pw")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "the password is sent over plain http" in warnings[0] and "use an https:// URL" in warnings[0]
    assert "the API key is sent over plain http" in warnings[1]
    assert not any("secret" in w for w in warnings)


# ---------------------------------------------------------------------- on a real node
@pytest.fixture()
def typed_index(cluster_backend, committed_encoder):
    docs = [Document("t1", "how do i reset my password?", {"flag": True, "tags": ["x", "y"], "n": 1, "s": "true"}),
            Document("t2", "how do i change my password?", {"flag": False, "tags": ["y"], "n": 2, "s": "no"}),
            Document("t3", "where is my order?", {"flag": True, "tags": "z", "n": 3, "s": "1"})]
    cluster_backend.ingest(docs, committed_encoder, show_progress=False)
    return cluster_backend


@pytest.mark.cluster
def test_filters_are_typed_by_the_mapping_and_unknown_fields_refused(typed_index, committed_encoder):
    searcher = HybridSearcher(typed_index, committed_encoder)

    def ids(filters):
        return sorted(r.id for r in searcher.search("password order", mode="bm25", top_k=10, filters=filters))

    assert ids({"flag": "true"}) == ["t1", "t3"]  # the CLI's string "true" on a boolean field
    assert ids({"flag": False}) == ["t2"]
    assert ids({"tags": "y"}) == ["t1", "t2"]  # a list-valued field matches when any element does
    assert ids({"tags": ["x", "z"]}) == ["t1", "t3"]  # several values: any of them
    assert ids({"n": "2"}) == ["t2"]
    assert ids({"s": True}) == ["t1"]  # a keyword field compares text: true means "true", never "1"
    with pytest.raises(ConfigError, match="field 'flag' holds booleans in index .*use true or false"):
        ids({"flag": "1"})
    with pytest.raises(ConfigError, match="field 'n' holds numbers"):
        ids({"n": "two"})
    with pytest.raises(ConfigError, match="filter field 'topic' is not in any document of index .*"
                                          "known fields: flag, n, s, tags"):
        searcher.search("password", mode="knn", filters={"topic": "x"})


@pytest.mark.cluster
def test_blank_query_limits_and_long_queries_are_refused_with_the_limit_named(typed_index, committed_encoder):
    searcher = HybridSearcher(typed_index, committed_encoder)
    with pytest.raises(ConfigError, match="the query text is empty"):
        searcher.search("   ")
    for mode in ("bm25", "knn", "hybrid"):
        with pytest.raises(ConfigError, match=r"100,000 hits asked per list .* returns at most 10,000 "
                                              r"\(.*index.max_result_window is 10,000\)"):
            searcher.search("password", mode=mode, top_k=100_000)
    long_query = " ".join(f"w{i}" for i in range(20_000))  # 20,000 distinct terms, ~130,000 characters
    for mode in ("bm25", "hybrid"):
        with pytest.raises(ConfigError, match="the query has more terms than .* allows in one query .*maxClauseCount"
                                              ".*indices.query.bool.max_clause_count.*shorten the query"):
            searcher.search(long_query, mode=mode)


@pytest.mark.cluster
def test_the_index_remembers_its_model(cluster_backend, question_bank):
    from pathlib import Path

    from hybrid_qpr.cli._engine import load_encoder
    from hybrid_qpr.encoders import Encoder

    other = Path(__file__).resolve().parents[1] / "onnx" / "sdml-cnn-quora"  # not the default model
    encoder = Encoder.load(other)
    assert encoder.fingerprint != Encoder.load(None).fingerprint
    cluster_backend.ingest(question_bank[:20], encoder, show_progress=False)
    assert cluster_backend.meta["model_dir"] == str(other)
    assert load_encoder(None, cluster_backend).fingerprint == encoder.fingerprint  # query without --model
    cluster_backend.set_fusion_defaults({"fusion": "rrf", "alpha": 0.5, "depth": 50})  # tuning keeps it
    assert cluster_backend.meta["model_dir"] == str(other)
