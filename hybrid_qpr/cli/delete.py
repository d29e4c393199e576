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

    wanted = list(ids) + (_read_ids(ids_file) if ids_file else [])
    if not wanted:
        raise click.UsageError("give at least one id (or --ids-file)")
    backend = open_backend(index, connection)
    removed = backend.delete(wanted, wait=wait)
    click.echo(f"deleted {removed} of {len(wanted)} ids from {index}")


def _read_ids(ids_file: str) -> list[str]:
    """The non-blank lines of ``ids_file`` ('-' = stdin), stripped; a line that is not UTF-8
    stops with its line number before anything is deleted."""
    from hybrid_qpr.artifacts import display_name, iconv_fix

    ids = []
    with click.open_file(ids_file, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError as exc:
                raise click.ClickException(f"{ids_file}:{number}: not valid UTF-8 text ({exc.reason} at byte {exc.start} "
                                           f"of the line); nothing was deleted. Fix: "
                                           f"{iconv_fix(display_name(ids_file), raw)}") from None
            if line:
                ids.append(line)
    return ids
