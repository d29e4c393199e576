"""Input a careless or hostile user gives ingest and 'query --queries': lines no store can keep
(a lone surrogate, a 5000-digit number, nesting 100,000 deep, NaN, 1e999, bytes that are not
UTF-8) are each skipped and named with their line while the good lines go in; metadata keys of
every odd kind filter; zero-hit tables print; what the summary and the hints tell. A property
test feeds both commands arbitrary JSON lines and byte strings."""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.testing.cli import one_error_line, run

GOOD = [{"id": "g1", "text": "how do i reset my password", "lang": "en"},
        {"id": "g2", "text": "cheapest flights to lisbon", "lang": "de"}]
# each line here is one that once stopped a whole ingest or query batch with a traceback
BAD_LINES = {
    "surrogate-in-text": ('{"id": "b", "text": "bad \\ud800 text"}', "lone surrogate '\\ud800'"),
    "surrogate-in-id": ('{"id": "\\udfff", "text": "an id that is no text"}', "lone surrogate '\\udfff'"),
    "surrogate-in-a-key": ('{"id": "b", "text": "t", "k\\ud83d": 1}', "lone surrogate '\\ud83d'"),
    "5000-digit-id": ('{"id": ' + "9" * 5000 + ', "text": "a long id"}', "a number of more than 4300 digits"),
    "nested-100000-deep": ('{"id": "b", "text": "t", "m": ' + "[" * 100_000 + "]" * 100_000 + "}",
                           "nested too deeply"),
    "nested-600-deep": ('{"id": "b", "text": "t", "m": ' + "[" * 600 + "]" * 600 + "}", "nested more than 500 levels"),
    "nan": ('{"id": "b", "text": "t", "score": NaN}', "NaN is not a JSON number"),
    "1e999": ('{"id": "b", "text": "t", "score": 1e999}', "beyond the range of a double"),
}


def lines_file(path: Path, lines: list[str | bytes]) -> Path:
    path.write_bytes(b"".join((line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")) + b"\n"
                              for line in lines))
    return path


def skipped_lines(text: str, name: str) -> dict[int, str]:
    """``{line: reason}`` of the ``skipped NAME:LINE: reason`` lines in ``text``."""
    return {int(m[1]): m[2] for m in re.finditer(rf"skipped {re.escape(name)}:(\d+): (.*)", text)}


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bad-lines") / "idx"
    source = lines_file(path.parent / "good.jsonl", [json.dumps(d) for d in GOOD])
    assert run("ingest", str(source), "--index", str(path)).exit_code == 0
    return path


@pytest.mark.parametrize("case", BAD_LINES)
def test_a_bad_line_is_skipped_with_its_number_and_the_good_lines_go_in(case, tmp_path):
    bad, reason = BAD_LINES[case]
    source = lines_file(tmp_path / "docs.jsonl", [json.dumps(GOOD[0]), bad, json.dumps(GOOD[1])])
    result = run("ingest", str(source), "--index", str(tmp_path / "idx"))
    assert result.exit_code == 0 and result.stdout.startswith("indexed 2, updated 0, skipped 1,"), result.output
    assert reason in skipped_lines(result.stderr, str(source))[2], result.stderr
    index = LocalIndex.open(tmp_path / "idx")
    assert {d: doc.text for d, doc in index.documents(["g1", "g2"]).items()} == {d["id"]: d["text"] for d in GOOD}
    index.close()
    strict = run("ingest", str(source), "--index", str(tmp_path / "strict"), "--strict")
    assert f"{source}:2: " in one_error_line(strict)
    assert LocalIndex.open(tmp_path / "strict").count() == 0  # --strict commits nothing


@pytest.mark.parametrize("case", BAD_LINES)
def test_the_same_line_in_a_queries_file_is_skipped_and_the_others_searched(case, index, tmp_path):
    bad, reason = BAD_LINES[case]
    queries = lines_file(tmp_path / "q.jsonl", ['{"id": "q1", "text": "reset password"}', bad, "flights to lisbon"])
    result = run("query", "--queries", str(queries), "--index", str(index), "--mode", "bm25")
    assert result.exit_code == 0, result.output
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a["query_id"] for a in answers] == ["q1", "3"] and answers[0]["hits"][0]["id"] == "g1"
    assert reason in skipped_lines(result.stderr, str(queries))[2], result.stderr


