"""Judgment-free comparison: Jaccard and rank-biased overlap against references written here
from their definitions (Webber, Moffat & Zobel, ACM TOIS 2010, equations 30 and 32)."""

from __future__ import annotations

import random

import pytest

from hybrid_qpr.errors import ConfigError
from hybrid_qpr.evaluation.overlap import Configuration, jaccard, overlap_report, rbo


def reference_rbo_ext(a, b, p):
    """Equation 30 term by term, with prefix overlaps computed from sets at every depth."""
    S, L = (a, b) if len(a) <= len(b) else (b, a)
    s, l = len(S), len(L)

    def X(d):
        return len(set(S[:min(d, s)]) & set(L[:d]))

    total = sum(X(d) / d * p ** d for d in range(1, l + 1))
    total += sum(X(s) * (d - s) / (s * d) * p ** d for d in range(s + 1, l + 1))
    return (1 - p) / p * total + ((X(l) - X(s)) / l + X(s) / s) * p ** l


def reference_rbo_even(a, b, p):
    """Equation 32 (even lengths): RBO_ext = X_k/k p^k + (1-p)/p sum_d X_d/d p^d."""
    k = len(a)
    A = [len(set(a[:d]) & set(b[:d])) / d for d in range(1, k + 1)]
    return A[-1] * p ** k + (1 - p) / p * sum(A[d - 1] * p ** d for d in range(1, k + 1))


def test_rbo_matches_the_papers_definition_on_fixed_lists():
    rnd = random.Random(5)
    docs = [f"d{i}" for i in range(30)]
    for _ in range(200):
        a = rnd.sample(docs, rnd.randint(1, 15))
        b = rnd.sample(docs, rnd.randint(1, 15))
        p = rnd.choice((0.5, 0.8, 0.9, 0.98))
        assert rbo(a, b, p, k=None) == pytest.approx(reference_rbo_ext(a, b, p), abs=1e-12)
        if len(a) == len(b):
            assert rbo(a, b, p, k=None) == pytest.approx(reference_rbo_even(a, b, p), abs=1e-12)


def test_rbo_and_jaccard_fixed_values():
    assert rbo(list("abcde"), list("abcde")) == pytest.approx(1.0)
    assert rbo(list("abc"), list("xyz")) == 0.0
    assert rbo(list("abcdefg"), list("abc")) == pytest.approx(1.0)  # a prefix extrapolates to agreement
    assert rbo(list("abcde"), list("edcba"), p=0.9) == pytest.approx(reference_rbo_even(list("abcde"), list("edcba"), 0.9))
    assert rbo([], []) == 1.0 and rbo(["a"], []) == 0.0
    assert jaccard(list("abcd"), list("cdef")) == pytest.approx(2 / 6)
    assert jaccard(list("abcdxyz"), list("abcd"), k=4) == 1.0
    assert rbo(list("abcz"), list("abcy"), k=3) == pytest.approx(1.0)
    with pytest.raises(ConfigError, match="persistence"):
        rbo(["a"], ["a"], p=1.0)


def test_overlap_report_lists_the_most_changed_first():
    queries = {"q1": "same", "q2": "swapped", "q3": "different"}
    a = {"q1": ["a", "b"], "q2": ["a", "b"], "q3": ["a", "b"]}
    b = {"q1": ["a", "b"], "q2": ["b", "a"], "q3": ["x", "y"]}
    report = overlap_report(a, b, queries, k=2, shown=2)
    assert [r["id"] for r in report["changed"]] == ["q3", "q2"]
    assert report["changed"][0]["only_b"] == ["x", "y"]
    assert report["same_top"] == pytest.approx(1 / 3) and report["same_first"] == pytest.approx(1 / 3)
    assert report["jaccard"] == pytest.approx(2 / 3)


def test_configuration_specs():
    assert Configuration.parse("hybrid,fusion=rrf,alpha=0.3") == Configuration("hybrid", "rrf", 0.3)
    assert Configuration.parse("knn,index=./other").label() == "knn,index=./other"
    for bad, problem in (("", "starts with a mode"), ("hybrid,fusion=max", "fusion 'max'"),
                         ("hybrid,alpha=2", "between 0 and 1"), ("hybrid,depth=3", "not fusion")):
        with pytest.raises(ConfigError, match=problem):
            Configuration.parse(bad)
