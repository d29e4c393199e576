"""Judgments and runs that travel: TREC qrels, Quepid CSV, BEIR, TREC runs and query logs."""

from __future__ import annotations

import json

import pytest

from hybrid_qpr.errors import ConfigError, InputError
from hybrid_qpr.evaluation import qrels_io
from hybrid_qpr.evaluation.qrels_io import (read_judgments, read_query_log, read_trec_run,
                                            write_judgments, write_trec_run)


@pytest.fixture
def beir(tmp_path):
    root = tmp_path / "beir"
    (root / "qrels").mkdir(parents=True)
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in (
        {"_id": "q1", "text": "how do i reset my password"},
        {"_id": "q2", "text": 'comma, "quotes" and ünïcode'},
        {"_id": "q3", "text": "unjudged"})))
    (root / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "x"}\n')
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t0\nq2\td3\t2\n")
    return root


def test_beir_trec_quepid_beir_round_trip_keeps_the_qrels(beir, tmp_path):
    qrels, texts = read_judgments(beir, split="test")
    assert write_judgments(tmp_path / "judged.qrels", qrels) == 3
    trec, _ = read_judgments(tmp_path / "judged.qrels")
    write_judgments(tmp_path / "ratings.csv", trec, queries=texts)
    quepid, quepid_texts = read_judgments(tmp_path / "ratings.csv", queries=texts)
    write_judgments(tmp_path / "back", quepid, split="val", queries=quepid_texts)
    back, back_texts = read_judgments(tmp_path / "back", split="val")
    assert back == trec == quepid == qrels == {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}
    assert back_texts == {"q1": texts["q1"], "q2": texts["q2"]}
    assert (tmp_path / "ratings.csv").read_text().splitlines()[0] == "query,docid,rating"


def test_quepid_without_known_ids_derives_stable_ones(tmp_path):
    path = tmp_path / "ratings.csv"
    path.write_text('query,docid,rating\n"reset  my password",d1,3\nreset my password,d2,0\n')
    qrels, texts = qrels_io.read_quepid(path)
    (qid,) = qrels
    assert qid.startswith("wb-") and qrels[qid] == {"d1": 3, "d2": 0} and texts[qid] == "reset my password"


def test_ids_with_spaces_are_refused_in_whitespace_formats(tmp_path):
    with pytest.raises(ConfigError, match="'my doc' contains spaces") as err:
        write_judgments(tmp_path / "x.qrels", {"q1": {"my doc": 1}})
    assert "\n" not in str(err.value) and not (tmp_path / "x.qrels").exists()
    with pytest.raises(ConfigError, match="tabs"):
        write_trec_run(tmp_path / "x.run", {"q\t1": ["d1"]})
    with pytest.raises(ConfigError, match="tabs or line breaks"):
        write_judgments(tmp_path / "beir", {"q1": {"a\tb": 1}})
    write_judgments(tmp_path / "beir", {"q1": {"my doc": 1}})  # BEIR's TSV holds a space
    assert read_judgments(tmp_path / "beir", split="test")[0] == {"q1": {"my doc": 1}}


def test_quepid_needs_the_query_texts(tmp_path):
    with pytest.raises(ConfigError, match="Quepid keys ratings by query text"):
        write_judgments(tmp_path / "r.csv", {"q1": {"d": 1}})


@pytest.mark.parametrize(("name", "text", "problem"), [
    ("a.qrels", "q1 0 d1 1\nq1 0 d2\n", r"a.qrels:2: found 3 fields, expected 4"),
    ("a.qrels", "q1 0 d1 yes\n", r"a.qrels:1: the grade must be an integer, found 'yes'"),
    ("a.qrels", "q1 0 d1 1\n\nq1 0 d1 0\n", r"a.qrels:3: .*judged twice \(first on line 1\)"),
    ("r.csv", "query,doc,rating\n", r"r.csv:1: expected the header query,docid,rating"),
    ("r.csv", "query,docid,rating\nq,d\n", r"r.csv:2: found 2 columns"),
])
def test_bad_judgment_files_name_file_and_line(tmp_path, name, text, problem):
    (tmp_path / name).write_text(text)
    with pytest.raises(InputError, match=problem) as err:
        read_judgments(tmp_path / name)
    assert "\n" not in str(err.value)


def test_trec_run_round_trip_and_trec_eval_order(tmp_path):
    run = {"q1": ["d3", "d1", "d2"], "q2": ["d9"]}
    write_trec_run(tmp_path / "a.run", run, tag="mine")
    assert read_trec_run(tmp_path / "a.run") == run
    assert (tmp_path / "a.run").read_text().splitlines()[0] == "q1 Q0 d3 1 3 mine"
    # ranked by score, ties by document id in reverse, whatever the rank column says
    (tmp_path / "b.run").write_text("q1 Q0 a 1 1.0 t\nq1 Q0 c 2 2.5 t\nq1 Q0 b 3 1.0 t\n")
    assert read_trec_run(tmp_path / "b.run") == {"q1": ["c", "b", "a"]}
    (tmp_path / "c.run").write_text("q1 Q0 a 1 high t\n")
    with pytest.raises(InputError, match=r"c.run:1: the score must be a number"):
        read_trec_run(tmp_path / "c.run")
    (tmp_path / "d.run").write_text("q1 Q0 a 1 1 t\nq1 Q0 a 2 0.5 t\n")
    with pytest.raises(InputError, match=r"d.run:2: document 'a' is listed twice"):
        read_trec_run(tmp_path / "d.run")


def test_query_logs_plain_and_jsonl(tmp_path):
    (tmp_path / "log.txt").write_text("reset password\n\nfly to lisbon\nreset password\n")
    assert read_query_log(tmp_path / "log.txt") == {"q1": "reset password", "q3": "fly to lisbon"}
    (tmp_path / "log.jsonl").write_text('{"id": "a", "text": "x"}\n{"query": "y"}\n')
    assert read_query_log(tmp_path / "log.jsonl") == {"a": "x", "q2": "y"}
    (tmp_path / "bad.jsonl").write_text('{"id": "a", "text": "x"}\n{"id": 3}\n')
    with pytest.raises(InputError, match=r"bad.jsonl:2: expected"):
        read_query_log(tmp_path / "bad.jsonl")
