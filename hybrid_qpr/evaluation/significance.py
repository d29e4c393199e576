"""Is a difference between two runs real? Paired tests over per-query scores.

Two runs scored on the same queries give one difference per query, ``d_i = b_i - a_i``.

* :func:`randomization_test` (Fisher's paired randomization test; Smucker, Allan & Carterette,
  CIKM 2007): under "no difference" each ``d_i`` is as likely to carry the other sign, so the
  p-value is the share of sign assignments whose ``|mean(d)|`` is at least the observed one.
  With ``2**n <= resamples`` every assignment is enumerated (exact); otherwise ``resamples``
  assignments are drawn with ``seed`` and ``p = (hits + 1) / (resamples + 1)``.
* :func:`paired_t_test`: Student's t on the differences, two-sided, ``n - 1`` degrees of freedom.
* :func:`holm`: Holm's step-down correction (Scand. J. Statistics, 1979) when several
  comparisons are tested at once, so "significant" keeps its meaning across all of them.
* :func:`bootstrap_interval`: a percentile bootstrap confidence interval of the mean difference,
  resampling queries with replacement.
* :func:`compare` puts them together for runs against a baseline, with the per-query
  win/loss/tie list, worst losses first.

Scores in, numbers out; numpy only (the t distribution is computed here, no scipy needed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hybrid_qpr.errors import ConfigError

RESAMPLES = 10_000
SEED = 13
ALPHA = 0.05
TIE = 1e-9  # per-query differences smaller than this are ties
SMALL_SAMPLE = 30  # fewer queries than this: say that the test has little power


def _differences(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ConfigError(f"paired scores need one score per query in each run; got {a.shape} and {b.shape}")
    if a.size == 0:
        raise ConfigError("no query is scored in both runs; nothing to compare")
    return b - a


def _at_least(null: np.ndarray, observed: float) -> np.ndarray:
    """``null >= observed`` with a relative tolerance of 100 ulp, so a resample that equals the
    observed statistic up to rounding counts as reaching it."""
    return null >= observed - abs(observed) * np.finfo(np.float64).eps * 100


def randomization_test(a: Sequence[float], b: Sequence[float], *, resamples: int = RESAMPLES,
                       seed: int = SEED) -> float:
    """Two-sided p-value of the paired randomization (sign-flip) test on ``mean(b - a)``."""
    d = _differences(a, b)
    if resamples < 1:
        raise ConfigError(f"resamples={resamples}: must be >= 1")
    n = d.size
    observed = abs(d.mean())
    if n < 63 and 2 ** n <= resamples:  # every sign assignment, in chunks of rows
        hits, total, chunk = 0, 2 ** n, 1 << 14
        bits = np.arange(n, dtype=np.int64)
        for start in range(0, total, chunk):
            codes = np.arange(start, min(start + chunk, total), dtype=np.int64)
            signs = 1.0 - 2.0 * ((codes[:, None] >> bits) & 1)
            hits += int(_at_least(np.abs(signs @ d) / n, observed).sum())
        return hits / total
    rng = np.random.default_rng(seed)
    hits, chunk = 0, max(1, 2_000_000 // n)
    for start in range(0, resamples, chunk):
        rows = min(chunk, resamples - start)
        signs = np.where(rng.random((rows, n)) < 0.5, -1.0, 1.0)
        hits += int(_at_least(np.abs(signs @ d) / n, observed).sum())
    return (hits + 1) / (resamples + 1)


def paired_t_test(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided p-value of Student's paired t-test on ``b - a`` (1.0 when every difference is
    0, 0.0 when they are all the same non-zero value: no spread, no doubt)."""
    d = _differences(a, b)
    n = d.size
    if n < 2:
        return 1.0
    mean, sd = d.mean(), d.std(ddof=1)
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    t = mean / (sd / math.sqrt(n))
    df = n - 1
    return float(min(1.0, _regularized_beta(df / (df + t * t), df / 2.0, 0.5)))


