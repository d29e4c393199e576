"""``hybrid-qpr ingest``: index questions into a local index directory or an OpenSearch/Elasticsearch index."""

from __future__ import annotations

import click

from hybrid_qpr.cli._common import BATCH, cluster_options, friendly_errors
from hybrid_qpr.cli._backend import knn_search_options, model_option
from hybrid_qpr.backends.local.index import BM25_IMPLS
from hybrid_qpr.backends.local.vectors import FAISS_KINDS
from hybrid_qpr.data.documents import FORMATS
from hybrid_qpr.text.analysis import ANALYZERS, DEFAULT_LANGUAGE

SHOW_SKIPPED = 20


@click.command()
@click.argument("input_path", metavar="INPUT", type=click.Path(exists=True, allow_dash=True, dir_okay=False))
@click.option("--index", required=True, help="Local index directory (created if missing), or the cluster index name with --opensearch/--elasticsearch.")
@model_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="Input format: JSONL/BEIR corpus, TSV/CSV with a header, or a Quora-layout pairs file. auto looks at "
                   "the extension and the first line.")
@click.option("--text-column", default="text", show_default=True, help="Field or column holding the question text.")
@click.option("--id-column", default="id", show_default=True,
              help="Field or column holding the id (BEIR '_id' is found too). Records without one get an id derived from their text.")
@click.option("--faiss", "faiss_kind", type=click.Choice(FAISS_KINDS), default=FAISS_KINDS[0], show_default=True,
              help="Local vector index when the index is created: auto = exact Flat for segments below 20,000 "
                   "documents, the larger ones sharing one HNSW32 graph (the vector base; both chosen by measured "
                   "recall >= 0.95 of the exact top 10: docs/search.md); hnsw = an HNSW32 graph per segment; "
                   "ivf = IVF{4*sqrt(N)},Flat per segment.")
@click.option("--bm25", "bm25_impl", type=click.Choice(BM25_IMPLS), default=BM25_IMPLS[0], show_default=True,
              help="Local BM25 scorer when the index is created: builtin (per-segment postings, corpus-wide "
                   "statistics) or rank-bm25 (a reference for benchmarks, much slower per query).")
@click.option("--language", type=click.Choice(ANALYZERS), default=None,
              help="BM25's language analysis when the index is created: Unicode words, lowercase, stop words, the "
                   "language's Snowball stemmer, ASCII folding (legacy: the words-and-? tokenizer of earlier "
                   f"indexes). An existing index keeps its own. [default: {DEFAULT_LANGUAGE}]")
@knn_search_options("stored in the index when it is created ('query' can override it)")
@click.option("--batch-size", type=BATCH, default=None,
              help="Texts per encoder batch (and per bulk request on a cluster) [default: 256; on a cluster 1000].")
@click.option("--strict", is_flag=True, help="Stop at the first bad input line instead of skipping and reporting it.")
@click.option("--wait", is_flag=True, help="Local index: if another process is writing it, wait for it instead of failing.")
@click.option("--rejects", type=click.Path(dir_okay=False), default=None,
              help="Cluster only: write documents the cluster rejected here as JSON lines.")
@click.option("--shards", type=click.IntRange(min=1), default=None,
              help="Cluster only, when the index is created: primary shards. [default: 1]")
@click.option("--replicas", type=click.IntRange(min=0), default=None,
              help="Cluster only, when the index is created: replicas per shard; each needs a data node of its own, "
                   "so at most the data nodes - 1 (more are refused). [default: 0 on a one-node cluster, else 1]")
