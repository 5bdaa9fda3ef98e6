"""PopART's build-time checks of ONNX operators, in PopART's words.

A PopART session refuses an ill-formed node while it builds its IR, with a message that
PopART programs and tests match (``"Axis 2 is out of acceptable range [-1, 0]"``,
``"np broadcasting failed on 'Op(ai.onnx.Add:7, ...)', frames [10, 10] and [10, 5] are
not aligned"``). The operator modules pass these functions as their rules' ``check``
(:mod:`ipuxl.onnx.registry`): each sees the node's input names and values (a NumPy array
for a value known at import, a tensor otherwise) and attributes before the node is built.
Every condition refused here is one ONNX forbids as well, so no valid model is refused.

Two kinds of error:

* :func:`refuse` raises ``OnnxImportError`` with PopART's whole message: the importer
  passes it on unchanged (PopART's tests compare the whole message);
* :class:`PopartOpError` holds a message that names the operator as PopART does
  (``Op(ai.onnx.MatMul:9, inputs=[a, b], outputs=[c])``); the importer words it for the
  node (:meth:`PopartOpError.for_node`). Without the node it names the operator by its
  type and inputs.

A PopART session also refuses some valid ONNX that its ops cannot build
(:func:`session_check`: ``Clip`` with bounds known only when the model runs,
``AveragePool`` counting the padding, ``MaxPool`` with dilations, opset 6's ``Sum``/
``Mean``/``Max``/``Min`` of inputs that differ), checks its own ``ai.graphcore`` ops
(``Reverse``'s dimensions, ``Nll``'s label shape), gives its
own words where ipuxl's would differ (``Transpose``'s ``perm`` of the wrong length,
``ai.graphcore.ReduceMedian``'s axes out of range), and asks
for a value its IR needs at build time in its own words (:func:`needed_value_message`).
The importer applies both only in PopART sessions (``Importer.popart``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ipuxl.onnx.errors import OnnxImportError

__all__ = ["PopartOpError", "popart_opid", "popart_op_label", "refuse", "axis_check",
           "axes_check", "broadcast_check", "matmul_check", "reshape_check", "tile_check",
           "expand_check", "session_check", "session_output_types", "needed_value_message",
           "unknown_input_shape_message"]

# ONNX operators whose outputs PopART makes in another type than ONNX says: the indices of
# ArgMax/ArgMin are INT32 (PopART has no 64-bit integers on the device).
_SESSION_OUTPUT_TYPES = {"ArgMax": np.int32, "ArgMin": np.int32}

Check = Callable[[list[str], list[Any], dict[str, Any]], None]


def popart_opid(domain: str, op_type: str, version: int | None) -> str:
    """PopART's operator identifier: ``ai.onnx.Slice:10`` (no version: ``ai.onnx.Slice``)."""
    return f"{domain or 'ai.onnx'}.{op_type}" + (f":{version}" if version else "")


def popart_op_label(domain: str, op_type: str, version: int | None, name: str,
                    inputs: Sequence[str], outputs: Sequence[str] | None) -> str:
    """PopART's name of an op in messages: ``Op(ai.onnx.Add:7, inputs=[a, b],
    outputs=[c])``, with the node's name first when it has one (``Op(my_add
    (ai.onnx.Add:7), ...)``); ``outputs`` None leaves them out."""
    opid = popart_opid(domain, op_type, version)
    head = f"{name} ({opid})" if name else opid
    tail = "" if outputs is None else f", outputs=[{', '.join(o for o in outputs if o)}]"
    return f"Op({head}, inputs=[{', '.join(i for i in inputs if i)}]{tail})"


class PopartOpError(ValueError):
    """A refusal whose PopART message names the op: ``template`` holds ``{op}`` where
    the op's label goes."""

    def __init__(self, template: str, op_type: str, inputs: Sequence[str]):
        self.template = template
        self.op_type = op_type
        super().__init__(template.format(
            op=popart_op_label("ai.onnx", op_type, None, "", inputs, None)))

    def for_node(self, node: Any, version: int) -> str:
        """The message for ONNX ``node`` imported with the rule of opset ``version``."""
        return self.template.format(op=popart_op_label(
            node.domain, node.op_type, version, node.name, node.input, node.output))


def refuse(message: str) -> None:
    """Raise PopART's whole ``message`` (the importer adds nothing to it)."""
    raise OnnxImportError(message)


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in (value.shape if hasattr(value, "shape") else np.shape(value)))