def test_a_queries_file_of_bad_lines_only_searches_nothing_and_says_why(index, tmp_path):
    queries = lines_file(tmp_path / "q.jsonl", [BAD_LINES["nan"][0], b"\xff\xfe"])
    result = run("query", "--queries", str(queries), "--index", str(index), "--mode", "bm25")
    assert result.exit_code == 1 and not result.stdout
    assert "holds no queries (all 2 non-blank lines were skipped)" in result.stderr, result.stderr
    assert sorted(skipped_lines(result.stderr, str(queries))) == [1, 2]


@pytest.mark.parametrize("args", [["xyzzyplugh"], ["password", "--from", "50"], ["password", "--filter", "lang=xx"]],
                         ids=["no-hits", "from-past-the-end", "filter-matching-nothing"])
def test_a_table_with_no_hits_is_an_empty_page(args, index):
    result = run("query", *args, "--index", str(index), "--mode", "bm25")
    assert result.exit_code == 0, result.output
    assert "rank" in result.stdout and result.stdout.rstrip().splitlines()[-1].startswith("no hits"), result.stdout


@pytest.mark.parametrize("mode", ["bm25", "knn", "hybrid", "rescore"])
def test_a_query_argument_that_is_not_utf8_is_one_line(mode, index):
    """``hybrid-qpr query $'caf\\xe9'``: Python reads the byte as the lone surrogate '\\udce9'."""
    line = one_error_line(run("query", "caf\udce9", "--index", str(index), "--mode", mode))
    assert "holds '\\udce9' at position 3, which is not valid Unicode text" in line, line


# every kind of key that once went through a JSON path: quotes, backslashes, path syntax, spaces,
# non-ASCII, the empty key, control characters, '=' (a queries file's filter, not --filter)
ODD_KEYS = ['a"b', "a\\b", 'a"]\\[$.', ".", "a.b", "[0]", "$", "*", "a b", " ", "é", "😀", "", "x\ny", "\t", "'",
            "\u2028", "a=b"]


def test_every_odd_metadata_key_filters_or_is_refused_at_ingest(tmp_path):
    records = [{"id": f"k{i}", "text": f"key probe {i}", key: f"v{i}"} for i, key in enumerate(ODD_KEYS)]
    records += [{"id": f"l{i}", "text": f"key probe list {i}", key: ["x", f"w{i}"]} for i, key in enumerate(ODD_KEYS)]
    nul = [{"id": "n1", "text": "a nul key", "a\u0000b": "v"}, {"id": "n2", "text": "a nul key", "\u0000": "v"}]
    source = lines_file(tmp_path / "keys.jsonl", [json.dumps(r) for r in records + nul])
    result = run("ingest", str(source), "--index", str(tmp_path / "idx"))
    assert result.stdout.startswith(f"indexed {len(records)}, updated 0, skipped 2,"), result.output
    skipped = skipped_lines(result.stderr, str(source))
    assert sorted(skipped) == [len(records) + 1, len(records) + 2]
    assert all("holds the NUL character" in reason for reason in skipped.values())
    for i, key in enumerate(ODD_KEYS):
        # --filter KEY=VALUE splits at the first '=' and trims spaces around KEY: those keys filter from a
        # queries file (or the library), as every key does
        if "=" not in key and key.strip() == key and key:
            found = run("query", "key probe", "--index", str(tmp_path / "idx"), "--mode", "bm25", "--json",
                        "--filter", f"{key}=v{i}", "--filter", f"{key}=w{i}")
            assert found.exit_code == 0, (key, found.output)
            assert sorted(h["id"] for h in json.loads(found.stdout)["hits"]) == [f"k{i}", f"l{i}"], key
        queries = lines_file(tmp_path / "q.jsonl", [json.dumps({"id": "q", "text": "key probe", "filter": {key: f"w{i}"}})])
        batch = run("query", "--queries", str(queries), "--index", str(tmp_path / "idx"), "--mode", "bm25")
        assert [h["id"] for h in json.loads(batch.stdout)["hits"]] == [f"l{i}"], (key, batch.output)


