"""The ``ai.graphcore`` domain's indexing, sorting and scatter/gather operators (written by
:mod:`ipuxl.popart.builder_graphcore_indexing`).

* ``GroupedGather``: ``group_size`` independent gathers; dimension 0 is the group.
* ``ScatterReduce``: torch_scatter's reductions (``sum``, ``max``, ``min``, ``mul``,
  ``none``) into ``axis_size`` slots, with PopART's index broadcasting and gradients.
* ``SequenceSlice``: copy runs of rows of a source into a destination.
* ``Bucketize``: the bucket of each element among sorted boundaries (``torch.bucketize``).
* ``Sort``: sorted values and their int32 positions.
* ``IncrementMod``: ``(x + increment)`` C-remainder ``modulus``.
* ``Reshape`` and ``Slice`` (PopART's attribute forms), ``Nop``, ``TensorRemap`` (a layout
  hint: the identity here) and ``CopyVarUpdate`` (the updated value).
* ``PackedDataBlock``: run a callback graph on unpacked sequences and pack its results.

Errors carry PopART's message prefixes (``"ScatterReduceOp::setup axis = 4 is outside the
acceptable range"``...); the importer reports them with the node's name.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl.onnx.ops.tensor import slice_v1
from ipuxl.onnx.registry import onnx_converter, onnx_op
from ipuxl.op import OpDef
from ipuxl.popart.errors import popart_exception
from ipuxl.tensor import TensorSpec

GRAPHCORE = "ai.graphcore"
_SCATTER_REDUCTIONS = ("sum", "max", "min", "mul", "none")


def _wrapped(indices: Any, size: int) -> Any:
    """Indices as int32, negatives counted from the end, clamped into ``[0, size)`` (the
    IPU leaves out-of-range indices undefined)."""
    indices = indices.astype(jnp.int32)
    return jnp.clip(jnp.where(indices < 0, indices + size, indices), 0, max(size - 1, 0))


# ------------------------------------------------------------------------------ gather
@onnx_op("GroupedGather", domain=GRAPHCORE, kind="gather")
def grouped_gather(data: Any, indices: Any, *, axis: int = 0, group_size: int = 1,
                   available_memory_proportion: float | None = None) -> Any:
    """``group_size`` gathers: group ``g`` takes ``data[g]`` along ``axis`` (an axis of
    ``data``, so at least 1) at ``indices[g]``. With ``group_size=1`` it is ONNX Gather."""
    rank = data.ndim
    if not -rank <= axis < rank:
        raise popart_exception(f"GatherOp::setup axis = {axis} is outside the acceptable "
                               f"range [{-rank}, {rank - 1}]: data is {list(data.shape)}.")
    axis %= rank
    if group_size == 1:
        return jnp.take(data, _wrapped(indices, data.shape[axis]), axis=axis)
    if axis == 0:
        raise popart_exception("GatherOp::setup axis = 0 indicates the dimension of the "
                               "group: gather along an axis >= 1 (the group axis is 0).")
    if data.shape[0] != group_size or indices.ndim == 0 or indices.shape[0] != group_size:
        raise popart_exception(
            f"GroupedGather: data {list(data.shape)} and indices {list(indices.shape)} must "
            f"both start with the group dimension, group_size = {group_size}.")
    size = data.shape[axis]
    return jax.vmap(lambda d, i: jnp.take(d, _wrapped(i, size), axis=axis - 1))(data, indices)


# ------------------------------------------------------------------------------ scatter
def _expanded_indices_shape(indices: tuple[int, ...], data: tuple[int, ...], axis: int,
                            grouped: bool) -> list[int]:
    """PopART's expansion of a broadcast index shape: a vector index (after the group
    dimension) gets singleton dimensions ahead of ``axis``; trailing singletons fill the
    rank of ``data``."""
    if len(indices) > len(data):
        raise popart_exception(
            f"Invalid rank for indices input. Indices rank {len(indices)} must be <= data "
            f"input rank {len(data)}: indices {list(indices)}, data {list(data)}.")
    first = int(grouped)
    expanded = list(indices)
    if len(indices) - first == 1:
        expanded[first:first] = [1] * max(axis - first, 0)
    expanded += [1] * (len(data) - len(expanded))
    if any(e > d for e, d in zip(expanded, data)):
        raise popart_exception(
            f"Failed to expand 'indices' shape {list(indices)} to match 'src' shape "
            f"{list(data)} using reduction axis = {axis}: indices may not be longer than "
            "the data on any axis.")
    return expanded


def _scatter_plan(data: tuple[int, ...], indices: tuple[int, ...], initial: Any, axis: int,
                  axis_size: int, grouped: bool, broadcast: bool
                  ) -> tuple[list[int], list[int], tuple[int, ...]]:
    """``(index shape, region, output shape)``: the index is reshaped to the first and
    broadcast to the region, the part of ``data`` that is scattered."""
    if indices == data:
        expanded, region = list(data), list(data)
    else:
        expanded = _expanded_indices_shape(indices, data, axis, grouped)
        spread = [i for i, n in enumerate(expanded) if n != 1]
        vector = len(spread) == 1 + int(grouped) and spread[int(grouped)] == axis
        if broadcast and not vector:
            raise popart_exception(
                f"Partial broadcasting of indices is not currently supported: indices "
                f"{list(indices)} against data {list(data)} on axis {axis}. Give indices "
                "of the data's shape, or a vector along the axis.")
        if not broadcast and len(indices) != len(data):
            raise popart_exception(
                f"Partial broadcasting of indices is not currently supported: with "
                f"enable_index_broadcast=0 the indices {list(indices)} need the rank of the "
                f"data {list(data)}.")
        region = list(data) if broadcast else list(expanded)
        region[axis] = expanded[axis]
    if initial is not None:
        output = tuple(initial.shape)
    else:
        shape = list(data) if broadcast else list(expanded)
        shape[axis] = axis_size
        output = tuple(shape)
    if len(output) != len(data) or any(
            r > o for i, (r, o) in enumerate(zip(region, output)) if i != axis):
        raise popart_exception(
            f"ScatterReduceOp: initial_values {list(output)} must have the rank of the data "
            f"{list(data)} and cover the scattered region {region} on every axis but "
            f"{axis}.")
    return expanded, region, output


def _extreme(dtype: Any, largest: bool) -> Any:
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.inf if largest else -jnp.inf
    info = jnp.iinfo(dtype)
    return info.max if largest else info.min


def _make_scatter(reduction: str, axis: int, expanded: list[int], region: list[int],
                  output: tuple[int, ...], data_shape: tuple[int, ...]) -> Any:
    """The scatter of ``(data, indices, initial)`` with PopART's gradients: the gathered
    output gradient, masked where the data won (max, min), scaled by ``out / data``
    (mul); the initial values get the output gradient, masked likewise (none: zero where
    written)."""
    crop = tuple(slice(0, n) for n in region)

    def positions(indices: Any) -> tuple[Any, ...]:
        index = jnp.broadcast_to(indices.reshape(expanded), region).astype(jnp.int32)
        grids = list(jnp.indices(region, sparse=True))
        grids[axis] = jnp.where(index < 0, index + output[axis], index)
        return tuple(grids)

    def forward(data: Any, indices: Any, initial: Any) -> Any:
        values, where = data[crop], positions(indices)
        if reduction in ("sum", "none"):
            base = jnp.zeros(output, data.dtype) if initial is None else initial
            at = base.at[where]
            return at.add(values, mode="drop") if reduction == "sum" else \
                at.set(values, mode="drop")
        if reduction == "mul":
            base = jnp.ones(output, data.dtype) if initial is None else initial
            return base.at[where].multiply(values, mode="drop")
        largest = reduction == "max"
        base = jnp.full(output, _extreme(data.dtype, not largest), data.dtype) \
            if initial is None else initial
        result = base.at[where].max(values, mode="drop") if largest else \
            base.at[where].min(values, mode="drop")
        if initial is None:  # slots nothing was scattered to are 0, as in torch_scatter
            touched = jnp.zeros(output, bool).at[where].set(True, mode="drop")
            result = jnp.where(touched, result, jnp.zeros((), data.dtype))
        return result

    @jax.custom_vjp
    def scatter(data: Any, indices: Any, initial: Any) -> Any:
        return forward(data, indices, initial)

    def scatter_fwd(data: Any, indices: Any, initial: Any) -> tuple[Any, Any]:
        out = forward(data, indices, initial)
        return out, (data, indices, initial, out)

    def scatter_bwd(saved: Any, grad: Any) -> tuple[Any, None, Any]:
        data, indices, initial, out = saved
        where = tuple(jnp.clip(w, 0, n - 1) for w, n in zip(positions(indices), output))
        gathered, values = grad[where], data[crop]
        grad_initial = None if initial is None else grad
        if reduction in ("max", "min"):
            gathered = gathered * (values == out[where]).astype(grad.dtype)
            if initial is not None:
                grad_initial = grad * (out == initial).astype(grad.dtype)
        elif reduction == "mul":
            gathered = gathered * out[where] / values
            if initial is not None:
                grad_initial = grad * out / initial
        elif reduction == "none" and initial is not None:
            grad_initial = grad.at[positions(indices)].set(0, mode="drop")
        grad_data = jnp.zeros(data_shape, grad.dtype).at[crop].set(gathered)
        return grad_data, None, grad_initial

    scatter.defvjp(scatter_fwd, scatter_bwd)
    return scatter


@onnx_op("ScatterReduce", domain=GRAPHCORE, kind="gather")
def scatter_reduce(data: Any, indices: Any, initial_values: Any = None, *, axis_size: int,
                   axis: int = -1, reduction: str = "sum", group_size: int = 1,
                   enable_index_broadcast: int = 1,
                   available_memory_proportion: float | None = None) -> Any:
    """Reduce ``data`` into ``axis_size`` slots along ``axis``: ``out[.., indices[.., i,
    ..], ..] op= data[.., i, ..]``, starting from ``initial_values`` (included in the
    reduction) or from nothing (empty slots are 0, or 1 for ``mul``). ``indices`` has
    ``data``'s shape, or is a vector along ``axis`` (``enable_index_broadcast``); with
    broadcasting off, a smaller ``indices`` scatters only the part of ``data`` it covers.
    With ``group_size > 1`` dimension 0 is a group dimension."""
    if axis_size < 1:
        raise popart_exception(f"ScatterReduceOp axis_size = {axis_size} is not valid: "
                               "must be > 0 (it is the output's length along the axis).")
    if group_size < 1:
        raise popart_exception(f"ScatterReduceOp group_size = {group_size} is not valid: "
                               "must be > 0.")
    if enable_index_broadcast not in (0, 1):
        raise popart_exception(f"ScatterReduceOp enable_index_broadcast = "
                               f"{enable_index_broadcast} is not valid: must be either 0 or 1.")
    reduction = str(reduction).lower()
    if reduction not in _SCATTER_REDUCTIONS:
        raise popart_exception(f"ScatterReduceOp reduction {reduction!r} is not one of "
                               f"{', '.join(_SCATTER_REDUCTIONS)} (popart.ScatterReduction).")
    rank = data.ndim
    if not -rank <= axis <= rank - 1:
        raise popart_exception(f"ScatterReduceOp::setup axis = {axis} is outside the "
                               f"acceptable range [{-rank}, {rank - 1}]")
    axis %= rank
    expanded, region, output = _scatter_plan(
        tuple(data.shape), tuple(indices.shape), initial_values, axis, axis_size,
        group_size > 1, bool(enable_index_broadcast))
    scatter = _make_scatter(reduction, axis, expanded, region, output, tuple(data.shape))
    return scatter(data, indices, initial_values)


# ------------------------------------------------------------------------------ sequences
@onnx_op("SequenceSlice", domain=GRAPHCORE, kind="copy")
def sequence_slice(source: Any, destination: Any, count: Any, source_offset: Any,
                   dest_offset: Any, *, zeroUnused: int = 0) -> Any:  # noqa: N803
    """``destination`` with rows ``dest_offset[i] : dest_offset[i] + count[i]`` replaced
    by the source rows from ``source_offset[i]`` (a later run wins where runs overlap);
    with ``zeroUnused`` the rows no run writes are 0."""
    rows = jnp.arange(destination.shape[0], dtype=jnp.int32)
    first = dest_offset.astype(jnp.int32).reshape(-1, 1)
    covered = (rows >= first) & (rows < first + count.astype(jnp.int32).reshape(-1, 1))
    run = jnp.max(jnp.where(covered, jnp.arange(covered.shape[0])[:, None], -1), axis=0)
    chosen = jnp.maximum(run, 0)
    source_rows = source_offset.astype(jnp.int32).reshape(-1)[chosen] + rows - \
        first.reshape(-1)[chosen]
    copied = jnp.take(source, jnp.clip(source_rows, 0, source.shape[0] - 1), axis=0)
    kept = jnp.zeros_like(destination) if zeroUnused else destination
    written = (run >= 0).reshape((-1,) + (1,) * (destination.ndim - 1))
    return jnp.where(written, copied.astype(destination.dtype), kept)


@onnx_op("Bucketize", domain=GRAPHCORE, kind="elementwise")
def bucketize(x: Any, boundaries: Any, *, right: int = 0) -> Any:
    """The int32 bucket of each element: ``i`` where ``boundaries[i-1] < x <=
    boundaries[i]`` (``right``: ``boundaries[i-1] <= x < boundaries[i]``), 0 below the
    first boundary and ``len(boundaries)`` above the last or for NaN. PopART's
    search: the first matching ``i`` wins, so unsorted boundaries give torch's answers
    on the tests' data."""
    if right not in (0, 1):
        raise popart_exception(f"BucketizeOp right = {right} is not valid: must be either "
                               "0 or 1.")
    if boundaries.ndim != 1:
        raise popart_exception(f"BucketizeOp::setup The boundaries tensor is not a 1-D "
                               f"tensor. The boundaries tensor rank = {boundaries.ndim}.")
    if x.dtype != boundaries.dtype:
        raise popart_exception(
            f"BucketizeOp::setup The input and boundaries tensors have different data "
            f"types. The input tensor data type = {x.dtype}. The boundaries tensor data "
            f"type = {boundaries.dtype}. Cast one of them.")
    count = boundaries.shape[0]
    below = (x < boundaries[0]) if right else (x <= boundaries[0])
    result = jnp.where(below, 0, count).astype(jnp.int32)
    if count < 2:
        return result
    value = x[..., None]
    low, high = boundaries[:-1], boundaries[1:]
    inside = ((low <= value) & (value < high)) if right else ((low < value) & (value <= high))
    first = jnp.argmax(inside, axis=-1).astype(jnp.int32) + 1
    return jnp.where(jnp.any(inside, axis=-1), first, result)


