"""What the library asks of onnxruntime: options that change what a model computes."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")


def test_int8_products_are_exact_on_every_x86_cpu(tmp_path):
    """A u8 x s8 product whose pairs of terms overflow 16 bits (255 * 127 * 2 = 64,770): onnxruntime's
    default kernel on x86 CPUs without VNNI saturates it (32,767); the library asks onnxruntime for
    the exact kernel, so every int8 model scores the same on every CPU."""
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