def test_the_summary_counts_generated_ids_and_a_question_field_names_text_column(tmp_path):
    source = lines_file(tmp_path / "docs.jsonl", ['{"text": "no id here"}', '{"id": "", "text": "a blank id"}',
                                                 '{"id": "x", "text": "has one"}', '{"question": "where is it?"}'])
    result = run("ingest", str(source), "--index", str(tmp_path / "idx"))
    assert result.stdout.startswith("indexed 3, updated 0, skipped 1,"), result.output
    assert "2 lines have no 'id' and got an id derived from the text (lines 1, 2)" in result.stdout
    assert ("field 'text' must be a non-empty string (found missing); if the text is in another field "
            "('question'), name it with --text-column") in skipped_lines(result.stderr, str(source))[4]
    fixed = run("ingest", str(source), "--index", str(tmp_path / "q-idx"), "--text-column", "question")
    assert "skipped 3," in fixed.stdout  # the others have no 'question': named without a hint to itself


def test_the_non_utf8_hint_is_an_iconv_command_that_works(tmp_path):
    source = tmp_path / "docs.jsonl"
    source.write_bytes(('{"id": "a1", "text": "plain ascii"}\n{"id": "c1", "text": "caf\u00e9 cr\u00e8me"}\n')
                       .encode("cp1252"))
    result = run("ingest", str(source), "--index", str(tmp_path / "idx"))
    hint = skipped_lines(result.stderr, str(source))[2]
    command = re.search(r"convert the file with (iconv .*?) \(", hint)[1]
    assert command.startswith("iconv -f CP1252 -t UTF-8 "), hint
    subprocess.run(command, shell=True, check=True, cwd=tmp_path)  # as printed
    converted = tmp_path / "docs.utf8.jsonl"
    again = run("ingest", str(converted), "--index", str(tmp_path / "idx"))
    assert again.stdout.startswith("indexed 1, updated 1, skipped 0,"), again.output
    index = LocalIndex.open(tmp_path / "idx")
    assert index.documents(["c1"])["c1"].text == "caf\u00e9 cr\u00e8me"
    index.close()


# ------------------------------------------------------------------ the property test
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=12)  # surrogates included
JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | ANY_TEXT
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(ANY_TEXT, inner, max_size=3), max_leaves=8)
RECORDS = st.dictionaries(st.sampled_from(["id", "_id", "text", "title", "question"]) | ANY_TEXT, JSON_VALUES,
                          max_size=4)
LINES = st.one_of(
    RECORDS.map(lambda r: ("json", json.dumps(r, ensure_ascii=bool(len(r) % 2)))),  # NaN and 1e999 as Python writes them
    JSON_VALUES.map(lambda v: ("json", json.dumps(v))),
    st.binary(max_size=30).map(lambda b: ("bytes", b.replace(b"\n", b" "))),
    st.sampled_from(sorted(v[0] for v in BAD_LINES.values())).map(lambda line: ("bad", line)),
    st.integers(0, 10**6).map(lambda n: ("good", json.dumps({"id": f"good-{n}", "text": f"good line number {n}"}))),
)


def numbered(lines: list[tuple[str, str | bytes]]) -> tuple[list[str | bytes], dict[int, str]]:
    """The file's lines (a good one first, so the file is JSONL) and ``{line number: kind}``."""
    out = [json.dumps({"id": "good-first", "text": "the first good line"}), *(text for _, text in lines)]
    return out, {1: "good", **{n: kind for n, (kind, _) in enumerate(lines, start=2)}}


