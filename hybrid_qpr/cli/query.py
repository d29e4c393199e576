"""``hybrid-qpr query``: search one query (a table or JSON) or a batch file (JSON lines)."""

from __future__ import annotations

import json

import click

from hybrid_qpr.cli._common import FiniteFloatRange, ModeChoice, cluster_options, friendly_errors
from hybrid_qpr.cli._backend import FILTER_HELP, knn_search_options, model_option, reranker_options
from hybrid_qpr.cli._fusion import bounds_option, explanation, read_fusion_extras, signal_options
from hybrid_qpr.search_request import OPTIONS_BY_NAME, SEARCH_OPTIONS, SearchOption


TEXT_MIN_WIDTH = 20  # below this the question text is unreadable: drop score columns first
# Optional columns, the first group dropped first when the table would be wider than the console
# (BM25's and kNN's columns go in pairs, so that neither list looks more important).
DROP_ORDER = (("first-stage rank",), ("BM25 rank", "kNN rank"), ("BM25", "kNN"), ("cross-encoder",))
SHOWN_CHARS = 200  # a --show field's value is cut here in the table (--json has it whole)
SCORE_PARTS = ("BM25", "BM25 rank", "kNN", "kNN rank")


def click_option(option: SearchOption):
    """``option`` (``search_request.SEARCH_OPTIONS``) as a click option: its flags, type and
    range, help and default; the value reaches the command under the request field's name."""
    if option.kind is bool:
        return click.option(*option.cli_flags, option.name, is_flag=True, default=option.default, help=option.help)
    if option.name == "mode":  # the modes, an old name read as its new one
        kind: click.ParamType = ModeChoice()
    elif option.choices:
        kind = click.Choice(option.choices)
    elif option.kind is int:
        kind = click.IntRange(min=None if option.minimum is None else int(option.minimum),
                              max=None if option.maximum is None else int(option.maximum))
    else:
        kind = FiniteFloatRange(option.minimum, option.maximum)
    return click.option(*option.cli_flags, option.name, type=kind, default=option.default,
                        show_default=option.default is not None, help=option.described())


def search_options(func):
    """Every option of ``SEARCH_OPTIONS``, in its order."""
    for option in reversed(SEARCH_OPTIONS):
        func = click_option(option)(func)
    return func


def shown_value(metadata: dict, field: str) -> str:
    """``metadata[field]`` as a table cell: text as it is, other values as JSON, cut at ``SHOWN_CHARS``."""
    value = metadata.get(field)
    text = "" if value is None else value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1].rstrip() + "…"


def score_decimals(values, significant: int = 4, most: int = 8) -> int:
    """Decimals to show ``values`` with: ``significant`` digits of the largest, and more (up to
    ``most``) while two different scores would still print alike (untuned RRF: 0.01639 vs 0.01613)."""
    import math

    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return significant
    largest = max(abs(v) for v in values)
    decimals = min(most, max(0, significant - 1 - math.floor(math.log10(largest)))) if largest > 0 else significant
    distinct = sorted(set(values))
    while decimals < most and len({f"{v:.{decimals}f}" for v in distinct}) < len(distinct):
        decimals += 1
    return decimals


