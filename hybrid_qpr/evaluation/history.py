"""Regressions over time: each evaluation's metrics, kept with what produced them.

A history directory holds ``history.jsonl`` (one line per evaluation: when, the context it ran
in — model fingerprint, index, document count, fusion — and every run's mean metrics) and
``runs/<n>.json`` with the per-query scores of that evaluation, so a later report can test
whether a drop against the previous evaluation is more than noise (a paired randomization test
on the queries both evaluated, Holm-corrected over every run and metric compared).

Each file is written aside and renamed into place: an interrupted append leaves the history as
it was.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hybrid_qpr.artifacts import atomic_write, iter_jsonl
from hybrid_qpr.errors import InputError
from hybrid_qpr.evaluation.significance import ALPHA, RESAMPLES, SEED, holm, randomization_test

HISTORY_FILE = "history.jsonl"
RUNS_DIR = "runs"


def append(history_dir: str | Path, context: Mapping[str, Any], metrics: Mapping[str, Mapping[str, float]],
           per_query: Mapping[str, Mapping[str, Mapping[str, float]]]) -> int:
    """Add one evaluation: ``metrics`` (run -> metric -> mean) and ``per_query`` (run -> metric ->
    query id -> score). Returns its number (1 for the first)."""
    history_dir = Path(history_dir)
    entries = load(history_dir)
    number = (entries[-1]["number"] + 1) if entries else 1
    with atomic_write(history_dir / RUNS_DIR / f"{number}.json") as fh:
        json.dump({"number": number, "per_query": per_query}, fh)
    entry = {"number": number, "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
             "context": dict(context), "metrics": {run: dict(values) for run, values in metrics.items()}}
    with atomic_write(history_dir / HISTORY_FILE) as fh:  # the summary last: it is what is read first
        for line in (*entries, entry):
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
    return number


def load(history_dir: str | Path) -> list[dict[str, Any]]:
    """The evaluations of ``history_dir``, oldest first (empty when there are none yet)."""
    path = Path(history_dir) / HISTORY_FILE
    if not path.is_file():
        return []
    entries = []
    for line, obj in iter_jsonl(path, finite=False):  # written by append: a metric may be NaN
        if not isinstance(obj.get("number"), int) or not isinstance(obj.get("metrics"), dict):
            raise InputError(path, line, 'expected {"number": int, "metrics": {...}, ...} (a line hybrid-qpr wrote)')
        entries.append(obj)
    return entries


def per_query_scores(history_dir: str | Path, number: int) -> dict[str, dict[str, dict[str, float]]]:
    path = Path(history_dir) / RUNS_DIR / f"{number}.json"
    if not path.is_file():
        raise InputError(path, None, f"missing: the per-query scores of evaluation {number}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))["per_query"]
    except (ValueError, KeyError) as exc:
        raise InputError(path, None, f"not a per-query score file hybrid-qpr wrote ({exc})") from None


def report(history_dir: str | Path, *, resamples: int = RESAMPLES, seed: int = SEED) -> dict[str, Any]:
    """Every run's trend per metric, and the latest evaluation against the one before it:
    ``drops`` lists each (run, metric) whose per-query scores fell significantly."""
    entries = load(history_dir)
    trend: dict[str, dict[str, list[float | None]]] = {}
    for entry in entries:
        for run, values in entry["metrics"].items():
            for metric in values:
                trend.setdefault(run, {}).setdefault(metric, [])
    for run, metrics in trend.items():
        for metric, series in metrics.items():
            series.extend(entry["metrics"].get(run, {}).get(metric) for entry in entries)
    checks: list[dict[str, Any]] = []
    if len(entries) >= 2:
        previous, latest = entries[-2], entries[-1]
        old, new = per_query_scores(history_dir, previous["number"]), per_query_scores(history_dir, latest["number"])
        for run in sorted(set(old) & set(new)):
            for metric in sorted(set(old[run]) & set(new[run])):
                common = sorted(set(old[run][metric]) & set(new[run][metric]))
                if not common:
                    continue
                a = [old[run][metric][q] for q in common]
                b = [new[run][metric][q] for q in common]
                checks.append({"run": run, "metric": metric, "queries": len(common), "before": sum(a) / len(a),
                               "after": sum(b) / len(b), "p": randomization_test(a, b, resamples=resamples, seed=seed)})
        for check, adjusted in zip(checks, holm([c["p"] for c in checks])):
            check["p_holm"] = adjusted
            check["delta"] = check["after"] - check["before"]
            check["significant_drop"] = check["delta"] < 0 and adjusted < ALPHA
    return {"evaluations": [{k: e.get(k) for k in ("number", "time", "context")} for e in entries],
            "trend": trend, "latest_vs_previous": checks,
            "drops": [c for c in checks if c["significant_drop"]]}


def markdown(summary: Mapping[str, Any]) -> str:
    """The report as text: one table per run (a row per metric, a column per evaluation), then
    the latest against the previous evaluation, significant drops marked."""
    lines: list[str] = []
    numbers = [e["number"] for e in summary["evaluations"]]
    for run, metrics in summary["trend"].items():
        lines += [f"## {run}", "", "| metric | " + " | ".join(f"#{n}" for n in numbers) + " |",
                  "|---|" + "---:|" * len(numbers)]
        for metric, series in metrics.items():
            lines.append(f"| {metric} | " + " | ".join("" if v is None else f"{v:.4f}" for v in series) + " |")
        lines.append("")
    checks = summary["latest_vs_previous"]
    if checks:
        lines += [f"## #{numbers[-1]} against #{numbers[-2]} (paired randomization test, Holm-corrected)", "",
                  "| run | metric | before | after | delta | p (Holm) | |", "|---|---|---:|---:|---:|---:|---|"]
        for c in checks:
            flag = "SIGNIFICANT DROP" if c["significant_drop"] else ""
            lines.append(f"| {c['run']} | {c['metric']} | {c['before']:.4f} | {c['after']:.4f} | {c['delta']:+.4f} "
                         f"| {c['p_holm']:.4f} | {flag} |")
    elif numbers:
        lines.append("One evaluation so far: nothing to compare it with.")
    return "\n".join(lines).rstrip() + "\n"
