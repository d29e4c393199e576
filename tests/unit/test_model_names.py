"""--model takes names: fast, quality, any bundled directory's name, or a directory."""

from __future__ import annotations

import pytest

from hybrid_qpr import resources
from hybrid_qpr.errors import ArtifactError


def test_names_resolve_to_bundled_directories(tmp_path, monkeypatch):
    assert resources.resolve_model(None) == resources.model_dir(resources.DEFAULT_MODEL)
    assert resources.resolve_model("fast") == resources.model_dir("static-minilm-l6")
    assert resources.resolve_model("quality") == resources.model_dir("minilm-l6-int8")
    assert resources.resolve_model("distilled-cnn-quora") == resources.model_dir("distilled-cnn-quora")
    assert resources.DEFAULT_MODEL == resources.MODEL_NAMES[resources.DEFAULT_MODEL_NAME]
    for name in ("fast", "quality", "distilled-cnn-quora", "sdml-cnn-quora"):
        assert name in resources.model_names()
        assert (resources.resolve_model(name) / "config.json").is_file()


def test_a_directory_wins_over_a_name(tmp_path, monkeypatch):
    (tmp_path / "fast").mkdir()
    monkeypatch.chdir(tmp_path)
    assert resources.resolve_model("fast") == tmp_path.joinpath("fast").relative_to(tmp_path)
    assert resources.resolve_model(tmp_path / "fast") == tmp_path / "fast"


def test_an_unknown_name_is_reported_as_a_missing_directory(tmp_path, monkeypatch):
    from hybrid_qpr.encoders import Encoder

    monkeypatch.chdir(tmp_path)
    assert str(resources.resolve_model("no-such-model")) == "no-such-model"
    with pytest.raises(ArtifactError, match="no-such-model"):
        Encoder.load("no-such-model")
    with pytest.raises(ArtifactError):
        Encoder.load("../etc")  # a path is never looked up among the names


def test_a_mistyped_name_lists_the_names_and_the_nearest_one(tmp_path, monkeypatch):
    from hybrid_qpr.testing.cli import one_error_line, run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.jsonl").write_text('{"id": "1", "text": "how do i sleep?"}\n', encoding="utf-8")
    line = one_error_line(run("ingest", "q.jsonl", "--index", "idx", "--model", "qualty"))
    assert "--model 'qualty' is neither a model directory nor a model name; did you mean 'quality'?" in line, line
    assert all(name in line for name in resources.model_names())
    assert not (tmp_path / "idx").exists()
    assert "did you mean" not in one_error_line(run("ingest", "q.jsonl", "--index", "idx", "--model", "zzzzzz"))


def test_ingest_line_names_the_model_and_the_other_choice(tmp_path):
    fast = resources.describe_model(resources.resolve_model("fast"))
    assert fast.startswith("model: fast (static-minilm-l6); --model quality") and "?" not in fast
    quality = resources.describe_model(resources.resolve_model("quality"))
    assert quality.startswith("model: quality (minilm-l6-int8); --model fast") and "\n" not in quality
    other = resources.describe_model(tmp_path)
    assert str(tmp_path) in other and "--model fast" in other and "--model quality" in other
