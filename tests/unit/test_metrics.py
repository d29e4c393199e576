"""IR metrics: hand-computed cases, and agreement with pytrec_eval when it is installed."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.evaluation.metrics import (average_precision, drop_self, hits_at_k, mrr_at_k,
                                           ndcg_at_k, per_query, recall_at_k, roc_auc)

# q1: relevant a (grade 1) and c (grade 2); q2: relevant z only, never retrieved;
# q3: judged but missing from the run; q4: no relevant documents -> not judged.
QRELS = {
    "q1": {"a": 1, "c": 2, "x": 0},
    "q2": {"z": 1},
    "q3": {"m": 1},
    "q4": {"n": 0},
}
RUN = {
    "q1": ["b", "a", "x", "c", "d"],
    "q2": ["y", "w"],
    "q4": ["n"],
    "unjudged": ["a"],
}


def test_hits_hand_computed():
    # q1: a at rank 2 -> H@1 = 0, H@2 = 1; q2, q3 never hit. Judged queries: q1, q2, q3.
    assert hits_at_k(RUN, QRELS, k=1) == 0.0
    assert hits_at_k(RUN, QRELS, k=2) == pytest.approx(1 / 3)


def test_mrr_hand_computed():
    assert mrr_at_k(RUN, QRELS, k=20) == pytest.approx((1 / 2) / 3)
    assert mrr_at_k(RUN, QRELS, k=1) == 0.0
    assert per_query(RUN, QRELS, "mrr", 20) == {"q1": 0.5, "q2": 0.0, "q3": 0.0}


def test_recall_hand_computed():
    # q1: top-2 holds a (1 of 2 relevant); top-4 holds a and c.
    assert recall_at_k(RUN, QRELS, k=2) == pytest.approx((1 / 2) / 3)
    assert recall_at_k(RUN, QRELS, k=4) == pytest.approx(1 / 3)


def test_ndcg_hand_computed():
    # q1 @4: DCG = 1/log2(3) + 2/log2(5); ideal = 2/log2(2) + 1/log2(3).
    dcg = 1 / math.log2(3) + 2 / math.log2(5)
    idcg = 2 + 1 / math.log2(3)
    assert ndcg_at_k(RUN, QRELS, k=4) == pytest.approx((dcg / idcg) / 3)
    # @2 only a counts; the ideal @2 still holds both grades.
    assert per_query(RUN, QRELS, "ndcg", 2)["q1"] == pytest.approx((1 / math.log2(3)) / idcg)


def test_average_precision_hand_computed():
    # q1: relevant at ranks 2 and 4 -> (1/2 + 2/4) / 2 = 0.5; cut at 3 -> (1/2) / 2.
    assert average_precision(RUN, QRELS) == pytest.approx(0.5 / 3)
    assert average_precision(RUN, QRELS, k=3) == pytest.approx(0.25 / 3)


def test_duplicate_ids_count_once_and_inputs_untouched():
    run = {"q": ["b", "b", "a"]}
    qrels = {"q": {"a": 1}}
    assert mrr_at_k(run, qrels, k=2) == 0.5  # b, a: the repeated b does not push a out
    assert run == {"q": ["b", "b", "a"]}


def test_drop_self():
    run = {"q1": ["q1", "a", "q1", "b"], "q2": ["c"]}
    assert drop_self(run) == {"q1": ["a", "b"], "q2": ["c"]}
    assert run["q1"][0] == "q1"


def test_bad_arguments():
    with pytest.raises(ConfigError, match="k=0"):
        hits_at_k(RUN, QRELS, k=0)
    with pytest.raises(ConfigError, match="metric"):
        per_query(RUN, QRELS, "p", 10)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="no query"):
        mrr_at_k(RUN, {"q4": {"n": 0}})


def test_roc_auc_hand_computed():
    # positives 0.9, 0.4; negatives 0.5, 0.1: pairs (0.9>0.5, 0.9>0.1, 0.4<0.5, 0.4>0.1) -> 3/4.
    assert roc_auc([0.9, 0.5, 0.4, 0.1], [1, 0, 1, 0]) == pytest.approx(0.75)
    # a tie between a positive and a negative counts one half
    assert roc_auc([0.5, 0.5], [True, False]) == pytest.approx(0.5)
    assert roc_auc([3.0, 2.0, 1.0], [1, 1, 0]) == 1.0
    with pytest.raises(ConfigError, match="both classes"):
        roc_auc([0.1, 0.2], [1, 1])


def test_roc_auc_matches_pairwise_definition():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, size=60).astype(float)  # many ties
    labels = rng.integers(0, 2, size=60)
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairwise = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) / (pos.size * neg.size)
    assert roc_auc(scores, labels) == pytest.approx(pairwise)


def _random_case(seed: int):
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(40)]
    qrels, run = {}, {}
    for q in range(25):
        qid = f"q{q}"
        qrels[qid] = {d: rng.choice([1, 1, 2]) for d in rng.sample(docs, rng.randint(1, 6))}
        run[qid] = rng.sample(docs, rng.randint(1, 30))
    return run, qrels


def test_agrees_with_pytrec_eval():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run, qrels = _random_case(7)

    def trec(measures: set[str], cut: int | None = None) -> dict[str, dict[str, float]]:
        # pytrec_eval ranks by score; give decreasing scores in our ranked order.
        scored = {q: {d: float(len(r) - i) for i, d in enumerate(r[:cut] if cut else r)} for q, r in run.items()}
        return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(scored)

    for k in (1, 5, 10):
        ours = per_query(run, qrels, "hits", k)
        theirs = trec({"success"})
        assert all(ours[q] == pytest.approx(theirs[q][f"success_{k}"]) for q in qrels)
    for k in (5, 10, 20):
        ours_ndcg, ours_recall, ours_map = (per_query(run, qrels, m, k) for m in ("ndcg", "recall", "map"))
        theirs = trec({"ndcg_cut", "recall", "map_cut"})
        for q in qrels:
            assert ours_ndcg[q] == pytest.approx(theirs[q][f"ndcg_cut_{k}"])
            assert ours_recall[q] == pytest.approx(theirs[q][f"recall_{k}"])
            assert ours_map[q] == pytest.approx(theirs[q][f"map_cut_{k}"])
        mrr = per_query(run, qrels, "mrr", k)
        theirs_rr = trec({"recip_rank"}, cut=k)
        assert all(mrr[q] == pytest.approx(theirs_rr[q]["recip_rank"]) for q in qrels)
    full_map = per_query(run, qrels, "map", None)
    theirs = trec({"map"})
    assert all(full_map[q] == pytest.approx(theirs[q]["map"]) for q in qrels)
