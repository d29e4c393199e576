"""``hybrid-qpr cluster start|stop|status``: the local OpenSearch node from Maven Central."""

from __future__ import annotations

import json

import click

from hybrid_qpr.cli._common import friendly_errors

_HOME_HELP = "Where artifacts and the node live. [default: $HYBRID_QPR_HOME, else /var/cache/hybrid-qpr/opensearch as root, else ~/.cache/hybrid-qpr/opensearch]"


@click.group()
def cluster() -> None:
    """Start, stop or check a single-node OpenSearch 2.19 on 127.0.0.1.

    The node is built from Maven Central only (server integ-test zip, the lang-painless and
    analysis-common modules, and the job-scheduler, ml-commons, k-NN and neural-search
    plugins) with 'mvn', so it needs Java >= 17 and Maven but no Docker. The first start
    downloads ~450 MB and takes a few minutes; later starts reuse the cache.

    \b
    Example:
      hybrid-qpr cluster start            # idempotent: a running node is left alone
      export HYBRID_QPR_OPENSEARCH_URL=$(hybrid-qpr cluster status --url)
      hybrid-qpr cluster stop
    """


@cluster.command()
@click.option("--home", type=click.Path(file_okay=False), default=None, help=_HOME_HELP)
@click.option("--port", type=int, default=9200, show_default=True, help="HTTP port on 127.0.0.1.")
@click.option("--heap", default="1g", show_default=True, help="JVM heap (-Xms and -Xmx), e.g. 1g or 512m.")
@click.option("--timeout", type=float, default=240.0, show_default=True, help="Seconds to wait for green health.")
@friendly_errors
def start(home: str | None, port: int, heap: str, timeout: float) -> None:
    """Install (first time) and start the node, then wait for green health.

    On failure the error shows the tail of the node's log. As root, the node runs as the
    system user 'hybridqpr' (created if missing) because OpenSearch refuses root.
    """
    from hybrid_qpr.localnode import LocalNode

    node = LocalNode(home, port=port, heap=heap, say=lambda message: click.echo(f"[cluster] {message}", err=True))
    timings = node.start(timeout=timeout)
    if timings["already_running"]:
        click.echo(f"OpenSearch already running at {node.url} (pid {node.status().pid})")
        return
    kind = "cold start (fetch + install + boot)" if timings["install_s"] > 1 else "warm start"
    click.echo(f"OpenSearch {node.version} running at {node.url}: {kind} took "
               f"{timings['install_s'] + timings['start_s']:.1f} s "
               f"(install {timings['install_s']:.1f} s, boot to green {timings['start_s']:.1f} s)")


@cluster.command()
@click.option("--home", type=click.Path(file_okay=False), default=None, help=_HOME_HELP)
@click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds before SIGKILL.")
@friendly_errors
def stop(home: str | None, timeout: float) -> None:
    """Stop the node started by 'cluster start' (only that process, found by its pid file)."""
    from hybrid_qpr.localnode import LocalNode

    node = LocalNode(home)
    click.echo("stopped" if node.stop(timeout=timeout) else "no node running")


@cluster.command()
@click.option("--home", type=click.Path(file_okay=False), default=None, help=_HOME_HELP)
@click.option("--url", "url_only", is_flag=True, help="Print only the URL (exit 1 if the node is not running).")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@friendly_errors
def status(home: str | None, url_only: bool, as_json: bool) -> None:
    """Show whether the node runs, its health, version and plugins.

    \b
    Example:
      export HYBRID_QPR_OPENSEARCH_URL=$(hybrid-qpr cluster status --url)
    """
    from dataclasses import asdict

    from hybrid_qpr.localnode import LocalNode

    node = LocalNode(home)
    state = node.status(with_plugins=not url_only)
    if url_only:
        if not state.running:
            raise click.ClickException(f"no node running at {state.url}; start it with 'hybrid-qpr cluster start'")
        click.echo(state.url)
    elif as_json:
        click.echo(json.dumps(asdict(state), indent=2))
    elif state.running:
        click.echo(f"running at {state.url} (pid {state.pid}), health {state.health}, OpenSearch {state.version}")
        click.echo("plugins: " + (", ".join(state.plugins) or "none"))
    else:
        click.echo(f"not running (node directory {state.node_dir})")
