"""Edges of the cluster backends, each a one-line message naming the value and the fix.

Without a node: another kind of server at the URL (a web server, a stub answering ``200 {}`` to
everything), https against a plain-HTTP server and http against a TLS one, URLs that cannot be
read, credentials over plain http. On both real nodes: each engine's flag pointed at the other
engine. On a real node, once per engine: a blank query, filters (an
unknown field, booleans, numbers, lists), the result window and kNN k limits, too many query
clauses, and the index remembering the model it was built with.
"""

from __future__ import annotations

import importlib
import logging
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from hybrid_qpr.backends.cluster.connection import resolve_options
from hybrid_qpr.cli.main import cli
from hybrid_qpr.errors import BackendError, ClusterError, ConfigError
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.testing.web import html_site
from hybrid_qpr.types import Document

ENGINES = {"opensearch": "OpenSearch", "elasticsearch": "Elasticsearch"}


def _installed(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


# each engine's client; Elasticsearch's is the elasticsearch extra (its absence fails under CI: conftest.py)
ENGINE_PARAMS = ["opensearch", pytest.param("elasticsearch", marks=pytest.mark.skipif(
    not _installed("elasticsearch"), reason="could not import 'elasticsearch' (the elasticsearch extra)"))]


@pytest.fixture()
def web_server():
    """A plain web server answering every GET with an HTML page (status 200 for /, else 404)."""
    with html_site("<html><body>It works!</body></html>",
                   lambda path: 200 if path == "/" or path.startswith("/_cluster") else 404) as host:
        yield host


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
def test_a_server_that_is_not_the_engine_and_a_tls_mismatch_are_named(engine, web_server):
    module = importlib.import_module(f"hybrid_qpr.backends.{engine}")
    with pytest.raises(ClusterError, match=f"the server is not {ENGINES[engine]}: it answered 200 with text/html.*"
                                           f"Fix: point --{engine} at the node's HTTP address") as caught:
        module.connect(f"http://{web_server}", timeout=5)
    assert "\n" not in str(caught.value)
    with pytest.raises(ClusterError, match=f"the TLS handshake with {ENGINES[engine]} failed .*use an http:// URL"):
        module.connect(f"https://{web_server}", timeout=5)


def serve(handler, tls_context=None):
    """``handler`` served on a free loopback port in a thread; yields ``host:port``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if tls_context is not None:
        server.socket = tls_context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class EmptyJson(BaseHTTPRequestHandler):
    """Answers every request ``200 {}`` (JSON), whatever it asks."""

    def answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(b"{}")

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = answer

    def log_message(self, *args):
        pass


@pytest.fixture()
def empty_json_server():
    yield from serve(EmptyJson)


@pytest.fixture()
def tls_server(tmp_path):
    """A TLS port (a certificate of the secured local node's kind) answering ``200 {}``."""
    pytest.importorskip("cryptography")  # the secure extra makes the certificate
    from hybrid_qpr.localnode.security import CERTS_DIR, NODE_CERT, NODE_KEY, generate_tls

    generate_tls(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / CERTS_DIR / NODE_CERT, tmp_path / CERTS_DIR / NODE_KEY)
    yield from serve(EmptyJson, context)


def one_line_error(result) -> str:
    """The CLI's output when it is exactly one 'Error: ...' line and exit status 1."""
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
def test_a_server_answering_200_empty_json_to_everything_is_named_not_a_traceback(engine, empty_json_server,
                                                                                   tmp_path):
    module = importlib.import_module(f"hybrid_qpr.backends.{engine}")
    with pytest.raises(ClusterError, match=f"the server is not {ENGINES[engine]}.*point --{engine} at the node"):
        module.connect(f"http://{empty_json_server}", timeout=5)
    backend_class = getattr(module, "OpenSearchBackend", None) or module.ElasticsearchBackend
    unchecked = backend_class(module.connect(f"http://{empty_json_server}", timeout=5, check=False), "questions")
    with pytest.raises((BackendError, ClusterError), match="questions"):  # the library without the probe
        unchecked.refresh_meta()
    source = tmp_path / "q.jsonl"
    source.write_text('{"id": "a", "text": "how do i reset my password?"}\n', encoding="utf-8")
    for command in (["query", "password", "--index", "questions"], ["ingest", str(source), "--index", "questions"],
                    ["index", "drop", "questions", "--yes"]):
        line = one_line_error(CliRunner().invoke(cli, [*command, f"--{engine}", f"http://{empty_json_server}"]))
        assert f"the server is not {ENGINES[engine]}" in line


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
@pytest.mark.parametrize("url, problem", [("http://127.0.0.1:notaport", "Port could not be cast"),
                                          ("http://[::1", "Invalid IPv6 URL"),
                                          ("http://127.0.0.1:99999", "Port out of range"),
                                          ("ftp://127.0.0.1:9200", "expected http\\(s\\)://host")])
def test_urls_that_cannot_be_read_are_one_line(engine, url, problem):
    with pytest.raises(ConfigError, match=f"{ENGINES[engine]} URL .*{problem}"):
        resolve_options(engine, url)
    line = one_line_error(CliRunner().invoke(cli, ["query", "password", "--index", "questions", f"--{engine}", url]))
    assert "expected http(s)://host[:port]" in line


@pytest.mark.parametrize("engine", ENGINE_PARAMS)
def test_plain_http_to_a_tls_port_suggests_https(engine, tls_server):
    module = importlib.import_module(f"hybrid_qpr.backends.{engine}")
    with pytest.raises(ClusterError, match=f"the port answers TLS, not plain HTTP.*use https://{tls_server}") as caught:
        module.connect(f"http://{tls_server}", timeout=5)
    assert "Is the node running" not in str(caught.value)
    line = one_line_error(CliRunner().invoke(cli, ["query", "password", "--index", "questions", f"--{engine}",
                                                   f"http://u:secret-pw@{tls_server}"]))
    assert f"use https://{tls_server}" in line and "secret-pw" not in line


@pytest.mark.cluster
def test_each_engine_flag_pointed_at_the_other_engine_names_what_it_found(opensearch_url, elasticsearch_url):
    from hybrid_qpr.backends import elasticsearch, opensearch

    with pytest.raises(ClusterError, match="this node is Elasticsearch, not OpenSearch. Fix: use --elasticsearch URL"):
        opensearch.connect(elasticsearch_url)
    with pytest.raises(ClusterError, match=r"this node is OpenSearch [0-9.]+, not Elasticsearch. Fix: use --opensearch"):
        elasticsearch.connect(opensearch_url)
    for flag, url, found in (("--opensearch", elasticsearch_url, "Elasticsearch"),
                             ("--elasticsearch", opensearch_url, "OpenSearch")):
        line = one_line_error(CliRunner().invoke(cli, ["query", "password", "--index", "questions", flag, url]))
        assert f"this node is {found}" in line and "model" not in line


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

    from hybrid_qpr.cli._backend import load_encoder
    from hybrid_qpr.encoders import Encoder

    other = Path(__file__).resolve().parents[2] / "onnx" / "sdml-cnn-quora"  # not the default model
    encoder = Encoder.load(other)
    assert encoder.fingerprint != Encoder.load(None).fingerprint
    cluster_backend.ingest(question_bank[:20], encoder, show_progress=False)
    assert cluster_backend.meta["model_dir"] == str(other)
    assert load_encoder(None, cluster_backend).fingerprint == encoder.fingerprint  # query without --model
    cluster_backend.set_fusion_defaults({"fusion": "rrf", "alpha": 0.5, "depth": 50})  # tuning keeps it
    assert cluster_backend.meta["model_dir"] == str(other)
