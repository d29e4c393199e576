"""``hybrid-qpr evaluate``: quality and latency of the search modes on a BEIR eval set."""

from __future__ import annotations

import click

from hybrid_qpr.cli._common import cluster_options, friendly_errors
from hybrid_qpr.cli._backend import model_option, reranker_options
from hybrid_qpr.cli._tasks import task_options
from hybrid_qpr.fusion import DEFAULT_ALPHA, DEFAULT_FUSION, FUSION_METHODS
from hybrid_qpr.search import ACCEPTED_MODES, MODES


@click.command()
@click.option("--beir", "beir_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="BEIR directory (corpus.jsonl, queries.jsonl, qrels/<split>.tsv).")
@click.option("--split", type=click.Choice(["val", "test"]), default="test", show_default=True, help="Queries to evaluate.")
@click.option("--index", required=True, help="Index holding the BEIR corpus (local directory, or a cluster index with --opensearch/--elasticsearch).")
@click.option("--modes", default=",".join(MODES), show_default=True, help="Comma-separated modes to compare.")
@click.option("--max-queries", type=click.IntRange(min=1), default=None, help="Evaluate a seeded sample of this many judged queries. [default: all]")
@click.option("--fusion", type=click.Choice(FUSION_METHODS), default=None,
              help=f"Hybrid fusion. [default: the index's tuned value, else {DEFAULT_FUSION}]")
@click.option("--alpha", type=click.FloatRange(0, 1), default=None, help=f"Weight of kNN in hybrid. [default: tuned value, else {DEFAULT_ALPHA}]")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="eval-report", show_default=True,
              help="Directory for report.md, report.json and report.png.")
@click.option("--no-plot", is_flag=True, help="Skip report.png (no matplotlib needed).")
@task_options
@model_option
@reranker_options
@cluster_options(selects_backend=True)
@friendly_errors
def evaluate(beir_dir, split, index, modes, max_queries, fusion, alpha, out_dir, no_plot, task, filter_field, model,
             reranker_dir, reranker_depth, **connection) -> None:
    """H@1, H@10, MRR@20, Recall@10/20, nDCG@10, MAP and p50/p95/p99 latency and queries/s
    for each mode. Each query retrieves 20 results and its own id is dropped (the SDML
    paper's protocol).

    \b
    --task answer-selection ranks each question's own candidates (a per-query filter on
    --filter-field, default 'group') and reports MAP and MRR; --task answer-retrieval ranks
    the whole corpus and reports MRR, R@1, R@5 and MAP (hybrid_qpr.evaluation.tasks).

    \b
    Examples:
      hybrid-qpr evaluate --beir data/quora/beir --split test --index ./quora-idx --out reports/quora
      hybrid-qpr evaluate --beir data/wikiqa/beir --split val --index ./wikiqa-idx --task answer-selection
    """
    from hybrid_qpr.cli._backend import load_encoder, load_reranker, open_backend
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.evaluation.evaluator import evaluate as run_evaluate, sample_queries
    from hybrid_qpr.evaluation.report import markdown_table, write_report
    from hybrid_qpr.search import HybridSearcher

    wanted = [m.strip() for m in modes.split(",") if m.strip()]
    bad = [m for m in wanted if m not in ACCEPTED_MODES]
    if bad or not wanted:
        raise click.BadParameter(f"{', '.join(bad) or modes!r}: allowed modes are {', '.join(MODES)}", param_hint="--modes")
    from hybrid_qpr.evaluation.tasks import task_query_filters

    _, queries, qrels = load_beir(beir_dir, split)
    backend = open_backend(index, connection)
    reranker, reranker_depth = load_reranker(reranker_dir, reranker_depth, backend)
    searcher = HybridSearcher(backend, load_encoder(model, backend), reranker=reranker, reranker_depth=reranker_depth)
    sample = sample_queries(queries, qrels, max_queries)
    results = run_evaluate(searcher, sample, qrels, modes=wanted, fusion=fusion, alpha=alpha, task=task,
                           query_filters=task_query_filters(beir_dir, task, filter_field, list(sample)), show_progress=True)
    context = {"beir": str(beir_dir), "split": split, "task": task, "index": str(index), "queries": len(sample),
               "documents": backend.count(), "model": searcher.encoder.fingerprint,
               **({"reranker": reranker.fingerprint, "reranker_depth": reranker_depth} if reranker else {})}
    paths = write_report(results, out_dir, title=f"hybrid-qpr evaluation ({split})", context=context, plot=not no_plot)
    click.echo(markdown_table(results))
    click.echo("wrote " + ", ".join(str(p) for p in paths.values()))