@cluster_options(selects_backend=True)
@friendly_errors
def ingest(input_path, index, model, fmt, text_column, id_column, faiss_kind, bm25_impl, language, ef_search, nprobe,
           batch_size, strict, wait, rejects, shards, replicas, **connection) -> None:
    """Encode and index the questions of INPUT ('-' = stdin).

    INPUT is JSONL (id, text, any metadata), TSV/CSV with a header naming the text column, a
    BEIR corpus.jsonl, or a Quora-layout pairs file (each distinct question once). Ingesting
    the same ids again updates them, never duplicates. Bad lines are skipped and listed
    with their line numbers (--strict stops instead). A local ingest adds a segment and
    commits it only when the whole ingest succeeded; one writer at a time (--wait queues).

    A cluster ingest retries what the cluster turns away (429, 5xx, a lost connection: capped
    backoff, the server's Retry-After honoured, smaller requests while it is busy) and then
    reads every id back: it succeeds only if each one holds this file's text. The summary says
    what the retries cost. Exit status 1 when any document was not written.

    Ctrl-C stops an ingest at any moment and says what it left (exit status 130): a local index
    keeps its previous commit, a cluster the documents already sent; re-running the same command
    finishes without duplicates.

    An index without tuned fusion takes the defaults its model directory carries ('tune
    --save-to-model': fusion, alpha, depth and reranker depth tuned on the model's own
    validation data); the summary says where the index's defaults come from.

    \b
    Examples:
      hybrid-qpr ingest questions.jsonl --index ./qidx
      hybrid-qpr ingest quora-pairs.tsv.gz --index ./quora-idx
      hybrid-qpr ingest corpus.jsonl --index questions --opensearch http://127.0.0.1:9200
      hybrid-qpr ingest corpus.jsonl --index questions --elasticsearch --shards 3
    """
    from hybrid_qpr.cli._backend import use_cluster

    stage = _Stage(index, cluster=use_cluster(connection))
    try:  # all of it: reading the first line, opening the model, encoding, committing, the summary
        _ingest(stage, input_path, index, model, fmt, text_column, id_column, faiss_kind, bm25_impl, language,
                ef_search, nprobe, batch_size, strict, wait, rejects, shards, replicas, connection)
    except KeyboardInterrupt:
        click.echo(stage.interrupted(), err=True)
        raise SystemExit(130) from None  # the shell's code for an interrupt, not click's "Aborted!" and 1


def _ingest(stage, input_path, index, model, fmt, text_column, id_column, faiss_kind, bm25_impl, language, ef_search,
            nprobe, batch_size, strict, wait, rejects, shards, replicas, connection) -> None:
    from hybrid_qpr import resources
    from hybrid_qpr.artifacts import display_name
    from hybrid_qpr.backends.base import adopt_model_fusion_defaults
    from hybrid_qpr.cli._backend import open_for_ingest, refuse_knn_options_on_a_cluster
    from hybrid_qpr.data.documents import iter_documents, require_documents
    from hybrid_qpr.errors import BadLines

    bad_lines = BadLines("error" if strict else "skip")
    generated: list[int] = []  # lines given an id derived from their text
    documents = iter_documents(input_path, text_column=text_column, id_column=id_column, fmt=fmt, bad_lines=bad_lines,
                               generated_ids=generated)
    documents = require_documents(documents, input_path, bad_lines)  # nothing usable: refused before any index is made
    refuse_knn_options_on_a_cluster(connection, ef_search, nprobe)
    backend, encoder = open_for_ingest(index, connection, model, faiss_kind=faiss_kind, bm25_impl=bm25_impl,
                                       ef_search=ef_search, nprobe=nprobe, shards=shards, replicas=replicas,
                                       language=language)
    stage.opened(backend)
    if strict:
        documents = _stop_at_a_refused_document(documents, backend, input_path, bad_lines)
    sizes = {} if batch_size is None else {"batch_size": batch_size}  # None: the backend's own default
    stage.sending = True
    report = backend.ingest(documents, encoder, wait=wait, rejects_path=rejects, **sizes)
    report.notes.append(adopt_model_fusion_defaults(backend, encoder))
    report.notes.append(resources.describe_model(encoder.model_dir))
    report.notes.extend(filter(None, [backend.analyzer_note()]))
    # the backend knows the line of a document it skipped, not the file
    all_skipped = sorted(bad_lines.skipped + [s.in_file(display_name(input_path)) for s in report.skipped],
                         key=lambda s: s.line or 0)
    click.echo(f"indexed {report.indexed}, updated {report.updated}, skipped {len(all_skipped)}, "
               f"failed {len(report.failed)} in {report.seconds:.1f} s ({report.docs_per_second:.0f} docs/s) -> {index}")
    if generated:
        report.notes.insert(0, _generated_note(generated, id_column))
    for note in report.notes:
        click.echo(f"  {note}")
    for bad in all_skipped[:SHOW_SKIPPED]:
        click.echo(f"  skipped {bad}", err=True)
    if len(all_skipped) > SHOW_SKIPPED:
        click.echo(f"  ... and {len(all_skipped) - SHOW_SKIPPED} more skipped lines", err=True)
    if report.failed:
        for failure in report.failed[:SHOW_SKIPPED]:
            click.echo(f"  failed {input_path}:{failure.get('line')} id {failure['id']!r}: {failure['error']}", err=True)
        raise click.ClickException(
            f"{len(report.failed)} documents were not written" + (f" (listed in {report.rejects_path})" if report.rejects_path
                                                                  else " (--rejects FILE lists them all)")
            + "; the others are in the index. Fix the cause shown above and re-run the same ingest (ids are stable)")


