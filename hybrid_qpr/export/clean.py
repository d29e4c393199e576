"""Strip build-machine details from an exported ONNX file without touching its graph.

torch's exporters record, for every node, the Python stack trace that produced it (file paths
of the export machine's checkout and virtualenv), module names and export bookkeeping, as
``doc_string`` fields and ``metadata_props`` on the graph, its nodes, values and initializers,
and the quantizer copies them along. None of it is read at inference; it only makes a
committed model name someone's home directory. ``strip_build_metadata`` clears those fields
in place; the nodes, their inputs, outputs and attributes and every weight stay as they were,
so onnxruntime computes exactly the same outputs.
"""

from __future__ import annotations

from pathlib import Path


def _clear(*protos) -> None:
    """Clear the ``doc_string`` and ``metadata_props`` of each proto (``metadata_props`` below the
    model exists from onnx 1.16; older packages cannot hold it there)."""
    for proto in protos:
        proto.ClearField("doc_string")
        if "metadata_props" in proto.DESCRIPTOR.fields_by_name:
            del proto.metadata_props[:]


def _strip_nodes(nodes) -> None:
    for node in nodes:
        _clear(node)
        for attribute in node.attribute:  # control flow (If, Loop, Scan) holds graphs of its own
            attribute.ClearField("doc_string")
            if attribute.HasField("g"):
                _strip_graph(attribute.g)
            for sub in attribute.graphs:
                _strip_graph(sub)


def _strip_graph(graph) -> None:
    _clear(graph, *graph.input, *graph.output, *graph.value_info, *graph.initializer)
    _strip_nodes(graph.node)


def strip_build_metadata(model) -> None:
    """Clear every ``doc_string`` and the exporters' ``metadata_props`` (graph, nodes, values,
    initializers, functions; on the model itself, those with a path or a ``pkg.`` key) of an
    ``onnx.ModelProto`` in place."""
    kept = [(p.key, p.value) for p in model.metadata_props if not p.key.startswith("pkg.") and "/" not in p.value]
    _clear(model)
    for key, value in kept:  # what a tool states about the model (the quantizer's "onnx.infer"), no paths
        model.metadata_props.add(key=key, value=value)
    _strip_graph(model.graph)
    for function in model.functions:
        _clear(function)
        _strip_nodes(function.node)


def clean_onnx_file(path: str | Path) -> None:
    """Rewrite the ONNX file at ``path`` without its build metadata (one file, weights inline)."""
    import onnx

    from hybrid_qpr.artifacts import atomic_write

    model = onnx.load(str(path))
    strip_build_metadata(model)
    with atomic_write(path, "wb") as out:
        out.write(model.SerializeToString())