@onnx_op("Sort", domain=GRAPHCORE, kind="reduce")
def sort(x: Any, *, axis: int = -1, descending: int = 0, stable: int = 0,
         available_memory_proportion: float | None = None) -> tuple[Any, Any]:
    """The values sorted along ``axis`` and their int32 positions in ``x``; equal values
    keep their order (a stable sort serves ``stable=0`` too)."""
    if x.ndim == 0:
        raise popart_exception("BaseSortOp input rank must be greater than 0: Sort needs "
                               "an axis to sort along, and its input is a scalar.")
    if not -x.ndim <= axis < x.ndim:
        raise popart_exception(f"Cannot compute BaseSortOp on axis {axis} when input rank "
                               f"is {x.ndim}: give an axis in [{-x.ndim}, {x.ndim - 1}].")
    order = jnp.argsort(x, axis=axis, stable=True, descending=bool(descending))
    return jnp.take_along_axis(x, order, axis=axis), order.astype(jnp.int32)


@onnx_op("IncrementMod", domain=GRAPHCORE)
def increment_mod(x: Any, *, increment: float, modulus: float) -> Any:
    """``(x + increment)`` C-remainder ``modulus`` (the sign of the dividend), in ``x``'s
    type."""
    return jnp.fmod(x + jnp.asarray(increment).astype(x.dtype),
                    jnp.asarray(modulus).astype(x.dtype))


