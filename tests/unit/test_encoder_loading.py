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


def test_int8_products_are_exact_on_every_x86_cpu(tmp_path):
    """A u8 x s8 product whose pairs of terms overflow 16 bits (255 * 127 * 2 = 64,770): onnxruntime's
    default kernel on x86 CPUs without VNNI saturates it (32,767); the library asks onnxruntime for
    the exact kernel, so every int8 model scores the same on every CPU."""
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper

    from hybrid_qpr.encoders.base import onnx_session

    weights = helper.make_tensor("w", TensorProto.INT8, [64, 8], [127] * 512)
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "w"], ["y"])], "saturation",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, [None, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [None, 8])], [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    (y,) = onnx_session(tmp_path / "m.onnx", threads=2).run(["y"], {"a": np.full((16, 64), 255, np.uint8)})
    assert (y == 255 * 127 * 64).all()
