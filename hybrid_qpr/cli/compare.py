"""``hybrid-qpr compare``: two search configurations on a query log, without judgments."""

from __future__ import annotations

import click

from hybrid_qpr.cli._common import cluster_options, FiniteFloatRange, friendly_errors
from hybrid_qpr.cli._backend import model_option
from hybrid_qpr.evaluation.overlap import CHANGED_SHOWN, DEPTH, PERSISTENCE


@click.command()
@click.option("--queries", "queries_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The query log: one query per line, or JSONL (.jsonl) with \"text\" (or \"query\") and an optional \"id\".")
@click.option("--index", required=True, help="The index both configurations search (unless one names its own with index=DIR).")
@click.option("--a", "spec_a", default="hybrid", show_default=True,
              help="Configuration A: MODE[,fusion=F][,alpha=A][,index=DIR], e.g. 'hybrid,fusion=rrf,alpha=0.3'.")
@click.option("--b", "spec_b", default="bm25", show_default=True, help="Configuration B, written as --a.")
@click.option("-k", "--top-k", "k", type=click.IntRange(min=1), default=DEPTH, show_default=True, help="Depth compared.")
@click.option("--p", "persistence", type=FiniteFloatRange(0, 1, min_open=True, max_open=True), default=PERSISTENCE,
              show_default=True, help="RBO persistence: the top d ranks carry 1 - p^d of the weight (0.9: top 10 ~86%).")
@click.option("--show", type=click.IntRange(min=0), default=CHANGED_SHOWN, show_default=True,
              help="How many of the most changed queries to list.")
@click.option("--max-queries", type=click.IntRange(min=1), default=None, help="Only the first N queries of the log. [default: all]")
@click.option("--out", "out_file", type=click.Path(dir_okay=False), default=None,
              help="Also write the whole report (every listed query's two top lists) as JSON.")
@model_option
@cluster_options(selects_backend=True)
@friendly_errors
def compare(queries_file, index, spec_a, spec_b, k, persistence, show, max_queries, out_file, model, **connection) -> None:
    """How much do two configurations agree, query by query, when no judgments exist? Each
    query of the log is searched with A and with B; reported are the mean Jaccard of the two
    top-k sets, the mean rank-biased overlap (RBO, weighted toward the top), the share of
    queries with the same first hit and the same top k, and the queries whose top hits
    changed most (lowest RBO first). A change is not a loss: it shows where to look, or what
    to judge next (docs/evaluation.md).

    \b
    Examples:
      hybrid-qpr compare --queries log.txt --index ./quora-idx --a hybrid --b bm25
      hybrid-qpr compare --queries log.jsonl --index ./quora-idx --a 'hybrid,fusion=rrf' --b 'hybrid,fusion=minmax,alpha=0.7'
      hybrid-qpr compare --queries log.txt --index ./idx-v1 --a hybrid --b 'hybrid,index=./idx-v2'
    """
    import json
    import time

    from hybrid_qpr.artifacts import atomic_write
    from hybrid_qpr.cli._backend import load_encoder, open_backend
    from hybrid_qpr.evaluation.overlap import Configuration, overlap_report, run_queries
    from hybrid_qpr.evaluation.qrels_io import read_query_log
    from hybrid_qpr.search import HybridSearcher

    configurations = [Configuration.parse(spec_a), Configuration.parse(spec_b)]
    queries = read_query_log(queries_file)
    if max_queries is not None:
        queries = dict(list(queries.items())[:max_queries])
    searchers: dict[str, HybridSearcher] = {}
    for config in configurations:
        where = config.index or index
        if where not in searchers:
            backend = open_backend(where, connection)
            searchers[where] = HybridSearcher(backend, load_encoder(model, backend))
    (run_a, run_b), searching = run_queries([searchers[c.index or index] for c in configurations], configurations,
                                            queries, k)
    start = time.perf_counter()
    report = overlap_report(run_a, run_b, queries, k=k, p=persistence, shown=show)
    comparing = time.perf_counter() - start
    a, b = (c.label() for c in configurations)
    click.echo(f"A = {a}, B = {b}, index {index}; {report['queries']} queries, top {k}")
    click.echo(f"  RBO (p={persistence}) {report['rbo']:.4f}   Jaccard@{k} {report['jaccard']:.4f}   "
               f"same first hit {report['same_first']:.1%}   same top {k} {report['same_top']:.1%}")
    click.echo(f"  searching both: {searching:.2f} s; comparing: {comparing:.3f} s")
    if report["changed"]:
        click.echo("most changed (lowest RBO first):")
        for row in report["changed"]:
            click.echo(f"  {row['rbo']:.3f}  J {row['jaccard']:.2f}  {row['id']}: {row['query'][:70]}")
            click.echo(f"         only A: {', '.join(row['only_a'][:5]) or '-'}   only B: {', '.join(row['only_b'][:5]) or '-'}")
    if out_file:
        with atomic_write(out_file) as fh:
            json.dump({"a": a, "b": b, "index": str(index), "seconds": {"searching": searching, "comparing": comparing},
                       **report}, fh, indent=2, ensure_ascii=False)
        click.echo(f"wrote {out_file}")
