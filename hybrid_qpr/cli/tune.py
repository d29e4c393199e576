"""``hybrid-qpr tune``: choose fusion method and alpha on validation queries; store them in the index."""

from __future__ import annotations

import click

from hybrid_qpr.cli._common import cluster_options, friendly_errors
from hybrid_qpr.cli._backend import model_option
from hybrid_qpr.cli._tasks import task_options
from hybrid_qpr.fusion import DEFAULT_DEPTH


@click.command()
@click.option("--beir", "beir_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="BEIR directory (corpus.jsonl, queries.jsonl, qrels/<split>.tsv), e.g. <dataset>/beir from 'hybrid-qpr dataset build'.")
@click.option("--split", type=click.Choice(["val", "test"]), default="val", show_default=True, help="Queries to tune on (tune on val, report on test).")
@click.option("--index", required=True, help="Index holding the BEIR corpus (local directory, or a cluster index with --opensearch/--elasticsearch).")
@click.option("--max-queries", type=click.IntRange(min=1), default=None, help="Tune on a seeded sample of this many judged queries. [default: all]")
@click.option("--depth", type=click.IntRange(min=1), default=None, help="Candidates per list before fusion (stored with the tuned fusion). "
              f"[default: {DEFAULT_DEPTH}, or the task's retrieve depth where larger (answer selection: 100)]")
@click.option("--dry-run", is_flag=True, help="Print the result without storing it as the index default.")
@task_options
@model_option
@cluster_options(selects_backend=True)
@friendly_errors
def tune(beir_dir, split, index, max_queries, depth, dry_run, task, filter_field, model, **connection) -> None:
    """Grid-search fusion (rrf, minmax, zscore, l2) x alpha (0, 0.1, ..., 1) for the best
    MRR@20 (retrieve 20, drop the query's own id) and store the winner as the index's
    default for 'query --mode hybrid'. The grid contains the pure BM25 and pure kNN
    rankings, so the tuned hybrid is never worse than the better single mode on these queries.

    \b
    Example:
      hybrid-qpr ingest data/quora/beir/corpus.jsonl --index ./quora-idx
      hybrid-qpr tune --beir data/quora/beir --split val --index ./quora-idx
    """
    from hybrid_qpr.cli._backend import load_encoder, open_backend
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.evaluation.evaluator import sample_queries, tune as run_tune
    from hybrid_qpr.search import HybridSearcher

    from hybrid_qpr.evaluation.tasks import task_query_filters

    from hybrid_qpr.evaluation.tasks import get_task

    retrieve = get_task(task).retrieve
    if depth is not None and depth < retrieve:
        raise click.BadParameter(f"{depth} is fewer than the {retrieve} results each {task} query retrieves; "
                                 f"fusion must see them all: give {retrieve} or more", param_hint="--depth")
    _, queries, qrels = load_beir(beir_dir, split)
    backend = open_backend(index, connection)
    searcher = HybridSearcher(backend, load_encoder(model, backend))
    sample = sample_queries(queries, qrels, max_queries)
    result = run_tune(searcher, sample, qrels, depth=depth, task=task,
                      query_filters=task_query_filters(beir_dir, task, filter_field, list(sample)), show_progress=True)
    metric = result.metric
    best_grid = sorted(result.grid, key=lambda g: -g[metric])[:5]
    click.echo(f"{metric} on {result.queries} {split} queries: bm25 {result.bm25_mrr:.4f}, knn {result.knn_mrr:.4f}")
    for g in best_grid:
        below = "" if g["allowed"] else "  (not chosen: another metric is below the better single mode)"
        click.echo(f"  {g['fusion']:<7} alpha={g['alpha']:.1f}  {metric} {g[metric]:.4f}{below}")
    click.echo(f"best: fusion={result.fusion} alpha={result.alpha:.1f} {metric} {result.mrr:.4f} "
               f"({result.mrr - max(result.bm25_mrr, result.knn_mrr):+.4f} vs the better single mode)")
    if not dry_run:
        backend.set_fusion_defaults(result.defaults)
        click.echo(f"stored as the default fusion of {index}")
