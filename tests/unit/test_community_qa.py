"""Community QA (SemEval-2016 Task 3 subtask B): the task's figures by hand, the forum-order
baseline, a BEIR set with graded candidates as a training set, and `evaluate --task community-qa`
end to end on a synthetic forum (``hybrid_qpr.testing.corpora.write_community_qa``)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hybrid_qpr.cli.main import cli
from hybrid_qpr.errors import InputError
from hybrid_qpr.evaluation.baselines import complete_run, field_order_run
from hybrid_qpr.evaluation.evaluator import sample_queries
from hybrid_qpr.evaluation.metrics import average_recall, per_query
from hybrid_qpr.evaluation.tasks import get_task
from hybrid_qpr.testing.corpora import write_community_qa


def test_the_tasks_figures_by_hand():
    run = {"q1": ["a", "b", "c"], "q2": ["d", "e", "f"], "q3": ["g", "h"]}
    qrels = {"q1": {"a": 0, "b": 1, "c": 1}, "q2": {"d": 1, "e": 0, "f": 0}, "q3": {"g": 0, "h": 0}}
    figures = get_task("community-qa").score(run, qrels)
    # AP q1 = (1/2 + 2/3) / 2, q2 = 1, q3 (no relevant post) = 0, over all three questions
    assert figures["MAP"] == pytest.approx(((1 / 2 + 2 / 3) / 2 + 1 + 0) / 3)
    assert figures["MRR"] == pytest.approx((1 / 2 + 1 + 0) / 3)
    # AvgRec pools the questions: found in the top i over the most a perfect ranking finds there,
    # i = 1..10 (q3 adds to neither); i=1: (0+1)/(1+1), i=2: (1+1)/(2+1), i>=3: (2+1)/(2+1)
    assert figures["AvgRec"] == pytest.approx((1 / 2 + 2 / 3 + 8 * 1) / 10)
    assert average_recall(run, qrels, 10) == figures["AvgRec"]
    # per question (for paired tests) the same ratio, question by question; q3 scores 0
    assert per_query(run, qrels, "avgrec", 10, unanswerable=True) == pytest.approx(
        {"q1": (0 + 1 / 2 + 8 * 1) / 10, "q2": 1.0, "q3": 0.0})
    assert get_task("community-qa").per_query(run, qrels, "MAP")["q3"] == 0.0
    # the other tasks leave a question without a relevant document out
    assert "q3" not in get_task("answer-selection").per_query(run, qrels, "MAP")
    # only the top 10 count, as the task's scorer cuts them
    long_run = {"q": [f"x{i}" for i in range(10)] + ["hit"]}
    assert get_task("community-qa").score(long_run, {"q": {"hit": 1}})["MAP"] == 0.0


def test_unanswerable_questions_stay_in_the_sample():
    queries = {"q1": "a", "q2": "b"}
    qrels = {"q1": {"d": 1}, "q2": {"d": 0}}
    assert list(sample_queries(queries, qrels, None)) == ["q1"]
    assert list(sample_queries(queries, qrels, None, unanswerable=True)) == ["q1", "q2"]


def test_the_forum_order_is_a_run_and_completes_a_short_one(tmp_path):
    beir = write_community_qa(tmp_path / "forum")
    order = field_order_run(beir, ["Q1", "Q3"], "group", "ir_rank")
    assert order == {"Q1": ["Q1_R1", "Q1_R2", "Q1_R3", "Q1_R4"], "Q3": ["Q3_R1", "Q3_R2", "Q3_R3", "Q3_R4"]}
    assert complete_run(["Q1_R4", "Q1_R2"], order["Q1"]) == ["Q1_R4", "Q1_R2", "Q1_R1", "Q1_R3"]
    assert field_order_run(beir, ["Q1"], "group", "votes") is None  # no such field: no baseline
    rows = [json.loads(line) for line in (beir / "corpus.jsonl").read_text().splitlines()]
    del rows[5]["ir_rank"]  # Q1_R2, line 6
    (beir / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError, match=r"corpus.jsonl:6: document 'Q1_R2' has no 'ir_rank'"):
        field_order_run(beir, ["Q1"], "group", "ir_rank")


def test_a_beir_set_with_graded_candidates_becomes_an_answer_dataset(tmp_path):
    from hybrid_qpr.data.answer_dataset import read_answer_records

    beir = write_community_qa(tmp_path / "forum")
    done = CliRunner().invoke(cli, ["dataset", "from-beir", str(beir), "--out", str(tmp_path / "ds"), "--json"])
    assert done.exit_code == 0, done.output
    manifest = json.loads(done.output)
    assert manifest["task"] == "community-qa"
    assert {s: manifest["counts"][s]["questions"] for s in ("train", "val", "test")} == {"train": 3, "val": 3, "test": 0}
    train = {r.id: r for r in read_answer_records(tmp_path / "ds", "train")}
    assert train["Q0"].positives == ["visa renewal time? my visa renewal took two weeks in doha.",
                                     "how long for the visa renewal? it takes a month."]
    assert len(train["Q0"].negatives) == 2 and train["Q0"].group == "Q0"
    val = {r.id: r for r in read_answer_records(tmp_path / "ds", "val")}
    assert val["Q5"].positives == [] and len(val["Q5"].negatives) == 4
    # beir/ keeps the val rows, their metadata and every judgment (grade 0 too)
    corpus = [json.loads(line) for line in (tmp_path / "ds" / "beir" / "corpus.jsonl").read_text().splitlines()]
    assert len(corpus) == 12 and corpus[0]["ir_rank"] == 1 and corpus[0]["group"] == "Q1"
    assert (tmp_path / "ds" / "beir" / "qrels" / "val.tsv").read_text().count("\t0\n") == 8
    (beir / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nQ0\tnowhere\t1\n")
    bad = CliRunner().invoke(cli, ["dataset", "from-beir", str(beir), "--out", str(tmp_path / "ds2")])
    assert bad.exit_code == 1 and "train.tsv: query 'Q0': 1 judged documents are not in" in bad.output


def test_evaluate_community_qa_ranks_each_question_s_posts_beside_the_forum_order(tmp_path, committed_encoder):
    beir = write_community_qa(tmp_path / "forum")
    index = str(tmp_path / "idx")
    runner = CliRunner()
    done = runner.invoke(cli, ["ingest", str(beir / "corpus.jsonl"), "--index", index,
                               "--model", str(committed_encoder.model_dir)])
    assert done.exit_code == 0, done.output
    out = tmp_path / "rep"
    done = runner.invoke(cli, ["evaluate", "--beir", str(beir), "--split", "val", "--index", index,
                               "--task", "community-qa", "--modes", "bm25,knn,hybrid", "--out", str(out), "--no-plot",
                               "--export-runs", str(tmp_path / "runs")])
    assert done.exit_code == 0, done.output
    comparison = json.loads((out / "comparison.json").read_text())
    assert comparison["context"]["queries"] == 3  # Q5, without a relevant post, counts
    metrics = comparison["metrics"]
    assert list(metrics) == ["ir_rank", "bm25", "knn", "hybrid"]
    # the forum lists both relevant posts of Q1 and Q3 at ranks 3 and 4: AP (1/3 + 2/4) / 2; Q5 0
    assert metrics["ir_rank"]["MAP"] == pytest.approx(2 * (1 / 3 + 2 / 4) / 2 / 3)
    assert all(c["baseline"] == "ir_rank" for c in comparison["comparisons"])
    assert metrics["bm25"]["MAP"] > metrics["ir_rank"]["MAP"]
    # every mode ranks every candidate of its question, and only those (BM25's misses completed)
    for mode in ("bm25", "knn", "hybrid"):
        lines = (tmp_path / "runs" / f"{mode}.run").read_text().splitlines()
        ranked = {}
        for line in lines:
            query, _, doc, *_ = line.split()
            ranked.setdefault(query, []).append(doc)
        assert {q: sorted(docs) for q, docs in ranked.items()} == {
            q: [f"{q}_R{k}" for k in range(1, 5)] for q in ("Q1", "Q3", "Q5")}, mode
    assert "| mode | MAP | MRR | AvgRec |" in (out / "report.md").read_text()