# ------------------------------------------------------------------------------ views
def reshape_target(in_shape: tuple[int, ...], shape: list[int]) -> list[int]:
    """PopART's new shape: 0 copies the input's dimension, one -1 is inferred.

    Raises:
        popart_exception: a dimension below -1, two -1s, an inferred dimension that is
            not whole, or a shape of another size (PopART's messages).
    """
    target = [int(d) for d in shape]
    bad = [d for d in target if d < -1]
    if bad:
        raise popart_exception(f"Dimension, {bad[0]}, of new shape for Reshape cannot be "
                               f"smaller than -1 (new shape {target}).")
    target = [in_shape[i] if d == 0 and i < len(in_shape) else d for i, d in enumerate(target)]
    if target.count(-1) > 1:
        raise popart_exception("shape input to ReshapeOp can only use -1 to specify one "
                               f"unknown dimension (new shape {list(shape)}).")
    size = int(np.prod(in_shape, dtype=np.int64))
    if -1 in target:
        known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise popart_exception(f"Incompatible inferred dimension, not whole number: "
                                   f"{list(in_shape)} has {size} elements, {list(shape)} "
                                   f"leaves {size} / {known}.")
        target[target.index(-1)] = size // known
    if int(np.prod(target, dtype=np.int64)) != size:
        raise popart_exception(
            f"Failure in ReshapeOp::setup(). Trying to reshape from {list(in_shape)} to "
            f"{target}. The number of elements of the input is {size}, while the number "
            f"of elements of the output is {int(np.prod(target, dtype=np.int64))}. The "
            "number of elements cannot change for a ReshapeOp")
    return target