def _dims(shape: Sequence[int], separator: str = ", ") -> str:
    return "[" + separator.join(str(d) for d in shape) + "]"


def _check_axis(axis: int, rank: int) -> None:
    if not -rank <= axis <= rank - 1:
        refuse(f"Axis {axis} is out of acceptable range [{-rank}, {rank - 1}]")


def axis_check(default: int) -> Check:
    """The check of an ``axis`` attribute against input 0's rank (Softmax, LogSoftmax,
    Hardmax, ArgMax, ArgMin); ``default`` is the version's default axis."""

    def check(names: list[str], values: list[Any], attrs: dict[str, Any]) -> None:
        _check_axis(int(attrs.get("axis", default)), len(_shape(values[0])))

    return check


def axes_check(names: list[str], values: list[Any], attrs: dict[str, Any]) -> None:
    """The check of a reduction's axes (its ``axes`` attribute, or its second input when
    known) against input 0's rank."""
    axes = attrs.get("axes")
    if axes is None and len(values) > 1 and isinstance(values[1], np.ndarray):
        axes = values[1].reshape(-1).tolist()
    rank = len(_shape(values[0]))
    for axis in axes or ():
        _check_axis(int(axis), rank)


def _type_name(value: Any) -> str | None:
    """PopART's name of a tensor's element type (``FLOAT16``), None for a known value
    (whose NumPy type is not the model's)."""
    from onnx import TensorProto, helper

    if isinstance(value, np.ndarray) or not hasattr(value, "dtype"):
        return None
    numpy_type = np.dtype(value.dtype.as_numpy())
    return str(TensorProto.DataType.Name(helper.np_dtype_to_tensor_dtype(numpy_type)))


def _mixed_scalar(types: tuple[str | None, str | None], shapes: list[tuple[int, ...]]
                  ) -> bool:
    """PopART's one mixed-precision case of ``Mul``: FLOAT16 with a one-element FLOAT."""
    return sorted(t or "" for t in types) == ["FLOAT", "FLOAT16"] and all(
        t == "FLOAT16" or int(np.prod(s)) == 1 for t, s in zip(types, shapes))


def broadcast_check(op_type: str, mixed_scalar: bool = False) -> Check:
    """The check of a binary elementwise operator's inputs: NumPy-broadcastable shapes
    and, between tensors, one element type (with ``mixed_scalar``, FLOAT16 may meet a
    one-element FLOAT, as PopART's ``Mul`` allows). Opsets 1-6's ``broadcast``/``axis``
    forms are not checked."""

    def check(names: list[str], values: list[Any], attrs: dict[str, Any]) -> None:
        if "broadcast" in attrs or "axis" in attrs or len(values) != 2 \
                or any(v is None for v in values):
            return
        shapes = [_shape(v) for v in values]
        for a, b in zip(reversed(shapes[0]), reversed(shapes[1])):
            if a != b and a != 1 and b != 1:
                raise PopartOpError(
                    "np broadcasting failed on '{op}', frames " + _dims(shapes[0])
                    + " and " + _dims(shapes[1]) + " are not aligned", op_type, names)
        types = (_type_name(values[0]), _type_name(values[1]))
        if None in types or types[0] == types[1]:
            return
        if mixed_scalar and _mixed_scalar(types, shapes):
            return
        raise PopartOpError(
            "np broadcasting failed on {op}, incompatible types " + f"{types[0]} and "
            f"{types[1]} (shapes {_dims(shapes[0], ' ')} and {_dims(shapes[1], ' ')})",
            op_type, names)

    return check


def matmul_check(names: list[str], values: list[Any], attrs: dict[str, Any]) -> None:
    """MatMul's operands: neither a scalar, and equal contracting dimensions."""
    shapes = [_shape(v) for v in values]
    for index, side in enumerate(("lhs", "rhs")):
        if not shapes[index]:
            raise PopartOpError("{op} doesn't support scalar tensor " + names[index]
                                + f" as the {side} input", "MatMul", names)
    lhs, rhs = shapes
    inner_rhs = rhs[-2] if len(rhs) > 1 else rhs[0]
    if lhs[-1] != inner_rhs:
        raise PopartOpError(
            "{op} contracting dimensions unequal: " + f"lhs '{names[0]}' {_dims(lhs, ' ')}, "
            f"rhs '{names[1]}' {_dims(rhs, ' ')}", "MatMul", names)


