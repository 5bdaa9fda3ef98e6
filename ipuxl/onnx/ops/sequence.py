"""ONNX sequences and optionals as import-time structures (see :mod:`ipuxl.onnx.ops`).

ipuxl compiles for static shapes, so an ONNX ``seq(tensor)`` or ``optional(...)`` value is
not a run-time object: it lives only in the importer's environment, as

* :class:`SequenceValue`: a tuple of values (ipuxl Tensors of the current graph, or NumPy
  arrays known at import time), with the element type for an empty sequence;
* :class:`OptionalValue`: a value or nothing.

Every position and length is therefore known while importing: SequenceConstruct,
SequenceEmpty, SequenceInsert, SequenceErase, SequenceAt, SequenceLength,
SplitToSequence, ConcatFromSequence, SequenceMap (the body imported once per element),
Optional, OptionalHasElement and OptionalGetElement work whenever their positions are
known (a position computed at run time raises
:class:`~ipuxl.onnx.importer.NeedsValueError`; inside a ``Loop`` that makes the loop
unroll, so the iteration number is known).

Both classes are JAX pytree nodes, so ``jax.tree_util.tree_flatten`` lists the tensors
of a nested structure (the control-flow converters pass such values into subgraphs as
one graph input per tensor) and two structures compare by their tree definitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from jax import tree_util

from ipuxl.onnx.registry import onnx_converter
from ipuxl.tensor import Tensor

__all__ = ["SequenceValue", "OptionalValue", "is_structure", "element_dtype", "from_host",
           "to_host"]


@dataclass(frozen=True)
class SequenceValue:
    """An ONNX sequence known at import time: ``items`` (Tensors or NumPy arrays) and
    the element type ``dtype`` (a NumPy dtype; None when unknown)."""

    items: tuple[Any, ...] = ()
    dtype: Any = None

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        return f"SequenceValue({len(self.items)} items, dtype={self.dtype})"


@dataclass(frozen=True)
class OptionalValue:
    """An ONNX optional: ``value`` (a tensor, array or sequence) or None when empty;
    ``type_proto`` is the element's serialized ``onnx.TypeProto`` when known."""

    value: Any = None
    type_proto: bytes | None = None

    @property
    def has_element(self) -> bool:
        return self.value is not None


tree_util.register_pytree_node(
    SequenceValue,
    lambda s: (s.items, s.dtype),
    lambda dtype, items: SequenceValue(tuple(items), dtype),
)
tree_util.register_pytree_node(
    OptionalValue,
    # A full optional's structure is its element's: the declared type is not compared.
    lambda o: ((o.value,), (True, None)) if o.value is not None else ((), (False,
                                                                         o.type_proto)),
    lambda aux, children: OptionalValue(children[0] if aux[0] else None, aux[1]),
)


def is_structure(value: Any) -> bool:
    """Whether ``value`` is a sequence or an optional (not a tensor or an array)."""
    return isinstance(value, (SequenceValue, OptionalValue))


def element_dtype(value: Any) -> Any:
    """The NumPy dtype of a tensor or array."""
    if isinstance(value, Tensor):
        return np.dtype(value.dtype.as_numpy())
    return np.asarray(value).dtype


def _error(ctx: Any, message: str) -> Exception:
    from ipuxl.onnx.importer import OnnxImportError

    node = ctx.node
    label = node.name or (node.output[0] if node.output else node.op_type)
    return OnnxImportError(f"Node {label!r} ({node.op_type}): {message}")


def _sequence(ctx: Any, index: int) -> SequenceValue:
    value = ctx.inputs[index]
    if isinstance(value, OptionalValue) and value.has_element:
        value = value.value
    if not isinstance(value, SequenceValue):
        raise _error(ctx, f"input {index} ({ctx.node.input[index]!r}) is not a sequence "
                          f"(got {type(value).__name__}).")
    return value


def _position(ctx: Any, index: int, length: int, default: int, insert: bool = False) -> int:
    if index >= len(ctx.inputs) or ctx.inputs[index] is None:
        return default
    position = int(np.asarray(ctx.value(index)).reshape(-1)[0])
    limit = length if insert else length - 1
    if not -length <= position <= limit:
        raise _error(ctx, f"position {position} is out of range for a sequence of length "
                          f"{length}.")
    return position + length if position < 0 else position


def _onnx_dtype(code: int) -> np.dtype:
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(int(code)))