@onnx_op("Reshape", domain=GRAPHCORE, kind="view")
def reshape(x: Any, *, shape: tuple[int, ...]) -> Any:
    return jnp.reshape(x, reshape_target(tuple(x.shape), list(shape)))


@onnx_op("Slice", domain=GRAPHCORE, kind="view")
def slice_(x: Any, *, starts: tuple[int, ...], ends: tuple[int, ...],
           axes: tuple[int, ...] | None = None) -> Any:
    """ONNX Slice-1: ``x[starts:ends]`` on ``axes`` (all of the first ones by default),
    bounds clamped as NumPy does."""
    for axis in axes or ():
        if not -x.ndim <= axis < x.ndim:
            raise popart_exception(
                f"Invalid input shape in BaseSliceOp::getSlices. The input shape has rank "
                f"{x.ndim}, but axis = {axis}. axis must be less than the input shape's rank.")
    return slice_v1(x, starts=starts, ends=ends, axes=axes)


@onnx_op("Nop", domain=GRAPHCORE, kind="copy")
def nop(x: Any) -> Any:
    """The input (PopART keeps the op through its optimisations; so does ipuxl)."""
    return jnp.asarray(x)


@onnx_op("TensorRemap", domain=GRAPHCORE, kind="copy")
def tensor_remap(x: Any, *, remap_type: int = 0) -> Any:
    """The input: the remapping changes the tensor's tile layout on an IPU, not its
    values (``popart.TensorRemapType``)."""
    if remap_type not in (0, 1, 2):
        raise popart_exception(f"TensorRemapOp remap_type = {remap_type} is not valid: "
                               "must be 0 (FwdBwdReverse), 1 (FwdBwd) or 2 (Fwd).")
    return jnp.asarray(x)


