"""The local-node life cycle: checks that need no download, then the live node (marked cluster)."""

from __future__ import annotations

import os
import socket
import stat
import zipfile

import pytest
from click.testing import CliRunner

from hybrid_qpr.cli.main import cli
from hybrid_qpr.localnode import LocalNode, default_home
from hybrid_qpr.localnode.maven import OPENSEARCH_VERSION, check_tools
from hybrid_qpr.localnode.node import _unzip_single_root
from hybrid_qpr.errors import ClusterError, ConfigError


def test_missing_maven_or_java_names_the_apt_command(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ClusterError, match="needs maven and openjdk-17-jdk-headless.*apt-get install -y maven openjdk-17-jdk-headless"):
        check_tools()


def test_home_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HYBRID_QPR_HOME", str(tmp_path / "h"))
    assert default_home() == tmp_path / "h"
    node = LocalNode()
    assert node.node_dir == tmp_path / "h" / f"opensearch-{OPENSEARCH_VERSION}"


def test_heap_size_is_checked(tmp_path):
    with pytest.raises(ConfigError, match="heap='64x'"):
        LocalNode(tmp_path, heap="64x")


def test_nothing_running_in_a_fresh_home(tmp_path):
    node = LocalNode(tmp_path, port=_free_port())
    state = node.status()
    assert not state.running and state.pid is None and state.health is None
    assert node.stop() is False
    result = CliRunner().invoke(cli, ["cluster", "status", "--url", "--home", str(tmp_path)])
    assert result.exit_code == 1 and "no node running" in result.output


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
        with pytest.raises(ClusterError, match=f"port {port} .* already taken .*--port"):
            LocalNode(tmp_path, port=port).start(timeout=5)
    assert not (tmp_path / f"opensearch-{OPENSEARCH_VERSION}").exists()  # nothing fetched or built


def test_unzip_keeps_executable_bits(tmp_path):
    archive = tmp_path / "dist.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        script = zipfile.ZipInfo("opensearch-x/bin/opensearch")
        script.external_attr = (stat.S_IFREG | 0o755) << 16
        zf.writestr(script, "#!/bin/sh\necho hi\n")
        zf.writestr("opensearch-x/config/opensearch.yml", "")
    _unzip_single_root(archive, tmp_path / "node")
    assert os.access(tmp_path / "node" / "bin" / "opensearch", os.X_OK)
    assert (tmp_path / "node" / "config" / "opensearch.yml").is_file()
    with zipfile.ZipFile(tmp_path / "two.zip", "w") as zf:
        zf.writestr("a/x", "")
        zf.writestr("b/y", "")
    with pytest.raises(ClusterError, match="expected one top-level directory"):
        _unzip_single_root(tmp_path / "two.zip", tmp_path / "node2")


@pytest.mark.cluster
def test_live_node_loads_knn_and_neural_search_and_start_is_idempotent(local_node, opensearch_client):
    if local_node is None:
        pytest.skip("the node under test is not the local node of 'hybrid-qpr cluster start'")
    state = local_node.status(with_plugins=True)
    assert state.running and state.version == OPENSEARCH_VERSION and state.health in ("green", "yellow")
    assert {"opensearch-knn", "opensearch-neural-search", "opensearch-ml", "opensearch-job-scheduler"} <= set(state.plugins)
    modules = opensearch_client.nodes.info(metric="plugins")["nodes"].popitem()[1]["modules"]
    assert {"lang-painless", "analysis-common", "transport-netty4"} <= {m["name"] for m in modules}
    timings = local_node.start()
    assert timings["already_running"] is True
    result = CliRunner().invoke(cli, ["cluster", "status", "--url"])
    assert result.exit_code == 0 and result.output.strip() == local_node.url


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
