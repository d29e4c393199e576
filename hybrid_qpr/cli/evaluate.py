"""``hybrid-qpr evaluate``: quality and latency of the search modes on a BEIR eval set, runs of
other systems scored beside them, paired significance tests, exported runs and a history."""

from __future__ import annotations

from pathlib import Path

import click

from hybrid_qpr.cli._common import cluster_options, FiniteFloatRange, friendly_errors, SEED
from hybrid_qpr.cli._backend import model_option, reranker_options
from hybrid_qpr.cli._tasks import task_options
from hybrid_qpr.evaluation.significance import RESAMPLES, SEED as DEFAULT_SEED
from hybrid_qpr.fusion import DEFAULT_ALPHA, DEFAULT_FUSION, FUSION_METHODS
from hybrid_qpr.search import ACCEPTED_MODES, MODES
from hybrid_qpr.data.beir import EVAL_SPLITS


@click.command()
@click.option("--beir", "beir_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="BEIR directory (corpus.jsonl, queries.jsonl, qrels/<split>.tsv). Needed with --index.")
@click.option("--split", type=click.Choice(EVAL_SPLITS), default="test", show_default=True, help="Queries to evaluate.")
@click.option("--qrels", "qrels_file", type=click.Path(exists=True), default=None,
              help="Judgments to use instead of --beir's qrels/<split>.tsv: TREC qrels, a Quepid ratings CSV (.csv) "
                   "or a BEIR directory.")
@click.option("--index", default=None,
              help="Index holding the BEIR corpus (local directory, or a cluster index with --opensearch/--elasticsearch). "
                   "Without it only the --run files are scored.")
@click.option("--modes", default=",".join(MODES), show_default=True, help="Comma-separated modes to compare.")
@click.option("--run", "run_files", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="A TREC run file (query-id Q0 doc-id rank score tag) made by any system, scored and tested beside "
                   "the modes; named after the file without its suffix (FOLDER/NAME when that name is taken). Repeatable.")
@click.option("--baseline", default=None,
              help="The run every other is tested against. [default: the first mode, else the first --run]")
@click.option("--metric", default=None, help="Metric of the paired tests. [default: the task's main metric, MRR@20 for paraphrase]")
@click.option("--resamples", type=click.IntRange(100, 1_000_000), default=RESAMPLES, show_default=True,
              help="Sign assignments drawn by the randomization test (all of them when 2^queries is fewer).")
@click.option("--seed", type=SEED, default=DEFAULT_SEED, show_default=True, help="Seed of the randomization test and of --max-queries.")
@click.option("--max-queries", type=click.IntRange(min=1), default=None, help="Evaluate a seeded sample of this many judged queries. [default: all]")
@click.option("--fusion", type=click.Choice(FUSION_METHODS), default=None,
              help=f"Hybrid fusion. [default: the index's tuned value, else {DEFAULT_FUSION}]")
@click.option("--alpha", type=FiniteFloatRange(0, 1), default=None, help=f"Weight of kNN in hybrid. [default: tuned value, else {DEFAULT_ALPHA}]")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="eval-report", show_default=True,
              help="Directory for report.md, report.json, report.png and comparison.md/json.")
@click.option("--no-plot", is_flag=True, help="Skip report.png (no matplotlib needed).")
@click.option("--export-runs", "export_dir", type=click.Path(file_okay=False), default=None,
              help="Also write each mode's run as DIR/<mode>.run (TREC run format, as scored: own id dropped, cut at the "
                   "task's depth), for trec_eval or another tool.")
@click.option("--history", "history_dir", type=click.Path(file_okay=False), default=None,
              help="Append this evaluation (metrics, per-query scores, model, index and fusion) to the history in DIR; "
                   "'hybrid-qpr history DIR' shows the trend and flags significant drops.")
