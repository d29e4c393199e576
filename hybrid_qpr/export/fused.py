"""A BERT cross-encoder written straight to ONNX with onnxruntime's fused transformer operators.

``torch.onnx.export`` spells attention out as a dozen small operators (transposes, a scaled
product, a ``Where`` over the mask, a softmax, another product) and onnxruntime's offline
optimizer does not recognise the pattern the torch.export-based exporter writes, so none of it
fuses. This module builds the graph from the weights instead, one node per block:

* embeddings: ``Gather`` of the word, position and segment tables, summed, ``LayerNormalization``
  (plain ``Gather`` rather than ``EmbedLayerNormalization`` so int8 quantization can shrink the
  word table);
* each layer: ``Attention`` (query, key and value in one product, the padding mask, softmax and
  the heads in one kernel; ``QAttention`` after int8 quantization), the output product and
  ``SkipLayerNormalization`` (residual, bias and layer norm in one), the feed-forward product with
  ``BiasGelu``, the second product and another ``SkipLayerNormalization``;
* the cross-encoder's pooling and head (``hybrid_qpr.model.cross_encoder``) in standard operators.

The operators are onnxruntime's own (domain ``com.microsoft``), so such a graph runs on
onnxruntime only, which is what reads a reranker here (in process and in OpenSearch's
ml-commons). Every export is still checked against torch (``export.cross_encoder.parity``).
Measured on the bundled reranker, WikiQA dev questions at depth 20, int8, two threads: see
docs/reranker.md ("Latency").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hybrid_qpr.errors import ArtifactError
from hybrid_qpr.rerankers.cross_encoder import INPUTS, OUTPUT

OPSET = 17
MICROSOFT = "com.microsoft"


class _Graph:
    """Nodes and weights of one graph; every op gets a fresh output name."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []
        self.count = 0

    def weight(self, name: str, array: np.ndarray) -> str:
        self.weights.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op_type: str, inputs: list[str], output: str | None = None, domain: str = "", **attrs) -> str:
        self.count += 1
        output = output or f"{op_type}_{self.count}"
        self.nodes.append(helper.make_node(op_type, inputs, [output], name=f"{op_type}_{self.count}",
                                           domain=domain or None, **attrs))
        return output


def _bert_layers(graph: _Graph, weights: dict[str, np.ndarray], config, ids: str, types: str, mask: str) -> str:
    """The last hidden state [batch, seq, hidden] of a BERT encoder (weights named as in a
    Hugging Face ``BertModel``'s state dict)."""
    eps = float(config.layer_norm_eps)
    f32 = weights.__getitem__  # float32 arrays already (write_fused_cross_encoder)
    words = graph.op("Gather", [graph.weight("word_embeddings", f32("embeddings.word_embeddings.weight")), ids])
    seq_len = graph.op("Slice", [graph.op("Shape", [ids]), graph.weight("one", np.array([1], np.int64)),
                                 graph.weight("two", np.array([2], np.int64))])
    positions = graph.op("Slice", [graph.weight("position_embeddings", f32("embeddings.position_embeddings.weight")),
                                   graph.weight("zero", np.array([0], np.int64)), seq_len,
                                   graph.weight("axis0", np.array([0], np.int64))])
    segments = graph.op("Gather", [graph.weight("segment_embeddings", f32("embeddings.token_type_embeddings.weight")),
                                   types])
    summed = graph.op("Add", [graph.op("Add", [words, positions]), segments])
    hidden = graph.op("LayerNormalization", [summed, graph.weight("embeddings_ln_gamma", f32("embeddings.LayerNorm.weight")),
                                             graph.weight("embeddings_ln_beta", f32("embeddings.LayerNorm.bias"))],
                      axis=-1, epsilon=eps)
    mask32 = graph.op("Cast", [mask], to=TensorProto.INT32)
    for layer in range(int(config.num_hidden_layers)):
        p = f"encoder.layer.{layer}."
        qkv_weight = np.concatenate([f32(p + f"attention.self.{part}.weight").T for part in ("query", "key", "value")], axis=1)
        qkv_bias = np.concatenate([f32(p + f"attention.self.{part}.bias") for part in ("query", "key", "value")])
        attended = graph.op("Attention", [hidden, graph.weight(f"l{layer}_qkv_weight", qkv_weight),
                                          graph.weight(f"l{layer}_qkv_bias", qkv_bias), mask32],
                            domain=MICROSOFT, num_heads=int(config.num_attention_heads))
        projected = graph.op("MatMul", [attended, graph.weight(f"l{layer}_attn_out_weight", f32(p + "attention.output.dense.weight").T)])
        hidden = graph.op("SkipLayerNormalization", [
            projected, hidden, graph.weight(f"l{layer}_attn_ln_gamma", f32(p + "attention.output.LayerNorm.weight")),
            graph.weight(f"l{layer}_attn_ln_beta", f32(p + "attention.output.LayerNorm.bias")),
            graph.weight(f"l{layer}_attn_out_bias", f32(p + "attention.output.dense.bias"))], domain=MICROSOFT, epsilon=eps)
        inner = graph.op("MatMul", [hidden, graph.weight(f"l{layer}_ffn_in_weight", f32(p + "intermediate.dense.weight").T)])
        inner = graph.op("BiasGelu", [inner, graph.weight(f"l{layer}_ffn_in_bias", f32(p + "intermediate.dense.bias"))],
                         domain=MICROSOFT)
        outer = graph.op("MatMul", [inner, graph.weight(f"l{layer}_ffn_out_weight", f32(p + "output.dense.weight").T)])
        hidden = graph.op("SkipLayerNormalization", [
            outer, hidden, graph.weight(f"l{layer}_ffn_ln_gamma", f32(p + "output.LayerNorm.weight")),
            graph.weight(f"l{layer}_ffn_ln_beta", f32(p + "output.LayerNorm.bias")),
            graph.weight(f"l{layer}_ffn_out_bias", f32(p + "output.dense.bias"))], domain=MICROSOFT, epsilon=eps)
    return hidden