def reshape_check(names: list[str], values: list[Any], attrs: dict[str, Any]) -> None:
    """Reshape's known shape input uses -1 at most once."""
    if len(values) > 1 and isinstance(values[1], np.ndarray) \
            and int(np.sum(values[1] == -1)) > 1:
        raise ValueError(
            "shape input to ReshapeOp can only use -1 to specify one unknown dimension "
            f"(found the shape {values[1].reshape(-1).tolist()}; give every other size)")


def tile_check(names: list[str], values: list[Any], attrs: dict[str, Any]) -> None:
    """Tile's known repeats: one per input axis, none negative."""
    if len(values) < 2 or not isinstance(values[1], np.ndarray):
        return
    repeats = values[1].reshape(-1).tolist()
    shape = _shape(values[0])
    if len(repeats) != len(shape):
        refuse(f"'Repeats' tensor `{names[1]}' should have one element for each dimension "
               "of the data tensor")
    out = [size * repeat for size, repeat in zip(shape, repeats)]
    if any(d < 0 for d in out):
        raise ValueError(f"Output of Tile has invalid shape, {_dims(out)}. Values must be "
                         f"non-negative in each shape dimension (repeats {repeats}).")


def expand_check(names: list[str], values: list[Any], attrs: dict[str, Any]) -> None:
    """Expand's known shape: each size equal to the input's, or one of them 1."""
    if len(values) < 2 or not isinstance(values[1], np.ndarray):
        return
    shape, target = _shape(values[0]), values[1].reshape(-1).tolist()
    for a, b in zip(reversed(shape), reversed(target)):
        if a != b and a != 1 and b != 1:
            raise ValueError(
                "Expand shape constraint: corresponding dimensions must have the same "
                f"value or one of them must be 1 (input {_dims(shape)}, shape "
                f"{_dims(target)})")


# ------------------------------------------------------------------- PopART sessions only
def _clip_bounds_check(node: Any, version: int, values: list[Any]) -> None:
    """Clip from opset 11: PopART's Clip takes its bounds when it is built, so an input
    ``min`` or ``max`` needs a value then (a Constant, an initializer or a weight)."""
    if version < 11:
        return
    for index, bound in ((1, "min"), (2, "max")):
        if index < len(values) and values[index] is not None \
                and not isinstance(values[index], np.ndarray):
            refuse(f"Op {node.name}({popart_opid(node.domain, node.op_type, version)}), "
                   f"inputs=[{node.input[0]}] currently only supports constant min/max "
                   f"parameters. Input '{bound}' ({node.input[index]}) has no data.")


def _node_ints(node: Any, name: str) -> list[int] | None:
    """The ints attribute ``name`` of ``node`` (None when absent)."""
    for attribute in node.attribute:
        if attribute.name == name:
            return [int(v) for v in attribute.ints]
    return None


def _transpose_rank_check(node: Any, version: int, values: list[Any]) -> None:
    """Transpose: a ``perm`` with one entry per input axis."""
    perm = _node_ints(node, "perm")
    shape = _shape(values[0])
    if perm is not None and len(perm) != len(shape):
        refuse(f"Rank of permutation tensor {_dims(perm, ' ')}, rank {len(perm)} must be "
               f"equal to rank of input tensor, shape {_dims(shape, ' ')}, rank {len(shape)}.")


def _reduce_median_axes_check(node: Any, version: int, values: list[Any]) -> None:
    """ai.graphcore's ReduceMedian: its axes within the input's rank, in PopART's words
    (as for the ai.onnx reductions, :func:`axes_check`)."""
    rank = len(_shape(values[0]))
    for axis in _node_ints(node, "axes") or ():
        _check_axis(axis, rank)


def _batch_norm_rank_check(node: Any, version: int, values: list[Any]) -> None:
    """A PopART session's BatchNormalization needs ``X`` of rank 3 or more (ONNX allows
    ``(N, C)``), refused in PopART's words."""
    rank = len(np.shape(values[0]))
    if rank < 3:
        refuse(f"batch norm requires X to have a rank >= 3.  x has rank {rank}")