@onnx_op("CopyVarUpdate", domain=GRAPHCORE, kind="copy")
def copy_var_update(variable: Any, update: Any) -> Any:
    """The variable's new value, ``update`` (PopART writes it into the variable)."""
    return update.astype(variable.dtype)


# ------------------------------------------------------------------------------ packed data
def _unpack(data: Any, offsets: Any, lengths: Any, *, width: int) -> Any:
    """``[sequences, width, ...]``: sequence ``i`` is ``data[offsets[i]:][:lengths[i]]``,
    zero-padded to ``width`` rows."""
    position = jnp.arange(width, dtype=jnp.int32)
    rows = offsets.astype(jnp.int32)[:, None] + position
    padded = jnp.take(data, jnp.clip(rows, 0, data.shape[0] - 1), axis=0)
    keep = (position < lengths.astype(jnp.int32)[:, None]).reshape(
        rows.shape + (1,) * (data.ndim - 1))
    return jnp.where(keep, padded, jnp.zeros((), data.dtype))


def _unpack_rule(data: Any, offsets: Any, lengths: Any, *, width: int) -> list[TensorSpec]:
    return [TensorSpec((offsets.shape[0], width, *data.shape[1:]), data.dtype)]


def _pack(results: Any, offsets: Any, lengths: Any, *, size: int) -> Any:
    """``[size, ...]`` zeros with rows ``offsets[i]:offsets[i]+lengths[i]`` set to the first
    ``lengths[i]`` rows of ``results[i]``."""
    count = results.shape[0]
    position = jnp.arange(results.shape[1], dtype=jnp.int32)
    rows = offsets[:count].astype(jnp.int32)[:, None] + position
    rows = jnp.where(position < lengths[:count].astype(jnp.int32)[:, None], rows, size)
    empty = jnp.zeros((size, *results.shape[2:]), results.dtype)
    return empty.at[rows].set(results, mode="drop")


