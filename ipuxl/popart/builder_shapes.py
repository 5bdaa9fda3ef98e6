"""Shapes and element types of a Builder's tensors, and PopART's build-time checks of the
window operators (Conv, AveragePool, MaxPool, Pad-2) that use them.

ONNX shape inference types the ai.onnx nodes; it skips nodes of other domains, so the
``ai.graphcore`` nodes are typed with ipuxl's own import rules (``jax.eval_shape`` of the
rule's function, :mod:`ipuxl.onnx.ops.graphcore`), their outputs are added to the model's
``value_info``, and ONNX inference runs again for the nodes after them, until nothing new is
learnt.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["infer_types", "verify_window_node"]

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
    graph whose shape is known. ``model`` is a copy given away: its nodes lose their
    ``__`` annotations and its ``value_info`` gains what is learnt."""
    from onnx import helper, shape_inference

    types: Types = {}
    opsets = {(o.domain or "ai.onnx"): int(o.version) for o in model.opset_import}
    for node in model.graph.node:  # ONNX reads a Constant's value only when it is alone
        kept = [a for a in node.attribute if not a.name.startswith("__")]
        del node.attribute[:]
        node.attribute.extend(kept)
    for _ in range(len(model.graph.node) + 1):
        try:
            inferred = shape_inference.infer_shapes(model, strict_mode=False)
        except Exception:  # noqa: BLE001 - an ill-typed graph: keep what is known
            inferred = model
        _collect(inferred.graph, types)
        learnt = False
        for node in model.graph.node:
            onnx_node = node.domain in ("", "ai.onnx")
            if onnx_node and node.op_type not in _ONNX_GAPS:
                continue
            if all(not o or o in types for o in node.output):
                continue
            if any(i and i not in types for i in node.input):
                continue
            if onnx_node:
                results = _ONNX_GAPS[node.op_type](node, types, opsets)
            elif node.op_type == "Call":
                results = _call_types(node, types, opsets)
            else:
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


def _batchnorm_types(node: Any, types: Types, opsets: dict[str, int]
                     ) -> list[tuple[tuple[int, ...], Any]]:
    """``BatchNormalization``'s outputs, which ONNX inference leaves untyped before
    opset 14 but for ``Y``: ``Y`` has the input's type, and the running and saved mean
    and variance (PopART makes all four) the shape of ``scale``, one value per channel."""
    from onnx import helper

    dtype = helper.tensor_dtype_to_np_dtype(types[node.input[0]][1])
    channel = tuple(types[node.input[1]][0])
    return [(tuple(types[node.input[0]][0]), dtype)] + \
        [(channel, dtype)] * (len(node.output) - 1)


def _graph_types(graph: Any, types: Types, opsets: dict[str, int],
                 inputs: list[str]) -> list[tuple[list[int], int]] | None:
    """The output types of subgraph ``graph``, its inputs typed as the parent tensors
    ``inputs`` (by position); None when one is unknown. The parent tensors its nodes
    read by name are typed as well."""
    from onnx import helper

    graph = type(graph).FromString(graph.SerializeToString())
    for info, parent in zip(graph.input, inputs):
        if parent not in types:
            return None
        shape, elem_type = types[parent]
        info.CopyFrom(helper.make_tensor_value_info(info.name, elem_type, shape))
    parent_names = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    for name in _free_inputs(graph, parent_names):
        if name in types:
            shape, elem_type = types[name]
            graph.input.append(helper.make_tensor_value_info(name, elem_type, shape))
    model = helper.make_model(graph, opset_imports=[
        helper.make_opsetid("" if domain == "ai.onnx" else domain, version)
        for domain, version in opsets.items()])
    inner = infer_types(model)
    if any(o.name not in inner for o in graph.output):
        return None
    return [inner[o.name] for o in graph.output]


def _free_inputs(graph: Any, defined: set[str]) -> list[str]:
    """The names ``graph``'s nodes read that nothing in it defines (parent tensors)."""
    made = set(defined)
    free = []
    for node in graph.node:
        free += [i for i in node.input if i and i not in made and i not in free]
        made.update(node.output)
    return free


def _call_types(node: Any, types: Types, opsets: dict[str, int]
                ) -> list[tuple[tuple[int, ...], Any]] | None:
    """``Call``'s outputs: the callee's output types, its inputs typed as the node's."""
    from onnx import helper

    callee = next(a.g for a in node.attribute if a.name == "callee")
    outputs = _graph_types(callee, types, opsets, list(node.input))
    if outputs is None:
        return None
    return [(tuple(shape), helper.tensor_dtype_to_np_dtype(dtype)) for shape, dtype in outputs]


# ai.onnx nodes whose outputs ONNX shape inference leaves untyped but PopART's Builder
# types (an ai.graphcore ``Call`` is typed by :func:`_call_types`).
_ONNX_GAPS = {"BatchNormalization": _batchnorm_types}


def _loss_shape(label_index: int) -> Any:
    """PopART's builder shape of a loss: a scalar, or with reduction ``"None"`` the shape
    of input ``label_index`` (the labels of ``Nll``, the input of ``L1``)."""

    def shape(node: Any, inputs: list[Any], attrs: dict[str, Any]
              ) -> list[tuple[tuple[int, ...], Any]]:
        reduction = attrs.get("reduction", "Mean")
        reduction = reduction.decode() if isinstance(reduction, bytes) else reduction
        kept = tuple(inputs[label_index].shape) if reduction == "None" else ()
        return [(kept, inputs[0].dtype)]

    return shape


