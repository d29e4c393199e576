"""The document reader behind 'hybrid-qpr ingest' (hybrid_qpr.data.documents)."""

from __future__ import annotations

import gzip
import io
import sys

import pytest

from hybrid_qpr.data.documents import detect_format, iter_batch_queries, iter_documents, text_id
from hybrid_qpr.errors import BadLines, InputError


def _docs(path, **kwargs):
    return [(line, d.id, d.text, d.metadata) for line, d in iter_documents(path, **kwargs)]


def test_jsonl_with_metadata_and_missing_id(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text('{"id": 7, "text": "how do i cook rice?", "topic": "food"}\n\n{"text": "no id here?"}\n', encoding="utf-8")
    assert _docs(path) == [(1, "7", "how do i cook rice?", {"topic": "food"}),
                           (3, text_id("no id here?"), "no id here?", {})]
    assert text_id("no id here?") == text_id("no id here?") and text_id("a") != text_id("b")


def test_beir_corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "d1", "title": "", "text": "what is bm25?"}\n{"_id": "d2", "title": "T", "text": "x y"}\n', encoding="utf-8")
    assert _docs(path) == [(1, "d1", "what is bm25?", {}), (2, "d2", "x y", {"title": "T"})]


def test_tsv_and_csv_with_named_columns(tmp_path):
    tsv = tmp_path / "q.tsv"
    tsv.write_text("qid\tquestion\tlang\nA\twhy is the sky blue?\ten\n", encoding="utf-8")
    assert _docs(tsv, text_column="question", id_column="qid") == [(2, "A", "why is the sky blue?", {"lang": "en"})]
    csv_path = tmp_path / "q.csv"
    csv_path.write_text('id,text\n1,"hello, world?"\n', encoding="utf-8")
    assert _docs(csv_path) == [(2, "1", "hello, world?", {})]
    with pytest.raises(InputError, match=r"q\.tsv:1: the header has no column 'text'"):
        _docs(tsv)


def test_quora_pairs_give_each_question_once(tmp_path):
    path = tmp_path / "pairs.tsv.gz"
    rows = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate", "0\t1\t2\thow old is the moon?\twhat is the age of the moon?\t1",
            "1\t1\t3\thow old is the moon?\tis the moon old?\t0"]
    path.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode("utf-8")))
    assert detect_format(path) == "pairs"
    assert [(line, i, t) for line, i, t, _ in _docs(path)] == [
        (2, "1", "how old is the moon?"), (2, "2", "what is the age of the moon?"), (3, "3", "is the moon old?")]


def test_bad_lines_raise_with_file_and_line_or_are_skipped(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "text": "fine?"}\n{not json\n{"id": "b", "text": ""}\n[1]\n{"id": [1], "text": "x"}\n'
                    '{"id": "c", "text": "also fine"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"bad\.jsonl:2: not valid JSON"):
        _docs(path)
    bad_lines = BadLines("skip")
    assert [d[1] for d in _docs(path, bad_lines=bad_lines)] == ["a", "c"]
    skipped = bad_lines.skipped
    assert [s.line for s in skipped] == [2, 3, 4, 5]
    assert "non-empty string" in skipped[1].reason and "JSON object" in skipped[2].reason and "'id'" in skipped[3].reason
    table = tmp_path / "bad.tsv"
    table.write_text("id\ttext\n1\tok\n2\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad\.tsv:3: found 1 columns, the header has 2"):
        _docs(table)


def test_stdin_is_sniffed(monkeypatch):
    data = b'{"id": "s1", "text": "from stdin?"}\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(data))))
    assert _docs("-") == [(1, "s1", "from stdin?", {})]


def test_batch_queries_plain_and_jsonl(tmp_path):
    path = tmp_path / "queries.txt"
    path.write_text('how do i sleep?\n\n{"id": "q9", "text": "cheap flights?"}\n', encoding="utf-8")
    assert [(q.line, q.id, q.text) for q in iter_batch_queries(path)] == [(1, "1", "how do i sleep?"),
                                                                         (3, "q9", "cheap flights?")]
    path.write_text('{"id": "q1"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"queries\.txt:1: field 'text'"):
        list(iter_batch_queries(path))