def _unit_mean(graph: _Graph, hidden: str, weights: str, normalise: bool) -> str:
    """The mean of ``hidden`` [batch, seq, h] over the positions where ``weights`` [batch, seq]
    is 1 (``model.transformer.mean_pool``), L2-normalised if asked (``torch.nn.functional.normalize``)."""
    summed = graph.op("Squeeze", [graph.op("MatMul", [graph.op("Unsqueeze", [weights, "axis1"]), hidden]), "axis1"])
    count = graph.op("Max", [graph.op("ReduceSum", [weights, "axis1"], keepdims=1), "count_floor"])
    mean = graph.op("Div", [summed, count])
    if not normalise:
        return mean
    norm = graph.op("Sqrt", [graph.op("ReduceSum", [graph.op("Mul", [mean, mean]), "axis1"], keepdims=1)])
    return graph.op("Div", [mean, graph.op("Max", [norm, "norm_floor"])])


def unsupported(model) -> str | None:
    """Why ``model``'s backbone cannot be written as a fused graph (None: it can)."""
    config = model.backbone.config
    if getattr(config, "model_type", None) != "bert":
        return f"a {getattr(config, 'model_type', 'unknown')!r} backbone"
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        return f"{config.position_embedding_type!r} position embeddings"
    if getattr(config, "hidden_act", None) != "gelu":
        return f"the {config.hidden_act!r} activation"
    return None


def write_fused_cross_encoder(model, path: Path) -> None:
    """Write ``model`` (a ``CrossEncoder`` on a BERT backbone) as a fused ONNX graph with the
    exported reranker's interface: int64 ``input_ids``, ``attention_mask``, ``token_type_ids``
    [batch, seq] in, float32 ``scores`` [batch] out. ``ArtifactError`` for another backbone."""
    reason = unsupported(model)
    if reason is not None:
        raise ArtifactError(f"the fused graph is written for BERT backbones with absolute positions and GELU, not "
                            f"{reason}: export it with --graph torch")
    config = model.backbone.config
    weights = {k: v.detach().cpu().float().numpy() for k, v in model.backbone.state_dict().items()}
    graph = _Graph()
    graph.weight("axis1", np.array([1], np.int64))
    graph.weight("count_floor", np.array(1e-9, np.float32))
    graph.weight("norm_floor", np.array(1e-12, np.float32))
    hidden = _bert_layers(graph, weights, config, "input_ids", "token_type_ids", "attention_mask")
    mask = graph.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    if model.pooling == "segments":
        candidate_mask = graph.op("Mul", [mask, graph.op("Cast", ["token_type_ids"], to=TensorProto.FLOAT)])
        question_mask = graph.op("Sub", [mask, candidate_mask])
        pooled = graph.op("Mul", [_unit_mean(graph, hidden, question_mask, True), _unit_mean(graph, hidden, candidate_mask, True)])
    elif model.pooling == "mean":
        pooled = _unit_mean(graph, hidden, mask, False)
    else:  # cls
        pooled = graph.op("Gather", [hidden, graph.weight("first", np.array(0, np.int64))], axis=1)
    head_weight = model.head.weight.detach().cpu().float().numpy().T  # [hidden, 1]
    head_bias = model.head.bias.detach().cpu().float().numpy()
    logit = graph.op("Add", [graph.op("MatMul", [pooled, graph.weight("head_weight", head_weight)]),
                             graph.weight("head_bias", head_bias)])
    graph.op("Reshape", [logit, graph.weight("flat", np.array([-1], np.int64))], output=OUTPUT)
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"]) for name in INPUTS]
    outputs = [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch"])]
    onnx_graph = helper.make_graph(graph.nodes, "hybrid_qpr_cross_encoder", inputs, outputs, graph.weights)
    proto = helper.make_model(onnx_graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(MICROSOFT, 1)],
                              producer_name="hybrid-qpr")
    proto.ir_version = 8
    onnx.save(proto, str(path))
