"""Paired significance tests against scipy and against reference computations written here from
their definitions; the project's metrics against trec_eval (pytrec_eval) on a fixed run."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
import pytest

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.evaluation.significance import (Comparison, bootstrap_interval, compare, holm, paired_t_test,
                                                randomization_test)
from hybrid_qpr.evaluation.tasks import TASKS


def _scores(n: int, seed: int, shift: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.random(n)
    b = np.clip(a + rng.normal(shift, 0.2, n), 0, 1)
    return a, b


def test_exact_randomization_equals_scipy_permutation_test():
    stats = pytest.importorskip("scipy.stats")
    a, b = _scores(12, seed=1)  # 2**12 sign assignments: both enumerate them all
    ours = randomization_test(a, b, resamples=10_000)
    reference = stats.permutation_test((b - a,), lambda d, axis: np.abs(np.mean(d, axis=axis)),
                                       permutation_type="samples", alternative="greater", n_resamples=10_000)
    assert abs(ours - reference.pvalue) < 1e-6


def test_exact_randomization_equals_enumeration_by_hand():
    a, b = [0.5, 0.2, 1.0, 0.0, 0.3], [0.7, 0.2, 0.5, 0.25, 0.9]
    d = [y - x for x, y in zip(a, b)]
    observed = abs(sum(d) / len(d))
    hits = sum(abs(sum(s * x for s, x in zip(signs, d)) / len(d)) >= observed - 1e-12
               for signs in itertools.product((1, -1), repeat=len(d)))
    assert randomization_test(a, b) == pytest.approx(hits / 32, abs=1e-12)


def test_sampled_randomization_equals_reference_with_the_same_seed():
    a, b = _scores(200, seed=2)
    d = b - a
    rng = np.random.default_rng(7)  # the reference: one resample at a time, same draws
    observed = abs(d.mean())
    hits = 0
    for _ in range(3000):
        signs = np.where(rng.random(d.size) < 0.5, -1.0, 1.0)
        hits += abs((signs * d).sum() / d.size) >= observed * (1 - 1e-13)
    assert abs(randomization_test(a, b, resamples=3000, seed=7) - (hits + 1) / 3001) < 1e-6
    assert randomization_test(a, b, resamples=3000, seed=7) == randomization_test(a, b, resamples=3000, seed=7)


def test_sampled_randomization_is_close_to_exact():
    a, b = _scores(16, seed=3, shift=0.1)
    exact = randomization_test(a, b, resamples=2 ** 16)
    sampled = randomization_test(a, b, resamples=20_000, seed=5)
    assert abs(exact - sampled) < 0.015


def test_t_test_equals_scipy():
    stats = pytest.importorskip("scipy.stats")
    for n, seed in ((5, 4), (30, 5), (500, 6)):
        a, b = _scores(n, seed)
        assert abs(paired_t_test(a, b) - stats.ttest_rel(b, a).pvalue) < 1e-9


def test_t_test_edge_cases():
    assert paired_t_test([0.5, 0.5], [0.5, 0.5]) == 1.0
    assert paired_t_test([0.25, 0.5], [0.5, 0.75]) == 0.0
    with pytest.raises(ConfigError, match="one score per query"):
        paired_t_test([1, 2], [1])


def test_holm_by_hand():
    # sorted 0.01, 0.02, 0.04, 0.30 times 4, 3, 2, 1 -> 0.04, 0.06, 0.08, 0.30 (already increasing)
    assert holm([0.30, 0.01, 0.04, 0.02]) == pytest.approx([0.30, 0.04, 0.08, 0.06])
    # monotone: 0.03*2 = 0.06 would be below the first adjusted 0.04*... the step-down keeps the max
    assert holm([0.02, 0.025]) == pytest.approx([0.04, 0.04])
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])


def test_bootstrap_interval_holds_the_mean_and_is_seeded():
    a, b = _scores(100, seed=8)
    low, high = bootstrap_interval(a, b, seed=3)
    assert low < float(np.mean(b - a)) < high
    assert (low, high) == bootstrap_interval(a, b, seed=3)
    assert bootstrap_interval([0.1] * 5, [0.3] * 5) == pytest.approx((0.2, 0.2))


def test_compare_lists_wins_and_losses_worst_first_and_corrects_with_holm():
    base = {f"q{i}": 0.5 for i in range(40)}
    better = {**{q: 1.0 for q in base}, "q3": 0.0}  # 39 wins, one loss
    same = dict(base)
    out = compare({"bm25": base, "hybrid": better, "copy": same}, "bm25", "MRR@20")
    assert [c.run for c in out] == ["hybrid", "copy"]
    hybrid, copy = out
    assert (hybrid.wins, hybrid.losses, hybrid.ties) == (39, 1, 0)
    assert hybrid.per_query[0] == ("q3", 0.5, 0.0)
    assert hybrid.significant and "better" in hybrid.verdict()
    assert hybrid.randomization_p_holm == pytest.approx(min(1.0, 2 * hybrid.randomization_p))
    assert (copy.ties, copy.randomization_p, copy.significant) == (40, 1.0, False)
    assert "within noise" in copy.verdict()
    small = compare({"a": {"q": 0.1}, "b": {"q": 0.9}}, "a", "MAP")[0]
    assert "little power" in small.verdict()
    with pytest.raises(ConfigError, match="baseline"):
        compare({"a": base}, "b", "MAP")


def test_metrics_equal_trec_eval_on_a_fixed_run():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rnd = random.Random(11)
    docs = [f"d{i}" for i in range(60)]
    qrels = {f"q{i}": {d: rnd.choice((1, 1, 2)) for d in rnd.sample(docs, rnd.randint(1, 6))} for i in range(25)}
    run = {q: rnd.sample(docs, 20) for q in qrels}
    scored = {q: {d: float(len(ranked) - r) for r, d in enumerate(ranked)} for q, ranked in run.items()}
    measures = {"recip_rank", "ndcg_cut_10", "recall_10", "recall_20", "map", "success_1", "success_10"}
    trec = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(scored)
    task = TASKS["answer-retrieval"]  # no drop_self: every document id differs from the query ids
    ours = TASKS["paraphrase"].per_query(run, qrels, "nDCG@10")
    for q in qrels:
        assert round(ours[q], 4) == round(trec[q]["ndcg_cut_10"], 4)
        assert round(task.per_query(run, qrels, "MAP")[q], 4) == round(trec[q]["map"], 4)
        assert round(task.per_query(run, qrels, "MRR")[q], 4) == round(trec[q]["recip_rank"], 4)
        assert round(TASKS["paraphrase"].per_query(run, qrels, "Recall@10")[q], 4) == round(trec[q]["recall_10"], 4)
        assert round(TASKS["paraphrase"].per_query(run, qrels, "H@1")[q], 4) == round(trec[q]["success_1"], 4)
    means = TASKS["paraphrase"].score(run, qrels)
    for ours_name, theirs in (("nDCG@10", "ndcg_cut_10"), ("Recall@20", "recall_20"), ("MAP", "map"),
                              ("H@10", "success_10"), ("MRR@20", "recip_rank")):
        assert round(means[ours_name], 4) == round(sum(t[theirs] for t in trec.values()) / len(trec), 4)


def test_comparison_to_dict_keeps_the_numbers():
    c = Comparison("b", "a", "MAP", 3, 0.6, 0.5, 0.2, 0.3, 0.4, 0.5, 1, 1, 1,
                   [("q1", 0.5, 0.1), ("q2", 0.5, 0.5), ("q3", 0.5, 0.9)])
    d = c.to_dict(rows=2)
    assert d["delta"] == pytest.approx(0.1) and len(d["per_query"]) == 2
    assert d["per_query"][0]["delta"] == pytest.approx(-0.4) and not d["significant"]
    assert math.isclose(d["randomization_p_holm"], 0.4)
