"""Write an evaluation result (from ``evaluator.evaluate``) as report.md, report.json and report.png.

Every file is written aside and renamed into place. matplotlib is imported only here and
only when the plot is drawn (``pip install 'hybrid-qpr[report]'``); without it the plot is
left out (``plot_unavailable`` says why) and report.md does not link it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hybrid_qpr.artifacts import atomic_write
from hybrid_qpr.errors import MissingDependencyError, require
from hybrid_qpr.evaluation.evaluator import METRIC_NAMES

LATENCY_NAMES = ("p50_ms", "p95_ms", "p99_ms", "qps")


def metric_names(results: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
    """The metrics the results hold, in their order (the paraphrase set when there are none)."""
    first = next(iter(results.values()), None)
    return tuple(first["metrics"]) if first else METRIC_NAMES


def table_cells(results: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The header and one row per mode: the quality metrics, then latency and throughput."""
    names = metric_names(results)
    head = ["mode", *names, "p50 ms", "p95 ms", "p99 ms", "queries/s"]
    rows = []
    for mode, r in results.items():
        cells = [mode] + [f"{r['metrics'][m]:.4f}" for m in names]
        cells += [f"{r['latency'][k]:.2f}" for k in ("p50_ms", "p95_ms", "p99_ms")] + [f"{r['latency']['qps']:.1f}"]
        rows.append(cells)
    return head, rows


def markdown_table(results: Mapping[str, Mapping[str, Any]]) -> str:
    """``table_cells`` as a Markdown table (report.md, and evaluate's output to paste)."""
    head, rows = table_cells(results)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])


# Columns left out first when a terminal table would be too wide (the first one first).
NARROW_DROP_ORDER = ("p95 ms", "Recall@20", "Recall@10", "MAP", "p99 ms", "Recall@100", "H@10")


def rich_table(results: Mapping[str, Mapping[str, Any]], title: str | None = None, width: int | None = None):
    """``table_cells`` as a rich table for a terminal, ``width`` columns at most: columns are
    left out (``NARROW_DROP_ORDER``; the caption names them) rather than cut."""
    from rich.table import Table

    head, rows = table_cells(results)
    columns = {name: [cells[i] for cells in rows] for i, name in enumerate(head)}
    dropped = []
    for name in NARROW_DROP_ORDER if width is not None else ():
        # each column adds two spaces of padding and one border; the table one more border
        if sum(max(len(n), *map(len, cells)) + 3 for n, cells in columns.items()) + 1 <= width:
            break
        if columns.pop(name, None) is not None:
            dropped.append(name)
    caption = f"left out to fit {width} columns: {', '.join(dropped)}" if dropped else None
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for i, name in enumerate(columns):
        table.add_column(name, justify="left" if i == 0 else "right", no_wrap=True)
    for cells in zip(*columns.values()):
        table.add_row(*cells)
    return table


def plot_unavailable() -> str | None:
    """Why ``report.png`` cannot be drawn here (matplotlib is missing, with the install
    command), or None when it can."""
    try:
        require("matplotlib", extra="report", feature="the report plot (report.png)")
    except MissingDependencyError as exc:
        return str(exc)
    return None


def write_report(results: Mapping[str, Mapping[str, Any]], out_dir: str | Path, *, title: str = "Evaluation",
                 context: Mapping[str, Any] | None = None, plot: bool = True) -> dict[str, Path]:
    """Write ``report.md``, ``report.json`` and (``plot=True``, when matplotlib is installed)
    ``report.png`` into ``out_dir``; the returned paths hold "png" only when it was written."""
    plot = plot and plot_unavailable() is None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    context = dict(context or {})
    paths = {"json": out_dir / "report.json", "md": out_dir / "report.md"}
    with atomic_write(paths["json"]) as fh:
        json.dump({"title": title, "context": context, "results": results}, fh, indent=2, ensure_ascii=False)
    settings = "\n".join(f"- {mode}: " + ", ".join(f"{k}={v}" for k, v in r.get("settings", {}).items())
                         for mode, r in results.items())
    facts = "\n".join(f"- {k}: {v}" for k, v in context.items())
    body = (f"# {title}\n\n{facts}\n\n{markdown_table(results)}\n\nSettings per mode:\n{settings}\n\n"
            f"{_protocol(results)} Latency per query includes encoding.\n")
    if plot:  # drawn before report.md links it
        paths["png"] = out_dir / "report.png"
        plot_modes(results, paths["png"], title)
        body += "\n![modes compared](report.png)\n"
    with atomic_write(paths["md"]) as fh:
        fh.write(body)
    return paths


def _protocol(results: Mapping[str, Mapping[str, Any]]) -> str:
    first = next(iter(results.values()), {})
    task = first.get("settings", {}).get("task", "paraphrase")
    if task == "paraphrase":
        return ("Metrics: retrieve 20 per query, drop the query's own id, then H@k / MRR@20 / Recall@k / nDCG@10 / MAP "
                "(hybrid_qpr.evaluation.metrics).")
    return (f"Task {task}: retrieve {first.get('settings', {}).get('retrieve')} per query, then "
            f"{' / '.join(metric_names(results))} (hybrid_qpr.evaluation.tasks).")


def plot_modes(results: Mapping[str, Mapping[str, Any]], path: str | Path, title: str = "Evaluation") -> None:
    """Bars of H@1, H@10, MRR@20, nDCG@10 per mode, and p50 latency per mode."""
    matplotlib = require("matplotlib", extra="report", feature="the report plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(results)
    names = metric_names(results)
    shown = tuple(m for m in ("H@1", "H@10", "MRR@20", "nDCG@10") if m in names) or names[:4]
    fig, (ax_quality, ax_latency) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / max(len(modes), 1)
    for i, mode in enumerate(modes):
        xs = [j + i * width for j in range(len(shown))]
        ax_quality.bar(xs, [results[mode]["metrics"][m] for m in shown], width, label=mode)
    ax_quality.set_xticks([j + 0.4 - width / 2 for j in range(len(shown))], shown)
    ax_quality.set_ylim(0, 1)
    ax_quality.set_title(title)
    ax_quality.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=max(len(modes), 1), frameon=False)
    ax_latency.bar(modes, [results[m]["latency"]["p50_ms"] for m in modes], color="grey")
    ax_latency.set_ylabel("p50 latency (ms)")
    fig.tight_layout()
    path = Path(path)
    with atomic_write(path, mode="wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)