def results_table(query: str, mode: str, results, offset: int = 0, width: int | None = None,
                  show: tuple[str, ...] = (), server_side: bool = False):
    """A rich table: rank, id, text, each metadata field of ``show``, fused score and the BM25 /
    kNN score and rank behind it (and, after a reranker, the first-stage rank and the
    cross-encoder's score; ``server_side``: a fusion inside the cluster returns no BM25 and kNN
    parts, so their columns are left out and the caption says why). Fitted to ``width``
    columns: ids are never broken, the text and shown fields wrap at words, and the optional
    columns are left out (``DROP_ORDER``; the caption says which) when they do not fit."""
    from rich.table import Table

    def formatted(values):
        decimals = score_decimals(values)
        return ["-" if v is None else f"{v:.{decimals}f}" for v in values]

    def part(name, what):
        return [None if getattr(r, name) is None else getattr(getattr(r, name), what) for r in results]

    columns = {"rank": [str(rank) for rank in range(offset + 1, offset + len(results) + 1)],
               "id": [r.id for r in results], "text": [r.text for r in results],
               **{field: [shown_value(r.metadata, field) for r in results] for field in show if field not in ("rank", "id", "text")},
               "score": formatted([r.score for r in results]),
               "BM25": formatted(part("bm25", "score")), "BM25 rank": [str(v or "-") for v in part("bm25", "rank")],
               "kNN": formatted(part("knn", "score")), "kNN rank": [str(v or "-") for v in part("knn", "rank")]}
    if any(r.first_stage_rank is not None for r in results):
        columns["first-stage rank"] = [str(r.first_stage_rank) for r in results]
        columns["cross-encoder"] = formatted(part("cross_encoder", "score"))

    wrapped = {"text", *show}  # columns that wrap at words (the others never break)
    notes = []
    if server_side:
        for name in SCORE_PARTS:
            columns.pop(name, None)
        notes.append("fused inside the cluster (--server-side): it returns no BM25 or kNN score or rank per hit")

    def needed(name):  # the column's width: its widest cell or header (a wrapped column only its minimum)
        return TEXT_MIN_WIDTH if name in wrapped else max([len(name), *(len(c) for c in columns[name])])

    dropped = []
    if width is not None:
        for group in DROP_ORDER:
            # each column adds two spaces of padding and one border; the table one more border
            if sum(needed(n) + 3 for n in columns) + 1 <= width:
                break
            for name in group:
                if columns.pop(name, None) is not None:
                    dropped.append(name)
    if dropped:
        notes.append(f"left out to fit {width} columns: {', '.join(dropped)} (--json shows every field)")
    table = Table(title=f"{mode}: {query}", title_justify="left", caption="\n".join(notes) or None,
                  caption_justify="left")
    for name in columns:
        if name in wrapped:
            table.add_column(name, overflow="fold", ratio=1, min_width=TEXT_MIN_WIDTH)
        else:
            table.add_column(name, justify="left" if name == "id" else "right", no_wrap=True, min_width=needed(name))
    for row in zip(*columns.values()):
        table.add_row(*row)
    return table


@click.command()
@click.argument("text", required=False)
@click.option("--index", required=True, help="Local index directory, or the cluster index name with --opensearch/--elasticsearch.")
@click.option("--queries", "queries_path", type=click.Path(allow_dash=True, dir_okay=False), default=None,
              help="Batch mode: a file with one query per line, or JSONL with id, text and optionally \"filter\": {\"field\": \"value\"} (merged with --filter) ('-' = stdin). Prints one JSON object per line.")
@search_options
@bounds_option("lower")
@bounds_option("upper")
@signal_options
@click.option("--explain", is_flag=True, help="Under the table, each hit's score broken down: fused score, BM25 and kNN "
                                              "score and rank, each business signal's contribution (--json carries them on each hit).")
@click.option("--filter", "filters", multiple=True, help=FILTER_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--show", "show", multiple=True, metavar="FIELD",
              help=f"Add a column with this metadata field of each hit (repeatable; cut at {SHOWN_CHARS} characters, "
                   "--json has it whole).")
