"""Sentence splitter, gold-sentence rule, and the from-answers / from-squad datasets on hand-made files."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hybrid_qpr.cli.main import cli
from hybrid_qpr.data.answer_dataset import build_answer_retrieval, build_answer_selection, read_answer_records
from hybrid_qpr.data.beir import load_beir, load_query_metadata
from hybrid_qpr.errors import ConfigError, InputError, SkippedLine
from hybrid_qpr.text.sentences import sentences_overlapping, split_sentences


def sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in split_sentences(text)]


def test_splitter_basic_and_punctuation():
    assert sentences("The cat sat. The dog ran! Did it? Yes.") == ["The cat sat.", "The dog ran!", "Did it?", "Yes."]
    assert sentences('He said "stop." Then he left.') == ['He said "stop."', "Then he left."]
    assert sentences("It ended (finally.) Then peace.") == ["It ended (finally.)", "Then peace."]
    assert sentences("") == [] and sentences("   ") == []


def test_splitter_keeps_abbreviations_initials_and_decimals():
    assert sentences("Dr. Smith met Mr. Jones at St. Mary's. They talked.") == [
        "Dr. Smith met Mr. Jones at St. Mary's.", "They talked."]
    assert sentences("J. R. R. Tolkien wrote it. It sold well.") == ["J. R. R. Tolkien wrote it.", "It sold well."]
    assert sentences("Pi is 3.14159 roughly. Oxygen is 20.8% of air.") == ["Pi is 3.14159 roughly.", "Oxygen is 20.8% of air."]
    assert sentences("It grew in the U.S. and e.g. Canada. Then it fell.") == [
        "It grew in the U.S. and e.g. Canada.", "Then it fell."]
    assert sentences("Version 2.0.1 shipped in Jan. 2020 to 5 cities. Done.") == [
        "Version 2.0.1 shipped in Jan. 2020 to 5 cities.", "Done."]
    # lower-case continuation is never a new sentence
    assert sentences("He ran 3 km. and then rested.") == ["He ran 3 km. and then rested."]


def test_splitter_citation_markers_newlines_and_spans():
    text = "It began around 1700.[citation needed] Although old, it lasted.\nNew line here"
    assert sentences(text) == ["It began around 1700.[citation needed]", "Although old, it lasted.", "New line here"]
    spans = split_sentences("  First one.   Second one.  ")
    assert spans == [(2, 12), (15, 26)]


def test_gold_sentence_rule_by_character_offsets():
    text = "Paris is in France. The Seine flows through Paris. It is long."
    spans = split_sentences(text)
    start = text.index("Seine")
    assert sentences_overlapping(spans, start, start + len("Seine")) == [1]
    # an answer across a boundary touches both sentences
    start = text.index("France")
    assert sentences_overlapping(spans, start, text.index("Seine") + 1) == [0, 1]
    # an empty span counts as the sentence holding its start
    assert sentences_overlapping(spans, text.index("long"), text.index("long")) == [2]


ANSWERS_TSV = (
    "qid\tquestion\tsentence\tlabel\n"
    "q1\twhere is paris\tparis is in france .\t1\n"
    "q1\twhere is paris\tthe seine is a river .\t0\n"
    "q2\twho wrote hamlet\thamlet is a play .\t0\n"
    "q2\twho wrote hamlet\tshakespeare wrote hamlet .\t1\n"
    "q3\twhat is tea\ttea is hot .\t0\n"
    "q1\twhere is paris\tparis is the capital .\t1\n"
)


def test_from_answers_one_split_groups_and_negatives(tmp_path):
    src = tmp_path / "dev.tsv"
    src.write_text(ANSWERS_TSV, encoding="utf-8")
    report = build_answer_selection(src, tmp_path / "ds", split_name="val")
    assert report.counts["val"]["questions"] == 3 and report.counts["val"]["queries"] == 2  # q3 has no answer
    records = {r.id: r for r in read_answer_records(tmp_path / "ds", "val")}
    assert records["q1"].positives == ["paris is in france .", "paris is the capital ."]
    assert records["q1"].negatives == ["the seine is a river ."]
    corpus, queries, qrels = load_beir(tmp_path / "ds" / "beir", "val")
    assert qrels == {"q1": {"q1-1": 1, "q1-3": 1}, "q2": {"q2-2": 1}}
    assert corpus["q1-2"] == "the seine is a river ." and set(queries) == {"q1", "q2"}
    assert load_query_metadata(tmp_path / "ds" / "beir", "group") == {"q1": "q1", "q2": "q2"}
    docs = [json.loads(line) for line in (tmp_path / "ds" / "beir" / "corpus.jsonl").read_text().splitlines()]
    assert {d["_id"]: d["group"] for d in docs}["q2-1"] == "q2"
    assert not (tmp_path / "ds" / "beir" / "qrels" / "test.tsv").exists()


def test_from_answers_seeded_split_and_extra_files(tmp_path):
    src = tmp_path / "a.tsv"
    src.write_text(ANSWERS_TSV, encoding="utf-8")
    report = build_answer_selection(src, tmp_path / "seeded", fractions=(0.34, 0.33, 0.33), seed=1)
    assert sum(c["questions"] for c in report.counts.values()) == 3
    again = build_answer_selection(src, tmp_path / "seeded2", fractions=(0.34, 0.33, 0.33), seed=1)
    assert again.counts == report.counts
    dev = tmp_path / "dev.tsv"
    dev.write_text("q9\twhy\tbecause .\t1\n", encoding="utf-8")  # no header: positional columns
    both = build_answer_selection(src, tmp_path / "both", extra={"val": dev})
    assert both.counts["train"]["questions"] == 3 and both.counts["val"]["queries"] == 1
    with pytest.raises(ConfigError, match="occurs in two"):
        build_answer_selection(src, tmp_path / "dup", extra={"val": src})


def test_from_answers_bad_lines_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("q1\twhere\tthere .\t1\nq1\twhere\there .\tmaybe\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.tsv:2: label must be 0 or 1"):
        build_answer_selection(bad, tmp_path / "x", split_name="val")
    clash = tmp_path / "clash.tsv"
    clash.write_text("q1\twhere\tthere .\t1\nq1\twho\there .\t0\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"clash.tsv:2: qid 'q1'"):
        build_answer_selection(clash, tmp_path / "y", split_name="val")
    skipped = build_answer_selection(bad, tmp_path / "z", split_name="val", on_bad_line="skip")
    assert skipped.skipped == [SkippedLine(str(bad), 2, "label must be 0 or 1, found 'maybe'")]
    control = tmp_path / "control.tsv"  # a qid becomes a query id of qrels and run files: no control characters
    control.write_text("q1\twhere\tthere .\t1\nq\x1b2\twho\there .\t1\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"control.tsv:2: qid: id 'q\\x1b2' holds the control character"):
        build_answer_selection(control, tmp_path / "c", split_name="val")


def _squad(articles: list[tuple[str, str, list[tuple[str, str, str]]]]) -> dict:
    data = []
    for title, context, qas in articles:
        data.append({"title": title, "paragraphs": [{"context": context, "qas": [
            {"id": qid, "question": q, "answers": [{"answer_start": context.index(a), "text": a}]} for qid, q, a in qas]}]})
    return {"version": "1.1", "data": data}


def test_from_squad_gold_sentence_and_article_split(tmp_path):
    arts = [(f"Art{i}", f"Topic {i} began in 19{i}0. Dr. Who led topic {i}. It ended in 20{i}0.",
             [(f"a{i}q1", f"who led topic {i}?", "Dr. Who"), (f"a{i}q2", f"when did topic {i} end?", f"20{i}0")])
            for i in range(5)]
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(_squad(arts)), encoding="utf-8")
    report = build_answer_retrieval(path, tmp_path / "ds", fractions=(0.6, 0.2, 0.2), seed=3)
    assert [report.counts[s]["questions"] for s in ("train", "val", "test")] == [6, 2, 2]
    corpus, queries, qrels = load_beir(tmp_path / "ds" / "beir", "test")
    assert len(corpus) == 6  # three sentences in each of the two held-out articles
    for qid, rel in qrels.items():
        (doc,) = rel
        expected = "Dr. Who led topic" if qid.endswith("q1") else "It ended in"
        assert corpus[doc].startswith(expected)
    train = read_answer_records(tmp_path / "ds", "train")
    assert train[0].positives[0].startswith("Dr. Who led") and len(train[0].negatives) == 2
    held_out = set(report.options["articles"]["val"]) | set(report.options["articles"]["test"])
    assert not held_out & set(report.options["articles"]["train"])


def test_from_squad_bad_offset_is_reported_or_skipped(tmp_path):
    body = _squad([("A", "One fact. Two facts.", [("x1", "how many?", "Two")])])
    body["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 0
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(body), encoding="utf-8")
    with pytest.raises(InputError, match=r"data\[0\]\.paragraphs\[0\]\.qas\[0\]\.answers\[0\]: answer_start 0"):
        build_answer_retrieval(path, tmp_path / "ds", split_name="test")
    report = build_answer_retrieval(path, tmp_path / "ds", split_name="test", on_bad_line="skip")
    assert report.counts["test"]["questions"] == 0 and len(report.skipped) == 2  # the answer, then its question
    control = _squad([("A", "One fact. Two facts.", [("x\x072", "how many?", "Two")])])
    path.write_text(json.dumps(control), encoding="utf-8")
    with pytest.raises(InputError, match=r"qas\[0\]: id 'x\\x072' holds the control character"):
        build_answer_retrieval(path, tmp_path / "ds3", split_name="test")
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [\n  {"title": }\n]}', encoding="utf-8")
    with pytest.raises(InputError, match=r"broken.json:2: not valid JSON"):
        build_answer_retrieval(broken, tmp_path / "ds2")


def test_cli_from_answers_and_from_squad(tmp_path):
    src = tmp_path / "dev.tsv"
    src.write_text(ANSWERS_TSV, encoding="utf-8")
    result = CliRunner().invoke(cli, ["dataset", "from-answers", str(src), "--split-name", "val", "--out",
                                      str(tmp_path / "a"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["counts"]["val"]["queries"] == 2
    squad = tmp_path / "s.json"
    squad.write_text(json.dumps(_squad([("A", "One fact. Two facts.", [("x1", "how many?", "Two")])])), encoding="utf-8")
    result = CliRunner().invoke(cli, ["dataset", "from-squad", str(squad), "--split-name", "test", "--out", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(cli, ["dataset", "from-answers", str(tmp_path / "missing.tsv"), "--out", str(tmp_path / "m")])
    assert result.exit_code == 1 and "missing.tsv: file not found" in result.output


def test_dataset_stats_reads_answer_datasets_and_notices_edits(tmp_path):
    src = tmp_path / "dev.tsv"
    src.write_text(ANSWERS_TSV, encoding="utf-8")
    build_answer_selection(src, tmp_path / "a", split_name="val")
    result = CliRunner().invoke(cli, ["dataset", "stats", str(tmp_path / "a"), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["format"] == "hybrid-qpr-answers" and report["counts"]["val"]["queries"] == 2
    val = tmp_path / "a" / "val.jsonl"
    val.write_text(val.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")  # keep one question
    result = CliRunner().invoke(cli, ["dataset", "stats", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert "modified since the build: val.jsonl" in result.output
    assert json.loads(CliRunner().invoke(cli, ["dataset", "stats", str(tmp_path / "a"), "--json"]).output)["counts"]["val"]["questions"] == 1
