"""The relevance commands end to end on the examples/ bank in a local index: evaluate with paired
tests, exported runs (scored again by trec_eval and by 'evaluate --run'), the history and its
drop flag, judgment-free compare, judgments convert and tune's gain interval."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hybrid_qpr import resources
from hybrid_qpr.cli.main import cli

BEIR = str(resources.examples_dir() / "beir")


@pytest.fixture(scope="module")
def index(tmp_path_factory, committed_encoder):
    from hybrid_qpr.backends.local import LocalIndex
    from hybrid_qpr.data.documents import iter_documents

    path = tmp_path_factory.mktemp("relevance") / "idx"
    built = LocalIndex.create(path, committed_encoder)
    built.ingest([doc for _, doc in iter_documents(resources.examples_dir() / "beir" / "corpus.jsonl")],
                 committed_encoder, show_progress=False)
    built.close()
    return str(path)


def invoke(*args: str, code: int = 0):
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == code, result.output
    return result


def test_evaluate_compares_modes_exports_runs_and_scores_them_again(index, tmp_path):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    out, runs, history = tmp_path / "out", tmp_path / "runs", tmp_path / "history"
    invoke("evaluate", "--beir", BEIR, "--index", index, "--modes", "bm25,knn,hybrid", "--no-plot", "--out", str(out),
           "--export-runs", str(runs), "--history", str(history))
    report = json.loads((out / "report.json").read_text())["results"]
    comparison = json.loads((out / "comparison.json").read_text())
    assert [c["run"] for c in comparison["comparisons"]] == ["knn", "hybrid"]
    for c in comparison["comparisons"]:
        assert c["baseline"] == "bm25" and c["metric"] == "MRR@20" and c["queries"] == 60
        assert c["wins"] + c["losses"] + c["ties"] == 60
        deltas = [row["delta"] for row in c["per_query"]]
        assert deltas == sorted(deltas)  # worst losses first
        assert c["randomization_p_holm"] >= c["randomization_p"]

    # the exported runs, scored by trec_eval, give the report's numbers
    from hybrid_qpr.evaluation.qrels_io import read_judgments, read_trec_run

    qrels, _ = read_judgments(BEIR, split="test")
    for mode in ("bm25", "knn", "hybrid"):
        run = read_trec_run(runs / f"{mode}.run")
        scored = {q: {d: float(len(ranked) - r) for r, d in enumerate(ranked)} for q, ranked in run.items()}
        trec = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut_10", "recall_20", "map"}).evaluate(scored)
        for ours, theirs in (("nDCG@10", "ndcg_cut_10"), ("Recall@20", "recall_20"), ("MAP", "map")):
            mean = sum(t[theirs] for t in trec.values()) / len(trec)
            assert round(report[mode]["metrics"][ours], 4) == round(mean, 4)

    # 'evaluate --run' on another system's runs: the same metrics, and the tests between them
    qrels_file = tmp_path / "test.qrels"
    invoke("judgments", "convert", BEIR, str(qrels_file))
    other = tmp_path / "other"
    invoke("evaluate", "--qrels", str(qrels_file), "--run", str(runs / "knn.run"), "--run", str(runs / "hybrid.run"),
           "--baseline", "hybrid", "--out", str(other))
    scored = json.loads((other / "comparison.json").read_text())
    assert scored["metrics"]["knn"] == pytest.approx(report["knn"]["metrics"], abs=1e-12)
    assert scored["comparisons"][0]["baseline"] == "hybrid"

    # runs of two fusions, both exported as hybrid.run, told apart by their folders
    invoke("evaluate", "--beir", BEIR, "--index", index, "--modes", "hybrid", "--fusion", "minmax", "--alpha", "0.7",
           "--no-plot", "--out", str(tmp_path / "mm"), "--export-runs", str(tmp_path / "minmax"))
    invoke("evaluate", "--beir", BEIR, "--run", str(runs / "hybrid.run"), "--run", str(tmp_path / "minmax" / "hybrid.run"),
           "--out", str(other))
    assert [c["run"] for c in json.loads((other / "comparison.json").read_text())["comparisons"]] == ["minmax/hybrid"]

    # a second evaluation of the history, then its report
    invoke("evaluate", "--beir", BEIR, "--index", index, "--modes", "bm25,hybrid", "--fusion", "minmax", "--no-plot",
           "--out", str(out), "--history", str(history))
    shown = invoke("history", str(history)).output
    assert "#1" in shown and "#2" in shown and "#2 against #1" in shown and "fusion=minmax" in shown
    summary = json.loads(invoke("history", str(history), "--json").stdout)  # stderr may name a drop
    assert len(summary["trend"]["hybrid"]["MRR@20"]) == 2 and summary["trend"]["knn"]["MRR@20"][1] is None


def test_history_flags_a_significant_drop(tmp_path):
    from hybrid_qpr.evaluation import history

    good = {f"q{i}": 1.0 for i in range(40)}
    bad = {**{f"q{i}": 0.2 for i in range(36)}, **{f"q{i}": 1.0 for i in range(36, 40)}}
    same = dict(good)
    history.append(tmp_path, {"model": "m1"}, {"hybrid": {"MRR@20": 1.0}, "bm25": {"MRR@20": 1.0}},
                   {"hybrid": {"MRR@20": good}, "bm25": {"MRR@20": good}})
    history.append(tmp_path, {"model": "m2"}, {"hybrid": {"MRR@20": 0.28}, "bm25": {"MRR@20": 1.0}},
                   {"hybrid": {"MRR@20": bad}, "bm25": {"MRR@20": same}})
    summary = history.report(tmp_path)
    assert [(d["run"], d["metric"]) for d in summary["drops"]] == [("hybrid", "MRR@20")]
    assert summary["drops"][0]["p_holm"] < 0.05
    result = invoke("history", str(tmp_path), "--fail-on-drop", code=2)
    assert "SIGNIFICANT DROP" in result.output


def test_evaluate_refuses_bad_input_in_one_line(index, tmp_path):
    bad = tmp_path / "bad.run"
    bad.write_text("q1 Q0 d1 1 x t\n")
    out = invoke("evaluate", "--beir", BEIR, "--run", str(bad), code=1).output
    assert out.strip() == f"Error: {bad}:1: the score must be a number, found 'x'"
    assert "needs --beir" in invoke("evaluate", "--index", index, code=2).output
    assert "nothing to evaluate" in invoke("evaluate", "--beir", BEIR, code=2).output


def test_compare_without_judgments(index, tmp_path):
    log = tmp_path / "log.txt"
    log.write_text("how do i reset my netflix password\ncheapest way to fly to lisbon\nhow to stop hiccups\n")
    out = tmp_path / "cmp.json"
    text = invoke("compare", "--queries", str(log), "--index", index, "--a", "hybrid", "--b", "bm25", "--out", str(out)).output
    assert "RBO (p=0.9)" in text and "most changed" in text
    report = json.loads(out.read_text())
    assert report["queries"] == 3 and 0 <= report["rbo"] <= 1 and len(report["changed"]) == 3
    same = invoke("compare", "--queries", str(log), "--index", index, "--a", "knn", "--b", "knn").output
    assert "RBO (p=0.9) 1.0000" in same and "Jaccard@10 1.0000" in same
    assert "starts with a mode" in invoke("compare", "--queries", str(log), "--index", index, "--a", "fast", code=1).output


def test_tune_reports_the_gain_with_an_interval(index):
    text = invoke("tune", "--beir", BEIR, "--split", "val", "--index", index, "--dry-run", "--max-queries", "10").output
    assert "95% CI" in text and "small sample" in text