def _subsample_shape(node: Any, inputs: list[Any], attrs: dict[str, Any]
                     ) -> list[tuple[tuple[int, ...], Any]]:
    """PopART's builder shape of ``Subsample``: each size divided by its stride, rounded
    down (the op itself keeps the partial last step: its output can be one longer)."""
    shape = tuple(inputs[0].shape)
    strides = list(attrs.get("strides", [])) or [1] * len(shape)
    return [(tuple(size // max(int(step), 1) for size, step in zip(shape, strides)),
             inputs[0].dtype)]


# ai.graphcore nodes whose shape PopART's Builder infers by its own rule, which the
# Builder's getTensorShape reports (not the shape the import rule computes).
_BUILDER_RULES = {"Nll": _loss_shape(1), "L1": _loss_shape(0),
                  "IdentityLoss": _loss_shape(0), "Subsample": _subsample_shape}


def _custom_node_types(node: Any, types: Types, opset: int
                       ) -> list[tuple[tuple[int, ...], Any]] | None:
    """Output ``(shape, NumPy dtype)`` of a node of another domain, or None."""
    import jax
    from onnx import helper

    from ipuxl.onnx.importer import attribute_value
    from ipuxl.onnx.registry import find_rule

    if node.domain == "ai.graphcore" and node.op_type in _BUILDER_RULES:
        inputs = [jax.ShapeDtypeStruct(tuple(types[name][0]),
                                       helper.tensor_dtype_to_np_dtype(types[name][1]))
                  for name in node.input]
        attrs = {a.name: attribute_value(a) for a in node.attribute}
        return _BUILDER_RULES[node.op_type](node, inputs, attrs)

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


_WINDOW_OPS = ("Conv", "AveragePool", "MaxPool")


def verify_window_node(types: Types, op_type: str, inputs: list[str],
                       attributes: dict[str, Any]) -> None:
    """PopART's checks of a window operator's attributes against its input's shape, made
    when the node is added (so the error names the builder call): the lengths of
    ``strides``, ``pads`` and ``dilations``, a Conv's ``kernel_shape`` against its
    weights, and an output of negative size. ``types`` are the known tensor types; a
    node whose input shape is unknown is not checked.

    Raises:
        popart_exception: with PopART's message (``"Length of strides vector 1 != number
            of spatial dimensions 2"``...).
    """
    if op_type == "Pad" and "pads" in attributes and inputs[0] in types:
        rank = len(types[inputs[0]][0])
        if len(attributes["pads"]) != 2 * rank:
            _fail(f"Padding vector (length {len(attributes['pads'])}) doesn't contain 2 "
                  f"entries per input dimension {rank}", "give pads as [begin of each axis"
                  "..., end of each axis...]")
    if op_type not in _WINDOW_OPS:
        return
    kernel = list(attributes.get("kernel_shape", []))
    if op_type == "Conv" and len(inputs) > 1 and inputs[1] in types:
        weights = types[inputs[1]][0][2:]
        if kernel and kernel != weights:
            _fail(f"kernel_shape, {_dims(kernel)}, does not match inferred shape from weight "
                  f"input '{inputs[1]}', {_dims(weights)}")
        kernel = weights
    if inputs[0] not in types:
        return
    shape = types[inputs[0]][0]
    spatial = len(shape) - 2
    if spatial < 1:
        _fail("Input tensor has no spatial dimensions", "give an input of shape [N, C, "
              "spatial...]")
    lengths = {"strides": spatial, "dilations": spatial, "pads": 2 * spatial}
    for name, length in lengths.items():
        given = list(attributes.get(name, []))
        if given and len(given) != length:
            if name == "pads":
                _fail(f"Padding vector (length {len(given)}) does not have 2 values for each "
                      f"spatial dimension {spatial}", "give pads as [begins..., ends...]")
            _fail(f"Length of {name} vector {len(given)} != number of spatial dimensions "
                  f"{spatial}", f"give one {name[:-1]} per spatial dimension")
    if kernel:
        out = _spatial_out_shape(shape[2:], kernel, attributes)
        if any(d < 0 for d in out):
            _fail(f"Window parameter values combine to give invalid spatial output shape: "
                  f"{_dims(out)}")


def _spatial_out_shape(spatial: list[int], kernel: list[int], attributes: dict[str, Any]
                       ) -> list[int]:
    """The output's spatial sizes, as PopART's receptive-field ops compute them."""
    count = len(spatial)
    pads = list(attributes.get("pads", [])) or [0] * 2 * count
    strides = list(attributes.get("strides", [])) or [1] * count
    dilations = list(attributes.get("dilations", [])) or [1] * count
    auto_pad = attributes.get("auto_pad", "NOTSET")
    rounding = np.ceil if attributes.get("ceil_mode", 0) else np.floor
    out = []
    for axis in range(count):
        size = spatial[axis]
        if auto_pad == "VALID":
            out.append(int(np.ceil((size - (kernel[axis] - 1)) / strides[axis])))
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out.append(int(np.ceil(size / strides[axis])))
        else:
            size += pads[axis] + pads[count + axis] - 1 - dilations[axis] * (kernel[axis] - 1)
            out.append(int(rounding(size / strides[axis])) + 1)
    return out


def _dims(values: list[int]) -> str:
    return "[" + " ".join(str(v) for v in values) + "]"  # PopART prints shapes so


def _fail(message: str, fix: str = "") -> None:
    """Raise PopART's ``message``, then ``fix`` (left out where PopART's tests compare the
    whole message)."""
    from ipuxl.popart.errors import popart_exception

    raise popart_exception(f"{message}. To fix: {fix}." if fix else message)
