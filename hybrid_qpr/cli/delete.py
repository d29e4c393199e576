"""``hybrid-qpr delete``: remove documents by id from a local index or an OpenSearch index."""

from __future__ import annotations

import click

from hybrid_qpr.cli._common import cluster_options, friendly_errors


@click.command()
@click.argument("ids", nargs=-1)
@click.option("--index", required=True, help="Local index directory, or the cluster index name with --opensearch/--elasticsearch.")
@click.option("--ids-file", type=click.Path(allow_dash=True, dir_okay=False), default=None,
              help="Also delete the ids listed in this file, one per line ('-' = stdin).")
@click.option("--wait", is_flag=True, help="Local index: if another process is writing it, wait for it instead of failing.")
@cluster_options(selects_backend=True)
@friendly_errors
def delete(ids, index, ids_file, wait, **connection) -> None:
    """Delete the documents with the given IDS (a local index records tombstones; the
    space is reclaimed by merges and 'hybrid-qpr index optimize').

    \b
    Example:
      hybrid-qpr delete q17 q18 --index ./qidx
    """
    from hybrid_qpr.cli._backend import open_backend

    wanted = list(ids)
    if ids_file:
        with click.open_file(ids_file, encoding="utf-8") as fh:
            wanted += [line.strip() for line in fh if line.strip()]
    if not wanted:
        raise click.UsageError("give at least one id (or --ids-file)")
    backend = open_backend(index, connection)
    removed = backend.delete(wanted, wait=wait)
    click.echo(f"deleted {removed} of {len(wanted)} ids from {index}")