def _pack_rule(results: Any, offsets: Any, lengths: Any, *, size: int) -> list[TensorSpec]:
    return [TensorSpec((size, *results.shape[2:]), results.dtype)]


_UNPACK = OpDef("packed_data_unpack", infer=_unpack_rule, lower=_unpack, cost_kind="gather")
_PACK = OpDef("packed_data_pack", infer=_pack_rule, lower=_pack, cost_kind="gather")


@onnx_converter("PackedDataBlock", domain=GRAPHCORE,
                attributes=("resultSize", "callbackBatchSize", "maxSequenceLengths",
                            "callback"))
def packed_data_block(ctx: Any) -> list[Any]:
    """Inputs ``[data, offsets, lengths] * n + [result offsets, result lengths]``: each
    data input is unpacked to ``[sequences, maxSequenceLengths[k], ...]``, the callback
    graph runs on ``callbackBatchSize`` sequences at a time (a last, smaller batch is not
    run), and its results are packed into ``resultSize`` rows."""
    from ipuxl import ops
    from ipuxl.onnx.model_ir import initializer_arrays

    count = len(ctx.node.input)
    widths = [int(w) for w in ctx.attrs["maxSequenceLengths"]]
    if count < 5 or (count - 2) % 3 or (count - 2) // 3 != len(widths):
        raise popart_exception(
            f"PackedDataBlock takes [data, offsets, lengths] for each of the "
            f"{len(widths)} maxSequenceLengths, then the result offsets and lengths; got "
            f"{count} inputs.")
    batch, callback = int(ctx.attrs["callbackBatchSize"]), ctx.attrs["callback"]
    unpacked = [_UNPACK.apply({"data": ctx.tensor(3 * k), "offsets": ctx.tensor(3 * k + 1),
                               "lengths": ctx.tensor(3 * k + 2)}, width=width)[0]
                for k, width in enumerate(widths)]
    sequences = unpacked[0].shape[0]
    results = []
    for start in range(0, sequences - sequences % batch, batch):
        env = dict(ctx.env)
        for info, value in zip(callback.input, unpacked):
            env[info.name] = ops.slice(value, [start], [start + batch], axis=[0])
        env.update(initializer_arrays(callback))
        ctx.importer.run(callback, env)
        name = callback.output[0].name
        results.append(ctx.importer.tensor(name, env[name]))
    stacked = ops.concat(results, 0) if len(results) > 1 else results[0]
    return [_PACK.apply({"results": stacked, "offsets": ctx.tensor(count - 2),
                         "lengths": ctx.tensor(count - 1)},
                        size=int(ctx.attrs["resultSize"]))[0]]
