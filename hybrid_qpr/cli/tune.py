"""``hybrid-qpr tune``: choose fusion method and alpha on validation queries; store them in the index."""

from __future__ import annotations

import click

from hybrid_qpr.cli._common import cluster_options, friendly_errors
from hybrid_qpr.cli._backend import model_option, reranker_options
from hybrid_qpr.cli._tasks import task_options
from hybrid_qpr.cli._fusion import read_bound_grid, read_fusion_extras, signal_options
from hybrid_qpr.evaluation.evaluator import RERANKER_DEPTHS
from hybrid_qpr.fusion import DEFAULT_DEPTH, FUSION_METHODS
from hybrid_qpr.signals import SIGNAL_WEIGHTS
from hybrid_qpr.data.beir import EVAL_SPLITS


@click.command()
@click.option("--beir", "beir_dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="BEIR directory (corpus.jsonl, queries.jsonl, qrels/<split>.tsv), e.g. <dataset>/beir from 'hybrid-qpr dataset build'.")
@click.option("--split", type=click.Choice(EVAL_SPLITS), default="val", show_default=True, help="Queries to tune on (tune on val, report on test).")
@click.option("--index", required=True, help="Index holding the BEIR corpus (local directory, or a cluster index with --opensearch/--elasticsearch).")
@click.option("--max-queries", type=click.IntRange(min=1), default=None, help="Tune on a seeded sample of this many judged queries. [default: all]")
@click.option("--depth", type=click.IntRange(min=1), default=None, help="Candidates per list before fusion (stored with the tuned fusion). "
              f"[default: {DEFAULT_DEPTH}, or the task's retrieve depth where larger (answer selection: 100)]")
@click.option("--dry-run", is_flag=True, help="Print the result without storing it as the index default.")
@click.option("--save-to-model", is_flag=True,
              help="Also write the result into the config.json of the index's model (its fusion_defaults), so "
                   "'ingest' gives every new index built with that model these defaults. Tune on the model's own "
                   "validation data.")
@click.option("--reranker-depths", default=",".join(map(str, RERANKER_DEPTHS)), show_default=True,
              help="With --reranker: the depths tried (comma-separated).")
@click.option("--fusions", default=",".join(FUSION_METHODS), show_default=True,
              help="Fusion methods in the grid (comma-separated).")
@click.option("--lower-bound-grid", "bound_grid", multiple=True, metavar="LIST=MODE:V1,V2,...",
              help="Also try minmax (at every alpha) with this lower bound on LIST (bm25 or knn) at each value, "
                   "e.g. knn=clip:0.2,0.4,0.6 (repeatable: each setting tried on its own).")
@signal_options
@click.option("--signal-weights", default=",".join(map(str, SIGNAL_WEIGHTS)), show_default=True,
              help="With --decay: the weights of the decay term tried on the tuned fusion (comma-separated).")
@task_options
@model_option
@reranker_options
@cluster_options(selects_backend=True)
@friendly_errors
def tune(beir_dir, split, index, max_queries, depth, dry_run, save_to_model, reranker_depths, fusions, bound_grid, boosts,
         decay, signal_weight, signal_weights, task, filter_field, model, reranker_dir, reranker_depth,
         **connection) -> None:
    """Grid-search fusion (--fusions: rrf, minmax, zscore, l2, dbsf) x alpha (0, 0.1, ..., 1) for the best
    MRR@20 (retrieve 20, drop the query's own id) and store the winner as the index's
    default for 'query --mode hybrid'. The grid contains the pure BM25 and pure kNN
    rankings, so its winner is never worse than the better single mode on these queries.

    \b
    The winner replaces the untuned prior (the model's fusion defaults, else rrf alpha 0.5)
    only when its gain is clearly real: the lower bound of the 95% bootstrap interval of its
    gain over the prior, per query, must be above 0. Otherwise the prior is kept and stored
    (a grid searched on a few hundred queries always finds a winner; on other queries it
    often loses). The output says which was kept and why.

    \b
    With --reranker DIR it then re-scores the tuned hybrid's top N (each of --reranker-depths)
    with the cross-encoder, orders them by the logit + w x the first-stage score normalised over
    the N (min-max, or the rank as (k+1)/(k+rank); w in 0, 0.5, 1, 2, 4, 8, 16), and keeps the best
    setting only if it beats the hybrid without it on the main metric and is below it on none of
    the task's metrics; else depth 0. It is stored with the fusion, and 'query --reranker DIR'
    uses it for this reranker (depth 0: one line says so and the query runs without it).
    --reranker without DIR tunes each bundled cross-encoder so and keeps the one with the best
    main metric; 'query --reranker' without DIR then takes it.

    \b
    --save-to-model also writes the result into the model's config.json: tuned on the model's
    own validation data, it becomes the fusion of every new index 'ingest' builds with the model;
    with --reranker, the depth, norm and weight go into the reranker's config.json as well.

    \b
    --lower-bound-grid adds minmax with bounds to the grid. With --decay (and --boost) it then
    tries each of --signal-weights for the decay on the tuned fusion and stores the formula
    with the best weight when it beats the fusion without it (and is below it on no metric).

    \b
    Example:
      hybrid-qpr ingest data/quora/beir/corpus.jsonl --index ./quora-idx
      hybrid-qpr tune --beir data/quora/beir --split val --index ./quora-idx
      hybrid-qpr tune --beir data/quora/beir --index ./quora-idx --lower-bound-grid knn=clip:0.2,0.4 --decay created:exp:365d
    """
    from hybrid_qpr.artifacts import recorded_path
    from hybrid_qpr.cli._backend import TUNED_RERANKER, load_encoder, load_reranker, open_backend
    from hybrid_qpr.data.beir import load_beir
    from hybrid_qpr.errors import ConfigError
    from hybrid_qpr.evaluation.evaluator import decision_sentence, sample_queries
    from hybrid_qpr.evaluation.significance import gain_sentence
    from hybrid_qpr.evaluation.tasks import get_task, task_query_filters
    from hybrid_qpr.evaluation.tuning import store, tune_index
    from hybrid_qpr.rerankers import Reranker
    from hybrid_qpr.rerankers.cross_encoder import bundled_rerankers
    from hybrid_qpr.search import HybridSearcher

    retrieve = get_task(task).retrieve
    if dry_run and save_to_model:
        raise click.UsageError("--dry-run stores nothing, --save-to-model stores into the model: give one of them")
    if depth is not None and depth < retrieve:
        raise click.BadParameter(f"{depth} is fewer than the {retrieve} results each {task} query retrieves; "
                                 f"fusion must see them all: give {retrieve} or more", param_hint="--depth")
    _, queries, qrels = load_beir(beir_dir, split)
    backend = open_backend(index, connection)
    if reranker_depth is not None:
        raise click.UsageError("tune chooses the reranker depth among --reranker-depths; --reranker-depth is for query and evaluate")
    try:
        depths = [int(d) for d in reranker_depths.split(",") if d.strip()]
    except ValueError:
        raise click.BadParameter(f"{reranker_depths!r}: expected comma-separated integers", param_hint="--reranker-depths")
    bounds_tried = read_bound_grid(bound_grid)
    methods = [m.strip() for m in fusions.split(",") if m.strip()]
    unknown = [m for m in methods if m not in FUSION_METHODS]
    if unknown or not methods:
        raise click.BadParameter(f"{fusions!r}: choose among {', '.join(FUSION_METHODS)}", param_hint="--fusions")
    if signal_weight is not None:
        raise click.UsageError("tune chooses the signal weight among --signal-weights; --signal-weight is for query")
    _, signals = read_fusion_extras((), (), boosts, decay, None)
    try:
        weights = [float(w) for w in signal_weights.split(",") if w.strip()]
    except ValueError:
        raise click.BadParameter(f"{signal_weights!r}: expected comma-separated numbers", param_hint="--signal-weights")
    choosing = reranker_dir == TUNED_RERANKER  # --reranker alone: choose among the bundled cross-encoders
    reranker, _ = (None, None) if choosing else load_reranker(reranker_dir, None, backend)
    candidates = [Reranker(directory) for directory in bundled_rerankers()] if choosing else []
    if choosing and not candidates:
        raise ConfigError("--reranker without a directory chooses among the bundled cross-encoders, and this "
                               "installation has none: give --reranker DIR")
    searcher = HybridSearcher(backend, load_encoder(model, backend), reranker=reranker)
    # a task that counts a question without a relevant document as 0 tunes on its own scale
    sample = sample_queries(queries, qrels, max_queries, unanswerable=get_task(task).unanswerable)
    result = tune_index(searcher, sample, qrels, fusions=methods, depth=depth, task=task,
                        query_filters=task_query_filters(beir_dir, task, filter_field, list(sample)),
                        bound_grid=bounds_tried, signals=signals, signal_weights=weights,
                        reranker_depths=depths if reranker is not None or choosing else None, rerankers=candidates,
                        on=f"{recorded_path(beir_dir)} {split}", show_progress=True)
    metric = result.metric
    best_grid = result.top_grid()
    click.echo(f"{metric} on {result.queries} {split} queries: bm25 {result.bm25_mrr:.4f}, knn {result.knn_mrr:.4f}")
    click.echo(f"the top {len(best_grid)} of {len(result.grid)} settings tried (ties in grid order: fusion as listed "
               "in --fusions, then the smaller alpha; of tied settings the first is the best):")
    for g in best_grid:
        below = "" if g["allowed"] else "  (not chosen: another metric is below the better single mode)"
        bounds = "".join(f" {name}:{b}" for name, b in g.get("bounds", {}).items())
        click.echo(f"  {g['fusion']:<7} alpha={g['alpha']:.1f}{bounds}  {metric} {g[metric]:.4f}{below}")
    best = result.decision["best"] if result.decision else {"fusion": result.fusion, "alpha": result.alpha, metric: result.mrr}
    tied = sum(1 for g in result.grid if g["allowed"] and g[metric] == best[metric]) - 1
    click.echo(f"best: fusion={best['fusion']} alpha={best['alpha']:.1f} {metric} {best[metric]:.4f}"
               + (f" (tied with {tied} other settings: the first in grid order is the best)" if tied > 0 else ""))
    click.echo(decision_sentence(result))
    chosen_bounds = "".join(f" {name}:{b.as_dict()}" for name, b in result.bounds.items())
    click.echo(f"kept: fusion={result.fusion} alpha={result.alpha:.1f}{chosen_bounds} {metric} {result.mrr:.4f}")
    if signals is not None and result.signal_tuning is None:  # boosts alone have their own weights
        click.echo("signals: --boost without --decay has no weight to tune; not stored")
    elif result.signal_tuning is not None:
        for w, row in result.signal_tuning.by_weight.items():
            click.echo(f"  signal weight {w:<5g} {metric} {row[metric]:.4f}")
        click.echo(f"signals: weight {result.signal_tuning.weight:g}" if result.signal_tuning.weight else
                   "signals: do not help on these queries; not stored")
    click.echo("  " + gain_sentence(result.gain_over_single(), "tuned hybrid", result.single_mode, metric))
    for tried in result.reranker_choices:
        shown = reranker_dir if not choosing else tried.reranker.model_dir.name
        click.echo(f"reranker {shown} on the tuned hybrid ({metric} without it {tried.without[metric]:.4f}; "
                   "final score = cross-encoder logit + weight x first-stage score normalised over the depth):")
        for d, row in tried.by_depth.items():
            note = "" if row["allowed"] else "  (not chosen: no gain, or another metric below the hybrid without it)"
            click.echo(f"  depth {d:<3} best {row['norm']:<6} weight {row['weight']:<4g} {metric} {row[metric]:.4f}{note}")
    chosen = result.reranker_tuning
    if chosen is not None:
        if choosing:
            names = ", ".join(tried.reranker.model_dir.name for tried in result.reranker_choices)
            click.echo(f"reranker: {chosen.reranker.model_dir.name} chosen among the bundled cross-encoders ({names}) "
                       f"with {metric} {chosen.value:.4f}; 'query --reranker' without a directory uses it")
        click.echo(f"reranker: depth {chosen.depth}, {chosen.norm} weight {chosen.weight:g}" if chosen.depth else
                   "reranker: does not help on these queries; stored as depth 0 ('query --reranker' says so and "
                   "searches without it)")
    stored = store(searcher, result, index=not dry_run, model=save_to_model)
    if stored.index:
        click.echo(f"stored as the default fusion of {index}")
    if stored.model_config is not None:
        click.echo(f"stored in {stored.model_config}: an index built with this model starts from these defaults")
    if stored.reranker_config is not None:
        from hybrid_qpr.rerankers.cross_encoder import TUNED_KEY

        click.echo(f"stored in {stored.reranker_config} ({TUNED_KEY}): 'query --reranker' on an index "
                   "tuned without it uses this depth and weight")
