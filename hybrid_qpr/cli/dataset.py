"""``hybrid-qpr dataset build|from-qa-log|stats``: paraphrase clusters, splits and BEIR eval sets."""

from __future__ import annotations

import functools
import json

import click

from hybrid_qpr.cli._common import SEED, FiniteFloatRange, friendly_errors
from hybrid_qpr.data.clusters import KEY_MODES
from hybrid_qpr.data.splits import SPLITS
from hybrid_qpr.errors import ON_BAD_LINE

_SHOWN_BAD_LINES = 20
_SPLIT_HELP = "Fractions of paraphrase clusters for train,val,test (must sum to 1)."
_BAD_LINE_HELP = "What to do with a malformed line: 'error' stops with file, line and problem; 'skip' skips it and lists it in the summary."


def _common_options(func):
    options = [
        click.option("--out", required=True, type=click.Path(file_okay=False),
                     help="Dataset directory to write (replaced atomically if it holds an earlier build)."),
        click.option("--seed", type=SEED, default=13, show_default=True, help="Seed of the paraphrase-cluster shuffle before splitting."),
        click.option("--split", "split", default="0.8,0.1,0.1", show_default=True, help=_SPLIT_HELP),
        click.option("--on-bad-line", type=click.Choice(ON_BAD_LINE), default="error", show_default=True,
                     help=_BAD_LINE_HELP),
        click.option("--json", "as_json", is_flag=True, help="Print the full report (the manifest body) as JSON instead of tables."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


@click.group()
def dataset() -> None:
    """Turn question pairs or QA logs into paraphrase clusters, a train/val/test split and
    BEIR-layout eval sets.

    \b
    A dataset directory holds train.jsonl, val.jsonl, test.jsonl (one cluster per line),
    manifest.json (every count and a data fingerprint) and beir/ (corpus.jsonl,
    queries.jsonl, qrels/val.tsv, qrels/test.tsv) for 'hybrid-qpr evaluate'.

    \b
    Example:
      hybrid-qpr dataset build pairs.tsv --out data/support
      hybrid-qpr dataset stats data/support
    """


@dataset.command()
@click.argument("pairs", type=click.Path(allow_dash=True))
@_common_options
@click.option("--key", type=click.Choice(KEY_MODES), default="auto", show_default=True,
              help="Identify questions by qid, or by normalized text (lowercase, tokens joined); 'auto' uses qids when every pair has them.")
@friendly_errors
def build(pairs: str, out: str, seed: int, split: str, on_bad_line: str, as_json: bool, key: str) -> None:
    """Build a dataset from a question-pair file PAIRS ('-' reads stdin).

    \b
    PAIRS is the Quora layout (id, qid1, qid2, question1, question2, is_duplicate) as TSV
    or CSV, or a two-column TSV (question1 <TAB> question2); .gz is read directly and a
    header line is recognised. Duplicate pairs are joined into clusters by transitive
    closure (a~b, b~c -> {a, b, c}); clusters are split with --seed; val/test questions
    whose text also occurs in train are removed, and clusters left with < 2 questions dropped.

    \b
    Example:
      hybrid-qpr dataset build pairs.tsv --out data/support --seed 13
      zcat pairs.csv.gz | hybrid-qpr dataset build - --out data/mine --on-bad-line skip
    """
    from hybrid_qpr.data.dataset import build_dataset
    from hybrid_qpr.data.splits import parse_fractions

    report = build_dataset(pairs, out, seed=seed, fractions=parse_fractions(split),
                           on_bad_line=on_bad_line, key=key)  # type: ignore[arg-type]
    _print(report, as_json)


@dataset.command("from-qa-log")
@click.argument("log", type=click.Path(allow_dash=True))
@_common_options
@click.option("--min-coherence", type=FiniteFloatRange(0.0, 1.0), default=0.1, show_default=True,
              help="Drop answer clusters whose lexical coherence (SDML paper eq. 5-6) is below this.")
@click.option("--question-column", default=None, help="Question column/field name [default: question, query, text or utterance].")
@click.option("--answer-column", default=None, help="Answer-id column/field name [default: answer_id, answer or aid].")
@friendly_errors
def from_qa_log(log: str, out: str, seed: int, split: str, on_bad_line: str, as_json: bool, min_coherence: float,
                question_column: str | None, answer_column: str | None) -> None:
    """Build a dataset from a QA log LOG of (question, answer id) rows by distant supervision.

    \b
    LOG is JSONL ({"question": ..., "answer_id": ...} per line) or TSV/CSV with a header
    naming both columns, or a header-less 2-column TSV (question, answer_id); .gz is fine.
    Questions that got the same answer form one cluster; a cluster is kept when its
    coherence c = mean_q |T_q ∩ S| / |S| (T_q: tokens of q, S: tokens of the cluster)
    is >= --min-coherence. Kept and dropped counts are printed.

    \b
    Example:
      hybrid-qpr dataset from-qa-log logs/qa.jsonl --out data/qa --min-coherence 0.1
    """
    from hybrid_qpr.data.dataset import build_dataset_from_qa_log
    from hybrid_qpr.data.splits import parse_fractions

    report = build_dataset_from_qa_log(log, out, min_coherence=min_coherence, seed=seed, fractions=parse_fractions(split),
                                       on_bad_line=on_bad_line, question_column=question_column,  # type: ignore[arg-type]
                                       answer_column=answer_column)
    _print(report, as_json)


@dataset.command()
@click.argument("directory", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON instead of tables.")
@friendly_errors
def stats(directory: str, as_json: bool) -> None:
    """Print the counts of a dataset DIRECTORY written by 'dataset build', 'from-qa-log',
    'from-answers' or 'from-squad' (the kind is read from its manifest).

    \b
    Example:
      hybrid-qpr dataset stats data/support
      hybrid-qpr dataset stats data/squad
    """
    from hybrid_qpr.data import answer_dataset

    if _manifest_format(directory) == answer_dataset.FORMAT:
        _print_answers(answer_dataset.answer_dataset_stats(directory), as_json)
        return
    from hybrid_qpr.data.dataset import dataset_stats

    _print(dataset_stats(directory), as_json)


def _manifest_format(directory: str) -> str | None:
    """The ``format`` of DIRECTORY's manifest.json, or None if it cannot be read (the reader
    called next then says what is wrong)."""
    from pathlib import Path

    try:
        return json.loads((Path(directory) / "manifest.json").read_text(encoding="utf-8")).get("format")
    except (OSError, ValueError, AttributeError):
        return None


def _print(report, as_json: bool) -> None:
    """Render a ``DatasetReport`` as tables on stdout (or JSON)."""
    if as_json:
        click.echo(json.dumps(report.manifest(), indent=2, ensure_ascii=False))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    reading, grouping, split = report.reading, report.grouping, report.split
    overview = Table(title=f"dataset {report.out}", show_header=False, title_justify="left")
    overview.add_column(style="bold")
    overview.add_column()
    overview.add_row("source", f"{report.source.get('path')} ({report.source.get('kind')})")
    overview.add_row("rows read", f"{reading.get('rows', 0):,}")
    overview.add_row("bad lines skipped", f"{reading.get('bad_lines', 0):,}")
    if "duplicate_pairs" in grouping:
        overview.add_row("questions keyed by", str(grouping["key"]))
        overview.add_row("duplicate pairs", f"{grouping['duplicate_pairs']:,}")
        overview.add_row("non-duplicate pairs (ignored)", f"{grouping['non_duplicate_pairs']:,}")
        overview.add_row("distinct questions", f"{grouping['questions']:,}")
        overview.add_row("clusters (>= 2 questions)", f"{grouping['clusters']:,}")
        overview.add_row("single-question groups dropped", f"{grouping['singletons_dropped']:,}")
    else:
        overview.add_row("answers", f"{grouping['answers']:,}")
        overview.add_row("answers with < 2 distinct questions", f"{grouping['too_small']:,}")
        overview.add_row(f"clusters kept (coherence >= {grouping['min_coherence']:g})", f"{grouping['kept']:,}")
        overview.add_row("clusters dropped (incoherent)", f"{grouping['dropped_incoherent']:,}")
    overview.add_row("split seed / fractions", f"{split.get('seed')} / {','.join(f'{f:g}' for f in split.get('fractions', []))}")
    overview.add_row("fingerprint", report.fingerprint)
    if report.seconds:
        overview.add_row("build time", f"{report.seconds:.2f} s")
    console.print(overview)
    if report.modified:
        console.print(f"warning: changed since the build: {', '.join(report.modified)} (sha256 differs from "
                      "manifest.json; the fingerprint no longer describes them)", markup=False)

    table = Table(title="splits (removed: val/test questions whose text is in train / already kept earlier)",
                  title_justify="left")
    for header in ("split", "clusters", "questions", "removed in train", "removed repeated", "clusters <2 dropped"):
        table.add_column(header, justify="left" if header == "split" else "right")
    for name, row in report.summary.items():
        table.add_row(name, f"{row['clusters']:,}", f"{row['questions']:,}",
                      *(f"{split.get(k, {}).get(name, 0):,}" for k in ("removed_in_train", "removed_repeated",
                                                                      "clusters_too_small")))
    console.print(table)
    sizes = next(iter(report.summary.values()))["sizes"] if report.summary else {}
    table = Table(title="cluster sizes (questions per cluster)", title_justify="left")
    for header in ("split", "mean", "max", *sizes):
        table.add_column(header, justify="left" if header == "split" else "right")
    for name, row in report.summary.items():
        table.add_row(name, f"{row['mean_size']:.2f}", str(row["max_size"]), *(f"{n:,}" for n in row["sizes"].values()))
    console.print(table)
    if report.beir:
        console.print("beir: " + ", ".join(f"{k} {v:,}" for k, v in report.beir.items()))
    from hybrid_qpr.errors import SkippedLine

    _print_skipped(console, "skipped lines", [SkippedLine.from_record(s) for s in reading.get("skipped") or []])


def _print_skipped(console, title: str, skipped) -> None:
    """The first skipped lines, each as ``file:line: reason`` (the strict error's form)."""
    if skipped:
        console.print(f"{title} ({len(skipped)}):")
        for bad in skipped[:_SHOWN_BAD_LINES]:
            console.print(f"  {bad}", markup=False, soft_wrap=True)  # one line: editors jump to file:line
        if len(skipped) > _SHOWN_BAD_LINES:
            console.print(f"  ... {len(skipped) - _SHOWN_BAD_LINES} more, all listed in manifest.json")


# ---------------------------------------------------------------- question -> answer sentence datasets
def _answer_options(func):
    """--out, the split choice (--split-name, --val, --test), --seed, --on-bad-line, --json."""
    out = click.option("--out", required=True, type=click.Path(file_okay=False),
                       help="Dataset directory to write (replaced atomically if it holds an earlier build).")
    options = [
        out,
        click.option("--split-name", type=click.Choice(SPLITS), default=None,
                     help="The whole FILE is this split (e.g. a dev file as val). [default: train when --val/--test "
                          "are given, else FILE is split with --seed and --split]"),
        click.option("--val", "val_file", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="A file of the same layout to use as the val split."),
        click.option("--test", "test_file", type=click.Path(exists=True, dir_okay=False), default=None,
                     help="A file of the same layout to use as the test split."),
        click.option("--seed", type=SEED, default=13, show_default=True, help="Seed of the shuffle before splitting."),
        click.option("--on-bad-line", type=click.Choice(ON_BAD_LINE), default="error", show_default=True,
                     help=_BAD_LINE_HELP),
        click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON instead of a table."),
    ]
    return functools.reduce(lambda f, option: option(f), reversed(options), func)


def _extra(val_file, test_file) -> dict:
    return {name: f for name, f in (("val", val_file), ("test", test_file)) if f}


def _answer_command(name: str, split: str, unit: str):
    """``dataset NAME FILE`` with the answer datasets' options and ``--split`` (fractions of ``unit``)."""
    def wrap(func):
        func = friendly_errors(func)
        func = click.option("--split", "split", default=split, show_default=True,
                            help=f"Fractions of {unit} for train,val,test when FILE is split (no --split-name, --val, "
                                 "--test).")(func)
        func = _answer_options(func)
        func = click.argument("file", type=click.Path(allow_dash=True))(func)
        return dataset.command(name)(func)
    return wrap


@_answer_command("from-answers", "0.8,0.1,0.1", "questions")
def from_answers(file, out, split_name, val_file, test_file, seed, on_bad_line, as_json, split) -> None:
    """Build an answer-selection dataset from FILE in the WikiQA/TrecQA layout.

    \b
    FILE: TSV/CSV rows 'qid question sentence label' (label 1 = correct answer), header optional.
    Writes train/val/test.jsonl (question, correct sentences, labelled wrong candidates as hard
    negatives) and beir/ whose corpus is the candidate sentences of the val/test questions, each
    with its question as 'group'; evaluate with --task answer-selection (MAP, MRR), which ranks
    only each question's own candidates.

    \b
    Examples:
      hybrid-qpr dataset from-answers wikiqa-train.tsv --val wikiqa-dev.tsv --out data/wikiqa
      hybrid-qpr dataset from-answers trecqa-dev.tsv --split-name val --out data/trecqa-dev
      hybrid-qpr dataset from-answers some-answers.tsv --out data/mine --split 0.8,0.1,0.1 --seed 13
    """
    from hybrid_qpr.data.answer_dataset import build_answer_selection

    report = build_answer_selection(file, out, split_name=split_name, extra=_extra(val_file, test_file), seed=seed,
                                    fractions=split, on_bad_line=on_bad_line)
    _print_answers(report, as_json)


@_answer_command("from-squad", "0.7,0.15,0.15", "articles")
def from_squad(file, out, split_name, val_file, test_file, seed, on_bad_line, as_json, split) -> None:
    """Build a sentence-level answer-retrieval dataset (ReQA style) from a SQuAD 1.1 JSON FILE.

    \b
    Every paragraph is split into sentences; a question's gold sentence holds its answer span
    (character offsets). Articles are split train/val/test with --seed. The BEIR corpus is
    every sentence of the val and test articles (metadata 'article'); evaluate with
    --task answer-retrieval (MRR, R@1, R@5). train.jsonl pairs each question with its gold
    sentence and the other sentences of its paragraph as hard negatives.

    \b
    Example:
      hybrid-qpr dataset from-squad squad-dev.json --out data/squad --seed 13
    """
    from hybrid_qpr.data.answer_dataset import build_answer_retrieval

    report = build_answer_retrieval(file, out, split_name=split_name, extra=_extra(val_file, test_file), seed=seed,
                                    fractions=split, on_bad_line=on_bad_line)
    _print_answers(report, as_json)


def _print_answers(report, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(report.manifest(), indent=2, ensure_ascii=False))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    table = Table(title=f"{report.task} dataset {report.out}", title_justify="left")
    for header in ("split", "questions", "with answer", "positives", "negatives", "corpus", "queries"):
        table.add_column(header, justify="left" if header == "split" else "right")
    for name, row in report.counts.items():
        table.add_row(name, *(f"{row[k]:,}" for k in ("questions", "with_answer", "positives", "negatives", "corpus", "queries")))
    console.print(table)
    for source in report.sources:
        console.print(f"source {source['path']} -> {source['split']}", markup=False)
    console.print("beir: " + ", ".join(f"{k} {v:,}" for k, v in report.beir.items()))
    _print_skipped(console, "skipped records", report.skipped)
    if report.modified:
        console.print(f"modified since the build: {', '.join(report.modified)} (counts above are read from the files)",
                      markup=False)


@dataset.command("from-beir")
@click.argument("beir_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--out", required=True, type=click.Path(file_okay=False),
              help="Dataset directory to write (replaced atomically if it holds an earlier build).")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON instead of a table.")
@friendly_errors
def from_beir(beir_dir, out, as_json) -> None:
    """Build a reranker training and dev set from BEIR_DIR, whose qrels grade every candidate of
    each query (community QA: SemEval-2016 Task 3 subtask B).

    \b
    Each of qrels/train.tsv, val.tsv and test.tsv that is present becomes that split: a query,
    its candidates graded > 0 as correct texts and those graded 0 as labelled wrong ones. Train
    with 'reranker train DIR', select with '--dev DIR' (MAP of each val question's own
    candidates); beir/ keeps the val/test rows and their metadata (group, ir_rank) for
    'evaluate --task community-qa'.

    \b
    Example:
      hybrid-qpr dataset from-beir ../shared/data/semeval2016-b --out data/semeval
    """
    from hybrid_qpr.data.answer_dataset import build_from_beir

    _print_answers(build_from_beir(beir_dir, out), as_json)