# ---------------------------------------------------------------------------- sequences
@onnx_converter("SequenceConstruct", since=11)
def sequence_construct(ctx: Any) -> list[SequenceValue]:
    items = tuple(ctx.inputs)
    return [SequenceValue(items, element_dtype(items[0]) if items else None)]


@onnx_converter("SequenceEmpty", since=11, attributes=("dtype",))
def sequence_empty(ctx: Any) -> list[SequenceValue]:
    return [SequenceValue((), _onnx_dtype(ctx.attrs.get("dtype", 1)))]


@onnx_converter("SequenceInsert", since=11)
def sequence_insert(ctx: Any) -> list[SequenceValue]:
    seq = _sequence(ctx, 0)
    position = _position(ctx, 2, len(seq), len(seq), insert=True)
    items = list(seq.items)
    items.insert(position, ctx.inputs[1])
    return [SequenceValue(tuple(items), seq.dtype or element_dtype(ctx.inputs[1]))]


@onnx_converter("SequenceErase", since=11)
def sequence_erase(ctx: Any) -> list[SequenceValue]:
    seq = _sequence(ctx, 0)
    if not seq.items:
        raise _error(ctx, "cannot erase from an empty sequence.")
    position = _position(ctx, 1, len(seq), len(seq) - 1)
    items = list(seq.items)
    del items[position]
    return [SequenceValue(tuple(items), seq.dtype)]


@onnx_converter("SequenceAt", since=11)
def sequence_at(ctx: Any) -> list[Any]:
    seq = _sequence(ctx, 0)
    if not seq.items:
        raise _error(ctx, "cannot read an element of an empty sequence.")
    return [seq.items[_position(ctx, 1, len(seq), 0)]]


@onnx_converter("SequenceLength", since=11)
def sequence_length(ctx: Any) -> list[np.ndarray]:
    return [np.asarray(len(_sequence(ctx, 0)), np.int64)]


@onnx_converter("SplitToSequence", since=(11, 24), attributes=("axis", "keepdims"))
def split_to_sequence(ctx: Any) -> list[SequenceValue]:
    from ipuxl.onnx.ops.tensor import norm_axis

    x = ctx.inputs[0]
    shape = tuple(x.shape) if isinstance(x, Tensor) else np.shape(x)
    axis = norm_axis(ctx.attrs.get("axis", 0), len(shape))
    dim = shape[axis]
    split = ctx.value(1) if len(ctx.inputs) > 1 and ctx.inputs[1] is not None else None
    squeeze = split is None and not ctx.attrs.get("keepdims", 1)
    if split is None:
        sizes = [1] * dim
    elif np.ndim(split) == 0:
        chunk = int(split)
        if chunk <= 0:
            raise _error(ctx, f"split {chunk} must be positive.")
        sizes = [min(chunk, dim - start) for start in range(0, dim, chunk)]
    else:
        sizes = [int(s) for s in np.asarray(split).reshape(-1)]
        if sum(sizes) != dim or any(s < 0 for s in sizes):
            raise _error(ctx, f"split {sizes} does not add up to dimension {dim} of axis "
                              f"{axis}.")
    items, start = [], 0
    for size in sizes:
        items.append(_slice(x, axis, start, start + size, squeeze))
        start += size
    return [SequenceValue(tuple(items), element_dtype(x))]


def _slice(x: Any, axis: int, start: int, stop: int, squeeze: bool) -> Any:
    if isinstance(x, Tensor):
        from ipuxl import ops

        part = ops.slice(x, start, stop, 1, axis) if x.shape[axis] != stop - start else (
            ops.identity(x))
        return ops.squeeze(part, [axis]) if squeeze else part
    part = np.take(np.asarray(x), np.arange(start, stop), axis=axis)
    return np.squeeze(part, axis) if squeeze else part


