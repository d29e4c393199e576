"""Ids holding a control character (TAB, CR, LF, any other C0 control, DEL) are refused in every
input format, naming the file and line: such an id would tear the tab- and line-separated qrels
and run files that carry it (a judgment of one once made the workbench unusable)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hybrid_qpr.cli.main import cli
from hybrid_qpr.data.documents import iter_documents
from hybrid_qpr.errors import BadLines, InputError
from hybrid_qpr.text.ids import id_problem
from hybrid_qpr.types import Document


@pytest.mark.parametrize("doc_id", ["a\tb", "a\nb", "a\r\nb", "a\rb", "a\x00b", "a\x1fb", "a\x7fb", "a\x0bb"])
def test_id_problem_names_the_control_character(doc_id):
    problem = id_problem(doc_id)
    assert problem and "control character" in problem and "\n" not in problem and "\t" not in problem


@pytest.mark.parametrize("doc_id", ["a b", "ünïcödé", "a\u00a0b", "x" * 300, "12"])
def test_ordinary_ids_pass(doc_id):
    assert id_problem(doc_id) is None


def _files(tmp_path):
    """The same bad id (line 2) in every input format that carries ids."""
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text(json.dumps({"id": "ok", "text": "first question?"}) + "\n"
                     + json.dumps({"id": "bad\tid", "text": "second question?"}) + "\n", encoding="utf-8")
    beir = tmp_path / "corpus.jsonl"
    beir.write_text(json.dumps({"_id": "ok", "title": "", "text": "first question?"}) + "\n"
                    + json.dumps({"_id": "bad\r\nid", "title": "", "text": "second question?"}) + "\n", encoding="utf-8")
    csv = tmp_path / "docs.csv"
    csv.write_text('id,text\nok,first question?\n"bad\nid",second question?\n', encoding="utf-8")
    tsv = tmp_path / "docs.tsv"
    tsv.write_text("id\ttext\nok\tfirst question?\nbad\x7fid\tsecond question?\n", encoding="utf-8")
    pairs = tmp_path / "quora.csv"
    pairs.write_text('id,qid1,qid2,question1,question2,is_duplicate\n0,1,2,how are you?,how do you do?,1\n'
                     '1,"bad\nid",4,what is this?,what is that?,0\n', encoding="utf-8")
    # the bad record's line: 2 in JSONL, 3 in the files with a header row
    return {"jsonl": (jsonl, 2), "beir": (beir, 2), "csv": (csv, 3), "tsv": (tsv, 3), "pairs": (pairs, 3)}


@pytest.mark.parametrize("fmt", ["jsonl", "beir", "csv", "tsv", "pairs"])
def test_every_input_format_refuses_them_naming_file_and_line(tmp_path, fmt):
    path, line = _files(tmp_path)[fmt]
    with pytest.raises(InputError) as caught:
        list(iter_documents(path))
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: id ") and "control character" in message and "\n" not in message
    skipped = BadLines("skip")
    ids = [doc.id for _, doc in iter_documents(path, bad_lines=skipped)]
    assert all(id_problem(i) is None for i in ids) and len(skipped.skipped) == 1 and skipped.skipped[0].line == line


def test_ingest_skips_and_lists_them_and_strict_stops_in_one_line(tmp_path, committed_encoder):
    path, _ = _files(tmp_path)["jsonl"]
    model = str(committed_encoder.model_dir)
    result = CliRunner().invoke(cli, ["ingest", str(path), "--index", str(tmp_path / "idx"), "--model", model],
                                catch_exceptions=False)
    assert result.exit_code == 0 and "indexed 1, updated 0, skipped 1" in result.output, result.output
    assert f"{path}:2" in result.output and "control character '\\t'" in result.output
    result = CliRunner().invoke(cli, ["ingest", str(path), "--index", str(tmp_path / "idx2"), "--model", model,
                                      "--strict"], catch_exceptions=False)
    lines = result.output.strip().splitlines()
    assert result.exit_code != 0 and len(lines) == 1 and lines[0].startswith(f"Error: {path}:2: id 'bad\\tid'"), \
        result.output


def test_the_library_ingest_refuses_them_too(tmp_path, committed_encoder):
    from hybrid_qpr.backends.local import LocalIndex

    index = LocalIndex.create(tmp_path / "idx", committed_encoder)
    report = index.ingest([Document("ok", "a question?"), Document("bad\nid", "another question?")],
                          committed_encoder, show_progress=False)
    assert report.indexed == 1 and "control character" in report.skipped[0].reason
