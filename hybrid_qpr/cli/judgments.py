"""``hybrid-qpr judgments``: move judgments between TREC qrels, Quepid CSV and the BEIR layout."""

from __future__ import annotations

import click

from hybrid_qpr.cli._common import friendly_errors
from hybrid_qpr.evaluation.qrels_io import QRELS_FORMATS


@click.group()
def judgments() -> None:
    """Judgments (qrels) in the formats other tools use: TREC qrels (trec_eval), Quepid's
    ratings CSV and BEIR directories (what 'evaluate' and 'tune' read, and the workbench writes)."""


@judgments.command()
@click.argument("source", type=click.Path(exists=True))
@click.argument("target", type=click.Path())
@click.option("--from", "from_format", type=click.Choice(QRELS_FORMATS), default=None,
              help="SOURCE's format. [default: beir for a directory, quepid for .csv, else trec]")
@click.option("--to", "to_format", type=click.Choice(QRELS_FORMATS), default=None,
              help="TARGET's format. [default: as for --from: a path without suffix is a BEIR directory]")
@click.option("--split", default="test", show_default=True, help="The BEIR split read or written (qrels/<split>.tsv).")
@click.option("--target-split", default=None, help="The BEIR split written, when it differs from --split.")
@click.option("--queries", "queries_dir", type=click.Path(exists=True, file_okay=False), default=None,
              help="A BEIR directory whose queries.jsonl maps query ids to texts: Quepid keys ratings by text.")
@friendly_errors
def convert(source, target, from_format, to_format, split, target_split, queries_dir) -> None:
    """Read the judgments of SOURCE and write them to TARGET. Grades stay integers; an id a
    whitespace format cannot hold (a space or tab in TREC qrels) is refused, never torn.

    \b
    Examples:
      hybrid-qpr judgments convert data/quora/beir quora-test.qrels --split test
      hybrid-qpr judgments convert quora-test.qrels ratings.csv --queries data/quora/beir
      hybrid-qpr judgments convert ratings.csv judged-beir --queries data/quora/beir --target-split val
    """
    from hybrid_qpr.evaluation.qrels_io import read_beir_queries, read_judgments, write_judgments

    known = read_beir_queries(queries_dir) if queries_dir else {}
    qrels, texts = read_judgments(source, from_format, split=split, queries=known)
    count = write_judgments(target, qrels, to_format, split=target_split or split, queries=texts)
    click.echo(f"wrote {count} judgments of {len(qrels)} queries to {target}")
