"""The static encoder: its start from the teacher, its loss, and a tiny distillation run that
learns, exports under the transformer contract and packages for ml-commons."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hybrid_qpr import resources  # noqa: E402

AWKWARD = ["", "?", "how do i reset my password?", "Ünïcödé çafé: ¿cómo estás? 東京", "why " * 300]


def test_sif_start_weighs_common_tokens_down():
    from hybrid_qpr.training.static import token_start

    vectors = np.ones((3, 4), dtype=np.float32)
    projection = np.eye(4, 2, dtype=np.float32)
    start = token_start(vectors, projection, np.array([0.5, 1e-3, 0.0]))
    norms = np.linalg.norm(start, axis=1)
    assert start.shape == (3, 2)
    assert norms[0] < norms[1] < norms[2]  # more frequent -> lighter
    assert norms[2] == pytest.approx(np.sqrt(2))  # an unseen token keeps its whole vector


def test_loss_is_zero_when_the_student_is_the_projected_teacher():
    from hybrid_qpr.training.static import StaticDistillationLoss, teacher_projection

    rng = np.random.default_rng(0)
    teacher = rng.normal(size=(64, 8)).astype(np.float32)
    teacher /= np.linalg.norm(teacher, axis=1, keepdims=True)
    projection = teacher_projection(teacher, 8)  # full rank: an orthogonal map, cosines kept
    loss = StaticDistillationLoss(projection, kl_weight=1.0)
    t = torch.from_numpy(teacher)
    assert loss(t @ torch.from_numpy(projection), t).item() == pytest.approx(0.0, abs=1e-4)
    assert loss(torch.from_numpy(rng.normal(size=(64, 8)).astype(np.float32)), t).item() > 0.5


@pytest.mark.slow
def test_tiny_static_run_learns_exports_and_packages(tmp_path):
    from hybrid_qpr import mlcommons
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.export.static import export_static_run
    from hybrid_qpr.training.cnn import TrainConfig
    from hybrid_qpr.training.static import distill_static

    minilm = resources.model_dir("minilm-l6-int8")
    corpus = resources.examples_dir() / "questions.jsonl"
    result = distill_static([corpus], minilm, tmp_path / "run", tokenizer_path=minilm / "tokenizer.json", dim=32,
                            group_size=1, held_out=60, show_progress=False,
                            train_config=TrainConfig(batch_size=64, epochs=3, patience=3, lr=3e-3))
    history = [h for h in result.history if "loss" in h]
    assert history[-1]["loss"] < history[0]["loss"]
    assert result.best_val_mrr > 0

    config = export_static_run(tmp_path / "run", tmp_path / "model")
    assert config["kind"] == "transformer" and config["dim"] == 32 and config["distance"] == "cosine"
    assert config["parity_max_abs_diff_fp32"] <= 1e-4
    encoder = Encoder.load(tmp_path / "model")
    vectors = encoder.encode(AWKWARD)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)  # the empty text too
    single = np.concatenate([encoder.encode(t) for t in AWKWARD])
    assert np.abs(vectors - single).max() < 1e-5  # a text's vector does not depend on its batch
    assert (tmp_path / "model" / "tokenizer.json").read_bytes() == (minilm / "tokenizer.json").read_bytes() or \
        json.loads((tmp_path / "model" / "tokenizer.json").read_text())["model"]["vocab"] == \
        json.loads((minilm / "tokenizer.json").read_text())["model"]["vocab"]

    package = mlcommons.package_model(tmp_path / "model", tmp_path / "pkg.zip")
    with zipfile.ZipFile(package.path) as archive:
        assert sorted(archive.namelist()) == ["model.onnx", "tokenizer.json"]
    assert package.model_config["embedding_dimension"] == 32


@pytest.mark.slow
def test_cli_distils_and_exports_a_static_student(tmp_path):
    from click.testing import CliRunner

    from hybrid_qpr.cli.main import cli
    from hybrid_qpr.encoders import Encoder

    runner = CliRunner()
    teacher = str(resources.model_dir("minilm-l6-int8"))
    corpus = str(resources.examples_dir() / "questions.jsonl")
    result = runner.invoke(cli, ["distill", corpus, "--teacher", teacher, "--out", str(tmp_path / "run"), "--student",
                                 "static", "--dim", "16", "--group-size", "1", "--held-out", "60", "--epochs", "1",
                                 "--batch-size", "64"])
    assert result.exit_code == 0, result.output
    summary = result.output[result.output.index('{"best_epoch"'):].splitlines()[0]  # after transformers' loading bar
    assert json.loads(summary)["best_epoch"] == 0
    result = runner.invoke(cli, ["export", str(tmp_path / "run"), "--kind", "static", "--out", str(tmp_path / "m")])
    assert result.exit_code == 0, result.output
    assert Encoder.load(tmp_path / "m").encode(AWKWARD).shape == (len(AWKWARD), 16)
    # a run of another kind is refused in one line
    (tmp_path / "cnn-run").mkdir()
    (tmp_path / "cnn-run" / "model.json").write_text(json.dumps({"loss": "distill"}))
    result = runner.invoke(cli, ["export", str(tmp_path / "cnn-run"), "--kind", "static", "--out", str(tmp_path / "x")])
    assert result.exit_code == 1 and "not a static distillation run" in result.output and "Traceback" not in result.output
    result = runner.invoke(cli, ["distill", corpus, "--teacher", teacher, "--out", str(tmp_path / "r2"), "--student",
                                 "static", "--pairs", str(tmp_path)])
    assert result.exit_code == 2 and "--student static takes no --pairs" in result.output