def _regularized_beta(x: float, a: float, b: float) -> float:
    """``I_x(a, b)``, the regularized incomplete beta function, by its continued fraction
    (modified Lentz); the two-sided t tail is ``I_{df/(df+t^2)}(df/2, 1/2)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast below this point
        return 1.0 - _regularized_beta(1.0 - x, b, a)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 10_000):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * result


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given: the i-th smallest p is multiplied by
    ``m - i + 1`` (i from 1), made non-decreasing in that order, and capped at 1."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted = [0.0] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def bootstrap_interval(a: Sequence[float], b: Sequence[float], *, confidence: float = 0.95,
                       resamples: int = RESAMPLES, seed: int = SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(b - a)``: queries resampled with replacement."""
    d = _differences(a, b)
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence={confidence}: must be between 0 and 1")
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // d.size)
    for start in range(0, resamples, chunk):
        rows = min(chunk, resamples - start)
        means[start:start + rows] = d[rng.integers(0, d.size, size=(rows, d.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


@dataclass
class Comparison:
    """One run against the baseline on one metric, over the queries both scored."""

    run: str
    baseline: str
    metric: str
    queries: int
    mean: float
    baseline_mean: float
    randomization_p: float
    t_p: float
    randomization_p_holm: float = 1.0
    t_p_holm: float = 1.0
    wins: int = 0
    losses: int = 0
    ties: int = 0
    # (query id, baseline score, run score), worst losses first, then the biggest wins
    per_query: list[tuple[str, float, float]] = field(default_factory=list)

    @property
    def delta(self) -> float:
        return self.mean - self.baseline_mean

    @property
    def significant(self) -> bool:
        """Below ``ALPHA`` after Holm's correction, on the randomization test."""
        return self.randomization_p_holm < ALPHA

    def verdict(self) -> str:
        """One plain sentence on what the numbers allow one to say."""
        few = f"; only {self.queries} queries, so the test has little power" if self.queries < SMALL_SAMPLE else ""
        if self.significant:
            word = "better" if self.delta > 0 else "worse"
            return f"{self.run} is {word} than {self.baseline} on {self.metric} (p={self.randomization_p_holm:.4f} after Holm){few}"
        return (f"no significant difference between {self.run} and {self.baseline} on {self.metric} "
                f"(p={self.randomization_p_holm:.4f} after Holm): within noise{few}")

    def to_dict(self, *, rows: int | None = None) -> dict[str, Any]:
        listed = self.per_query if rows is None else self.per_query[:rows]
        return {"run": self.run, "baseline": self.baseline, "metric": self.metric, "queries": self.queries,
                "mean": self.mean, "baseline_mean": self.baseline_mean, "delta": self.delta,
                "randomization_p": self.randomization_p, "t_p": self.t_p,
                "randomization_p_holm": self.randomization_p_holm, "t_p_holm": self.t_p_holm,
                "significant": self.significant, "verdict": self.verdict(),
                "wins": self.wins, "losses": self.losses, "ties": self.ties,
                "per_query": [{"query": q, "baseline": s, "run": r, "delta": r - s} for q, s, r in listed]}


def compare(scores: Mapping[str, Mapping[str, float]], baseline: str, metric: str, *,
            resamples: int = RESAMPLES, seed: int = SEED) -> list[Comparison]:
    """Every run of ``scores`` (run name -> query id -> score) against ``baseline``, on the
    queries both scored; p-values Holm-corrected over the comparisons."""
    if baseline not in scores:
        raise ConfigError(f"baseline {baseline!r} is not among the runs ({', '.join(scores)})")
    base = scores[baseline]
    out: list[Comparison] = []
    for name, run in scores.items():
        if name == baseline:
            continue
        queries = sorted(q for q in run if q in base)
        a = np.array([base[q] for q in queries], dtype=np.float64)
        b = np.array([run[q] for q in queries], dtype=np.float64)
        d = _differences(a, b)
        rows = sorted(zip(queries, a.tolist(), b.tolist()), key=lambda row: (row[2] - row[1], row[0]))
        out.append(Comparison(name, baseline, metric, len(queries), float(b.mean()), float(a.mean()),
                              randomization_test(a, b, resamples=resamples, seed=seed), paired_t_test(a, b),
                              wins=int((d > TIE).sum()), losses=int((d < -TIE).sum()),
                              ties=int((np.abs(d) <= TIE).sum()), per_query=rows))
    for attribute in ("randomization_p", "t_p"):
        for comparison, adjusted in zip(out, holm([getattr(c, attribute) for c in out])):
            setattr(comparison, attribute + "_holm", adjusted)
    return out


def compare_runs(runs: Mapping[str, Mapping[str, Sequence[str]]], qrels: Mapping[str, Mapping[str, int]], *,
                 task: str = "paraphrase", baseline: str | None = None, metric: str | None = None,
                 resamples: int = RESAMPLES, seed: int = SEED) -> list[Comparison]:
    """Score ``runs`` (name -> query id -> ranked ids) per query on ``metric`` (the task's main
    metric when None) and compare each with ``baseline`` (the first run when None)."""
    from hybrid_qpr.evaluation.tasks import get_task

    spec = get_task(task)
    metric = metric or spec.main_metric
    if len(runs) < 2:
        raise ConfigError(f"a comparison needs two runs or more; got {len(runs)}")
    baseline = baseline or next(iter(runs))
    scores = {name: spec.per_query(run, qrels, metric) for name, run in runs.items()}
    return compare(scores, baseline, metric, resamples=resamples, seed=seed)


def markdown(comparisons: Sequence[Comparison], *, rows: int = 10) -> str:
    """A table of the comparisons, their verdicts, and each one's worst losses and best wins."""
    if not comparisons:
        return ""
    first = comparisons[0]
    lines = [f"Baseline {first.baseline}, metric {first.metric}; paired randomization test (two-sided) and "
             f"paired t-test, Holm-corrected over {len(comparisons)} comparison(s).", "",
             "| run | mean | baseline | delta | p rand. | p rand. Holm | p t | p t Holm | wins | losses | ties |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in comparisons:
        lines.append(f"| {c.run} | {c.mean:.4f} | {c.baseline_mean:.4f} | {c.delta:+.4f} | {c.randomization_p:.4f} "
                     f"| {c.randomization_p_holm:.4f} | {c.t_p:.4f} | {c.t_p_holm:.4f} | {c.wins} | {c.losses} | {c.ties} |")
    lines.append("")
    lines += [f"- {c.verdict()}" for c in comparisons]
    for c in comparisons:
        losses = [row for row in c.per_query if row[2] - row[1] < -TIE][:rows]
        wins = [row for row in reversed(c.per_query) if row[2] - row[1] > TIE][:rows]
        for title, chosen in (("worst losses", losses), ("biggest wins", wins)):
            if chosen:
                lines += ["", f"{c.run} vs {c.baseline}, {title}:", "", "| query | baseline | run | delta |", "|---|---:|---:|---:|"]
                lines += [f"| {q} | {s:.4f} | {r:.4f} | {r - s:+.4f} |" for q, s, r in chosen]
    return "\n".join(lines) + "\n"


def gain(base: Mapping[str, float], run: Mapping[str, float], *, confidence: float = 0.95,
         resamples: int = RESAMPLES, seed: int = SEED) -> dict[str, Any]:
    """The gain of ``run`` over ``base`` (query id -> score, over the queries both scored) with
    a bootstrap confidence interval and the randomization test's p-value, and ``noise``: True
    when the interval holds 0 or the test is not significant, i.e. the gain may not be real."""
    queries = sorted(q for q in run if q in base)
    a = [base[q] for q in queries]
    b = [run[q] for q in queries]
    low, high = bootstrap_interval(a, b, confidence=confidence, resamples=resamples, seed=seed)
    p = randomization_test(a, b, resamples=resamples, seed=seed)
    delta = float(np.mean(b) - np.mean(a))
    return {"delta": delta, "low": low, "high": high, "confidence": confidence, "p": p, "queries": len(queries),
            "noise": bool(low <= 0 <= high or p >= ALPHA), "few": len(queries) < SMALL_SAMPLE}


def clearly_better(base: Mapping[str, float], run: Mapping[str, float], *, confidence: float = 0.95,
                   resamples: int = RESAMPLES, seed: int = SEED) -> tuple[bool, dict[str, Any]]:
    """The rule by which a tuned setting replaces the one in place (``tune``, the workbench):
    only when the lower bound of the bootstrap interval of its gain over ``base`` (query id ->
    score) is above 0. A grid searched on a small validation set always finds some winner; an
    interval that reaches 0 says the gain may be that search's luck. Returns the verdict and
    :func:`gain`'s result."""
    found = gain(base, run, confidence=confidence, resamples=resamples, seed=seed)
    return found["low"] > 0, found


def gain_sentence(result: Mapping[str, Any], run: str, base: str, metric: str) -> str:
    """``result`` of :func:`gain` as one plain sentence."""
    head = (f"{run} vs {base}: {metric} {result['delta']:+.4f} "
            f"({result['confidence']:.0%} CI {result['low']:+.4f} .. {result['high']:+.4f}, p={result['p']:.4f}, "
            f"{result['queries']} queries)")
    if result["noise"]:
        head += ": within noise, this gain may not hold on other queries"
    if result["few"]:
        head += f"; fewer than {SMALL_SAMPLE} queries is a small sample, tune on more judged queries"
    return head
