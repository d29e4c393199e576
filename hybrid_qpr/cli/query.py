"""``hybrid-qpr query``: search one query (a table or JSON) or a batch file (JSON lines)."""

from __future__ import annotations

import json

import click

from hybrid_qpr.cli._common import FiniteFloatRange, ModeChoice, cluster_options, friendly_errors
from hybrid_qpr.cli._backend import FILTER_HELP, knn_search_options, model_option, reranker_options
from hybrid_qpr.fusion import DEFAULT_ALPHA, DEFAULT_DEPTH, DEFAULT_FUSION, FUSION_METHODS
from hybrid_qpr.search import DEFAULT_MODE, RESCORE_DEPTH


def results_table(query: str, mode: str, results, offset: int = 0):
    """A rich table: rank, id, text, fused score and the BM25 / kNN score and rank behind it
    (and, after a reranker, the first-stage rank and the cross-encoder's score)."""
    from rich.table import Table

    def cell(ranked, what):
        if ranked is None:
            return "-"
        return f"{ranked.score:.4f}" if what == "score" else str(ranked.rank)

    table = Table(title=f"{mode}: {query}", title_justify="left")
    reranked = any(r.first_stage_rank is not None for r in results)
    columns = [("rank", "right"), ("id", "left"), ("text", "left"), ("score", "right"), ("BM25", "right"),
               ("BM25 rank", "right"), ("kNN", "right"), ("kNN rank", "right")]
    if reranked:
        columns += [("first-stage rank", "right"), ("cross-encoder", "right")]
    for name, justify in columns:
        table.add_column(name, justify=justify, overflow="fold")
    for rank, r in enumerate(results, start=offset + 1):
        row = [str(rank), r.id, r.text, f"{r.score:.4f}", cell(r.bm25, "score"), cell(r.bm25, "rank"),
               cell(r.knn, "score"), cell(r.knn, "rank")]
        if reranked:
            row += [str(r.first_stage_rank), cell(r.cross_encoder, "score")]
        table.add_row(*row)
    return table


@click.command()
@click.argument("text", required=False)
@click.option("--index", required=True, help="Local index directory, or the cluster index name with --opensearch/--elasticsearch.")
@click.option("--queries", "queries_path", type=click.Path(allow_dash=True, dir_okay=False), default=None,
              help="Batch mode: a file with one query per line, or JSONL with id, text and optionally \"filter\": {\"field\": \"value\"} (merged with --filter) ('-' = stdin). Prints one JSON object per line.")
@click.option("--mode", type=ModeChoice(), default=DEFAULT_MODE, show_default=True,
              help="hybrid fuses BM25 and kNN; rescore is the MSEM baseline (BM25 recall of --rescore-depth, re-scored by the encoder; 'rerank', its name before, still works).")
@click.option("-k", "--top-k", type=click.IntRange(min=1), default=10, show_default=True, help="Results per query (per page).")
@click.option("--from", "offset", type=click.IntRange(min=0), default=0, show_default=True, help="Skip this many results (pagination): --from 10 -k 10 is page 2.")
@click.option("--fusion", type=click.Choice(FUSION_METHODS), default=None,
              help=f"Hybrid fusion. [default: the index's tuned value ('hybrid-qpr tune'), else {DEFAULT_FUSION}]")
@click.option("--alpha", type=FiniteFloatRange(0, 1), default=None,
              help=f"Weight of kNN in the fusion, BM25 gets 1 - alpha. [default: tuned value, else {DEFAULT_ALPHA}]")
@click.option("--depth", type=click.IntRange(min=1), default=None,
              help=f"Candidates taken from each list before fusion. [default: the tuned depth, else {DEFAULT_DEPTH}; at least --from + k]")
