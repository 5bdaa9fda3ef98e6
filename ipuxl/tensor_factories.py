"""Tensor factories: ``variable``, ``constant``, ``graph_input`` and ``graph_output``.

Example:
    >>> import numpy as np, ipuxl as popxl
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     w = popxl.variable(np.zeros((2, 3)), name="w")   # float64 is downcast
    ...     c = popxl.constant(1, popxl.float16, name="one")
    >>> w, c
    (Variable[w popxl.dtypes.float32 (2, 3)], Constant[one popxl.dtypes.float16 ()])
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import numpy as np

from ipuxl import dtypes
from ipuxl.context import get_current_context
from ipuxl.op import check_in_graph
from ipuxl.popart import VariableRetrievalMode
from ipuxl.replica_grouping import ReplicaGrouping
from ipuxl.tensor import Constant, Tensor, TensorSpec, Variable
from ipuxl.utils import to_numpy

__all__ = ["variable", "adopted_variable", "constant", "adopted_constant", "graph_input", "graph_output",
           "remote_variable"]

_RETRIEVAL_MODES = ("one_per_group", "all_replicas")

# PopART's logger: PopXL warns there when a memmap cannot back a variable.
_LOGGER = logging.getLogger("popart")


def variable(
    data: Any,
    dtype: dtypes.dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    retrieval_mode: str | None = None,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> Variable:
    """A main-graph tensor that keeps its value between runs.

    Args:
        data: the initial value (host array, list, scalar). With a grouping of G > 1
            groups, ``data.shape[0]`` must be G and replica k starts from
            ``data[assignment[k]]``.
        dtype: the tensor's dtype; inferred from ``data`` (after downcasting) if None.
        name: the name; ``t`` if None. Made unique.
        downcast: turn 64-bit host data into 32-bit when ``dtype`` is None.
        replica_grouping: how replicas share the value (default: all in one group).
        retrieval_mode: ``"one_per_group"`` (default) or ``"all_replicas"``.
        log2_scale, nan_on_overflow: float8 conversion options (see ``utils.to_numpy``).

    Returns:
        The variable. Its initial data is a copy of ``data``, except for an ``np.memmap``
        with a constant replica grouping, which is used in place: it is ``_memmap_arr``,
        every host write of the Session goes into it, ``Session.weights_to_host`` flushes
        it, and ``Session.get_tensor_data`` returns it. With a non-constant grouping the
        memmap is copied, as in PopXL, and a warning is logged on the ``"popart"`` logger.

    Raises:
        RuntimeError: no graph is on the context stack.
        TypeError: ``data`` is not numbers (None, strings, objects); ``replica_grouping``
            is not a ReplicaGrouping.
        ValueError: not in the main graph; bad retrieval mode; data does not match the
            grouping; a memmap that would need converting (a ``dtype`` other than its
            own, not C-contiguous, or 64-bit data, which PopXL downcasts); a value that
            does not fit the dtype (an int64 value beyond int32 when downcasting, 300 for
            int8, NaN or 2.5 for an integer dtype); a replica grouping of another Ir or
            replication factor.

    Warns:
        HostValueWarning: a float beyond a narrower float's range became ±inf (1e39 for
            float32, as PopXL's downcast makes it).
    """
    return _variable(data, dtype, name, downcast, replica_grouping, retrieval_mode,
                     log2_scale, nan_on_overflow, adopt=False)


def adopted_variable(array: np.ndarray, dtype: dtypes.dtype, name: str | None = None
                     ) -> Variable:
    """A variable whose initial data is ``array`` itself, not a copy, with
    :func:`variable`'s checks: for a caller that made ``array`` and gives it up, such as
    the ONNX importer with the initializers it decoded (copying them was half of the
    import time of an MLP's 22 MB of weights)."""
    return _variable(array, dtype, name, False, None, None, None, None, adopt=True)


def _variable(data: Any, dtype: dtypes.dtype | None, name: str | None, downcast: bool,
              replica_grouping: ReplicaGrouping | None, retrieval_mode: str | None,
              log2_scale: int | None, nan_on_overflow: bool | None, *, adopt: bool
              ) -> Variable:
    context = get_current_context()
    graph = context.graph
    if graph is not graph.ir.main_graph:
        raise ValueError(
            "You cannot initialise a variable tensor within a graph. Variables live in the "
            f"main graph; {graph.id!r} is a subgraph. Create the variable under "
            "`with ir.main_graph:` and pass it to the subgraph as an input."
        )
    if retrieval_mode is None:
        retrieval_mode = "one_per_group"
    if isinstance(retrieval_mode, VariableRetrievalMode):  # PopART's enum
        retrieval_mode = {VariableRetrievalMode.OnePerGroup: "one_per_group",
                          VariableRetrievalMode.AllReplicas: "all_replicas"}.get(
                              retrieval_mode, retrieval_mode.name)
    if retrieval_mode not in _RETRIEVAL_MODES:
        raise ValueError(
            f"Invalid retrieval_mode: {retrieval_mode!r}. Use one of {_RETRIEVAL_MODES}."
        )
    grouping = checked_replica_grouping(replica_grouping, graph.ir, _what("variable", name))
    host = to_numpy(data, dtype, downcast, copy=False, log2_scale=log2_scale,
                    nan_on_overflow=nan_on_overflow, what=_what("variable", name))
    shape = host.shape
    if grouping.num_groups > 1:
        if not shape or shape[0] != grouping.num_groups:
            raise ValueError(
                f"The variable data has shape {shape}, but its replica grouping has "
                f"{grouping.num_groups} groups: the first dimension must be the group "
                f"dimension of size {grouping.num_groups}."
            )
        shape = shape[1:]
    in_place = isinstance(host, np.memmap) and grouping.is_const
    if isinstance(host, np.memmap) and not in_place:
        _LOGGER.warning(
            "In creation of variable %s, you have passed np.memmap data and a non-const "
            "replica grouping (assignment %s). Only a constant grouping keeps a memmap as "
            "the variable's data (PopXL stores the others reordered, in a copy), so the data "
            "is copied: the variable is NOT backed by the np.memmap and weights_to_host does "
            "not write to it. Use `ir.replica_grouping(stride, group_size)` to keep it "
            "memory-mapped.", name or "t", grouping.assignment)
    if not in_place and not adopt:
        # to_numpy(copy=False) may return the caller's array; the variable owns its data,
        # so later edits of that array must not change the initial value (np.array copies
        # into a plain ndarray, a memmap too).
        host = np.array(host)
    tensor_dtype = dtypes.dtype.as_dtype(host.dtype if dtype is None else dtype)
    if in_place and not host.flags.writeable:
        graph.ir._read_only_memmap = True
    var = graph._new_tensor(Variable, name, TensorSpec(shape, tensor_dtype))
    var._data = host
    if in_place:
        var._memmap_arr = host
    var._replica_grouping = grouping
    var._retrieval_mode = retrieval_mode
    return var


def constant(
    data: Any,
    dtype: dtypes.dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> Constant:
    """A tensor with fixed data, in the current graph (any graph, unlike variables).

    Args:
        data: the value (host array, memmap, list or scalar); it is copied.
        dtype: the tensor's dtype; inferred from ``data`` (after downcasting) if None.
        name: the name; ``t`` if None. Made unique.
        downcast: turn 64-bit host data into 32-bit when ``dtype`` is None.
        log2_scale, nan_on_overflow: float8 conversion options (see ``utils.to_numpy``).

    Returns:
        The constant.

    Raises:
        RuntimeError: no graph is on the context stack.
        TypeError: float8 structured data without an explicit ``dtype``; data that is not
            numbers (None, strings, objects).
        ValueError: a value that does not fit the dtype (as for ``variable``).
    """
    return _constant(data, dtype, name, downcast, log2_scale, nan_on_overflow, copy=True)


def adopted_constant(array: np.ndarray, dtype: dtypes.dtype, name: str | None = None
                     ) -> Constant:
    """A constant that holds ``array`` itself (made read-only) instead of a copy, with
    :func:`constant`'s checks: for a caller that made ``array`` and gives it up, such as
    the ONNX importer with the values it folds (copying them was a third of the import
    time of a model whose weights are folded).

    One value repeated (``np.broadcast_to``, as the importer folds ``ConstantOfShape``)
    stays that read-only view: its elements are written where they are used (the upload
    to the device), not when the constant is made."""
    if array.size > 1 and not any(array.strides):
        one = to_numpy(array.reshape(-1)[:1], dtype, False, copy=False,
                       what=_what("constant", name))
        return _new_constant(np.broadcast_to(one.reshape(()), array.shape), dtype, name)
    return _constant(array, dtype, name, False, None, None, copy=False)


def _constant(data: Any, dtype: dtypes.dtype | None, name: str | None, downcast: bool,
              log2_scale: int | None, nan_on_overflow: bool | None, *, copy: bool
              ) -> Constant:
    graph = get_current_context().graph
    if dtype is None and isinstance(data, np.ndarray) and data.dtype in (
        dtypes.np_dtype_float8_143, dtypes.np_dtype_float8_152
    ):
        raise TypeError(
            "Please explicitly set the data type (`dtype=popxl.float8_143` or "
            "`popxl.float8_152`) when creating a float8 constant from host data."
        )
    if isinstance(data, np.memmap):
        # A constant keeps a read-only copy: reading the memmap as a plain array makes
        # to_numpy copy and convert it like any array (it returns memmaps uncopied).
        data = np.asarray(data)
    host = to_numpy(data, dtype, downcast, copy=copy, log2_scale=log2_scale,
                    nan_on_overflow=nan_on_overflow, what=_what("constant", name))
    return _new_constant(host, dtype, name, graph)


def _new_constant(host: np.ndarray, dtype: dtypes.dtype | None, name: str | None,
                  graph: Any = None) -> Constant:
    """A constant of the current graph holding ``host`` (made read-only)."""
    graph = graph if graph is not None else get_current_context().graph
    tensor_dtype = dtypes.dtype.as_dtype(host.dtype if dtype is None else dtype)
    host.flags.writeable = False
    const = graph._new_tensor(Constant, name, TensorSpec(host.shape, tensor_dtype))
    const._data = host
    return const


def graph_input(
    shape: Iterable[int],
    dtype: dtypes.dtype,
    name: str | None = None,
    by_ref: bool = False,
    meta_shape: Iterable[int] | None = None,
) -> Tensor:
    """Append an input to the current graph; its index is the creation order.

    Args:
        shape: the input's shape.
        dtype: the input's dtype.
        name: the name; ``t`` if None. Made unique.
        by_ref: every call site writes the input's final value back to the parent tensor.
        meta_shape: the full shape before replica sharding (default ``()``).

    Returns:
        The input tensor. ``graph_input(**tensor.spec)`` copies another tensor's type.

    Raises:
        RuntimeError: no graph is on the context stack.
    """
    graph = get_current_context().graph
    spec = TensorSpec(shape, dtypes.dtype.as_dtype(dtype), meta_shape or ())
    tensor = graph._new_tensor(Tensor, name, spec)
    graph._inputs.append(tensor)
    if by_ref:
        graph._by_ref_inputs.add(tensor)
    return tensor


def graph_output(t: Tensor) -> None:
    """Append ``t`` to the current graph's outputs.

    Raises:
        RuntimeError: no graph is on the context stack.
        TypeError: ``t`` is not a Tensor.
        ValueError: ``t`` belongs to another graph.
    """
    graph = get_current_context().graph
    check_in_graph(graph, "t", t)
    graph._outputs.append(t)
    graph.ir._edited()


def _what(factory: str, name: str | None) -> str:
    """How error messages name the tensor being created."""
    return f"popxl.{factory}(name={name!r})" if name else f"popxl.{factory}"


def checked_replica_grouping(grouping: Any, ir: Any, what: str) -> ReplicaGrouping:
    """A variable's replica grouping: None (all replicas in one group), or one made by the
    variable's Ir for its replication factor (the rule collectives apply to their groups).

    Raises:
        TypeError: ``grouping`` is not a ReplicaGrouping or None.
        ValueError: it was made for another replication factor or by another Ir.
    """
    if grouping is None:
        return ir.replica_grouping()
    if not isinstance(grouping, ReplicaGrouping):
        raise TypeError(
            f"{what}: `replica_grouping` must be a popxl.ReplicaGrouping or None, got "
            f"{type(grouping).__name__} {grouping!r}. Make one with "
            "`ir.replica_grouping(stride, group_size)`."
        )
    grouping.check_belongs_to(ir, what)
    return grouping


def remote_variable(
    data: Any,
    remote_buffer: Any,
    offset: int = 0,
    dtype: dtypes.dtype | None = None,
    name: str | None = None,
    downcast: bool = True,
    replica_grouping: ReplicaGrouping | None = None,
    retrieval_mode: str | None = None,
    log2_scale: int | None = None,
    nan_on_overflow: bool | None = None,
) -> Variable:
    """A variable that lives in slot ``offset`` of ``remote_buffer`` (off-chip memory):
    each replica's copy of the buffer starts with that replica's data (per group when
    grouped). Programs read and write it with ``ops.remote_load`` / ``ops.remote_store``;
    ``session.get_tensor_data`` / ``write_variable_data`` read and write the slot, with
    the host shape of an ordinary variable.

    Raises:
        TypeError: ``remote_buffer`` is not a RemoteBuffer.
        IndexError: ``offset`` is not a slot of the buffer.
        ValueError: the errors of :func:`variable`. (Whether the variable matches the
            buffer's shape and dtype is checked, as in PopXL, where it is used: by
            ``ops.remote_load``/``remote_store`` and when a Session is built.)
    """
    from ipuxl.remote_buffer import RemoteSlot, check_buffer, check_slot

    what = _what("remote_variable", name)
    checked_replica_grouping(replica_grouping, get_current_context().graph.ir, what)
    remote_buffer = check_buffer(remote_buffer, "remote_variable")
    slot = check_slot(remote_buffer, offset, "remote_variable")
    var = variable(data, dtype, name, downcast, replica_grouping, retrieval_mode, log2_scale,
                   nan_on_overflow)
    var._remote_slot = RemoteSlot(remote_buffer, slot)
    return var