def _tensor_info(value: Any) -> str:
    """PopART's text of a tensor's type and shape: ``FLOAT   [2 4 3]`` (the type padded to
    eight characters)."""
    from onnx import TensorProto, helper

    name = _type_name(value)
    if name is None:
        code = helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype)
        name = str(TensorProto.DataType.Name(code))
    return f"{name:<8}{_dims(_shape(value), ' ')}"


def _op_text(node: Any, version: int) -> str:
    """How PopART names an op it is building: its name and identifier."""
    opid = popart_opid(node.domain, node.op_type, version)
    return f"{node.name} ({opid})" if node.name else opid


def _average_pool_pad_check(node: Any, version: int, values: list[Any]) -> None:
    """AveragePool: PopART's pooling leaves the padding out of each window's count, so
    it refuses ``count_include_pad=1`` (valid ONNX)."""
    for attribute in node.attribute:
        if attribute.name == "count_include_pad" and attribute.i:
            refuse("`count_include_pad` is not supported by PopART's AveragePool (node "
                   f"{_op_text(node, version)} sets it to {attribute.i}): pad the input with "
                   "Pad and pool without padding instead.")


def _max_pool_dilations_check(node: Any, version: int, values: list[Any]) -> None:
    """MaxPool from opset 10: PopART's pooling has no dilated windows."""
    dilations = _node_ints(node, "dilations") or []
    if version >= 10 and any(d != 1 for d in dilations):
        refuse(f"MaxPool has dilations {_dims(dilations, ' ')}. Dilations of value other "
               f"than 1 are currently not supported. Node {_op_text(node, version)}: remove "
               "the dilations attribute or set them all to 1.")


def _variadic_same_inputs_check(node: Any, version: int, values: list[Any]) -> None:
    """Sum, Mean, Max and Min of opset 6 (before NumPy broadcasting): every input has the
    type and shape of the first, as PopART checks."""
    infos = [_tensor_info(v) for v in values if v is not None]
    if version == 6 and any(info != infos[0] for info in infos[1:]):
        refuse(f"Inputs to {popart_opid(node.domain, node.op_type, version)} do not all the "
               f"same type & shape, with opid.version = 6 (inputs {', '.join(infos)}): "
               "give inputs of one type and shape, or import with opset 8 or later, which "
               "broadcasts.")


def _reverse_dimensions_check(node: Any, version: int, values: list[Any]) -> None:
    """ai.graphcore's Reverse: each dimension counted from 0, below the rank, and once."""
    rank, seen = len(_shape(values[0])), set()
    op = _op_text(node, version)
    for dimension in _node_ints(node, "dimensions") or ():
        if dimension < 0:
            refuse(f"ReverseOp '{op}' invalid dimension '{dimension}'. Only positive "
                   f"dimensions are supported: count it from the front ({dimension + rank}).")
        if dimension >= rank:
            refuse(f"ReverseOp '{op}' invalid dimension '{dimension}' for input tensor of "
                   f"rank {rank}. Give dimensions below {rank}.")
        if dimension in seen:
            refuse(f"Dimension {dimension} appears multiple times in the list of dimensions "
                   f"of ReverseOp '{op}'. Give each dimension once.")
        seen.add(dimension)


def _nll_label_shape_check(node: Any, version: int, values: list[Any]) -> None:
    """ai.graphcore's Nll: one label for each row of probabilities, that is the labels
    have the probabilities' shape without its last (class) axis."""
    probabilities, labels = _shape(values[0]), _shape(values[1])
    op = _op_text(node, version)
    if not probabilities:
        refuse(f"Invalid shape for prob tensor ({_tensor_info(values[0])}) in Op {op}. The "
               "probabilities need a class axis.")
    if labels != probabilities[:-1]:
        refuse(f"The label tensor ({_tensor_info(values[1])}) must have shape "
               f"{_dims(probabilities[:-1], ' ')} to match all but the final dimension of "
               f"the probabilities tensor ({_tensor_info(values[0])}) in Op {op}. ")


# (domain, operator) -> the check a PopART session makes before building the node.
def _recurrent_check(node: Any, version: int, values: list[Any]) -> None:
    """PopART's RNN/LSTM attribute checks (:mod:`ipuxl.onnx.ops.nn_rnn`, imported here,
    when a session meets one)."""
    from ipuxl.onnx.ops.nn_rnn import lstm_session_check, rnn_session_check

    check = lstm_session_check if node.op_type == "LSTM" else rnn_session_check
    check(node, version, values)


