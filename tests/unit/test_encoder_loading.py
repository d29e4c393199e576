"""Errors from Encoder.load on broken model directories (the encoders themselves are tested elsewhere)."""

import json

import pytest

from hybrid_qpr.encoders import Encoder, read_config
from hybrid_qpr.errors import ArtifactError, ConfigError


def _model_dir(tmp_path, config):
    d = tmp_path / "model"
    d.mkdir()
    (d / "model.onnx").write_bytes(b"not really onnx")
    (d / "tokenizer.json").write_text("{}")
    (d / "config.json").write_text(json.dumps(config) if isinstance(config, dict) else config)
    return d


def test_missing_directory_and_files_are_named(tmp_path):
    with pytest.raises(ArtifactError, match="does not exist"):
        Encoder.load(tmp_path / "absent")
    d = tmp_path / "partial"
    d.mkdir()
    (d / "config.json").write_text("{}")
    with pytest.raises(ArtifactError, match="model.onnx is missing"):
        Encoder.load(d)


def test_corrupt_config_is_reported(tmp_path):
    d = _model_dir(tmp_path, "{oops")
    with pytest.raises(ArtifactError, match="config.json: not valid JSON"):
        read_config(d)


def test_config_checks_format_fields_and_distance(tmp_path):
    d = _model_dir(tmp_path, {"format": "hybrid-qpr-encoder", "kind": "cnn", "dim": 8})
    with pytest.raises(ArtifactError, match="'distance' is missing"):
        read_config(d)
    (d / "config.json").write_text(json.dumps({"format": "hybrid-qpr-encoder", "kind": "cnn", "dim": 8, "distance": "manhattan"}))
    with pytest.raises(ConfigError, match="distance='manhattan'"):
        read_config(d)


def test_unknown_kind_lists_the_allowed_ones(tmp_path):
    d = _model_dir(tmp_path, {"format": "hybrid-qpr-encoder", "kind": "rnn", "dim": 8, "distance": "cosine"})
    with pytest.raises(ArtifactError, match="kind='rnn'.*cnn"):
        Encoder.load(d)
