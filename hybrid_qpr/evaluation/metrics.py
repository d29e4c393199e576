"""Pure IR metrics over plain dicts: a run (ranked ids per query) and qrels (graded judgments).

Conventions (shared by training validation, ``hybrid-qpr evaluate`` and the benchmarks):

* ``run[qid]`` is a ranked list of document ids, best first, with the query's own id
  already removed (see :func:`drop_self`; the BEIR convention for paraphrase retrieval,
  where every query is also a corpus document). If an id occurs twice, only its first
  position counts.
* ``qrels[qid][doc_id]`` is a relevance grade; a document is relevant when its grade > 0.
* A metric is the **mean over the judged queries**: queries of ``qrels`` with at least one
  relevant document. A judged query absent from ``run`` scores 0 (no silent inflation);
  run queries without judgments are ignored. This matches ``trec_eval -c``. With
  ``unanswerable=True`` a query of ``qrels`` whose judgments are all 0 counts too, scoring 0 on
  every metric: the SemEval-2016 Task 3 scorer's rule (its MAP is over all questions).
* ``k`` is the rank cut-off (``top_k``): only the first ``k`` ids of each list count.

These are the measures of the SDML paper (Bonadiman et al., 2019, Tables 3-4: H@1, H@10,
MRR@20) plus the usual BEIR set (nDCG@k, Recall@k, MAP). Results agree with
``pytrec_eval`` (checked in ``tests/unit/test_metrics.py`` when it is installed).
Inputs are never modified.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import numpy as np

from hybrid_qpr.errors import ConfigError

Run = Mapping[str, Sequence[str]]
Qrels = Mapping[str, Mapping[str, int]]
MetricName = Literal["hits", "mrr", "recall", "ndcg", "map", "avgrec"]

__all__ = [
    "MetricName", "Qrels", "Run", "average_precision", "average_recall", "drop_self", "hits_at_k", "mrr_at_k",
    "ndcg_at_k", "per_query", "recall_at_k", "roc_auc",
]


def drop_self(run: Run) -> dict[str, list[str]]:
    """Return a copy of ``run`` in which each query's own id is removed from its list.

    In paraphrase retrieval every query is also in the corpus, so it would trivially
    rank itself first; BEIR's evaluation removes it the same way.
    """
    return {qid: [doc for doc in ranked if doc != qid] for qid, ranked in run.items()}


def _top(ranked: Sequence[str], k: int | None) -> list[str]:
    """First ``k`` distinct ids (first occurrence wins)."""
    seen: set[str] = set()
    out: list[str] = []
    for doc in ranked:
        if doc in seen:
            continue
        seen.add(doc)
        out.append(doc)
        if k is not None and len(out) == k:
            break
    return out


def _hits(ranked: list[str], grades: Mapping[str, int]) -> float:
    """1 if any of the ranked ids is relevant, else 0 (Hits@k, "H@k" in the SDML paper)."""
    return 1.0 if any(grades.get(doc, 0) > 0 for doc in ranked) else 0.0


def _reciprocal_rank(ranked: list[str], grades: Mapping[str, int]) -> float:
    """1 / rank of the first relevant id, 0 if none (Voorhees, TREC-8 QA track, 1999)."""
    for rank, doc in enumerate(ranked, start=1):
        if grades.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0


def _recall(ranked: list[str], grades: Mapping[str, int]) -> float:
    """|relevant ∩ ranked| / |relevant| (BEIR and trec_eval ``recall_k``)."""
    relevant = sum(1 for g in grades.values() if g > 0)
    found = sum(1 for doc in ranked if grades.get(doc, 0) > 0)
    return found / relevant


def _ndcg(ranked: list[str], grades: Mapping[str, int], k: int | None) -> float:
    """DCG / ideal DCG with linear gain and log2 discount (Järvelin & Kekäläinen, 2002):
    ``DCG@k = sum_{i=1..k} rel_i / log2(i + 1)``; the ideal ranking sorts the judged
    grades in decreasing order. Linear gain is what trec_eval's ``ndcg_cut`` uses.
    """
    dcg = sum(grades.get(doc, 0) / math.log2(rank + 1) for rank, doc in enumerate(ranked, start=1)
              if grades.get(doc, 0) > 0)
    ideal_grades = sorted((g for g in grades.values() if g > 0), reverse=True)
    if k is not None:
        ideal_grades = ideal_grades[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal_grades, start=1))
    return dcg / idcg


def _average_precision(ranked: list[str], grades: Mapping[str, int]) -> float:
    """``AP = (1/|R|) * sum over ranks i holding a relevant id of Precision@i`` where |R|
    counts all relevant documents, retrieved or not (trec_eval ``map``; Manning et al.,
    Introduction to IR, 2008, section 8.4)."""
    relevant = sum(1 for g in grades.values() if g > 0)
    found = 0
    total = 0.0
    for rank, doc in enumerate(ranked, start=1):
        if grades.get(doc, 0) > 0:
            found += 1
            total += found / rank
    return total / relevant


def _found_at(ranked: list[str], grades: Mapping[str, int], cut: int) -> list[int]:
    """The number of relevant ids among the first 1, 2, ..., ``cut`` of ``ranked``."""
    found, out = 0, []
    for rank in range(cut):
        if rank < len(ranked) and grades.get(ranked[rank], 0) > 0:
            found += 1
        out.append(found)
    return out


def _average_recall(ranked: list[str], grades: Mapping[str, int], k: int | None) -> float:
    """One query's ``AvgRec``: the mean over cut-offs i = 1..k of the relevant ids in the top i
    divided by the most a perfect ranking could have there, ``min(i, |R|)`` (SemEval-2016 Task 3,
    Nakov et al. 2016); the reported figure pools queries (:func:`average_recall`)."""
    relevant = sum(1 for g in grades.values() if g > 0)
    cut = len(ranked) if k is None else k
    found = _found_at(ranked, grades, cut)
    return sum(n / min(i, relevant) for i, n in enumerate(found, start=1)) / cut if cut else 0.0


_PER_QUERY: dict[str, Callable[[list[str], Mapping[str, int], int | None], float]] = {
    "hits": lambda ranked, grades, k: _hits(ranked, grades),
    "mrr": lambda ranked, grades, k: _reciprocal_rank(ranked, grades),
    "recall": lambda ranked, grades, k: _recall(ranked, grades),
    "ndcg": _ndcg,
    "map": lambda ranked, grades, k: _average_precision(ranked, grades),
    "avgrec": _average_recall,
}


def _check_k(k: int | None, allow_none: bool) -> None:
    if k is None and allow_none:
        return
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ConfigError(f"k={k!r}: the rank cut-off must be an integer >= 1")


def per_query(run: Run, qrels: Qrels, metric: MetricName, k: int | None,
              unanswerable: bool = False) -> dict[str, float]:
    """Score of every judged query (see the module docstring) for one metric at cut-off ``k``.

    ``k=None`` means the whole ranked list (allowed for ``map`` and ``ndcg``, e.g. for
    MAP over full rankings as trec_eval reports it). ``unanswerable``: queries of ``qrels``
    without a relevant document score 0 instead of being left out (module docstring).
    """
    if metric not in _PER_QUERY:
        raise ConfigError(f"metric={metric!r}: must be one of {sorted(_PER_QUERY)}")
    _check_k(k, allow_none=metric in ("map", "ndcg"))
    fn = _PER_QUERY[metric]
    scores: dict[str, float] = {}
    for qid, grades in qrels.items():
        if not any(g > 0 for g in grades.values()):
            if unanswerable:
                scores[qid] = 0.0
            continue
        scores[qid] = fn(_top(run.get(qid, ()), k), grades, k)
    return scores


def _mean(scores: dict[str, float]) -> float:
    if not scores:
        raise ConfigError("no query in qrels has a relevant document (grade > 0); nothing to evaluate")
    return sum(scores.values()) / len(scores)


def hits_at_k(run: Run, qrels: Qrels, k: int = 10) -> float:
    """Hits@k (H@k in the SDML paper, Bonadiman et al. 2019): the fraction of queries with
    at least one relevant id among the first ``k``."""
    return _mean(per_query(run, qrels, "hits", k))


def mrr_at_k(run: Run, qrels: Qrels, k: int = 20) -> float:
    """MRR@k: mean of ``1 / rank`` of the first relevant id within the first ``k`` (0 when
    none). The SDML paper reports MRR@20 (retrieve 20, query's own id dropped)."""
    return _mean(per_query(run, qrels, "mrr", k))


def recall_at_k(run: Run, qrels: Qrels, k: int = 100) -> float:
    """Recall@k: mean of ``|relevant in top k| / |relevant|`` (denominator: all relevant ids,
    as in BEIR and trec_eval, so it can stay below 1 when |relevant| > k)."""
    return _mean(per_query(run, qrels, "recall", k))


def ndcg_at_k(run: Run, qrels: Qrels, k: int = 10) -> float:
    """nDCG@k with linear gain ``rel_i`` and discount ``1 / log2(i + 1)``, normalised by
    the ideal DCG of the judged grades (Järvelin & Kekäläinen, ACM TOIS 2002; BEIR's main
    measure, computed as trec_eval ``ndcg_cut_k``)."""
    return _mean(per_query(run, qrels, "ndcg", k))


def average_precision(run: Run, qrels: Qrels, k: int | None = None) -> float:
    """MAP: mean over queries of ``(1/|R|) * sum_{i: d_i relevant} Precision@i``, with
    ``|R|`` all relevant ids of the query; ``k`` cuts the ranking first (trec_eval
    ``map_cut_k``), ``None`` uses the whole list (trec_eval ``map``)."""
    return _mean(per_query(run, qrels, "map", k))


def average_recall(run: Run, qrels: Qrels, k: int = 10) -> float:
    """AvgRec@k as the SemEval-2016 Task 3 scorer computes it: for each cut-off i = 1..k, the
    relevant ids found in the top i over all queries divided by the most a perfect ranking finds
    there (the sum of ``min(i, |R|)``), averaged over i. A query without a relevant id adds
    nothing to either sum. Pooled, so it is not the mean of the per-query values."""
    _check_k(k, allow_none=False)
    found, best = [0.0] * k, [0.0] * k
    for qid, grades in qrels.items():
        relevant = sum(1 for g in grades.values() if g > 0)
        if not relevant:
            continue
        for i, n in enumerate(_found_at(_top(run.get(qid, ()), k), grades, k)):
            found[i] += n
            best[i] += min(i + 1, relevant)
    if not any(best):
        raise ConfigError("no query in qrels has a relevant document (grade > 0); nothing to evaluate")
    return sum(f / b for f, b in zip(found, best)) / k


def roc_auc(scores: Sequence[float] | np.ndarray, labels: Sequence[int | bool] | np.ndarray) -> float:
    """Area under the ROC curve of ``scores`` (higher = more likely positive) for binary
    ``labels``: the probability that a random positive outscores a random negative, ties
    counting one half. Computed as the Mann-Whitney U statistic with average ranks
    (Hanley & McNeil, Radiology 1982): ``AUC = (sum of positive ranks - P(P+1)/2) / (P N)``.
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    y = np.asarray(labels).ravel()
    if s.shape != y.shape:
        raise ConfigError(f"roc_auc: {s.size} scores but {y.size} labels; give one label per score")
    if not np.all(np.isfinite(s)):
        raise ConfigError("roc_auc: scores contain NaN or infinity")
    if not np.all((y == 0) | (y == 1)):
        raise ConfigError("roc_auc: labels must be 0/1 or booleans")
    positive = y.astype(bool)
    n_pos = int(positive.sum())
    n_neg = int(positive.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        raise ConfigError(f"roc_auc needs both classes; got {n_pos} positive and {n_neg} negative labels")
    values, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    below = np.cumsum(counts) - counts  # items with a strictly smaller score
    average_rank = below + (counts + 1) / 2.0  # 1-based average rank of each tie group
    ranks = average_rank[inverse]
    u = ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))