@click.option("--rescore-depth", "--rerank-depth", "rerank_depth", type=click.IntRange(min=1), default=RESCORE_DEPTH, show_default=True, help="BM25 candidates re-scored in rescore mode.")
@click.option("--filter", "filters", multiple=True, help=FILTER_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--server-side", is_flag=True, help="OpenSearch only: fuse (hybrid, with the same fusion, alpha and depth) or re-rank inside the cluster.")
@knn_search_options("for this query (overrides the value stored in the index)")
@model_option
@reranker_options
@cluster_options(selects_backend=True)
@friendly_errors
def query(text, index, queries_path, mode, top_k, offset, fusion, alpha, depth, rerank_depth, filters, as_json,
          server_side, ef_search, nprobe, model, reranker_dir, reranker_depth, **connection) -> None:
    """Find the questions in the index that ask the same as TEXT.

    The table shows, for each hit, the fused score and the BM25 and kNN score and rank
    behind it ('-' = not in that list).

    \b
    Examples:
      hybrid-qpr query "how do i reset my password" --index ./qidx
      hybrid-qpr query "how do i reset my password" --index ./qidx --mode bm25 --json
      hybrid-qpr query "cheap flights?" --index ./qidx --filter topic=travel --from 10 -k 10
      hybrid-qpr query --queries questions.txt --index ./qidx --json > hits.jsonl
      hybrid-qpr query "how do i reset my password" --index ./qidx --reranker onnx/reranker-minilm-l6-int8
    """
    from hybrid_qpr.backends.base import takes_knn_settings
    from hybrid_qpr.cli._backend import (load_encoder, load_reranker, open_backend, parse_filters,
                                       refuse_knn_options_on_a_cluster)
    from hybrid_qpr.search import HybridSearcher

    if (text is None) == (queries_path is None):
        raise click.UsageError("give either TEXT or --queries FILE")
    if text is not None and not text.strip():
        raise click.UsageError("the query TEXT is empty; give the question to search for, e.g. "
                               "hybrid-qpr query \"how do i reset my password\" --index DIR")
    refuse_knn_options_on_a_cluster(connection, ef_search, nprobe)
    backend = open_backend(index, connection)
    if backend.count() == 0:
        raise click.ClickException(backend.empty_reason())
    if server_side and not backend.capabilities.server_side_hybrid:
        raise click.UsageError("--server-side fuses inside OpenSearch: add --opensearch [URL]; a local index and "
                               "Elasticsearch (basic licence) fuse client-side, which is the default")
    if (ef_search or nprobe) and takes_knn_settings(backend):  # a cluster index was refused above
        backend.set_search_settings(nprobe=nprobe, ef_search=ef_search)
    # BM25 needs no encoder: an index whose model directory is gone still answers --mode bm25
    encoder = None if mode == "bm25" and model is None else load_encoder(model, backend)
    reranker, reranker_depth = load_reranker(reranker_dir, reranker_depth, backend)
    searcher = HybridSearcher(backend, encoder, reranker=reranker, reranker_depth=reranker_depth)
    options = dict(mode=mode, top_k=top_k, offset=offset, fusion=fusion, alpha=alpha, depth=depth,
                   rerank_depth=rerank_depth, filters=parse_filters(filters), server_side=server_side)
    if queries_path is not None:
        from hybrid_qpr.data.documents import iter_batch_queries

        batch = list(iter_batch_queries(queries_path))
        if not batch:
            raise click.ClickException(f"{queries_path}: holds no queries (every line is blank); nothing was searched")
        answers = searcher.search_many([q.text for q in batch], query_filters=[q.filter for q in batch], **options)
        for q, results in zip(batch, answers):
            click.echo(json.dumps({"query_id": q.id, "query": q.text, "hits": [r.to_dict() for r in results]}, ensure_ascii=False))
        return
    results = searcher.search(text, **options)
    if as_json:
        click.echo(json.dumps({"query": text, "mode": mode, "hits": [r.to_dict() for r in results]}, ensure_ascii=False, indent=2))
        return
    from rich.console import Console

    Console().print(results_table(text, mode, results, offset))