@knn_search_options("for this query (overrides the value stored in the index)")
@model_option
@reranker_options
@cluster_options(selects_backend=True)
@friendly_errors
def query(text, index, queries_path, lower_bounds, upper_bounds, boosts, decay, signal_weight, explain, filters, as_json,
          show, ef_search, nprobe, model, reranker_dir, reranker_depth, **given) -> None:
    """Find the questions in the index that ask the same as TEXT.

    The table shows, for each hit, the fused score and the BM25 and kNN score and rank
    behind it ('-' = not in that list; --server-side: not returned by the cluster, so those
    columns are left out), and a column for each --show FIELD of the hits' metadata. It fits
    the terminal's width (80 columns off a terminal, or $COLUMNS): ids are never broken, and
    columns that do not fit are left out and named under the table; --json has every field.

    \b
    Examples:
      hybrid-qpr query "how do i reset my password" --index ./qidx
      hybrid-qpr query "how do i reset my password" --index ./qidx --mode bm25 --json
      hybrid-qpr query "how do i reset my password" --index ./qidx --show topic
      hybrid-qpr query "cheap flights?" --index ./qidx --filter topic=travel --from 10 -k 10
      hybrid-qpr query --queries questions.txt --index ./qidx --json > hits.jsonl
      hybrid-qpr query "how do i reset my password" --index ./qidx --reranker onnx/reranker-minilm-l6-int8
      hybrid-qpr query "cheap flights?" --index ./qidx --fusion dbsf --decay created:exp:30d --explain
      hybrid-qpr query "cheap flights?" --index ./qidx --fusion minmax --lower-bound knn=clip:0.3 --autocut 1
    """
    from hybrid_qpr.backends.base import takes_knn_settings
    from hybrid_qpr.cli._backend import (load_encoder, load_reranker, open_backend, parse_filters,
                                       refuse_knn_options_on_a_cluster)
    from hybrid_qpr.search import HybridSearcher, SearchRequest

    settings = {name: given.pop(name) for name in OPTIONS_BY_NAME}  # the request's options; the rest: connection
    connection, mode, server_side, offset = given, settings["mode"], settings["server_side"], settings["offset"]
    if (text is None) == (queries_path is None):
        raise click.UsageError("give either TEXT or --queries FILE")
    if text is not None and not text.strip():
        raise click.UsageError("the query TEXT is empty; give the question to search for, e.g. "
                               "hybrid-qpr query \"how do i reset my password\" --index DIR")
    refuse_knn_options_on_a_cluster(connection, ef_search, nprobe)
    bounds, signals = read_fusion_extras(lower_bounds, upper_bounds, boosts, decay, signal_weight)
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
    reranker, reranker_depth = load_reranker(reranker_dir, reranker_depth, backend, off_when_tuned_off=True)
    searcher = HybridSearcher(backend, encoder, reranker=reranker, reranker_depth=reranker_depth)
    options = dict(settings, filters=parse_filters(filters), bounds=bounds, signals=signals)
    if queries_path is not None:
        from hybrid_qpr.data.documents import iter_batch_queries
        from hybrid_qpr.errors import BadLines

        bad_lines = BadLines("skip")
        batch = list(iter_batch_queries(queries_path, bad_lines))
        for bad in bad_lines.skipped:  # like ingest: each bad line skipped and named, the others searched
            click.echo(f"skipped {bad}", err=True)
        if not batch:
            why = f"all {len(bad_lines.skipped)} non-blank lines were skipped" if bad_lines.skipped else "every line is blank"
            raise click.ClickException(f"{queries_path}: holds no queries ({why}); nothing was searched")
        answers = searcher.search_many([q.text for q in batch], query_filters=[q.filter for q in batch], **options)
        for q, results in zip(batch, answers):
            click.echo(json.dumps({"query_id": q.id, "query": q.text, "hits": [r.to_dict() for r in results]}, ensure_ascii=False))
        return
    results, used = searcher.run(SearchRequest(text=text, **options))
    if as_json:  # with the settings the search used, the index's tuned ones filled in
        click.echo(json.dumps({"query": text, "mode": used.mode, "request": used.settings(),
                               "hits": [r.to_dict() for r in results]}, ensure_ascii=False, indent=2))
        return
    from rich.console import Console

    console = Console()
    console.print(results_table(text, mode, results, offset, width=console.width, show=show,
                                server_side=server_side and bool(results)
                                and all(r.bm25 is None and r.knn is None for r in results)))
    if not results:
        click.echo(f"no hits past result {offset} (--from {offset})" if offset else "no hits")
    if explain:
        click.echo(explanation(results, offset))
