"""The documented path from labelled pairs to an evaluated index, on the bundled sample
(examples/support/pairs.tsv): dataset build -> train -> export -> ingest -> tune -> evaluate,
in under a minute with a small CNN. docs/data.md and the README show the same commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hybrid_qpr.cli.main import cli

PAIRS = Path(__file__).resolve().parents[2] / "examples" / "support" / "pairs.tsv"
SMALL_CNN = ["--vocab", "2000", "--hash-bins", "500", "--embedding-dim", "64", "--channels", "64", "--dim", "64",
             "--batch-size", "32", "--max-minutes", "1"]


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.slow
@pytest.mark.torch
def test_sample_pairs_go_from_dataset_to_evaluation(tmp_path):
    pytest.importorskip("torch")
    data, run_dir, model, index, report = (str(tmp_path / name) for name in ("data", "run", "model", "idx", "report"))
    assert "beir: corpus 384" in run("dataset", "build", str(PAIRS), "--out", data)
    trained = run("train", data, "--out", run_dir, *SMALL_CNN)
    assert json.loads(trained.strip().splitlines()[-1])["best_val_mrr@20"] > 0.5
    run("export", run_dir, "--kind", "cnn", "--out", model)
    assert "indexed 384" in run("ingest", f"{data}/beir/corpus.jsonl", "--index", index, "--model", model)
    tuned = run("tune", "--beir", f"{data}/beir", "--split", "val", "--index", index)
    assert "stored as the default fusion" in tuned
    run("evaluate", "--beir", f"{data}/beir", "--split", "test", "--index", index, "--out", report, "--no-plot")
    results = json.loads((Path(report) / "report.json").read_text())["results"]
    assert set(results) == {"bm25", "knn", "hybrid", "rescore"}  # rerank: rescore's name before
    assert all(0 < r["metrics"]["MRR@20"] <= 1 for r in results.values())
