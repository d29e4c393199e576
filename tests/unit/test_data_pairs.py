"""iter_pairs: Quora TSV/CSV, gzip, two-column files, headers, bad lines."""

from __future__ import annotations

import csv
import gzip
import io
import sys

import pytest

from hybrid_qpr.data.pairs import QuestionPair, iter_pairs
from hybrid_qpr.errors import BadLines, ConfigError, InputError

HEADER = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
ROWS = [
    "0\t1\t2\thow do i learn python ?\twhat is the best way to learn python ?\t1\n",
    "1\t3\t4\twhat is love ?\thow tall is everest ?\t0\n",
]


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def test_quora_tsv_with_header(tmp_path):
    pairs = list(iter_pairs(write(tmp_path / "p.tsv", HEADER + "".join(ROWS))))
    assert pairs == [
        QuestionPair(2, "1", "2", "how do i learn python ?", "what is the best way to learn python ?", True),
        QuestionPair(3, "3", "4", "what is love ?", "how tall is everest ?", False),  # non-duplicates are read too
    ]


def test_quora_tsv_without_header_and_unknown_extension(tmp_path):
    pairs = list(iter_pairs(write(tmp_path / "pairs.txt", "".join(ROWS))))
    assert [p.line for p in pairs] == [1, 2]
    assert pairs[0].qid1 == "1" and pairs[1].is_duplicate is False


def test_gzip_detected_by_content(tmp_path):
    path = tmp_path / "p.tsv.gz"
    path.write_bytes(gzip.compress((HEADER + "".join(ROWS)).encode()))
    assert len(list(iter_pairs(path))) == 2
    renamed = tmp_path / "p.data"  # no .gz suffix: the magic bytes still say gzip
    renamed.write_bytes(path.read_bytes())
    assert len(list(iter_pairs(renamed))) == 2


def test_csv_with_quoted_newline_comma_and_quote(tmp_path):
    buf = io.StringIO()
    writer = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"])
    writer.writerow([0, 10, 11, "why is the sky blue,\nreally?", 'what does "blue" mean?', 1])
    writer.writerow([1, 12, 13, "plain one", "plain two", 0])
    path = write(tmp_path / "quora.csv", buf.getvalue())
    first, second = iter_pairs(path)
    assert first.question1 == "why is the sky blue,\nreally?"
    assert first.question2 == 'what does "blue" mean?'
    assert (first.line, second.line) == (2, 4)  # the second row starts after the embedded newline


def test_two_column_paraphrase_tsv(tmp_path):
    pairs = list(iter_pairs(write(tmp_path / "para.tsv", "how old are you ?\twhat is your age ?\nhi\thello\n\n")))
    assert pairs == [QuestionPair(1, None, None, "how old are you ?", "what is your age ?", True),
                     QuestionPair(2, None, None, "hi", "hello", True)]


def test_two_column_header_and_reordered_columns(tmp_path):
    assert list(iter_pairs(write(tmp_path / "a.tsv", "question1\tquestion2\na\tb\n")))[0].question2 == "b"
    text = "is_duplicate,question2,question1,qid2,qid1\n1,second,first,8,7\n"
    (pair,) = iter_pairs(write(tmp_path / "b.csv", text))
    assert (pair.qid1, pair.qid2, pair.question1, pair.question2) == ("7", "8", "first", "second")


def test_bad_line_error_names_file_line_and_problem(tmp_path):
    path = write(tmp_path / "bad.tsv", HEADER + ROWS[0] + "2\t5\t6\tonly four\n")
    with pytest.raises(InputError) as err:
        list(iter_pairs(path))
    assert err.value.path == str(path) and err.value.line == 3
    assert str(err.value).startswith(f"{path}:3: found 4 columns, expected 6")


@pytest.mark.parametrize("row, problem", [
    ("2\t5\t6\t \tq\t1\n", "question1 is empty"),
    ("2\t5\t6\tq\t\t1\n", "question2 is empty"),
    ("2\t5\t6\tq\tr\tyes\n", "is_duplicate must be 0 or 1, found 'yes'"),
    ("2\t5\t\tq\tr\t1\n", "only one qid"),
])
def test_bad_values(tmp_path, row, problem):
    with pytest.raises(InputError, match=problem):
        list(iter_pairs(write(tmp_path / "bad.tsv", HEADER + row)))


def test_skip_mode_records_lines_and_reasons(tmp_path):
    text = HEADER + ROWS[0] + "x\ty\n" + "3\t5\t6\tq\tr\tmaybe\n" + ROWS[1]
    bad_lines = BadLines("skip")
    pairs = list(iter_pairs(write(tmp_path / "mixed.tsv", text), bad_lines))
    skipped = bad_lines.skipped
    assert [p.line for p in pairs] == [2, 5]
    assert [s.line for s in skipped] == [3, 4] and {s.path for s in skipped} == {str(tmp_path / "mixed.tsv")}
    assert "found 2 columns" in skipped[0].reason and "is_duplicate" in skipped[1].reason


def test_unknown_layout_and_bad_option(tmp_path):
    with pytest.raises(InputError, match="found 3 columns; expected 6"):
        list(iter_pairs(write(tmp_path / "three.tsv", "a\tb\tc\n")))
    with pytest.raises(ConfigError, match="on_bad_line"):
        BadLines("ignore")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="file not found"):
        list(iter_pairs(tmp_path / "missing.tsv"))


def test_unclosed_csv_quote_is_an_input_error(tmp_path):
    path = write(tmp_path / "q.csv", 'question1,question2\n"open,quote\n')
    with pytest.raises(InputError, match=r"q.csv:2"):
        list(iter_pairs(path))


def test_stdin(monkeypatch, tmp_path):
    data = gzip.compress(("hi\thello\n").encode())
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(data))))
    assert [p.question2 for p in iter_pairs("-")] == ["hello"]


def test_utf8_bom_and_non_ascii(tmp_path):
    path = tmp_path / "u.tsv"
    path.write_bytes("\ufeffquestion1\tquestion2\nwie alt bist du ?\twas ist dein alter ?\n¿qué hora es?\tla hora, por favor\n".encode())
    pairs = list(iter_pairs(path))
    assert [p.question1 for p in pairs] == ["wie alt bist du ?", "¿qué hora es?"]
    latin1 = tmp_path / "latin1.tsv"
    latin1.write_bytes("caf\xe9\tcoffee\n".encode("latin-1"))
    with pytest.raises(InputError, match=r"latin1.tsv:1: not valid UTF-8"):
        list(iter_pairs(latin1))


def test_truncated_gzip(tmp_path):
    data = gzip.compress(("".join(f"question {i}\tparaphrase {i}\n" for i in range(2000))).encode())
    path = tmp_path / "cut.tsv.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match="corrupt or truncated gzip"):
        list(iter_pairs(path))
