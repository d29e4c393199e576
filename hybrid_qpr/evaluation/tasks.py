"""What is measured for each kind of eval set: the metric set, the main metric, the depth.

* ``paraphrase`` (the SDML protocol, Bonadiman et al. 2019): retrieve 20, drop the query's
  own id (it is in the corpus), then H@1, H@10, MRR@20, Recall@10/20, nDCG@10, MAP.
  Tuned on MRR@20.
* ``answer-selection`` (ASBERT, Shonibare 2021, on WikiQA/TrecQA): each question ranks only
  its own candidate sentences (a per-query filter on their group), retrieving up to 100,
  which covers every candidate list of WikiQA (max 30) and TrecQA dev (max 92); then
  MAP and MRR over that ranking, as trec_eval computes them. Tuned on MAP.
* ``answer-retrieval`` (ReQA, Ahmad et al. 2019; Cross-VAE, Yu et al. 2020, on SQuAD): each
  question ranks every sentence of the held-out articles; MRR (over the top 100, which
  differs from the full-list MRR by less than 0.01), R@1 and R@5, where R@k is the fraction
  of questions with a gold sentence in the top k (ReQA's definition; with one gold
  sentence it is recall), plus MAP. Tuned on MRR.
* ``community-qa`` (SemEval-2016 Task 3 subtask B, Nakov et al. 2016): each original question
  ranks only its own related forum posts (the per-query filter on ``group``), the top 10 as the
  task's scorer cuts them; MAP and MRR over **all** judged questions, a question without a
  relevant candidate counting 0, and AvgRec pooled over the questions as the scorer does
  (``metrics.average_recall``), so the figures compare with the task's. The forum's own order (the corpus field ``ir_rank``) is the
  baseline run (``hybrid_qpr.evaluation.baselines``); a run ranking fewer than a question's
  candidates is completed in that order, as a submission ranks every candidate. Tuned on MAP.

Pure: runs and qrels in, a dict of floats out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.evaluation.metrics import (Qrels, Run, average_precision, average_recall, drop_self, hits_at_k, mrr_at_k,
                                           ndcg_at_k, per_query, recall_at_k)

TaskName = Literal["paraphrase", "answer-selection", "answer-retrieval"]


@dataclass(frozen=True)
class Task:
    name: str
    metric_names: tuple[str, ...]
    main_metric: str
    retrieve: int
    drop_self: bool
    default_filter_field: str | None
    scorer: Callable[[Run, Qrels, int], dict[str, float]]  # (run, judged qrels, retrieve) -> metrics
    # metrics on which a tuned hybrid may not fall below its better single mode (the ones the
    # papers report); empty: the main metric only
    guarded: tuple[str, ...] = ()
    # a judged query without a relevant document counts (scoring 0) instead of being left out
    unanswerable: bool = False
    # the corpus field whose order within each query's group is the baseline run (and completes
    # a run that ranks fewer than the group's documents); None: no such baseline
    order_field: str | None = None

    def score(self, run: Run, qrels: Qrels) -> dict[str, float]:
        """Every metric of this task for ``run``; only queries present in ``run`` are judged."""
        if self.drop_self:
            run = drop_self(run)
        judged = {q: qrels[q] for q in run if q in qrels}
        return self.scorer(run, judged, self.retrieve)

    def per_query(self, run: Run, qrels: Qrels, metric: str) -> dict[str, float]:
        """Query id -> its score on ``metric`` (one of ``metric_names``), for the judged queries
        of ``run``: the numbers whose mean ``score`` reports, kept for paired tests."""
        if metric not in self.metric_names:
            raise ConfigError(f"metric={metric!r}: the {self.name} task reports {', '.join(self.metric_names)}")
        if self.drop_self:
            run = drop_self(run)
        judged = {q: qrels[q] for q in run if q in qrels}
        kind, _, cut = metric.partition("@")
        measure = {"H": "hits", "R": "hits", "MRR": "mrr", "Recall": "recall", "nDCG": "ndcg", "MAP": "map",
                   "AvgRec": "avgrec"}[kind]
        # MAP over the whole list, except where the task's scorer cuts every measure (community QA)
        whole = measure == "map" and not self.unanswerable
        return per_query(run, judged, measure, int(cut) if cut else (None if whole else self.retrieve),
                         self.unanswerable)


def _paraphrase(run: Run, qrels: Qrels, retrieve: int) -> dict[str, float]:
    return {"H@1": hits_at_k(run, qrels, 1), "H@10": hits_at_k(run, qrels, 10), "MRR@20": mrr_at_k(run, qrels, 20),
            "Recall@10": recall_at_k(run, qrels, 10), "Recall@20": recall_at_k(run, qrels, 20),
            "nDCG@10": ndcg_at_k(run, qrels, 10), "MAP": average_precision(run, qrels)}


def _selection(run: Run, qrels: Qrels, retrieve: int) -> dict[str, float]:
    return {"MAP": average_precision(run, qrels), "MRR": mrr_at_k(run, qrels, retrieve)}


def _retrieval(run: Run, qrels: Qrels, retrieve: int) -> dict[str, float]:
    return {"MRR": mrr_at_k(run, qrels, retrieve), "R@1": hits_at_k(run, qrels, 1), "R@5": hits_at_k(run, qrels, 5),
            "MAP": average_precision(run, qrels)}


def _community_qa(run: Run, qrels: Qrels, retrieve: int) -> dict[str, float]:
    """The SemEval-2016 Task 3 scorer's figures: every measure cut at ``retrieve`` (10) and averaged
    over all judged questions, those without a relevant candidate counting 0."""
    def mean(measure: str) -> float:
        scores = per_query(run, qrels, measure, retrieve, unanswerable=True)  # type: ignore[arg-type]
        if not scores:
            raise ConfigError("no judged query to evaluate")
        return sum(scores.values()) / len(scores)

    return {"MAP": mean("map"), "MRR": mean("mrr"), "AvgRec": average_recall(run, qrels, retrieve)}


TASKS: dict[str, Task] = {
    "paraphrase": Task("paraphrase", ("H@1", "H@10", "MRR@20", "Recall@10", "Recall@20", "nDCG@10", "MAP"),
                       "MRR@20", 20, True, None, _paraphrase),
    "answer-selection": Task("answer-selection", ("MAP", "MRR"), "MAP", 100, False, "group", _selection, ("MAP", "MRR")),
    "answer-retrieval": Task("answer-retrieval", ("MRR", "R@1", "R@5", "MAP"), "MRR", 100, False, None, _retrieval,
                             ("MRR", "R@1", "R@5")),
    "community-qa": Task("community-qa", ("MAP", "MRR", "AvgRec"), "MAP", 10, False, "group", _community_qa,
                         ("MAP", "MRR"), unanswerable=True, order_field="ir_rank"),
}
TASK_NAMES: tuple[str, ...] = tuple(TASKS)  # the first is the default


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise ConfigError(f"task={name!r}: allowed tasks are {', '.join(TASKS)}")
    return TASKS[name]


def query_filters_from(metadata: Mapping[str, str], field: str, query_ids: Sequence[str]) -> dict[str, dict[str, str]]:
    """``{query id: {field: value}}``: each query filtered on its own value of ``field``
    (e.g. its group of candidate answers). A query without a value is an error, because it
    would silently rank the whole corpus."""
    missing = [q for q in query_ids if q not in metadata]
    if missing:
        raise ConfigError(f"{len(missing)} queries have no {field!r} in queries.jsonl (e.g. {missing[0]!r}); "
                          f"a per-query filter on {field!r} needs it on every query")
    return {q: {field: metadata[q]} for q in query_ids}


def task_query_filters(beir_dir, task: str, field: str | None, query_ids: Sequence[str]) -> dict[str, dict[str, str]] | None:
    """The per-query filters an evaluation of ``task`` on ``beir_dir`` uses: on ``field`` if
    given, else on the task's default field (``group`` for answer selection), else none."""
    from hybrid_qpr.data.beir import load_query_metadata

    field = field or get_task(task).default_filter_field
    if not field:
        return None
    return query_filters_from(load_query_metadata(beir_dir, field), field, query_ids)
