"""A node whose JVM is alive but does not answer yet (a first start on a slow machine): 'node
status' says it is starting and how to wait for it, and 'node start' waits for it instead of
failing, its timeout counted from then. The JVM is played by a process whose command line names
the engine's main class, on a port where nothing answers; no engine is started."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from hybrid_qpr.cli.main import cli
from hybrid_qpr.localnode import LocalNode


@pytest.fixture()
def starting_node(tmp_path):
    """A home recording a start of OpenSearch on a free port, and a live 'JVM' in its pid file."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    node = LocalNode(tmp_path, port=port)
    member = node.members[0]
    member.pid_file.parent.mkdir(parents=True)
    # what a start writes before it launches the JVM
    node.state_file.write_text(json.dumps({"version": node.version, "port": port, "nodes": 1, "token": "t",
                                           "cluster_name": node.cluster_name}))
    jvm = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", node.dist.main_class])
    member.pid_file.write_text(str(jvm.pid))
    try:
        yield tmp_path, node, jvm.pid
    finally:
        jvm.kill()
        jvm.wait()


def test_status_says_a_booting_node_is_starting_and_how_to_wait(starting_node):
    home, node, pid = starting_node
    for args in ([], ["--url"]):
        result = CliRunner().invoke(cli, ["node", "status", "--home", str(home), *args])
        assert "is starting, not answering yet" in result.output and f"pid {pid}" in result.output, result.output
        assert "'hybrid-qpr node start --engine opensearch' waits for it" in result.output
        assert "not running" not in result.output  # the old, contradicting 'not running ... alive'
    assert CliRunner().invoke(cli, ["node", "status", "--home", str(home), "--url"]).exit_code == 1


def test_start_waits_for_a_node_that_is_starting_and_says_it_still_is(starting_node):
    home, node, pid = starting_node
    began = time.monotonic()
    result = CliRunner().invoke(cli, ["node", "start", "--home", str(home), "--timeout", "2"])
    took = time.monotonic() - began
    assert result.exit_code == 1 and 2 <= took < 30, (took, result.output)
    assert "is still starting (hybrid-qpr-1 alive); waiting for green health" in result.output  # not "stop it first"
    error = next(line for line in result.output.splitlines() if line.startswith("Error: "))
    assert "did not reach green health with 1 node(s) within 2 s" in error, error
    assert "the node is still starting (hybrid-qpr-1 alive): 'hybrid-qpr node start --engine opensearch' again " \
           "waits for it" in error, error
