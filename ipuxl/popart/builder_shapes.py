"""Shapes and element types of a Builder's tensors.

ONNX shape inference types the ai.onnx nodes; it skips nodes of other domains, so the
``ai.graphcore`` nodes are typed with ipuxl's own import rules (``jax.eval_shape`` of the
rule's function, :mod:`ipuxl.onnx.ops.graphcore`), their outputs are added to the model's
``value_info``, and ONNX inference runs again for the nodes after them, until nothing new is
learnt.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["infer_types"]

Types = dict[str, tuple[list[int], int]]  # id -> (shape, ONNX element type)


def _collect(graph: Any, types: Types) -> None:
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if not info.type.HasField("tensor_type"):
            continue
        tensor_type = info.type.tensor_type
        if not tensor_type.elem_type or not tensor_type.HasField("shape"):
            continue
        dims = tensor_type.shape.dim
        if all(d.HasField("dim_value") for d in dims):
            types[info.name] = ([int(d.dim_value) for d in dims], int(tensor_type.elem_type))
    for tensor in graph.initializer:
        types[tensor.name] = ([int(d) for d in tensor.dims], int(tensor.data_type))


def infer_types(model: Any) -> Types:
    """``{tensor id: (shape, ONNX element type)}`` for every tensor of ``model``'s main
    graph whose shape is known."""
    from onnx import helper, shape_inference

    types: Types = {}
    opsets = {(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import}
    for _ in range(len(model.graph.node) + 1):
        try:
            inferred = shape_inference.infer_shapes(model, strict_mode=False)
        except Exception:  # noqa: BLE001 - an ill-typed graph: keep what is known
            inferred = model
        _collect(inferred.graph, types)
        learnt = False
        for node in model.graph.node:
            if node.domain in ("", "ai.onnx"):
                continue
            if all(not o or o in types for o in node.output):
                continue
            if any(i and i not in types for i in node.input):
                continue
            results = _custom_node_types(node, types, opsets.get(node.domain, 1))
            for name, (shape, dtype) in zip(node.output, results or ()):
                if name and name not in types:
                    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
                    types[name] = (list(shape), int(elem_type))
                    model.graph.value_info.append(
                        helper.make_tensor_value_info(name, elem_type, list(shape)))
                    learnt = True
        if not learnt:
            break
    return types


def _custom_node_types(node: Any, types: Types, opset: int
                       ) -> list[tuple[tuple[int, ...], Any]] | None:
    """Output ``(shape, NumPy dtype)`` of a node of another domain, or None."""
    import jax
    from onnx import helper

    from ipuxl.onnx.importer import attribute_value
    from ipuxl.onnx.registry import find_rule

    rule = find_rule(node.domain, node.op_type, opset)
    if rule is None:
        return None
    inputs = [None if not name else
              jax.ShapeDtypeStruct(tuple(types[name][0]),
                                   helper.tensor_dtype_to_np_dtype(types[name][1]))
              for name in node.input]
    attrs = {a.name: attribute_value(a) for a in node.attribute if not a.name.startswith("__")}
    if rule.fn is None:
        from ipuxl.onnx.ops.graphcore import converter_types

        return converter_types(node.op_type, inputs, attrs)
    if rule.static:
        return None  # needs input values
    attrs = {k: v for k, v in attrs.items() if k in rule.attributes}
    if rule.takes_num_outputs:
        attrs["num_outputs"] = len(node.output)
    try:
        with jax.enable_x64(True):
            out = jax.eval_shape(lambda *a: rule.fn(*a, **attrs), *inputs)
    except Exception:  # noqa: BLE001 - the session reports the error with context
        return None
    outs = out if isinstance(out, (list, tuple)) else (out,)
    return [(tuple(o.shape), o.dtype) for o in outs]
