"""Evaluator, tuner and report writer (hybrid_qpr.evaluation.evaluator / report)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hybrid_qpr.backends.local import LocalIndex
from hybrid_qpr.evaluation.evaluator import (WARM_UP_QUERIES, evaluate, latency_summary, sample_queries, score_run, tune,
                                             untuned_prior)
from hybrid_qpr.evaluation.report import write_report
from hybrid_qpr.search import HybridSearcher


def test_score_run_hand_computed():
    qrels = {"q1": {"a": 1, "b": 1}, "q2": {"c": 1}}
    run = {"q1": ["x", "a", "b"], "q2": ["y", "z"]}
    m = score_run(run, qrels)
    assert m["H@1"] == 0.0 and m["H@10"] == 0.5
    assert m["MRR@20"] == pytest.approx((1 / 2 + 0) / 2)
    assert m["Recall@10"] == pytest.approx((1.0 + 0.0) / 2)
    assert m["MAP"] == pytest.approx(((1 / 2 + 2 / 3) / 2 + 0) / 2)


def test_latency_summary_and_sampling():
    s = latency_summary([0.001, 0.002, 0.003, 0.004])
    assert s["p50_ms"] == pytest.approx(2.5) and s["qps"] == pytest.approx(4 / 0.010)
    queries = {f"q{i}": f"text {i}" for i in range(10)}
    qrels = {f"q{i}": {"d": 1} for i in range(0, 10, 2)}
    assert list(sample_queries(queries, qrels, None)) == ["q0", "q2", "q4", "q6", "q8"]
    assert sample_queries(queries, qrels, 2) == sample_queries(queries, qrels, 2) and len(sample_queries(queries, qrels, 2)) == 2


@pytest.fixture(scope="module")
def bank(tmp_path_factory, committed_encoder, question_bank):
    """The test bank with its paraphrase groups (one subject = one group) as BEIR-style dicts."""
    idx = LocalIndex.create(tmp_path_factory.mktemp("eval") / "idx", committed_encoder)
    idx.ingest(question_bank, committed_encoder, show_progress=False)
    queries = {d.id: d.text for d in question_bank}
    qrels = {d.id: {o.id: 1 for o in question_bank if o.metadata["topic"] == d.metadata["topic"] and o.id != d.id}
             for d in question_bank}
    return HybridSearcher(idx, committed_encoder), queries, qrels


def test_evaluate_drops_the_query_itself_and_times_each_mode(bank):
    searcher, queries, qrels = bank
    results = evaluate(searcher, queries, qrels, modes=("bm25", "knn", "hybrid", "rerank"))
    assert set(results) == {"bm25", "knn", "hybrid", "rescore"}  # rerank: rescore's name before
    for r in results.values():
        assert r["queries"] == 200 and 0.0 < r["metrics"]["MRR@20"] <= 1.0
        assert r["latency"]["p50_ms"] > 0 and r["latency"]["qps"] > 0
        assert r["metrics"]["H@1"] <= r["metrics"]["H@10"]
    # the query itself is in the corpus and would be rank 1 in bm25 mode without drop_self
    identity = {q: {q: 1} for q in queries}
    assert evaluate(searcher, queries, identity, modes=("bm25",))["bm25"]["metrics"]["H@10"] == 0.0
    # an index built through the library has no defaults of its own: it fuses as its model says (untuned_prior)
    assert results["hybrid"]["settings"]["fusion"] == untuned_prior(searcher.encoder)["fusion"]


def test_tuned_hybrid_is_never_worse_than_the_better_single_mode(bank):
    searcher, queries, qrels = bank
    result = tune(searcher, queries, qrels, depth=50)
    assert result.mrr >= max(result.bm25_mrr, result.knn_mrr)
    assert len(result.grid) == 11 * 5 and {g["fusion"] for g in result.grid} == {"rrf", "minmax", "zscore", "l2", "dbsf"}
    assert max(g["MRR@20"] for g in result.grid if g["allowed"]) == result.mrr
    # the stored defaults really give that MRR in hybrid mode
    evaluated = evaluate(searcher, queries, qrels, modes=("hybrid", "bm25", "knn"), fusion=result.fusion,
                         alpha=result.alpha, depth=50)
    assert evaluated["hybrid"]["metrics"]["MRR@20"] == pytest.approx(result.mrr)

    assert evaluated["bm25"]["metrics"]["MRR@20"] == pytest.approx(result.bm25_mrr)
    assert evaluated["knn"]["metrics"]["MRR@20"] == pytest.approx(result.knn_mrr)
    assert result.defaults["fusion"] == result.fusion and result.defaults["tuned"]["queries"] == 200


def test_report_files(tmp_path):
    pytest.importorskip("matplotlib")  # report.png (the report extra)
    paths = write_report(_results(), tmp_path / "r", context={"split": "test"})
    assert json.loads(paths["json"].read_text())["results"]["bm25"]["latency"]["qps"] == 800.0
    md = paths["md"].read_text()
    assert "| hybrid | 0.5000" in md and "report.png" in md and "split: test" in md
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _results(modes=("bm25", "hybrid")):
    return {m: {"metrics": {k: 0.5 for k in ("H@1", "H@10", "MRR@20", "Recall@10", "Recall@20", "nDCG@10", "MAP")},
                "latency": {"p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0, "mean_ms": 1.2, "qps": 800.0},
                "queries": 3, "settings": {"retrieve": 20}} for m in modes}


def test_report_without_matplotlib_leaves_the_plot_out(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails as if not installed
    paths = write_report(_results(), tmp_path / "r")
    assert set(paths) == {"json", "md"} and not (tmp_path / "r" / "report.png").exists()
    md = paths["md"].read_text()
    assert "| hybrid | 0.5000" in md and "report.png" not in md


def test_evaluate_cli_without_matplotlib_prints_the_table_and_writes_the_reports(tmp_path, committed_encoder):
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli
    from hybrid_qpr.testing.corpora import write_paraphrase_answers

    beir, index, out = write_paraphrase_answers(tmp_path / "answers"), tmp_path / "idx", tmp_path / "rep"
    ingested = CliRunner().invoke(cli, ["ingest", f"{beir}/corpus.jsonl", "--index", str(index)])
    assert ingested.exit_code == 0, ingested.output
    args = ["evaluate", "--beir", str(beir), "--split", "val", "--index", str(index), "--modes", "bm25,hybrid",
            "--out", str(out)]
    code = f"import sys; sys.modules['matplotlib'] = None\nfrom hybrid_qpr.cli.main import cli\ncli({args!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "| bm25 |" in done.stdout and "| hybrid |" in done.stdout
    assert "Traceback" not in done.stderr
    [skipped] = [line for line in done.stderr.splitlines() if "report.png" in line]
    assert skipped.startswith("skipped report.png:") and "pip install matplotlib" in skipped
    assert (out / "report.json").is_file() and not (out / "report.png").exists()
    assert "report.png" not in (out / "report.md").read_text()


def test_every_mode_is_warmed_up_before_any_is_timed(bank, monkeypatch):
    searcher, queries, qrels = bank
    calls = []
    search = searcher.search

    def recorded(text, *, mode, **kwargs):
        calls.append(mode)
        return search(text, mode=mode, **kwargs)

    monkeypatch.setattr(searcher, "search", recorded)
    modes = ("bm25", "knn", "hybrid")
    sample = dict(list(queries.items())[:20])
    evaluate(searcher, sample, qrels, modes=modes)
    untimed = ["hybrid"] * len(sample) + [m for m in modes for _ in range(WARM_UP_QUERIES)]  # every query, every mode
    assert calls == untimed + [m for m in modes for _ in sample]  # then each mode timed over every query


@pytest.mark.parametrize("width", [60, 80, 200])
def test_the_terminal_table_leaves_columns_out_instead_of_cutting_numbers(width):
    import io

    from rich.console import Console

    from hybrid_qpr.evaluation.report import rich_table

    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(rich_table(_results(), "test", width=width))
    lines = out.getvalue().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width and "…" not in out.getvalue()
    header = next(line for line in lines if line.startswith("┃ mode"))
    assert all(f" {name} " in header for name in ("H@1", "MRR@20", "nDCG@10", "p50 ms"))
    kept = "Recall@10" in header and "p95 ms" in header
    assert kept == (width == 200) and kept != any(line.startswith("left out to fit") for line in lines)
    assert sum(line.startswith("│ ") for line in lines) == 2 and "0.5000" in out.getvalue()