def _generated_note(lines: list[int], id_column: str) -> str:
    """The summary's line about records that carried no id."""
    shown = ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")
    one = len(lines) == 1
    return (f"{len(lines)} {'line has' if one else 'lines have'} no {id_column!r} and got an id derived from the text "
            f"({'line' if one else 'lines'} {shown}); the same text keeps that id, so ingesting it again updates it")


class _Stage:
    """How far an ingest got, for the line after Ctrl-C: what the index holds and that re-running is safe."""

    def __init__(self, index: str, *, cluster: bool):
        self.index, self.cluster = index, cluster
        self.generation: int | None = None  # a local index's commit when this ingest opened it
        self.sending = False  # a cluster ingest has begun sending documents

    def opened(self, backend) -> None:
        if not self.cluster:
            self.generation = int(backend.manifest.get("generation", 0))

    def interrupted(self) -> str:
        rerun = "re-run the same command to finish; ids are updated in place, never duplicated"
        if self.cluster:
            if not self.sending:
                return f"interrupted before any document was sent to cluster index {self.index}; {rerun}"
            return (f"interrupted: the documents sent before Ctrl-C are in cluster index {self.index} (they are "
                    f"kept); {rerun}")
        from hybrid_qpr.errors import HybridQPRError

        try:
            committed = _committed(self.index)
        except (HybridQPRError, OSError):  # unreadable now; manifest.json is replaced whole, never half written
            return f"interrupted: index {self.index} holds its last whole commit; {rerun}"
        if committed is None:
            return f"interrupted before index {self.index} was created; nothing was written; {rerun}"
        generation, count = committed
        if self.generation is None or generation == self.generation:
            return (f"interrupted: nothing of this ingest was committed (a local ingest commits at its end); index "
                    f"{self.index} holds its previous {count} documents; {rerun}")
        return (f"interrupted after this ingest was committed (index {self.index} holds {count} documents); "
                "re-running it updates the same ids, never duplicates them")


def _committed(index: str) -> tuple[int, int] | None:
    """(generation, documents) of the local index's commit on disk, None when it has none. Read
    from disk: Ctrl-C may come between writing the manifest and the index taking it in."""
    from pathlib import Path

    from hybrid_qpr.backends.local.commit import MANIFEST, read_manifest

    if not (Path(index) / MANIFEST).is_file():
        return None
    manifest = read_manifest(Path(index))
    return int(manifest.get("generation", 0)), int(manifest.get("count", 0))


def _stop_at_a_refused_document(documents, backend, input_path, bad_lines):
    """--strict: a document the backend would skip (``Backend.document_problem``) stops the
    ingest like any other bad line."""
    from hybrid_qpr.artifacts import display_name

    for line, doc in documents:
        problem = backend.document_problem(doc)
        if problem:
            bad_lines.skip(display_name(input_path), line, problem)
            continue
        yield line, doc
