"""Clusters: transitive closure on qids or text, QA-log distant supervision and coherence."""

from __future__ import annotations

import json

import pytest

from hybrid_qpr.data.clusters import (QALogRecord, clusters_from_pairs, clusters_from_qa_log, coherence,
                                      normalize_text, text_id)
from hybrid_qpr.data.pairs import QuestionPair
from hybrid_qpr.data.qalog import iter_qa_log
from hybrid_qpr.errors import BadLines, ConfigError, InputError, SkippedLine


def pair(line, q1, q2, qid1=None, qid2=None, dup=True):
    return QuestionPair(line, qid1, qid2, q1, q2, dup)


def test_transitive_closure_on_qids():
    pairs = [pair(1, "A?", "B?", "a", "b"), pair(2, "B?", "C?", "b", "c"), pair(3, "D?", "E?", "d", "e"),
             pair(4, "F?", "G?", "f", "g", dup=False), pair(5, "E?", "E?", "e", "e")]
    clusters, report = clusters_from_pairs(pairs)
    assert report.key == "qid"
    assert [[q.id for q in c.questions] for c in clusters] == [["a", "b", "c"], ["d", "e"]]
    assert [c.id for c in clusters] == ["c0", "c1"]
    assert (report.duplicate_pairs, report.non_duplicate_pairs, report.self_pairs, report.questions) == (4, 1, 1, 5)


def test_transitive_closure_on_normalized_text():
    pairs = [pair(1, "How old are you?", "What is your age?"),
             pair(2, "what is  YOUR age ?", "Your age, please?"),  # same normalized text as line 1's q2
             pair(3, "hi", "hello")]
    clusters, report = clusters_from_pairs(pairs)
    assert report.key == "text"
    assert [[q.text for q in c.questions] for c in clusters] == [
        ["How old are you?", "What is your age?", "Your age, please?"], ["hi", "hello"]]
    assert clusters[0].questions[1].id == text_id(normalize_text("what is your age?"))


def test_self_pair_alone_is_dropped_and_qid_mode_needs_qids():
    clusters, report = clusters_from_pairs([pair(1, "same", "Same")])
    assert clusters == [] and report.singletons_dropped == 1
    with pytest.raises(ConfigError, match="line 1 has no qids"):
        clusters_from_pairs([pair(1, "a", "b")], key="qid")


def test_coherence_hand_computed():
    # T1 = {how, do, i, reset, my, password, ?} (7), T2 = {reset, password} (2),
    # T3 = {password, reset, help, ?} (4); S = T1 ∪ T3 = 8 tokens -> c = (7 + 2 + 4) / (3 * 8)
    texts = ["How do I reset my password?", "reset password", "password reset help?"]
    assert coherence(texts) == pytest.approx(13 / 24)
    assert coherence(["same words", "Same words"]) == 1.0
    assert coherence(["!!!", "..."]) == 0.0


def test_qa_log_clusters_and_coherence_filter():
    records = [QALogRecord(i + 1, q, a) for i, (q, a) in enumerate([
        ("How do I reset my password?", "ans-1"), ("reset password", "ans-1"), ("password reset help?", "ans-1"),
        ("reset password", "ans-1"),  # same text again: merged
        *((w, "ans-2") for w in ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota",
                                 "kappa", "lambda"]),  # 11 disjoint one-word questions: c = 1/11 < 0.1
        *((w, "ans-3") for w in ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                                 "ten"]),  # 10 disjoint words: c = 1/10, kept (>= threshold)
        ("lonely question", "ans-4"),
    ])]
    clusters, report = clusters_from_qa_log(records)
    assert [len(c.questions) for c in clusters] == [3, 10]
    assert (report.records, report.answers, report.kept, report.dropped_incoherent, report.too_small) == (26, 4, 2, 1, 1)
    clusters, report = clusters_from_qa_log(records, min_coherence=0.6)
    assert report.kept == 0 and report.dropped_incoherent == 3  # 13/24 < 0.6 too
    with pytest.raises(ConfigError, match="min_coherence"):
        clusters_from_qa_log(records, min_coherence=1.5)


def test_question_in_two_answer_clusters_gets_unique_ids():
    records = [QALogRecord(1, "shared question", "x"), QALogRecord(2, "shared question two", "x"),
               QALogRecord(3, "shared question", "y"), QALogRecord(4, "question shared again", "y")]
    clusters, _ = clusters_from_qa_log(records)
    ids = [q.id for c in clusters for q in c.questions]
    assert len(ids) == len(set(ids)) == 4


def test_qa_log_readers(tmp_path):
    jsonl = tmp_path / "log.jsonl"
    jsonl.write_text("\n".join(json.dumps(o) for o in [{"question": "q one", "answer_id": 7},
                                                      {"query": "q two", "answer": "7", "extra": 1}]) + "\n")
    assert [(r.line, r.question, r.answer_id) for r in iter_qa_log(jsonl)] == [(1, "q one", "7"), (2, "q two", "7")]
    tsv = tmp_path / "log.tsv"
    tsv.write_text("user\tanswer_id\tquestion\nu1\tA\tfirst q\nu2\t\tsecond q\n")
    with pytest.raises(InputError, match=r"log.tsv:3: the answer id is empty"):
        list(iter_qa_log(tsv))
    bad_lines = BadLines("skip")
    assert [r.question for r in iter_qa_log(tsv, bad_lines=bad_lines)] == ["first q"]
    assert bad_lines.skipped == [SkippedLine(str(tsv), 3, "the answer id is empty or not a string/number ('')")]
    plain = tmp_path / "plain.csv"
    plain.write_text('"a, question",A1\nanother,A1\n')
    assert [r.question for r in iter_qa_log(plain)] == ["a, question", "another"]
    custom = tmp_path / "custom.jsonl"
    custom.write_text('{"utt": "hello", "label": "L"}\n{"utt": "hi"}\n')
    with pytest.raises(InputError, match=r"custom.jsonl:2: no answer id field"):
        list(iter_qa_log(custom, question_column="utt", answer_column="label"))
