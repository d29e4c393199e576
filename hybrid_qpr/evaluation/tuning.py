"""One tune of an index, for every surface: ``tune_index`` chooses the fusion (the grid of
``evaluator.tune_candidates``, kept only when its gain over the untuned prior is clearly real:
``evaluator.settle_against_prior``), then, when asked, the business-signal weight and the
reranker's depth and weight, all from one fetch of each query's lists; ``store`` writes what it
chose where the index, its model and its reranker keep it. ``hybrid-qpr tune`` and the workbench
call these two and print what they answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from hybrid_qpr.artifacts import (ENCODER_CONFIG_FILE, ENCODER_FUSION_DEFAULTS, update_encoder_config,
                                  write_encoder_config)
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.evaluation.evaluator import (ALPHAS, TuneResult, query_lists, tune_candidates, tune_reranker,
                                             tune_signals, tuning_depth, untuned_prior)
from hybrid_qpr.evaluation.tasks import get_task
from hybrid_qpr.fusion import FUSION_METHODS
from hybrid_qpr.search import HybridSearcher
from hybrid_qpr.signals import SIGNAL_WEIGHTS, Signals
from hybrid_qpr.types import Filters


def tune_index(searcher, queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], *,
               fusions: Sequence[str] = FUSION_METHODS, alphas: Sequence[float] = ALPHAS, depth: int | None = None,
               task: str = "paraphrase", query_filters: Mapping[str, Filters] | None = None,
               bound_grid: Sequence[Mapping[str, Any]] = (), signals: Signals | None = None,
               signal_weights: Sequence[float] = SIGNAL_WEIGHTS, reranker_depths: Sequence[int] | None = None,
               rerankers: Sequence[Any] = (), on: str | None = None, show_progress: bool = False) -> TuneResult:
    """The fusion for ``searcher``'s index tuned on ``queries`` (``evaluator.tune``: the grid of
    ``fusions`` x ``alphas``, and minmax with each of ``bound_grid``, settled against the untuned
    prior of the searcher's model). ``signals`` with a decay: its weight is then chosen among
    ``signal_weights`` on the tuned fusion (``result.signal_tuning``; the formula with that
    weight in ``result.signals`` when it helps); boosts alone have no weight to choose and are
    left out. ``reranker_depths``: the searcher's reranker, or each of ``rerankers``
    (``hybrid_qpr.rerankers.Reranker``), is then tuned at those depths, as ``evaluator.tune_reranker``
    tunes one (``result.reranker_choices``), and the one with the best main metric is chosen
    (``result.reranker_tuning``; ties: the first). ``on`` names the queries in what is stored."""
    spec = get_task(task)
    depth = tuning_depth(depth, spec.retrieve)
    if depth < spec.retrieve:
        raise ConfigError(f"depth={depth}: must be >= retrieve ({spec.retrieve}) so fusion sees every candidate")
    candidates = list(rerankers) or ([searcher.reranker] if searcher.reranker is not None else [])
    if reranker_depths is not None and not candidates:
        raise ConfigError("tuning a reranker's depths needs a searcher with a reranker, or rerankers to choose among")
    lists = query_lists(searcher, queries, depth, query_filters, show_progress)
    result = tune_candidates(lists, qrels, fusions=fusions, alphas=alphas, depth=depth, task=task,
                             show_progress=show_progress, bound_grid=bound_grid, prior=untuned_prior(searcher.encoder))
    if signals is not None and signals.decay is not None:
        found = tune_signals(searcher, queries, qrels, result, signals, weights=signal_weights, task=task,
                             query_filters=query_filters, lists=lists)
        result.signal_tuning = found
        if found.weight:
            result.signals = signals.with_weight(found.weight)
    if reranker_depths is not None:
        for reranker in candidates:
            with_it = searcher if reranker is searcher.reranker else HybridSearcher(searcher.backend, searcher.encoder,
                                                                                     reranker=reranker)
            result.reranker_choices.append(tune_reranker(with_it, queries, qrels, result, depths=reranker_depths,
                                                         task=task, query_filters=query_filters))
        result.reranker_tuning = max(result.reranker_choices, key=lambda found: found.value)  # the first of ties
    result.on = on
    return result


class Stored(NamedTuple):
    """Where ``store`` wrote: the index's defaults, and the config.json files it changed."""

    index: bool
    model_config: Path | None
    reranker_config: Path | None


def store(searcher, result: TuneResult, *, index: bool = True, model: bool = False) -> Stored:
    """``result.defaults`` stored: as the index's fusion defaults (``index``), and (``model``) in
    the config.json of the searcher's model (its fusion defaults, which every index ``ingest``
    builds with it starts from) and, with a tuned reranker, the depth, norm and weight in the
    reranker's config.json (``rerankers.cross_encoder.TUNED_KEY``), naming the first-stage model."""
    defaults = result.defaults
    if index:
        searcher.backend.set_fusion_defaults(defaults)
    model_config = reranker_config = None
    if model:
        encoder = searcher.encoder
        update_encoder_config(encoder.model_dir, **{ENCODER_FUSION_DEFAULTS: defaults})
        model_config = Path(encoder.model_dir) / ENCODER_CONFIG_FILE
        reranker = None if result.reranker_tuning is None else result.reranker_tuning.reranker
        if reranker is not None:  # its tuning travels with it too
            from hybrid_qpr.rerankers.cross_encoder import TUNED_KEY

            write_encoder_config(reranker.model_dir, {**reranker.config, TUNED_KEY: {
                **defaults["reranker"], "first_stage_model": encoder.fingerprint}})
            reranker_config = Path(reranker.model_dir) / ENCODER_CONFIG_FILE
    return Stored(index, model_config, reranker_config)