def non_blank(lines: list[str | bytes]) -> set[int]:
    """Line numbers a reader does not pass over as blank (a non-UTF-8 line is never blank)."""
    found = set()
    for number, line in enumerate(lines, start=1):
        raw = line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")
        try:
            blank = not raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            blank = False
        if not blank:
            found.add(number)
    return found


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(LINES, min_size=1, max_size=10))
def test_ingest_of_arbitrary_lines_reports_each_bad_one_and_keeps_the_good(lines):
    content, kinds = numbered(lines)
    with tempfile.TemporaryDirectory() as tmp:
        source = lines_file(Path(tmp) / "in.jsonl", content)
        result = run("ingest", str(source), "--index", str(Path(tmp) / "idx"))  # a traceback raises here
        assert result.exit_code == 0, result.output
        counts = re.match(r"indexed (\d+), updated (\d+), skipped (\d+),", result.stdout)
        skipped = skipped_lines(result.stderr, str(source))
        assert counts and int(counts[3]) == len(skipped), result.output
        assert int(counts[1]) + int(counts[2]) + len(skipped) == len(non_blank(content)), result.output
        assert set(skipped) <= non_blank(content)
        assert not {n for n, kind in kinds.items() if kind == "good"} & set(skipped), result.output
        assert {n for n, kind in kinds.items() if kind == "bad"} <= set(skipped), result.output
        good = {json.loads(content[n - 1])["id"]: json.loads(content[n - 1])["text"]
                for n, kind in kinds.items() if kind == "good"}
        index = LocalIndex.open(Path(tmp) / "idx")
        assert {d: doc.text for d, doc in index.documents(list(good)).items()} == good
        index.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(lines=st.lists(LINES, min_size=1, max_size=10))
def test_query_batches_of_arbitrary_lines_report_each_bad_one_and_search_the_rest(lines, index):
    content, kinds = numbered(lines)
    with tempfile.TemporaryDirectory() as tmp:
        queries = lines_file(Path(tmp) / "q.jsonl", content)
        result = run("query", "--queries", str(queries), "--index", str(index), "--mode", "bm25")
        assert result.exit_code == 0, result.output
        answers = [json.loads(line) for line in result.stdout.splitlines()]
        skipped = skipped_lines(result.stderr, str(queries))
        assert len(answers) + len(skipped) == len(non_blank(content)), result.output
        assert not {n for n, kind in kinds.items() if kind == "good"} & set(skipped)
        assert {n for n, kind in kinds.items() if kind == "bad"} <= set(skipped)
        searched = {a["query_id"] for a in answers}
        assert {json.loads(content[n - 1])["id"] for n, kind in kinds.items() if kind == "good"} <= searched


def test_the_library_ingest_skips_what_no_store_can_keep(tmp_path, committed_encoder):
    from hybrid_qpr.types import Document

    deep: list = []
    for _ in range(600):
        deep = [deep]
    docs = [Document("ok-1", "a good text"), Document("s", "bad \ud800 text"), Document("\udfff", "an id that is no text"),
            Document("m", "a key", {"k\ud83d": 1}), Document("d", "deep metadata", {"m": deep}),
            Document("n", "a nul key", {"a\x00b": "v"}), Document("ok-2", "another good text")]
    index = LocalIndex.create(tmp_path / "idx", committed_encoder)
    report = index.ingest(docs, committed_encoder, show_progress=False)
    assert report.indexed == 2 and [s.line for s in report.skipped] == [2, 3, 4, 5, 6]
    reasons = [s.reason for s in report.skipped]
    assert all("lone surrogate" in r for r in reasons[:3]) and "nested more than 500" in reasons[3], reasons
    assert "NUL character" in reasons[4]
    assert sorted(index.documents(["ok-1", "ok-2"])) == ["ok-1", "ok-2"]
    index.close()
