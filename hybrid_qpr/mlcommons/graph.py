"""The ONNX graph surgery ml-commons needs: a first output of token embeddings for its mean pooling
(``adapt_graph``: the pooled vector repeated at every position, so the pooling gives it back), and
an IR version and opset its bundled onnxruntime reads (``save_for_ml_commons``)."""

from __future__ import annotations

from pathlib import Path

from hybrid_qpr.errors import ArtifactError

TOKEN_OUTPUT = "token_embeddings"
# ml-commons 2.19 bundles onnxruntime 1.16.3: "Unsupported model IR version: 10, max supported IR version: 9"
MAX_IR_VERSION = 9
MAX_OPSET = 19


def adapt_graph(model_path: str | Path, out_path: str | Path) -> None:
    """Write a copy of a hybrid-qpr transformer graph whose first output is ``token_embeddings``
    [batch, seq, dim]: the pooled ``embeddings`` broadcast over the sequence axis (see module doc)."""
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load(str(model_path))
    graph = model.graph
    names = [o.name for o in graph.output]
    if names[:1] != ["embeddings"] or {i.name for i in graph.input} != {"input_ids", "attention_mask"}:
        raise ArtifactError(f"{model_path}: expected inputs input_ids/attention_mask and first output 'embeddings' "
                            f"(a hybrid-qpr transformer export); found outputs {names}")
    axis = helper.make_tensor("hqpr_axis1", TensorProto.INT64, [1], [1])
    graph.initializer.append(axis)
    graph.node.extend([
        helper.make_node("Unsqueeze", ["embeddings", "hqpr_axis1"], ["hqpr_emb3"]),        # [b, 1, d]
        helper.make_node("Shape", ["input_ids"], ["hqpr_bs"]),                              # [b, s]
        helper.make_node("Concat", ["hqpr_bs", "hqpr_axis1"], ["hqpr_shape"], axis=0),       # [b, s, 1]
        helper.make_node("Expand", ["hqpr_emb3", "hqpr_shape"], [TOKEN_OUTPUT]),            # [b, s, d]
    ])
    dim = graph.output[0].type.tensor_type.shape.dim[-1]
    token = helper.make_tensor_value_info(TOKEN_OUTPUT, TensorProto.FLOAT, ["batch", "seq", dim.dim_value or "dim"])
    outputs = [token] + list(graph.output)
    del graph.output[:]
    graph.output.extend(outputs)
    save_for_ml_commons(model, model_path, out_path)


def save_for_ml_commons(model, model_path: str | Path, out_path: str | Path) -> None:
    """Save ``model`` with an IR version ml-commons' onnxruntime reads (checked opset)."""
    import onnx

    if model.ir_version > MAX_IR_VERSION:
        # IR 10 only adds things these graphs do not use (4-bit types, overloaded functions)
        model.ir_version = MAX_IR_VERSION
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    if opset > MAX_OPSET:
        raise ArtifactError(f"{model_path}: opset {opset}; ml-commons' onnxruntime 1.16 runs opset <= {MAX_OPSET}")
    onnx.checker.check_model(model)
    onnx.save(model, str(out_path))
