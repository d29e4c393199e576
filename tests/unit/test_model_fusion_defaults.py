"""A model directory carries the fusion tuned on its own validation data (``tune --save-to-model``)
and ``ingest`` gives it to an index that has none, so an untuned user's hybrid is not below the
better single mode: shown on a synthetic answer set where RRF 0.5 is below kNN alone."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hybrid_qpr.cli.main import cli
from hybrid_qpr.encoders import Encoder
from hybrid_qpr.fusion import check_fusion_defaults
from hybrid_qpr.errors import ConfigError
from hybrid_qpr.testing.corpora import model_without_fusion_defaults, write_paraphrase_answers


def _run(args):
    result = CliRunner().invoke(cli, args)
    return result


def _metrics(tmp_path, beir, index, name, *more):
    out = tmp_path / name
    result = _run(["evaluate", "--beir", str(beir), "--split", "val", "--index", index, "--task", "answer-selection",
                   "--modes", "bm25,knn,hybrid", "--out", str(out), "--no-plot", *more])
    assert result.exit_code == 0, result.output
    return {mode: row["metrics"]["MAP"] for mode, row in json.loads((out / "report.json").read_text())["results"].items()}


@pytest.fixture()
def own_model(tmp_path, committed_encoder):
    """A copy of the committed model that carries no fusion defaults, whose config.json the test may write."""
    return model_without_fusion_defaults(committed_encoder.model_dir, tmp_path / "model")


def test_ingest_gives_an_index_the_model_tuned_fusion(tmp_path, own_model):
    beir = write_paraphrase_answers(tmp_path / "answers")
    tuned_idx, fresh_idx = str(tmp_path / "tuned-idx"), str(tmp_path / "fresh-idx")
    first = _run(["ingest", f"{beir}/corpus.jsonl", "--index", tuned_idx, "--model", str(own_model)])
    assert first.exit_code == 0 and "fusion defaults: none, so hybrid uses rrf alpha 0.5" in first.output, first.output
    untuned = _metrics(tmp_path, beir, tuned_idx, "untuned")
    assert untuned["hybrid"] < untuned["knn"] - 0.1, untuned  # the problem: RRF 0.5 is below kNN alone here

    fingerprint = Encoder.load(own_model).fingerprint
    tuned = _run(["tune", "--beir", str(beir), "--split", "val", "--index", tuned_idx, "--task", "answer-selection",
                  "--save-to-model"])
    assert tuned.exit_code == 0 and "stored in" in tuned.output, tuned.output
    carried = json.loads((own_model / "config.json").read_text())["fusion_defaults"]
    assert carried["tuned"]["metric"] == "MAP" and carried["tuned"]["on"].endswith("beir val") and carried["depth"] == 100
    assert Encoder.load(own_model).fingerprint == fingerprint  # config.json is not hashed: indexes still accept it

    second = _run(["ingest", f"{beir}/corpus.jsonl", "--index", fresh_idx, "--model", str(own_model)])
    assert second.exit_code == 0, second.output
    assert f"fusion defaults: {carried['fusion']} alpha {carried['alpha']}, depth 100, tuned on" in second.output
    assert f"from model model ({fingerprint}) (the index had none" in second.output
    adopted = _metrics(tmp_path, beir, fresh_idx, "adopted")
    assert adopted["hybrid"] >= max(adopted["bm25"], adopted["knn"]), adopted
    rrf_half = _metrics(tmp_path, beir, fresh_idx, "rrf", "--fusion", "rrf", "--alpha", "0.5")
    assert rrf_half["hybrid"] == pytest.approx(untuned["hybrid"])  # an explicit fusion still wins

    # the index's own tuned defaults are never replaced by the model's
    (own_model / "config.json").write_text(json.dumps({**json.loads((own_model / "config.json").read_text()),
                                                       "fusion_defaults": {"fusion": "minmax", "alpha": 0.2}}))
    again = _run(["ingest", f"{beir}/corpus.jsonl", "--index", tuned_idx])
    assert again.exit_code == 0 and "from 'hybrid-qpr tune' on this index (kept)" in again.output, again.output
    kept = _run(["ingest", f"{beir}/corpus.jsonl", "--index", fresh_idx])
    assert f"from model model ({fingerprint}) (kept)" in kept.output and "minmax" not in kept.output, kept.output


@pytest.mark.parametrize("bad, message", [
    ({"fusion": "max", "alpha": 0.5}, "fusion='max': allowed values are rrf, minmax, zscore, l2"),
    ({"fusion": "l2", "alpha": 1.5}, "alpha=1.5: must be a number in [0, 1]"),
    ({"fusion": "l2", "alpha": 0.5, "depth": 0}, "fusion_defaults.depth=0: must be a whole number >= 1"),
    ({"fusion": "l2", "alpha": 0.5, "reranker": {"depth": "20"}}, "fusion_defaults.reranker.depth='20'"),
    ("l2", "fusion_defaults must be an object"),
])
def test_bad_model_defaults_are_one_line_errors(tmp_path, own_model, bad, message):
    config = json.loads((own_model / "config.json").read_text())
    (own_model / "config.json").write_text(json.dumps({**config, "fusion_defaults": bad}))
    with pytest.raises(ConfigError, match="config.json: fusion_defaults"):
        check_fusion_defaults(bad, str(own_model / "config.json"))
    beir = write_paraphrase_answers(tmp_path / "answers")
    result = _run(["ingest", f"{beir}/corpus.jsonl", "--index", str(tmp_path / "idx"), "--model", str(own_model)])
    assert result.exit_code == 1 and message in result.output, result.output
    error = [line for line in result.output.splitlines() if line.startswith("Error")]
    assert len(error) == 1 and str(own_model / "config.json") in error[0], result.output
    assert not (tmp_path / "idx").exists()  # refused when the model is loaded, before any index is made


def test_save_to_model_and_dry_run_exclude_each_other(tmp_path):
    beir = write_paraphrase_answers(tmp_path / "answers")
    result = _run(["tune", "--beir", str(beir), "--index", str(tmp_path / "idx"), "--dry-run", "--save-to-model"])
    assert result.exit_code == 2 and "give one of them" in result.output


def test_the_default_model_carries_a_fusion_chosen_on_several_domains_that_holds_untuned(tmp_path, committed_encoder):
    """The default model's fusion defaults were chosen on several development domains at once
    (``benchmarks/choose_fusion_default.py``); on the bundled support bank, one of them and the one
    a test can reach, an index that was never tuned ranks its hybrid at least as well as the
    better of BM25 and kNN, on the val split and on the test split the choice never saw."""
    from pathlib import Path

    carried = check_fusion_defaults(committed_encoder.config["fusion_defaults"], "config.json")
    domains = carried["chosen_on"]["domains"]
    assert len(domains) >= 5 and "support" in domains and all(d["margin"] >= 0 for d in domains.values()), domains
    beir = Path(__file__).resolve().parents[2] / "examples" / "support" / "beir"
    index = str(tmp_path / "idx")
    ingested = _run(["ingest", str(beir / "corpus.jsonl"), "--index", index])
    assert ingested.exit_code == 0 and f"chosen on {len(domains)} development domains" in ingested.output, ingested.output
    for split in ("val", "test"):
        out = tmp_path / split
        result = _run(["evaluate", "--beir", str(beir), "--split", split, "--index", index, "--modes", "bm25,knn,hybrid",
                       "--out", str(out), "--no-plot"])
        assert result.exit_code == 0, result.output
        mrr = {mode: row["metrics"]["MRR@20"] for mode, row in json.loads((out / "report.json").read_text())["results"].items()}
        assert mrr["hybrid"] >= max(mrr["bm25"], mrr["knn"]), (split, mrr)
