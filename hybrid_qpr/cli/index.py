"""``hybrid-qpr index``: maintenance of a local index directory (check, repair, optimize) and removal of a cluster index (drop)."""

from __future__ import annotations

import click

from hybrid_qpr.cli._common import cluster_options, friendly_errors
from hybrid_qpr.text.analysis import ANALYZERS

WAIT_HELP = "If another process is writing the index, wait for it instead of failing."


@click.group()
def index() -> None:
    """Check, repair or optimize a local index directory; drop a cluster index."""


@index.command()
@click.argument("directory", type=click.Path(file_okay=False))
@friendly_errors
def check(directory) -> None:
    """Verify every file of the index in DIRECTORY against its manifest (sizes, CRC32
    checksums recorded at commit, row counts, vector dims, postings, tombstones) and say
    how to recover from each problem: 'index repair' for a damaged manifest, 'index
    optimize' for damaged segment files. Exit status 1 when something is wrong.

    \b
    Example:
      hybrid-qpr index check ./qidx
    """
    from hybrid_qpr.backends.local.check import check_index

    report = check_index(directory)
    for note in report.notes:
        click.echo(f"note: {note}")
    if report.ok:
        segments = f"{report.segments} segment" + ("" if report.segments == 1 else "s")
        click.echo(f"ok: {directory}: {report.documents} documents in {segments} (commit "
                   f"{report.generation}); every file matches its checksum")
        return
    for problem in report.problems:
        click.echo(f"problem: {problem.what}\n  fix: {problem.fix}")
    raise click.exceptions.Exit(1)


@index.command()
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@friendly_errors
def repair(directory) -> None:
    """Rebuild the damaged manifest.json of the index in DIRECTORY from the copy each commit
    also writes (manifest.copy.json), or from what is readable of it, keeping every segment
    whose files match their recorded sizes and CRC32 checksums and naming each one it leaves
    out. An intact manifest is left alone; a damaged, missing or stale copy of it is
    rewritten from it. Exit status 1 when a segment was left out.

    \b
    Example:
      hybrid-qpr index repair ./qidx && hybrid-qpr index check ./qidx
    """
    from hybrid_qpr.backends.local.repair import repair_index

    report = repair_index(directory)
    if not report.repaired:
        click.echo(f"ok: {directory}: its manifest and its copy are intact; nothing to repair")
        return
    if report.copy_rewritten:
        click.echo(f"repaired {directory}: manifest.copy.json rewritten from the intact manifest.json (the copy "
                   f"{report.copy_rewritten}); {report.documents} documents")
        return
    click.echo(f"repaired {directory}: manifest rebuilt from {report.source}; {len(report.kept)} segment(s) kept, "
               f"{report.documents} documents")
    for left in report.left_out:
        click.echo(f"  left out {left}", err=True)
    if report.left_out:
        raise click.exceptions.Exit(1)


@index.command()
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@click.option("--model", type=click.Path(file_okay=False), default=None,
              help="Encoder to re-encode damaged vectors with. [default: the model the index was built with]")
@click.option("--drop-damaged", is_flag=True,
              help="Drop segments whose damage their checksums confirm and that cannot be rebuilt from a second "
                   "copy: lists what is lost, asks, and moves their files to DIRECTORY/damaged/ (then re-ingest your "
                   "source file; it never duplicates).")
@click.option("--yes", "-y", is_flag=True, help="With --drop-damaged: drop without asking (the list is still printed).")
@click.option("--wait", is_flag=True, help=WAIT_HELP)
@click.option("--language", type=click.Choice(ANALYZERS), default=None,
              help="Move the index to this BM25 analyzer: the postings are rebuilt from the stored texts (vectors "
                   "are kept, nothing is re-encoded) and committed with it. [default: the index's own]")
