"""Creating and dropping a cluster index, once per engine on the real one-node cluster.

Creation is whole or nothing: replicas the cluster cannot place are refused at once, naming the
node count (before, ``--replicas 1`` on one node waited 30 s, blamed an overloaded node and left
an empty yellow index that the next run used); an index whose shards do not start is deleted
again. ``hybrid-qpr index drop NAME`` removes a cluster index after asking.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hybrid_qpr.backends.cluster import index_admin as cluster_index_admin
from hybrid_qpr.cli.main import cli
from hybrid_qpr.errors import ClusterError, ConfigError
from hybrid_qpr.types import Document

pytestmark = pytest.mark.cluster

QUESTIONS = str(Path(__file__).resolve().parents[2] / "examples" / "questions.jsonl")

FLAGS = {"opensearch": "--opensearch", "elasticsearch": "--elasticsearch"}
ENGINES = {"opensearch": "OpenSearch", "elasticsearch": "Elasticsearch"}


def one_line_error(result) -> str:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and lines and lines[-1].startswith("Error: "), result.output
    assert "Traceback" not in result.output
    return lines[-1]


def test_replicas_the_cluster_cannot_place_are_refused_at_once_and_nothing_is_created(
        cluster_backend, cluster_engine, committed_encoder, question_bank):
    nodes = cluster_backend.data_nodes()
    start = time.monotonic()
    with pytest.raises(ConfigError, match=f"with {nodes} replica\\(s\\) per shard: a replica is never placed on the "
                                          f"node that holds its primary, so that needs {nodes + 1} data nodes and this "
                                          f"{ENGINES[cluster_engine]} cluster has {nodes}. Nothing was created; use "
                                          f"--replicas {nodes - 1}"):
        cluster_backend.ingest(question_bank[:10], committed_encoder, replicas=nodes, show_progress=False)
    assert time.monotonic() - start < 5
    assert not cluster_backend.exists()


def test_the_help_example_refuses_at_once_then_a_placeable_layout_is_created_green(
        cluster_backend, cluster_engine, cluster_url, committed_encoder):
    from hybrid_qpr.backends.cluster.names import index_path

    index, flag = cluster_backend.index, FLAGS[cluster_engine]
    args = ["ingest", QUESTIONS, "--index", index, flag, cluster_url, "--shards", "3"]
    start = time.monotonic()
    line = one_line_error(CliRunner().invoke(cli, [*args, "--replicas", "1"]))
    assert time.monotonic() - start < 20  # the encoder load included; before, 30 s went in waiting alone
    assert "a replica is never placed on the node that holds its primary" in line and "--timeout" not in line
    assert not cluster_backend.exists()  # no empty yellow index left for the next run to use
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    health = cluster_backend.transport.request("GET", "/_cluster/health" + index_path(index))
    assert health["status"] == "green" and health["active_primary_shards"] == 3
    assert cluster_backend.shards == 3
    again = CliRunner().invoke(cli, [*args, "--replicas", "1"])  # the index exists: its layout stays, and says so
    assert again.exit_code == 0, again.output
    assert f"note: --shards/--replicas apply when an index is created; {index} exists and keeps its layout" \
        in again.output


def test_an_index_whose_shards_never_start_is_deleted_again(cluster_backend, cluster_engine, committed_encoder,
                                                             question_bank, monkeypatch):
    monkeypatch.setattr(cluster_index_admin, "CREATE_WAIT_SECONDS", 2)
    plain_body = type(cluster_backend).index_body

    def unplaceable_body(*args, **kwargs):  # shards that may live only on a node that does not exist
        body = plain_body(*args, **kwargs)
        body["settings"]["index"]["routing"] = {"allocation": {"require": {"_name": "no-such-node"}}}
        return body

    monkeypatch.setattr(cluster_backend, "index_body", unplaceable_body)
    with pytest.raises(ClusterError, match=f"creating index '{cluster_backend.index}': its shards did not start within "
                                           "2 s .*so it was deleted again.*allocation/explain"):
        cluster_backend.ingest(question_bank[:10], committed_encoder, show_progress=False)
    assert not cluster_backend.exists()


def test_an_index_made_by_a_create_request_whose_answer_never_came_is_deleted_again(
        cluster_backend, cluster_engine, cluster_url, committed_encoder, question_bank, monkeypatch):
    import importlib

    from hybrid_qpr.testing.faultproxy import FaultProxy, Faults

    monkeypatch.setattr(cluster_index_admin, "CREATE_WAIT_SECONDS", 1)
    monkeypatch.setattr(cluster_index_admin, "CREATE_ANSWER_MARGIN", 2)
    module = importlib.import_module(f"hybrid_qpr.backends.{cluster_engine}")
    with FaultProxy(cluster_url, Faults(withhold_create=True, hold_seconds=10)) as proxy:
        through = type(cluster_backend)(module.connect(proxy.url), cluster_backend.index)
        with pytest.raises(ClusterError, match=f"creating index '{cluster_backend.index}': "
                                               f"{ENGINES[cluster_engine]} did not answer in time"):
            through.ingest(question_bank[:10], committed_encoder, show_progress=False)
        assert proxy.counts["withheld_creations"] == 1
    assert not cluster_backend.exists()  # it was made (the node applied the request), then deleted


@pytest.fixture()
def filled(cluster_backend, committed_encoder):
    cluster_backend.ingest([Document(f"d{i}", f"how do i reset password {i}?") for i in range(3)], committed_encoder,
                           show_progress=False)
    return cluster_backend


def test_index_drop_asks_first_and_drops_only_the_index_named(filled, cluster_engine, cluster_url, cluster_client,
                                                              committed_encoder):
    from hybrid_qpr.backends.elasticsearch import ElasticsearchBackend
    from hybrid_qpr.backends.opensearch import OpenSearchBackend

    cls = OpenSearchBackend if cluster_engine == "opensearch" else ElasticsearchBackend
    # a neighbour whose name starts like the dropped one: a prefix or pattern must not reach it
    neighbour = cls(cluster_client, f"{filled.index}-neighbour")
    neighbour.ingest([Document("n", "where is my order?")], committed_encoder, show_progress=False)
    name, target = ENGINES[cluster_engine], [FLAGS[cluster_engine], cluster_url]
    try:
        answered_no = CliRunner().invoke(cli, ["index", "drop", filled.index, *target], input="n\n")
        assert answered_no.exit_code == 1 and "Aborted" in answered_no.output
        assert f"Drop {name} index '{filled.index}' and its 3 documents? [y/N]" in answered_no.output
        assert filled.count() == 3
        answered_yes = CliRunner().invoke(cli, ["index", "drop", filled.index, *target], input="y\n")
        assert answered_yes.exit_code == 0, answered_yes.output
        assert answered_yes.output.strip().splitlines()[-1] == f"dropped {name} index '{filled.index}' (3 documents)"
        assert not filled.exists()
        assert neighbour.count() == 1
        again = one_line_error(CliRunner().invoke(cli, ["index", "drop", filled.index, "--yes", *target]))
        assert again == f"Error: {name} has no index '{filled.index}': nothing dropped"
        forced = CliRunner().invoke(cli, ["index", "drop", neighbour.index, "--yes", *target])
        assert forced.exit_code == 0 and "?" not in forced.output  # --yes: no question
        assert not neighbour.exists()
    finally:
        neighbour.drop()


def test_index_drop_without_a_cluster_flag_is_a_usage_error():
    result = CliRunner().invoke(cli, ["index", "drop", "questions", "--yes"])
    assert result.exit_code == 2
    assert "index drop deletes a cluster index: give --opensearch [URL] or --elasticsearch [URL]" in result.output
