"""``hybrid-qpr history``: the trend of the evaluations kept by ``evaluate --history DIR``."""

from __future__ import annotations

import click

from hybrid_qpr.cli._common import friendly_errors, SEED
from hybrid_qpr.evaluation.significance import RESAMPLES, SEED as DEFAULT_SEED


@click.command()
@click.argument("history_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of tables.")
@click.option("--resamples", type=click.IntRange(100, 1_000_000), default=RESAMPLES, show_default=True,
              help="Sign assignments drawn by the randomization test.")
@click.option("--seed", type=SEED, default=DEFAULT_SEED, show_default=True, help="Seed of the randomization test.")
@click.option("--fail-on-drop", is_flag=True, help="Exit with status 2 when a drop is significant (for CI).")
@friendly_errors
def history(history_dir, as_json, resamples, seed, fail_on_drop) -> None:
    """Every metric of every run across the evaluations in HISTORY_DIR, oldest first, and the
    latest evaluation against the one before it: a paired randomization test per run and metric
    on the queries both evaluated (Holm-corrected over all of them), a significant fall flagged
    as SIGNIFICANT DROP. Each evaluation also records its model, index and fusion.

    \b
    Example:
      hybrid-qpr evaluate --beir data/quora/beir --index ./quora-idx --history reports/history
      hybrid-qpr history reports/history
    """
    import json

    from hybrid_qpr.evaluation import history as history_lib

    summary = history_lib.report(history_dir, resamples=resamples, seed=seed)
    if not summary["evaluations"]:
        raise click.ClickException(f"{history_dir} holds no evaluation yet; add one with 'hybrid-qpr evaluate ... "
                                   f"--history {history_dir}'")
    if as_json:
        click.echo(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        for entry in summary["evaluations"]:
            facts = ", ".join(f"{k}={v}" for k, v in entry["context"].items() if k in ("model", "index", "fusion", "alpha", "split"))
            click.echo(f"#{entry['number']} {entry['time']}  {facts}")
        click.echo("")
        click.echo(history_lib.markdown(summary).rstrip())
    if summary["drops"]:
        click.echo(f"{len(summary['drops'])} significant drop(s) in the latest evaluation", err=True)
        if fail_on_drop:
            raise SystemExit(2)