@friendly_errors
def optimize(directory, model, drop_damaged, yes, wait, language) -> None:
    """Merge all segments of the index in DIRECTORY into one: deleted documents are purged
    and the FAISS and BM25 parts rebuilt. Also repairs what 'index check' reports in a
    segment, from the second copy each part has: FAISS, BM25 and text files; vectors,
    re-encoded with the index's model; docs.sqlite from the text store and the ids file;
    tombstones from their copy (or from the ids updated in other segments). What cannot be
    rebuilt (both copies damaged, or a segment written by an earlier version) is named with
    the documents it costs; --drop-damaged lists them, asks, and moves the segment's files to
    DIRECTORY/damaged/ before dropping it (an updated document gets its older version back
    where that is still stored). (A damaged manifest: 'index repair'.) An index already in
    one segment whose vector graph was written by an earlier version gets the graph's nodes
    stored in locality order (seconds, no rebuild; kNN searches 4-9% faster).
    --language moves the index to another BM25 analyzer (an index built before analyzers
    existed runs 'legacy'; 'index check' says so).

    \b
    Examples:
      hybrid-qpr index optimize ./qidx
      hybrid-qpr index optimize ./qidx --language english
    """
    from pathlib import Path

    from hybrid_qpr.backends.local import LocalIndex
    target = LocalIndex.open_for_repair(directory)
    encoder = None
    model = model or target.model_dir
    if model and Path(model).is_dir():
        from hybrid_qpr.encoders import Encoder

        encoder = Encoder.load(model)
        target.check_encoder(encoder)

    def confirm(losses) -> bool:
        for loss in losses:
            click.echo(f"segment {loss.segment} cannot be rebuilt: {loss.problem}\n  {loss.summary()}", err=True)
        click.echo(f"The files of {'these segments' if len(losses) > 1 else 'this segment'} go to "
                   f"{Path(directory) / 'damaged'}/ (with lost.json: why, and the ids it costs where readable).", err=True)
        if yes:
            return True
        try:
            return click.confirm("Drop them?" if len(losses) > 1 else "Drop it?", default=False, err=True)
        except click.Abort:  # no answer (end of input, Ctrl-C): keep everything
            return False

    result = target.optimize(encoder=encoder, drop_damaged=drop_damaged, confirm=confirm, wait=wait, analyzer=language)
    if result["declined"]:
        click.echo(f"nothing dropped: {directory} is as it was", err=True)
        raise click.exceptions.Exit(1)
    click.echo(f"optimized {directory}: {result['segments_before']} segment(s) -> {len(target.segments)}, "
               f"{result['documents']} documents; BM25 analyzer {target.analyzer.name}")
    for loss in result["dropped"]:
        click.echo(f"  dropped damaged segment {loss.segment} ({loss.lost} documents lost"
                   + (f", {len(loss.restored)} back in their older version" if loss.restored else "")
                   + f"; its files are in {Path(directory) / 'damaged' / loss.segment}); re-ingest your source file "
                   "to restore its documents", err=True)


@index.command()
@click.argument("name")
@click.option("--yes", "-y", is_flag=True, help="Drop without asking for confirmation.")
@cluster_options(selects_backend=True)
@friendly_errors
def drop(name, yes, **connection) -> None:
    """Delete the OpenSearch or Elasticsearch index NAME with all its documents. Asks for
    confirmation first (--yes skips it). NAME is one index, never a pattern. A local index
    is a directory: remove that with 'rm -r'.

    \b
    Example:
      hybrid-qpr index drop questions --opensearch http://127.0.0.1:9200
    """
    from hybrid_qpr.cli._backend import open_cluster_index

    backend = open_cluster_index(name, connection)
    if backend is None:
        raise click.UsageError("index drop deletes a cluster index: give --opensearch [URL] or --elasticsearch [URL] "
                               "(a local index is a directory: remove it with 'rm -r')")
    if not backend.exists():
        raise click.ClickException(f"{backend.engine_name} has no index {name!r}: nothing dropped")
    documents = backend.count()
    if not yes:
        click.confirm(f"Drop {backend.engine_name} index {name!r} and its {documents:,} documents?", abort=True, err=True)
    backend.drop()
    click.echo(f"dropped {backend.engine_name} index {name!r} ({documents:,} documents)")
