"""Index names and document ids a cluster would refuse or misread, once per engine on a real node.

An index name is user input that ends up in a URL path: a percent-encoded pattern (``%2a`` is
``*``) or a plain one (``*``, ``_all``, ``a,b``) would let a query read every index of the node,
system indexes included. Each such name is refused with one line before anything is sent, and
a valid name is sent percent-encoded, so the server decodes exactly the name given. An id over
the engines' 512-byte limit is skipped and reported with its line; the rest of the input is
written.
"""

from __future__ import annotations

import json
import re
import uuid

import pytest
from click.testing import CliRunner

from hybrid_qpr.backends.cluster.names import MAX_ID_BYTES, index_name_problem, index_path
from hybrid_qpr.cli.main import cli
from hybrid_qpr.errors import ConfigError, SkippedLine
from hybrid_qpr.types import Document

FLAGS = {"opensearch": "--opensearch", "elasticsearch": "--elasticsearch"}
ENGINES = {"opensearch": "OpenSearch", "elasticsearch": "Elasticsearch"}
# (name, what the message says is wrong)
BAD_NAMES = [
    ("%2a", "contains '%'"), ("%5fall", "contains '%'"), ("a%2cb", "contains '%'"), ("%2A", "contains '%'"),
    ("*", "contains '\\*'"), ("hqpr*", "contains '\\*'"), ("_all", "starts with '_'"), ("a,b", "contains ','"),
    ("a#b", "contains '#'"), ("a?b", "contains '\\?'"), ("a b", "contains a space"), ("a:b", "contains ':'"),
    ("a/b", "contains '/'"), ("a\\b", "contains '\\\\\\\\'"), ('a"b', "contains '\"'"), ("a|b", "contains '\\|'"),
    ("a<b", "contains '<'"), ("Questions", "upper-case"), ("-a", "starts with '-'"), ("+a", "starts with '\\+'"),
    (".", "'\\.' is not allowed"), ("..", "'\\.\\.' is not allowed"), (".kibana", "starts with '\\.'"),
    ("a\tb", "control character"), ("", "empty"), ("a" * 256, "256 bytes long"), ("é" * 128, "256 bytes long"),
]


@pytest.mark.parametrize("name, problem", BAD_NAMES)
def test_each_name_the_engines_refuse_or_would_decode_into_a_pattern_is_refused(name, problem):
    found = index_name_problem(name)
    assert found is not None and re.search(problem, found), (name, found)


def test_valid_names_are_accepted_and_sent_percent_encoded():
    for name in ("questions", "q-2024.11_a+b", "a" * 255, "fragé"):
        assert index_name_problem(name) is None
    assert index_path("q-1.a+b", "_search") == "/q-1.a%2Bb/_search"
    assert index_path("fragé") == "/frag%C3%A9"


@pytest.fixture()
def neighbour(cluster_backend, committed_encoder):
    """An index of the node under test holding 'password' questions: what a leaking name would find."""
    docs = [Document(f"n{i}", f"how do i reset my password number {i}?") for i in range(5)]
    cluster_backend.ingest(docs, committed_encoder, show_progress=False)
    return cluster_backend


@pytest.mark.cluster
def test_no_bad_name_reaches_the_node_or_leaks_another_index(cluster_engine, cluster_url, neighbour):
    from hybrid_qpr.cli._backend import open_backend

    assert neighbour.count() == 5  # a pattern reaching the node would find these
    runner = CliRunner()
    for name, problem in BAD_NAMES:
        with pytest.raises(ConfigError, match=f"index name .*{ENGINES[cluster_engine]} index names are lower case"):
            open_backend(name, {cluster_engine: cluster_url})
        target = [FLAGS[cluster_engine], cluster_url]
        for command in (["query", "how do i reset my password", "--mode", "bm25", "-k", "5", "--index", name, *target],
                        ["delete", "n1", "--index", name, *target], ["index", "drop", "--yes", *target, "--", name]):
            result = runner.invoke(cli, command)
            assert result.exit_code == 1, (name, command, result.output)
            lines = result.output.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith("Error: index name "), (name, result.output)
            assert "password number" not in result.output and "n0" not in result.output
    assert neighbour.count() == 5  # nothing deleted, nothing dropped


@pytest.mark.cluster
def test_a_name_with_characters_that_need_encoding_round_trips(cluster_engine, cluster_client, committed_encoder):
    from hybrid_qpr.backends.elasticsearch import ElasticsearchBackend
    from hybrid_qpr.backends.opensearch import OpenSearchBackend

    cls = OpenSearchBackend if cluster_engine == "opensearch" else ElasticsearchBackend
    name = f"hqpr-test-{uuid.uuid4().hex[:6]}.v1+é"
    backend = cls(cluster_client, name)
    try:
        report = backend.ingest([Document("a", "how do i reset my password?"), Document("b", "where is my order?")],
                                committed_encoder, show_progress=False)
        assert report.indexed == 2 and backend.count() == 2
        assert [h.id for h in backend.bm25("password", 5)] == ["a"]
        listed = backend.transport.request("GET", "/_cat/indices", params={"format": "json", "h": "index"})
        assert name in {row["index"] for row in listed}  # the node holds exactly this name, decoded
    finally:
        assert backend.drop() is True
    assert not backend.exists()


# ---------------------------------------------------------------------- ids
LONG_ID = "é" * 257  # 257 characters, 514 bytes: the limit counts bytes
EDGE_ID = "x" * MAX_ID_BYTES  # exactly at the limit: allowed


@pytest.mark.cluster
def test_an_id_over_512_bytes_is_skipped_with_its_position_and_the_rest_written(cluster_backend, cluster_engine,
                                                                                 committed_encoder, question_bank):
    docs = question_bank[:40]
    docs = docs[:2] + [Document(LONG_ID, "a question with a long id")] + docs[2:] + [Document(EDGE_ID, "at the limit")]
    report = cluster_backend.ingest(docs, committed_encoder, batch_size=16, show_progress=False)
    assert report.skipped == [SkippedLine(None, 3, f"id is 514 bytes long; {ENGINES[cluster_engine]} allows at most 512 bytes "
                                  "(UTF-8): shorten it")]
    assert report.failed == [] and report.indexed == 41 and report.verified == 41
    assert cluster_backend.count() == 41
    assert EDGE_ID in cluster_backend.documents([EDGE_ID])


@pytest.mark.cluster
def test_the_cli_reports_the_long_id_line_and_writes_the_rest_or_stops_with_strict(cluster_backend, cluster_engine,
                                                                                   cluster_url, tmp_path):
    path = tmp_path / "ids.jsonl"
    lines = [{"id": f"d{i}", "text": f"how do i change setting {i}?"} for i in range(1, 301)]
    lines[199] = {"id": LONG_ID, "text": "line 200 has an id over the limit"}
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    args = ["ingest", str(path), "--index", cluster_backend.index, "--batch-size", "32", FLAGS[cluster_engine],
            cluster_url]
    strict = CliRunner().invoke(cli, [*args, "--strict"])
    assert strict.exit_code == 1
    assert strict.output.strip().splitlines()[-1] == f"Error: {path}:200: id is 514 bytes long; " \
        f"{ENGINES[cluster_engine]} allows at most 512 bytes (UTF-8): shorten it"
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "skipped 1, failed 0" in result.output
    assert f"skipped {path}:200: id is 514 bytes long" in result.output
    assert cluster_backend.count() == 299
