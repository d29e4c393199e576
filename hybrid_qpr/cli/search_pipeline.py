"""``hybrid-qpr search-pipeline install``: the OpenSearch *search* pipelines of server-side
hybrid queries (not the ml-commons *ingest* pipeline: that is ``mlcommons ingest-pipeline``).
``hybrid-qpr pipeline`` is kept as a hidden alias."""

from __future__ import annotations

import click

from hybrid_qpr.cli._common import FiniteFloatRange, cluster_client, friendly_errors, opensearch_options
from hybrid_qpr.fusion import DEFAULT_ALPHA, FUSION_METHODS, RRF_K


@click.group("search-pipeline")
def search_pipeline() -> None:
    """Manage the OpenSearch search pipelines used by 'query --mode hybrid --server-side'."""


@search_pipeline.command()
@opensearch_options
@click.option("--index", default=None, help="Take alpha and rrf_k from this index's tuned fusion defaults (mapping _meta).")
@click.option("--fusion", "fusions", type=click.Choice(FUSION_METHODS), multiple=True,
              help=f"Pipelines to install (repeatable). [default: all: {', '.join(FUSION_METHODS)}]")
@click.option("--alpha", type=FiniteFloatRange(0, 1), default=None,
              help=f"Weight of the kNN list in minmax/l2/zscore (BM25 gets 1 - alpha). [default: the index's tuned value, else {DEFAULT_ALPHA}]")
@click.option("--rrf-k", type=click.IntRange(min=1), default=None, help=f"RRF rank constant. [default: the index's tuned value, else {RRF_K}]")
@friendly_errors
def install(index, fusions, alpha, rrf_k, **connection) -> None:
    """Install (or overwrite) the hybrid-qpr-<fusion> search pipelines.

    hybrid-qpr-minmax / -l2 / -zscore use neural-search's normalization-processor with
    weights [1 - alpha, alpha] for [BM25, kNN]; hybrid-qpr-rrf uses the score-ranker-processor
    (RRF). A pipeline the cluster rejects is reported and the others are still installed
    (neural-search 2.19 has no z_score technique; it arrived in 3.0). A method no pipeline
    can run (dbsf) is named with one line and fuses client-side only.

    \b
    Example:
      hybrid-qpr search-pipeline install --opensearch http://127.0.0.1:9200 --index questions
    """
    from hybrid_qpr.backends.opensearch import CLIENT_SIDE_ONLY, OpenSearchBackend, install_pipelines

    client = cluster_client(**connection)
    defaults = OpenSearchBackend(client, index).fusion_defaults if index else {}
    alpha = alpha if alpha is not None else float(defaults.get("alpha", DEFAULT_ALPHA))
    rrf_k = rrf_k if rrf_k is not None else int(defaults.get("rrf_k", RRF_K))
    outcome = install_pipelines(client, fusions or FUSION_METHODS, alpha=alpha, rrf_k=rrf_k)
    for name, result in outcome.items():
        click.echo(f"{name}: {result}")
    click.echo(f"(alpha={alpha} for the kNN side, rrf_k={rrf_k})")
    if fusions and not any(result == "installed" for result in outcome.values()):
        if all(f in CLIENT_SIDE_ONLY for f in fusions):
            raise click.ClickException(f"{', '.join(fusions)}: client-side only, there is no search pipeline to install")
        raise click.ClickException("no pipeline could be installed")
    if not any(result == "installed" for result in outcome.values()):
        raise click.ClickException("no pipeline could be installed")