@task_options
@model_option
@reranker_options
@cluster_options(selects_backend=True)
@friendly_errors
def evaluate(beir_dir, split, qrels_file, index, modes, run_files, baseline, metric, resamples, seed, max_queries, fusion,
             alpha, out_dir, no_plot, export_dir, history_dir, task, filter_field, model, reranker_dir, reranker_depth,
             **connection) -> None:
    """H@1, H@10, MRR@20, Recall@10/20, nDCG@10, MAP and p50/p95/p99 latency and queries/s
    for each mode. Each query retrieves 20 results and its own id is dropped (the SDML
    paper's protocol).

    \b
    With two runs or more (modes and --run files) each is tested against --baseline per query:
    a paired randomization test (seeded) and a paired t-test, Holm-corrected over the
    comparisons, with each run's wins, losses and ties and its worst losses first
    (comparison.md, comparison.json; docs/evaluation.md explains every number).

    \b
    --task answer-selection ranks each question's own candidates (a per-query filter on
    --filter-field, default 'group') and reports MAP and MRR; --task answer-retrieval ranks
    the whole corpus and reports MRR, R@1, R@5 and MAP (hybrid_qpr.evaluation.tasks).
    --task community-qa (SemEval-2016 Task 3 subtask B) ranks each question's own related posts
    (the 'group' filter), reports the task's MAP, MRR and AvgRec over all questions (one with no
    relevant post counts 0), and scores the corpus's 'ir_rank' order beside the modes as the
    baseline run every mode is tested against.

    \b
    Examples:
      hybrid-qpr evaluate --beir data/quora/beir --split test --index ./quora-idx --out reports/quora
      hybrid-qpr evaluate --beir data/quora/beir --index ./quora-idx --modes bm25,hybrid --history reports/history
      hybrid-qpr evaluate --qrels judged.qrels --run mine.run --run theirs.run --baseline theirs
      hybrid-qpr evaluate --beir data/wikiqa/beir --split val --index ./wikiqa-idx --task answer-selection
      hybrid-qpr evaluate --beir data/semeval/beir --split val --index ./semeval-idx --task community-qa
    """
    from hybrid_qpr.evaluation.evaluator import sample_queries
    from hybrid_qpr.evaluation.qrels_io import read_judgments, read_trec_run
    from hybrid_qpr.evaluation.tasks import get_task

    spec = get_task(task)
    if index is not None and beir_dir is None:
        raise click.UsageError("--index needs --beir: the query texts come from its queries.jsonl")
    if beir_dir is None and qrels_file is None:
        raise click.UsageError("give --beir DIR (queries and judgments) or --qrels FILE (judgments) to score runs against")
    if index is None and not run_files:
        raise click.UsageError("nothing to evaluate: give --index (the modes are searched) and/or --run FILE")
    queries, qrels = _judgments(beir_dir, split, qrels_file, read_judgments)
    sample = sample_queries(queries, qrels, max_queries, seed=seed, unanswerable=spec.unanswerable)
    if not sample:
        raise click.UsageError("no judged query (with a relevant document) to evaluate")
    runs: dict[str, dict[str, list[str]]] = {}
    order_run = _order_baseline(beir_dir, spec, filter_field, list(sample))
    if order_run is not None:  # the set's own baseline (the forum's order) first, every run tested against it
        runs[spec.order_field] = order_run
        baseline = baseline or spec.order_field
    results: dict = {}
    context: dict = {"split": split, "task": task, "queries": len(sample),
                     **({"beir": str(beir_dir)} if beir_dir else {}), **({"qrels": str(qrels_file)} if qrels_file else {})}
    if index is not None:
        results, searcher_context = _search_modes(beir_dir, index, modes, sample, qrels, task, filter_field, fusion,
                                                  alpha, model, reranker_dir, reranker_depth, connection, runs,
                                                  order_run)
        context.update(searcher_context)
        from hybrid_qpr.evaluation.report import markdown_table, plot_unavailable, write_report

        click.echo(markdown_table(results))  # first: the table is the answer, whatever the files do
        paths = write_report(results, out_dir, title=f"hybrid-qpr evaluation ({split})", context=context, plot=not no_plot)
        click.echo("wrote " + ", ".join(str(p) for p in paths.values()))
        if not no_plot and "png" not in paths:
            click.echo(f"skipped report.png: {plot_unavailable()} (--no-plot skips it quietly)", err=True)
    for path in run_files:
        name = Path(path).name.split(".")[0]
        if name in runs:  # e.g. two exported hybrid.run: told apart by their folders
            name = f"{Path(path).resolve().parent.name}/{name}"
        if name in runs:
            raise click.BadParameter(f"{path}: its name {name!r} is taken by a mode or another run; rename the file",
                                     param_hint="--run")
        made = read_trec_run(path)
        missing = sum(1 for q in sample if q not in made)
        if missing:
            click.echo(f"{path}: {missing} of {len(sample)} judged queries have no results there; they score 0", err=True)
        runs[name] = {q: made.get(q, []) for q in sample}
    if run_files:
        context["runs"] = [str(p) for p in run_files]
    if export_dir:
        _export_runs(export_dir, {name: runs[name] for name in results}, spec)
    _compare(runs, qrels, spec, baseline, metric, resamples, seed, out_dir, context)
    if history_dir:
        from hybrid_qpr.evaluation import history

        number = history.append(history_dir, context, {name: spec.score(run, qrels) for name, run in runs.items()},
                                {name: {m: spec.per_query(run, qrels, m) for m in spec.metric_names}
                                 for name, run in runs.items()})
        click.echo(f"history: evaluation #{number} added to {history_dir} (see: hybrid-qpr history {history_dir})")


def _judgments(beir_dir, split, qrels_file, read_judgments):
    """``(query id -> text, qrels)`` from --beir and/or --qrels."""
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.evaluation.qrels_io import read_beir_queries

    texts = read_beir_queries(beir_dir) if beir_dir else {}
    if qrels_file:
        qrels, texts = read_judgments(qrels_file, split=split, queries=texts)
    else:
        _, texts, qrels = load_beir(beir_dir, split)
    return {q: texts.get(q, q) for q in qrels}, qrels


