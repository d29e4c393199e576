"""Input edges of ingest and query on a local index: a non-UTF-8 line, a blank query, an
unknown filter field, booleans and lists in filters."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hybrid_qpr.cli.main import cli
from hybrid_qpr.data.documents import iter_documents
from hybrid_qpr.errors import BadLines, ConfigError, InputError, SkippedLine


def run(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture()
def latin1_files(tmp_path):
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_bytes(b'{"id": "a", "text": "first question?"}\n{"id": "b", "text": "caf\xe9 question?"}\n'
                      b'{"id": "c", "text": "third question?", "flag": true, "tags": ["x", "y"]}\n')
    tsv = tmp_path / "docs.tsv"
    tsv.write_bytes(b"id\ttext\na\tfirst question?\nb\tcaf\xe9 question?\nc\tthird question?\n")
    pairs = tmp_path / "pairs.tsv"  # Quora layout
    pairs.write_bytes(b"id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
                      b"0\t1\t2\tfirst question?\tfirst one?\t1\n1\t3\t4\tcaf\xe9 question?\tcoffee?\t0\n"
                      b"2\t5\t6\tthird question?\tthird one?\t1\n")
    return jsonl, tsv, pairs


def test_non_utf8_line_is_skipped_like_any_bad_line(latin1_files):
    expected = {".jsonl": [(1, "a"), (3, "c")], ".tsv": [(2, "a"), (4, "c")]}
    for path in latin1_files:
        bad_lines = BadLines("skip")
        docs = list(iter_documents(path, bad_lines=bad_lines))
        skipped = bad_lines.skipped
        if path.name == "pairs.tsv":
            assert [(line, d.id) for line, d in docs] == [(2, "1"), (2, "2"), (4, "5"), (4, "6")]
        else:
            assert [(line, d.id) for line, d in docs] == expected[path.suffix]
        assert len(skipped) == 1 and "not valid UTF-8" in skipped[0].reason and skipped[0].path == str(path)
        assert skipped[0].line == (2 if path.suffix == ".jsonl" else 3)
        with pytest.raises(InputError, match="not valid UTF-8"):
            list(iter_documents(path))  # strict


def test_cli_ingest_skips_non_utf8_unless_strict_and_filters_by_bool_and_list(tmp_path, latin1_files, committed_encoder):
    jsonl, _, _ = latin1_files
    index = str(tmp_path / "idx")
    model = ["--model", str(committed_encoder.model_dir)]
    result = run("ingest", str(jsonl), "--index", index, *model)
    assert result.exit_code == 0 and "indexed 2, updated 0, skipped 1" in result.output
    assert f"{jsonl}:2: not valid UTF-8" in result.output
    strict = CliRunner().invoke(cli, ["ingest", str(jsonl), "--index", str(tmp_path / "idx2"), "--strict", *model])
    assert strict.exit_code == 1 and f"{jsonl}:2: not valid UTF-8" in strict.output
    for filters, expected in ((["--filter", "flag=true"], ["c"]), (["--filter", "tags=y"], ["c"]),
                              (["--filter", "tags=z", "--filter", "tags=x"], ["c"]), (["--filter", "flag=1"], [])):
        out = run("query", "question", "--index", index, "--json", *filters)
        assert out.exit_code == 0 and [h["id"] for h in json.loads(out.output)["hits"]] == expected, filters
    unknown = run("query", "question", "--index", index, "--filter", "topic=x")
    assert unknown.exit_code == 1 and "filter field 'topic'" in unknown.output and "known fields: flag, tags" in unknown.output


def test_blank_query_is_refused(tmp_path, committed_encoder, question_bank):
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.search import HybridSearcher

    idx = LocalIndex.create(tmp_path / "idx", committed_encoder)
    idx.ingest(question_bank[:20], committed_encoder, show_progress=False)
    for blank in ("", "   ", "\t\n"):
        result = run("query", blank, "--index", str(idx.path))
        assert result.exit_code == 2 and "query TEXT is empty" in result.output
        with pytest.raises(ConfigError, match="empty"):
            HybridSearcher(idx, committed_encoder).search(blank)


def test_one_bad_input_rule_raises_or_records_the_same_file_line_and_problem():
    """Every reader hands its bad lines to one ``BadLines``: strict raises ``file:line: problem``
    (with the hint that names the skip option); skip records the same three as a ``SkippedLine``,
    printed in the error's form. Manifests written before the record existed still read."""
    strict = BadLines(hint="use --on-bad-line skip to skip such lines")
    with pytest.raises(InputError, match=r"^f\.tsv:3: empty \(use --on-bad-line skip to skip such lines\)$"):
        strict.skip("f.tsv", 3, "empty")
    lenient = BadLines("skip")
    lenient.skip("f.tsv", 3, "empty")
    assert lenient.skipped == [SkippedLine("f.tsv", 3, "empty")] and str(lenient.skipped[0]) == "f.tsv:3: empty"
    old_and_new = ([6, "x"], ["a.tsv", 2, "y"], ["s.json", "data[0].qas[1]", "z"], *lenient.to_list())
    assert [SkippedLine.from_record(r) for r in old_and_new] == [
        SkippedLine(None, 6, "x"), SkippedLine("a.tsv", 2, "y"), SkippedLine("s.json", None, "data[0].qas[1]: z"),
        SkippedLine("f.tsv", 3, "empty")]
    assert str(SkippedLine(None, 6, "x")) == "line 6: x" and str(SkippedLine("s.json", None, "z")) == "s.json: z"
    assert SkippedLine(None, 4, "empty id").in_file("d.jsonl") == SkippedLine("d.jsonl", 4, "empty id")
    with pytest.raises(ConfigError, match="on_bad_line='ignore'"):
        BadLines("ignore")  # type: ignore[arg-type]