_SESSION_CHECKS: dict[tuple[str, str], Callable[[Any, int, list[Any]], None]] = {
    ("ai.onnx", "RNN"): _recurrent_check,
    ("ai.onnx", "LSTM"): _recurrent_check,
    ("ai.onnx", "Clip"): _clip_bounds_check,
    ("ai.onnx", "Transpose"): _transpose_rank_check,
    ("ai.graphcore", "ReduceMedian"): _reduce_median_axes_check,
    ("ai.onnx", "BatchNormalization"): _batch_norm_rank_check,
    ("ai.onnx", "AveragePool"): _average_pool_pad_check,
    ("ai.onnx", "MaxPool"): _max_pool_dilations_check,
    **{("ai.onnx", variadic): _variadic_same_inputs_check
       for variadic in ("Sum", "Mean", "Max", "Min")},
    ("ai.graphcore", "Reverse"): _reverse_dimensions_check,
    ("ai.graphcore", "Nll"): _nll_label_shape_check}


def session_output_types(node: Any, outputs: list[Any]) -> list[Any]:
    """``outputs`` of ``node`` in the types a PopART session gives them (see
    ``_SESSION_OUTPUT_TYPES``): NumPy arrays (folded) or ipuxl tensors, cast."""
    wanted = _SESSION_OUTPUT_TYPES.get(node.op_type) if node.domain in ("", "ai.onnx") \
        else None
    if wanted is None:
        return outputs
    from ipuxl import dtypes, ops

    return [o.astype(wanted) if isinstance(o, np.ndarray)
            else ops.cast(o, dtypes.dtype.as_dtype(wanted)) for o in outputs]


def session_check(node: Any, version: int, values: list[Any]) -> None:
    """The refusals of a PopART session beyond ONNX's rules, for ``node`` imported with
    the rule of opset ``version``. ``values`` are its inputs: a NumPy array where the
    value is known when the model is built (weights included), a tensor where it is
    not, None where the input is absent."""
    check = _SESSION_CHECKS.get((node.domain or "ai.onnx", node.op_type))
    if check is not None:
        check(node, version, values)


def unknown_input_shape_message(info: Any) -> str | None:
    """PopART's message for graph input ``info`` (an ``onnx.ValueInfoProto`` that no
    ``InputShapeInfo`` gives a shape) when a dimension is unknown: named (``dim_param``),
    missing, or negative. None when every dimension is known."""
    dims = [dim.dim_param if dim.dim_param else str(dim.dim_value)
            if dim.HasField("dim_value") else "?"
            for dim in info.type.tensor_type.shape.dim]
    unknown = [d for d in dims if not d.isdigit()]
    if not unknown:
        return None
    return (f"Input tensor '{info.name}' must be specified in InputShapeInfo, as it has "
            f"shape {_dims(dims)}, which uses an unknown value '{unknown[0]}'.")


# The inputs whose value PopART's ops read to work out their output shape.
_SHAPE_INPUTS = {"Slice": {1: "starts", 2: "ends", 3: "axes", 4: "steps"},
                 "Reshape": {1: "shape"}, "Expand": {1: "shape"}}


def needed_value_message(node: Any, version: int, index: int, fix: str) -> str:
    """PopART's message when input ``index`` of ``node`` (rule of opset ``version``) has
    no value when the model is built.

    ``Slice`` (from opset 10), ``Reshape`` and ``Expand`` say which input they needed
    and why, ``Tile`` that its repeats must be a Constant, as PopART's tests compare them
    whole; any other operator gives PopART's generic ``The tensor `x` does not have
    data`` followed by ``fix``, ipuxl's advice."""
    tensor = node.input[index]
    onnx_op = node.op_type if node.domain in ("", "ai.onnx") else ""
    if onnx_op == "Tile" and index == 1:
        return f"The 'Repeats' Tensor `{tensor}' must be of type Constant"
    input_name = _SHAPE_INPUTS.get(onnx_op, {}).get(index)
    if input_name is None or (onnx_op == "Slice" and version < 10):
        return f"The tensor `{tensor}` does not have data. {fix}"
    purpose = "slicing direction" if input_name == "steps" else "output shape"
    return (f"Need the value of the {popart_opid(node.domain, node.op_type, version)} input "
            f"'{input_name}' to determine the {purpose}, but was unable because "
            "[Tensor::getDataViaGraphTraversal] Could not work out tensor data for "
            f"{tensor}.")
