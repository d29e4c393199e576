"""The secured local nodes (``hybrid-qpr node start --secure``): "lets no one in" is tested, not assumed.

Each engine's secured node is the one scripts/test started in the background, else it is started
here (and stopped at the end). Elasticsearch 9.5.3 runs x-pack security; OpenSearch runs 2.19.4, the
one version whose security plugin is on Maven Central. Both have HTTPS with a CA drawn at their
first start, an admin and a read-only user (hybrid_qpr.localnode.security).

What is checked, through the CLI as a user meets it:

- wrong password, no credentials, a wrong API key, the demo configuration's admin/admin: refused
  with a one-line 401 message;
- no CA (``--ca-certs`` left out): a TLS message, not "is the node running?"; with the CA it verifies;
- the read-only user can query, but ingest, delete and tune get a one-line 403 message and the
  index is unchanged (documents, texts and ``_meta``);
- no secret in CLI output, log records, the evaluation report, the index ``_meta``, the
  node's logs, or the ``node start|status`` output; the credentials file is mode 0600.

On OpenSearch 2.19.4 there is no k-NN plugin, so no hybrid-qpr index (it has a ``knn_vector``
field) can be made there: ingest as admin is refused by the node itself ("unknown setting
[index.knn]") and shown as one line. The roles are tested there on a plain index the admin fills
over REST: the reader can search it and read its mapping, and delete (the CLI) and writes are 403.
On Elasticsearch the read-only API key queries and is refused writes like the read-only user.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from hybrid_qpr.cli.main import cli
from hybrid_qpr.errors import ClusterError
from hybrid_qpr.localnode import LocalNode
from hybrid_qpr.localnode.security import Access, Credentials, request_json

pytestmark = [pytest.mark.cluster, pytest.mark.secure]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FLAGS = {"opensearch": "--opensearch", "elasticsearch": "--elasticsearch"}


class Secured:
    """A running secured node and what a test needs to talk to it."""

    def __init__(self, node: LocalNode, credentials: Credentials):
        self.node = node
        self.engine = node.engine
        self.credentials = credentials
        self.url = credentials.url
        self.outputs: list[str] = []  # every CLI output, checked for secrets at the end

    def env(self, who: str | None) -> dict[str, str | None]:
        """The environment a user exports (secrets stay off the command line); ``who``: admin,
        reader, api_key or None."""
        prefix = f"HYBRID_QPR_{self.engine.upper()}_"
        env: dict[str, str | None] = {prefix + name: None for name in ("URL", "USER", "PASSWORD", "API_KEY", "CA", "VERIFY")}
        if who == "api_key":
            env[prefix + "API_KEY"] = self.credentials.api_key
        elif who is not None:
            env[prefix + "USER"] = getattr(self.credentials, f"{who}_user")
            env[prefix + "PASSWORD"] = getattr(self.credentials, f"{who}_password")
        return env

    def run(self, args: list[str], who: str | None = "reader", ca: bool = True):
        """``hybrid-qpr ARGS --<engine> URL [--ca-certs CA]`` as ``who``; returns the click result."""
        extra = [FLAGS[self.engine], self.url] + (["--ca-certs", self.credentials.ca_certs] if ca else [])
        result = CliRunner(env=self.env(who)).invoke(cli, ["-vv", *args, *extra])
        self.outputs.append(result.output)
        return result

    def rest(self, method: str, path: str, body=None, who: str = "admin"):
        access = Access(self.credentials.ca_certs, getattr(self.credentials, f"{who}_user"),
                        getattr(self.credentials, f"{who}_password"))
        return request_json(method, self.url + path, access, body)


def _one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = [line for line in result.output.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.fixture(scope="session")
def secured_nodes():
    """``get(engine)``: that engine's secured node, started on first use when not running (and then
    stopped at the end of the test run)."""
    ready: dict[str, Secured] = {}
    started: list[LocalNode] = []

    def get(engine: str) -> Secured:
        if engine not in ready:
            # scripts/test runs the Elasticsearch of $HYBRID_QPR_ELASTICSEARCH_VERSION (8.19.21 where no Java 21+)
            version = os.environ.get("HYBRID_QPR_ELASTICSEARCH_VERSION") if engine == "elasticsearch" else None
            node = LocalNode(engine=engine, secure=True, heap="512m", version=version or None)
            try:
                timings = node.start(timeout=300)
            except ClusterError as exc:
                message = f"the secured {engine} node did not start: {exc}"
                pytest.fail(message + " (CI is set: secure tests never skip)") if os.environ.get("CI") else pytest.skip(message)
            if not timings["already_running"]:
                started.append(node)
            ready[engine] = Secured(node, node.credentials())
        return ready[engine]

    yield get
    for node in started:
        node.stop()


@pytest.fixture(scope="module", params=["elasticsearch", "opensearch"])
def secured(request, secured_nodes) -> Secured:
    return secured_nodes(request.param)


@pytest.fixture(scope="module")
def es_index(secured_nodes):
    """Elasticsearch: the examples corpus ingested by the admin (the fixture's ingest is part of the check)."""
    secured = secured_nodes("elasticsearch")
    index = "hqpr-secure-examples"
    result = secured.run(["ingest", str(EXAMPLES / "beir" / "corpus.jsonl"), "--index", index], who="admin")
    assert result.exit_code == 0 and ("indexed 300" in result.output or "updated 300" in result.output), result.output
    yield secured, index
    secured.rest("DELETE", f"/{index}")


@pytest.fixture(scope="module")
def os_index(secured_nodes):
    """OpenSearch: a plain (BM25-only) index filled by the admin over REST."""
    secured = secured_nodes("opensearch")
    index = "hqpr-secure-plain"
    secured.rest("DELETE", f"/{index}?ignore_unavailable=true")
    secured.rest("PUT", f"/{index}", {"mappings": {"_meta": {"written_by": "test_cluster_secure"},
                                                   "properties": {"text": {"type": "text"}}}})
    for line in (EXAMPLES / "beir" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:20]:
        doc = json.loads(line)
        secured.rest("PUT", f"/{index}/_doc/{doc['_id']}", {"text": doc["text"]})
    secured.rest("POST", f"/{index}/_refresh")
    yield secured, index
    secured.rest("DELETE", f"/{index}")


def _state(secured: Secured, index: str) -> tuple[int, dict, str]:
    """Count, mapping and the sorted (id, source) pairs: what a refused write must leave unchanged."""
    secured.rest("POST", f"/{index}/_refresh")
    count = secured.rest("GET", f"/{index}/_count")["count"]
    mapping = secured.rest("GET", f"/{index}/_mapping")
    hits = secured.rest("POST", f"/{index}/_search", {"size": 1000, "sort": ["_doc"]})["hits"]["hits"]
    return count, mapping, json.dumps(sorted((h["_id"], h["_source"].get("text")) for h in hits))


# ------------------------------------------------------------------------------------ both engines
def test_the_node_is_https_only_and_the_credentials_file_is_private(secured):
    assert secured.url.startswith("https://127.0.0.1:")
    mode = stat.S_IMODE(os.stat(secured.node.credentials_file).st_mode)
    assert mode == 0o600, oct(mode)
    key = Path(secured.credentials.ca_certs).with_name("node-key.pem")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    state = secured.node.status()
    assert state.running and state.nodes[0]["verified"] and state.credentials_file == str(secured.node.credentials_file)
    # plain HTTP on the HTTPS port gets no answer it could read
    with pytest.raises((urllib.error.URLError, OSError, ValueError)):
        urllib.request.urlopen(secured.url.replace("https://", "http://") + "/_cluster/health", timeout=5).read()
    # the CLI tells where the credentials are, never what they are
    for args in (["node", "status", "--engine", secured.engine, "--secure"],
                 ["node", "start", "--engine", secured.engine, "--secure"]):
        result = CliRunner().invoke(cli, args)
        secured.outputs.append(result.output)
        assert result.exit_code == 0 and str(secured.node.credentials_file) in result.output, result.output


@pytest.mark.parametrize("who, extra", [
    ("wrong", []), (None, []), (None, ["--api-key", "d3Jvbmc6a2V5"]), (None, ["--user", "admin", "--password", "admin"]),
], ids=["wrong-password", "no-credentials", "wrong-api-key", "demo-admin"])
def test_wrong_or_missing_credentials_are_refused_in_one_line(secured, who, extra):
    args = ["query", "how do i reset my password?", "--index", "hqpr-any", *extra]
    if who == "wrong":
        args += ["--user", secured.credentials.reader_user, "--password", "not-the-password"]
    line = _one_line_error(secured.run(args, who=None))
    assert "refused the credentials (401" in line and "--user/--password or --api-key" in line, line


def test_a_missing_ca_is_a_tls_error_and_the_ca_verifies(secured):
    line = _one_line_error(secured.run(["query", "password", "--index", "hqpr-any"], ca=False))
    assert "TLS" in line and "--ca-certs" in line and "Is the node running" not in line, line
    # with the CA the handshake verifies and the request reaches the index check (none such index)
    line = _one_line_error(secured.run(["query", "password", "--index", "hqpr-none"]))
    assert "'hqpr-none' does not exist" in line, line


# ------------------------------------------------------------------------------------ Elasticsearch
@pytest.mark.parametrize("who", ["reader", "api_key"])
def test_the_reader_and_the_api_key_can_query(es_index, who):
    secured, es_index = es_index
    assert secured.credentials.api_key, "the secured Elasticsearch node made no API key"
    result = secured.run(["query", "how do i reset my netflix password?", "--index", es_index, "-k", "3",
                          "--mode", "hybrid", "--json"], who=who)
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["hits"]
    assert len(hits) == 3 and "netflix" in hits[0]["text"], result.stdout


def test_the_reader_cannot_ingest_delete_or_tune_and_nothing_changes(es_index, tmp_path):
    secured, es_index = es_index
    before = _state(secured, es_index)
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"id": "secure-new", "text": "how do i keep my account safe?"}) + "\n"
                   + json.dumps({"id": "netflix-password-0", "text": "changed text"}) + "\n", encoding="utf-8")
    attempts = {
        "ingest": ["ingest", str(new), "--index", es_index],
        "delete": ["delete", "netflix-password-0", "netflix-password-1", "--index", es_index],
        "tune": ["tune", "--beir", str(EXAMPLES / "beir"), "--index", es_index, "--max-queries", "5"],
    }
    for name, args in attempts.items():
        line = _one_line_error(secured.run(args))
        assert "permission denied (403)" in line and secured.credentials.reader_user in line, (name, line)
    # the read-only API key likewise (it is the admin's key, limited to the read-only role)
    line = _one_line_error(secured.run(attempts["delete"], who="api_key"))
    assert "permission denied (403)" in line and secured.credentials.admin_user in line, line
    assert _state(secured, es_index) == before
    # the admin may: the same tune stores its winner in _meta (then the test's index is dropped)
    tuned = secured.run(attempts["tune"], who="admin")
    assert tuned.exit_code == 0 and "stored as the default" in tuned.output, tuned.output


