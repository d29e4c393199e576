"""``hybrid-qpr serve``: the relevance workbench (``hybrid_qpr.workbench``) over one index."""

from __future__ import annotations

from pathlib import Path

import click

from hybrid_qpr.cli._common import chosen_engine, cluster_options, friendly_errors
from hybrid_qpr.cli._backend import knn_search_options, model_option, reranker_options

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def default_judgments_dir(index: str, engine: str | None) -> Path:
    """Beside a local index (``INDEX/judgments``); for a cluster index, ``./judgments-ENGINE-INDEX``."""
    return Path(index) / "judgments" if engine is None else Path(f"judgments-{engine}-{index}")


@click.command()
@click.option("--index", required=True, help="Local index directory, or the cluster index name with --opensearch/--elasticsearch.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback lets other machines search and write judgments.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port to listen on.")
@click.option("--server-api-key", envvar="HYBRID_QPR_SERVE_API_KEY", default=None,
              help="Require this key (header X-API-Key) on every /api/ request [env HYBRID_QPR_SERVE_API_KEY]. "
                   "(--api-key is the cluster's key.)")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="Also answer requests whose Host header names NAME (repeatable), e.g. the machine's DNS name "
                   "behind --host 0.0.0.0. Loopback names and the --host address are always accepted (with --host "
                   "0.0.0.0 or ::, any IP address too); any other name is refused (421), which stops DNS-rebinding "
                   "pages.")
@click.option("--allow-index-writes", is_flag=True, default=False,
              help="Let 'tune' on the page store its winning fusion in the index, as 'hybrid-qpr tune' does. "
                   "Off by default: tune then reports its result and stores nothing (judgments are always stored).")
@click.option("--judgments", "judgments_dir", type=click.Path(file_okay=False), default=None,
              help="Judgments store (a BEIR eval set). [default: INDEX/judgments for a local index, "
                   "./judgments-ENGINE-INDEX for a cluster index]")
@click.option("--min-tune-queries", type=click.IntRange(min=1), default=5, show_default=True,
              help="Judged queries (with a relevant hit) needed before the page may tune.")
@knn_search_options("for this server (overrides the value stored in the index)")
@model_option
@reranker_options
@cluster_options(selects_backend=True)
@friendly_errors
def serve(index, host, port, server_api_key, allowed_hosts, allow_index_writes, judgments_dir, min_tune_queries,
          ef_search, nprobe, model, reranker_dir, reranker_depth, **connection) -> None:
    """Serve the relevance workbench: a page at http://HOST:PORT/ showing bm25, knn, hybrid and
    rescore side by side, with relevance buttons on every hit and a 'tune on my judgments'
    button, and its JSON API under /api/ (described at /api/openapi.json).

    Other web pages cannot use it through your browser: only Host names it knows are answered,
    and a write must be same-origin JSON carrying the run's token (GET /api/session).

    \b
    Examples:
      hybrid-qpr serve --index ./qidx
      hybrid-qpr serve --index ./qidx --allow-index-writes     # tune may store its winner
      hybrid-qpr serve --index ./qidx --host 0.0.0.0 --allowed-host wb.example.org --server-api-key "$KEY"
      hybrid-qpr serve --index questions --opensearch http://127.0.0.1:9200 --port 8080
      hybrid-qpr serve --index ./qidx --reranker onnx/reranker-minilm-l6-int8
    """
    from hybrid_qpr.errors import require_all

    _, uvicorn = require_all(("starlette", "uvicorn"), feature="'hybrid-qpr serve'")
    from hybrid_qpr.backends.base import takes_knn_settings
    from hybrid_qpr.cli._backend import load_encoder, load_reranker, open_backend, refuse_knn_options_on_a_cluster
    from hybrid_qpr.search import HybridSearcher
    from hybrid_qpr.workbench.app import create_app
    from hybrid_qpr.workbench.judgments import JudgmentStore
    from hybrid_qpr.workbench.service import Limits, Workbench

    refuse_knn_options_on_a_cluster(connection, ef_search, nprobe)
    engine = chosen_engine(connection)
    backend = open_backend(index, connection)
    if backend.count() == 0:
        raise click.ClickException(backend.empty_reason())
    if (ef_search or nprobe) and takes_knn_settings(backend):  # a cluster index was refused above
        backend.set_search_settings(nprobe=nprobe, ef_search=ef_search)
    reranker, reranker_depth = load_reranker(reranker_dir, reranker_depth, backend)
    searcher = HybridSearcher(backend, load_encoder(model, backend), reranker=reranker, reranker_depth=reranker_depth)
    store = JudgmentStore(judgments_dir or default_judgments_dir(index, engine))
    workbench = Workbench(searcher, store, index=index, backend=engine or "local",
                          limits=Limits(min_tune_queries=min_tune_queries), index_writes=allow_index_writes)
    workbench.warm_up()
    if host not in LOOPBACK:
        click.secho(f"warning: listening on {host}, not loopback: anyone who can reach this machine can search "
                    f"index {index} and write judgments" + ("" if server_api_key else "; set --server-api-key"),
                    fg="yellow", err=True)
    click.echo(f"workbench for {index} ({engine or 'local'}, {backend.count():,} documents) at "
               f"http://{host if ':' not in host else f'[{host}]'}:{port}/  judgments: {store.directory}  "
               f"index writes: {'on' if allow_index_writes else 'off (--allow-index-writes)'}", err=True)
    app = create_app(workbench, api_key=server_api_key, bound_host=host, allowed_hosts=allowed_hosts)
    uvicorn.run(app, host=host, port=port, log_level="warning")
