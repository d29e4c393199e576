"""Is the deployment up, and is it ours: each HTTP port is checked to be answered by the node
launched there (cluster name, node name and the start's random token in a node attribute), not
by some other server; a start waits for every node to join and for green health."""

from __future__ import annotations

import logging
import time
import urllib.error
from dataclasses import dataclass, field
from typing import NamedTuple

from hybrid_qpr.errors import ClusterError
from hybrid_qpr.localnode import security
from hybrid_qpr.localnode.config import TOKEN_ATTRIBUTE, NodeView
from hybrid_qpr.localnode.layout import Member
from hybrid_qpr.localnode.process import live_pid


logger = logging.getLogger(__name__)


class NodeIdentity(NamedTuple):
    """Who answers an HTTP port: the node's cluster, its name and its token attribute."""

    cluster_name: str
    node_name: str
    token: str | None


@dataclass
class NodeStatus:
    running: bool  # every node alive, answering as the node we started, health known
    url: str
    pid: int | None = None  # the first node's
    health: str | None = None  # green / yellow / red, None when HTTP does not answer
    version: str | None = None
    plugins: list[str] = field(default_factory=list)
    node_dir: str = ""
    engine: str = "opensearch"
    cluster_name: str = ""
    nodes: list[dict] = field(default_factory=list)  # per node: name, url, pid, alive, verified
    problem: str | None = None  # why ``running`` is False although a process is alive
    credentials_file: str | None = None  # the secured node's URL, CA and users (mode 0600)


def read_status(node: NodeView, token: str | None, with_plugins: bool = False) -> NodeStatus:
    """Each member's process and identity (``token``: the one the recorded start drew), then the
    health, version and (``with_plugins``) plugins from the first member that answers as ours."""
    rows, problem = [], None
    access = node.access()
    for member in node.members:
        pid = live_pid(member, node.dist)
        verified = False
        if pid is not None:
            found = identify(member.url, access)
            verified = found == (node.cluster_name, member.name, token)
            if found is not None and not verified and problem is None:
                problem = (f"{member.url} answers as node {found.node_name!r} of cluster {found.cluster_name!r}, not "
                           f"as {member.name!r} of {node.cluster_name!r} started from {node.home}")
        rows.append({"name": member.name, "url": member.url, "pid": pid, "alive": pid is not None,
                     "verified": verified})
    health, version, plugins = None, None, []
    answering = [row for row in rows if row["verified"]]
    if answering:
        url = answering[0]["url"]
        health_body = get_json(url + "/_cluster/health", access)
        health = health_body.get("status") if health_body else None
        info = get_json(url + "/_nodes/_local?filter_path=nodes.*.version", access)
        if info and info.get("nodes"):
            version = next(iter(info["nodes"].values())).get("version")
        if with_plugins:
            plugin_rows = get_json(url + "/_cat/plugins?format=json", access) or []
            plugins = sorted({row["component"] for row in plugin_rows})
    running = len(answering) == len(rows) and health is not None
    return NodeStatus(running=running, url=node.url, pid=rows[0]["pid"], health=health, version=version,
                      plugins=plugins, node_dir=str(node.node_dir), engine=node.engine,
                      cluster_name=node.cluster_name, nodes=rows, problem=problem,
                      credentials_file=str(node.credentials_file) if node.secure else None)


def wait_ready(node: NodeView, launched: list[Member], deadline: float, settle: float = 10.0) -> None:
    """Wait until every node has joined and health is green. Yellow that stays yellow with
    nothing initialising for ``settle`` seconds is accepted with a warning: an index created
    with more replicas than the nodes can hold can never be green, and that must not make
    every later start fail."""
    last, yellow_since, started = "no answer", None, time.monotonic()
    # a JVM still without a pid file is given half the start timeout: on a loaded machine
    # writing it took over 60 s, and a false "exited" fails a start that would succeed
    pid_file_grace = max(60.0, (deadline - started) / 2)
    query = f"/_cluster/health?wait_for_status=green&wait_for_nodes={node.nodes}&timeout=5s"
    while time.monotonic() < deadline:
        # the -d launcher may return before the JVM has written its pid file
        for member in launched:
            if live_pid(member, node.dist) is None and (member.pid_file.exists()
                                                         or time.monotonic() > started + pid_file_grace):
                raise ClusterError(f"{node.dist.label} node {member.name} exited during start-up\n"
                                   f"{node.log_tail(members=[member])}")
        body = get_json(node.url + query, node.access())
        if body is not None:
            last = f"{body.get('status', '?')}, {body.get('number_of_nodes', '?')}/{node.nodes} nodes"
            if body.get("number_of_nodes") == node.nodes:
                if body.get("status") == "green":
                    return
                busy = body.get("initializing_shards", 0) or body.get("delayed_unassigned_shards", 0)
                if body.get("status") == "yellow" and not busy:
                    yellow_since = yellow_since or time.monotonic()
                    if time.monotonic() - yellow_since >= settle:
                        logger.warning("health is yellow: %s replica shard(s) cannot be placed",
                                       body.get("unassigned_shards"))
                        return
                else:
                    yellow_since = None
        time.sleep(1.0)
    alive = [m.name for m in launched if live_pid(m, node.dist) is not None]
    still = (f"; the node is still starting ({', '.join(alive)} alive): '{start_command(node)}' again waits for it, "
             f"and 'hybrid-qpr node status --engine {node.engine}' says when it answers (or raise --timeout)"
             if alive else "")
    raise ClusterError(f"{node.url} did not reach green health with {node.nodes} node(s) within "
                       f"{deadline - started:.0f} s (--timeout; last: {last}){still}\n{node.log_tail()}")


def start_command(node: NodeView) -> str:
    """The ``node start`` command line for this deployment (which waits for a node already starting)."""
    return (f"hybrid-qpr node start --engine {node.engine}" + (f" --nodes {node.nodes}" if node.nodes > 1 else "")
            + (" --secure" if node.secure else ""))


def verify(node: NodeView, token: str) -> None:
    """Each HTTP port must be answered by the node launched there, not by another server."""
    for member in node.members:
        found = identify(member.url, node.access())
        if found != (node.cluster_name, member.name, token):
            raise ClusterError(
                f"{member.url} is not answered by the node just started ({member.name!r} of cluster "
                f"{node.cluster_name!r}) but by {found or 'nothing'}; another server may hold the port\n"
                f"{node.log_tail(members=[member])}"
            )


def identify(url: str, access: security.Access | None = None) -> NodeIdentity | None:
    """Who answers ``url``; None if nothing does.

    ``/_nodes/_local`` rather than ``/``: the Elasticsearch integ-test zip has no ``rest-root``
    module, so its ``GET /`` answers 405."""
    body = get_json(url + "/_nodes/_local?filter_path=cluster_name,nodes.*.name,nodes.*.attributes", access)
    if not body or not body.get("nodes"):
        return None
    node = next(iter(body["nodes"].values()))
    return NodeIdentity(body.get("cluster_name", ""), node.get("name", ""),
                        (node.get("attributes") or {}).get(TOKEN_ATTRIBUTE))


def get_json(url: str, access: security.Access | None = None, timeout: float = 10.0):
    """The decoded answer, or None when there is none or it is an error."""
    try:
        return security.request_json("GET", url, access, timeout=timeout)
    except (urllib.error.URLError, OSError, ValueError, ClusterError):
        return None