def _order_baseline(beir_dir, spec, filter_field, query_ids):
    """The task's order-field baseline run (community QA: ``ir_rank`` within each query's group),
    or None (no such task, no --beir, or a corpus without the field)."""
    if spec.order_field is None or beir_dir is None:
        return None
    from hybrid_qpr.evaluation.baselines import field_order_run

    return field_order_run(beir_dir, query_ids, filter_field or spec.default_filter_field, spec.order_field)


def _search_modes(beir_dir, index, modes, sample, qrels, task, filter_field, fusion, alpha, model, reranker_dir,
                  reranker_depth, connection, runs, complete_with=None):
    """Evaluate the --modes on the index; fills ``runs``; returns the results and their context.
    ``complete_with``: each query's candidates in the order that completes a shorter list."""
    from hybrid_qpr.cli._backend import load_encoder, load_reranker, open_backend
    from hybrid_qpr.evaluation.evaluator import evaluate as run_evaluate
    from hybrid_qpr.evaluation.tasks import task_query_filters
    from hybrid_qpr.search import HybridSearcher

    wanted = [m.strip() for m in modes.split(",") if m.strip()]
    bad = [m for m in wanted if m not in ACCEPTED_MODES]
    if bad or not wanted:
        raise click.BadParameter(f"{', '.join(bad) or modes!r}: allowed modes are {', '.join(MODES)}", param_hint="--modes")
    backend = open_backend(index, connection)
    reranker, reranker_depth = load_reranker(reranker_dir, reranker_depth, backend)
    searcher = HybridSearcher(backend, load_encoder(model, backend), reranker=reranker, reranker_depth=reranker_depth)
    results = run_evaluate(searcher, sample, qrels, modes=wanted, fusion=fusion, alpha=alpha, task=task,
                           query_filters=task_query_filters(beir_dir, task, filter_field, list(sample)),
                           show_progress=True, runs=runs, complete_with=complete_with)
    used_fusion, used_alpha = searcher.fusion_settings(fusion, alpha)
    context = {"index": str(index), "documents": backend.count(), "model": searcher.encoder.fingerprint,
               "fusion": used_fusion, "alpha": used_alpha, "fusion_defaults": backend.fusion_defaults,
               **({"reranker": reranker.fingerprint, "reranker_depth": reranker_depth} if reranker else {})}
    return results, context


def _export_runs(export_dir, runs, spec) -> None:
    from hybrid_qpr.evaluation.metrics import drop_self
    from hybrid_qpr.evaluation.qrels_io import write_trec_run

    for name, run in runs.items():
        scored = drop_self(run) if spec.drop_self else run
        path = Path(export_dir) / f"{name.replace('+', '-')}.run"
        lines = write_trec_run(path, {q: ranked[:spec.retrieve] for q, ranked in scored.items()}, tag=name.replace("+", "-"))
        click.echo(f"wrote {path} ({lines} lines)")


def _compare(runs, qrels, spec, baseline, metric, resamples, seed, out_dir, context) -> None:
    """The metrics of every run and, with two or more, the paired tests: printed and written as
    comparison.md and comparison.json in ``out_dir``."""
    import json

    from hybrid_qpr.artifacts import atomic_write
    from hybrid_qpr.evaluation.significance import compare_runs, markdown

    if metric is not None and metric not in spec.metric_names:
        raise click.BadParameter(f"{metric!r}: the {spec.name} task reports {', '.join(spec.metric_names)}",
                                 param_hint="--metric")
    if baseline is not None and baseline not in runs:
        raise click.BadParameter(f"{baseline!r} is not one of the runs ({', '.join(runs)})", param_hint="--baseline")
    names = spec.metric_names
    table = ["| run | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    scores = {name: spec.score(run, qrels) for name, run in runs.items()}
    table += [f"| {name} | " + " | ".join(f"{values[m]:.4f}" for m in names) + " |" for name, values in scores.items()]
    comparisons = compare_runs(runs, qrels, task=spec.name, baseline=baseline, metric=metric, resamples=resamples,
                               seed=seed) if len(runs) >= 2 else []
    body = "\n".join(table) + "\n\n" + markdown(comparisons)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_write(out / "comparison.json") as fh:
        json.dump({"context": context, "metrics": scores, "resamples": resamples, "seed": seed,
                   "comparisons": [c.to_dict() for c in comparisons]}, fh, indent=2, ensure_ascii=False)
    with atomic_write(out / "comparison.md") as fh:
        fh.write("# Runs compared\n\n" + body)
    if comparisons or "runs" in context:
        click.echo("\n" + body.rstrip())
    click.echo(f"wrote {out / 'comparison.md'}, {out / 'comparison.json'}")