@onnx_converter("ConcatFromSequence", since=11, attributes=("axis", "new_axis"))
def concat_from_sequence(ctx: Any) -> list[Any]:
    from ipuxl.onnx.ops.tensor import norm_axis

    seq = _sequence(ctx, 0)
    if not seq.items:
        raise _error(ctx, "cannot concatenate an empty sequence (its shape is unknown).")
    new_axis = bool(ctx.attrs.get("new_axis", 0))
    rank = len(seq.items[0].shape if isinstance(seq.items[0], Tensor)
               else np.shape(seq.items[0]))
    axis = norm_axis(ctx.attrs["axis"], rank + 1 if new_axis else rank)
    if not any(isinstance(item, Tensor) for item in seq.items):
        arrays = [np.asarray(item) for item in seq.items]
        return [np.stack(arrays, axis) if new_axis else np.concatenate(arrays, axis)]
    from ipuxl import ops

    name = ctx.node.input[0]
    parts = []
    for index, item in enumerate(seq.items):
        tensor = ctx.importer.tensor(f"{name}[{index}]", item)
        if new_axis:
            shape = list(tensor.shape)
            shape.insert(axis, 1)
            tensor = ops.reshape(tensor, shape)
        parts.append(tensor)
    return [ops.concat(parts, axis) if len(parts) > 1 else ops.identity(parts[0])]


@onnx_converter("SequenceMap", since=17, attributes=("body",))
def sequence_map(ctx: Any) -> list[SequenceValue]:
    """The body is imported once per element, inline (positions are known)."""
    from ipuxl.onnx.ops.control_subgraph import run_inline

    body = ctx.attrs["body"]
    first = _sequence(ctx, 0)
    length = len(first)
    for value in ctx.inputs[1:]:
        if isinstance(value, SequenceValue) and len(value) != length:
            raise _error(ctx, f"input sequences have different lengths ({length} and "
                              f"{len(value)}).")
    results: list[list[Any]] = [[] for _ in body.output]
    for position in range(length):
        args = [v.items[position] if isinstance(v, SequenceValue) else v for v in ctx.inputs]
        outputs = run_inline(ctx, body, args)
        for collected, value in zip(results, outputs):
            collected.append(value)
    dtypes = [_output_dtype(info) for info in body.output]
    return [SequenceValue(tuple(items), element_dtype(items[0]) if items else dtype)
            for items, dtype in zip(results, dtypes)]


def _output_dtype(info: Any) -> Any:
    tensor_type = info.type.tensor_type
    return _onnx_dtype(tensor_type.elem_type) if tensor_type.elem_type else None


# ---------------------------------------------------------------------------- optionals
@onnx_converter("Optional", since=(15, 28), attributes=("type",))
def optional(ctx: Any) -> list[OptionalValue]:
    proto = ctx.attrs.get("type")
    serialized = proto.SerializeToString() if proto is not None else None
    value = ctx.inputs[0] if ctx.inputs else None
    return [OptionalValue(value, serialized)]


@onnx_converter("OptionalHasElement", since=(15, 18, 28))
def optional_has_element(ctx: Any) -> list[np.ndarray]:
    value = ctx.inputs[0] if ctx.inputs else None
    if isinstance(value, OptionalValue):
        value = value.value
    return [np.asarray(value is not None)]


@onnx_converter("OptionalGetElement", since=(15, 18, 28))
def optional_get_element(ctx: Any) -> list[Any]:
    value = ctx.inputs[0] if ctx.inputs else None
    if isinstance(value, OptionalValue):
        if not value.has_element:
            raise _error(ctx, "the optional input is empty.")
        value = value.value
    if value is None:
        raise _error(ctx, "the input is missing.")
    return [value]


# ---------------------------------------------------------------------------- host values
def from_host(type_proto: Any, value: Any) -> Any:
    """A host value of ONNX type ``type_proto`` (a list for a sequence, None for an empty
    optional, an array for a tensor) as a structure with NumPy leaves, for
    ``jax.tree_util.tree_flatten`` (one stream per array)."""
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        elem = type_proto.sequence_type.elem_type
        items = tuple(from_host(elem, item) for item in value)
        dtype = None
        if elem.HasField("tensor_type") and elem.tensor_type.elem_type:
            dtype = _onnx_dtype(elem.tensor_type.elem_type)
        return SequenceValue(items, dtype)
    if kind == "optional_type":
        if value is None:
            return OptionalValue(None, type_proto.optional_type.elem_type.SerializeToString())
        return OptionalValue(from_host(type_proto.optional_type.elem_type, value))
    if kind == "tensor_type":
        return np.asarray(value)
    raise TypeError(f"ipuxl cannot feed an ONNX {kind} value.")


def to_host(value: Any) -> Any:
    """A structure as the host value ONNX's backend returns: a list for a sequence, None
    or the element for an optional, the array for a tensor."""
    if isinstance(value, SequenceValue):
        return [to_host(item) for item in value.items]
    if isinstance(value, OptionalValue):
        return None if value.value is None else to_host(value.value)
    return value