def test_no_secret_in_the_report_or_meta(es_index, tmp_path):
    secured, es_index = es_index
    report = tmp_path / "report"
    result = secured.run(["evaluate", "--beir", str(EXAMPLES / "beir"), "--index", es_index, "--modes", "bm25,knn",
                          "--max-queries", "5", "--out", str(report), "--no-plot"])
    assert result.exit_code == 0, result.output
    texts = {"_meta": json.dumps(secured.rest("GET", f"/{es_index}/_mapping"))}
    texts.update({f"report {p.name}": p.read_text(encoding="utf-8") for p in report.iterdir()})
    assert {"report report.md", "report report.json"} <= set(texts)
    _assert_no_secret(secured, texts)


# ------------------------------------------------------------------------------------ OpenSearch 2.19.4
def test_opensearch_reader_can_search_but_not_write(os_index):
    secured, os_index = os_index
    from hybrid_qpr.backends.opensearch import OpenSearchBackend, connect

    before = _state(secured, os_index)
    creds = secured.credentials
    reader = connect(secured.url, username=creds.reader_user, password=creds.reader_password, ca_certs=creds.ca_certs)
    backend = OpenSearchBackend(reader, os_index)
    hits = backend.bm25("how do i reset my password?", 5)
    assert hits and backend.count() == 20 and backend.meta["written_by"] == "test_cluster_secure"
    line = _one_line_error(secured.run(["delete", *[h.id for h in hits[:2]], "--index", os_index]))
    assert "permission denied (403)" in line and creds.reader_user in line, line
    # ingest into a new index: refused at its creation (no index appears)
    line = _one_line_error(secured.run(["ingest", str(EXAMPLES / "questions.jsonl"), "--index", "hqpr-secure-new"]))
    assert "permission denied (403)" in line and "indices:admin/create" in line, line
    with pytest.raises(ClusterError, match="404"):
        secured.rest("GET", "/hqpr-secure-new")
    with pytest.raises(ClusterError, match=r"permission denied \(403\)"):
        backend.set_fusion_defaults({"fusion": "rrf", "alpha": 0.5})  # what tune stores
    assert _state(secured, os_index) == before


def test_opensearch_without_knn_refuses_a_hybrid_qpr_index_in_one_line(secured_nodes):
    secured = secured_nodes("opensearch")
    line = _one_line_error(secured.run(["ingest", str(EXAMPLES / "questions.jsonl"), "--index", "hqpr-secure-knn"],
                                       who="admin"))
    assert "unknown setting [index.knn]" in line, line


# ------------------------------------------------------------------------------------ both engines, last
def test_no_secret_in_cli_output_or_logs(secured, caplog):
    """After the tests above: every CLI output so far, the log records of a -vv run that had the
    password on its command line, and the node's own logs."""
    caplog.set_level(logging.DEBUG)
    creds = secured.credentials
    result = secured.run(["query", "password", "--index", "hqpr-any", "--user", creds.reader_user,
                          "--password", creds.reader_password], who=None)
    assert result.exit_code == 1 and "does not exist" in result.output, result.output
    assert caplog.records, "the -vv run logged nothing: the log check would prove nothing"
    texts = {"CLI output": "\n".join(secured.outputs), "log records": caplog.text}
    logs = secured.node.members[0].root / "logs"
    texts.update({f"node log {p.name}": p.read_text(encoding="utf-8", errors="replace") for p in logs.glob("*.log")})
    assert len(texts) > 3
    _assert_no_secret(secured, texts)


def _assert_no_secret(secured: Secured, texts: dict[str, str]) -> None:
    for secret in secured.credentials.secrets():
        leaks = [name for name, text in texts.items() if secret in text]
        assert not leaks, f"a password appears in {leaks}"
