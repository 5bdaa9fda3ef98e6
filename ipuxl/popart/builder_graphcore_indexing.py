"""``builder.aiGraphcore``: PopART's indexing, sorting and scatter/gather operators.

Mixed into :class:`ipuxl.popart.builder_graphcore.AiGraphcoreOpset1`; each method writes one
node (through ``self._node`` / ``self._one``) whose import rule is in
:mod:`ipuxl.onnx.ops.graphcore_indexing`::

    summed = builder.aiGraphcore.scatterreduce([data, index], axis_size=4, axis=0)
    values, order = builder.aiGraphcore.sort([x], axis=-1, descending=1)

The arguments are PopART's, in PopART's order, with its defaults. Attribute values are
checked for type here; what depends on the input shapes (axes in range, index shapes)
is checked when a session imports the model, with PopART's messages.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from ipuxl.popart.arguments import enum_argument
from ipuxl.popart.errors import popart_exception

__all__ = ["IndexingOpsMixin", "ScatterReduction", "TensorRemapType"]


class ScatterReduction(IntEnum):
    """How ``aiGraphcore.scatterreduce`` combines the values sent to one slot."""

    Sum = 0  # noqa: N815 - PopART's names
    Max = 1  # noqa: N815
    Min = 2  # noqa: N815
    Mul = 3  # noqa: N815
    NoReduction = 4  # noqa: N815 - the last value written wins


class TensorRemapType(IntEnum):
    """``aiGraphcore.tensorremap``'s remapping (a tile layout; values never change)."""

    FwdBwdReverse = 0  # noqa: N815 - PopART's names
    FwdBwd = 1  # noqa: N815
    Fwd = 2  # noqa: N815


def _checks() -> Any:
    """:mod:`ipuxl.popart.builder_graphcore`, whose argument checks the methods share
    (imported when first needed: that module imports this one)."""
    from ipuxl.popart import builder_graphcore

    return builder_graphcore


_REDUCTION_NAMES = {ScatterReduction.Sum: "sum", ScatterReduction.Max: "max",
                    ScatterReduction.Min: "min", ScatterReduction.Mul: "mul",
                    ScatterReduction.NoReduction: "none"}


class IndexingOpsMixin:
    """Methods of ``AiGraphcoreOpset1`` (see the module docstring)."""

    # ------------------------------------------------------------------ gather, scatter
    def groupedgather(self, args: list[str], axis: int = 0, group_size: int = 1,
                      debugContext: Any = "") -> str:  # noqa: N803 - PopART's names
        """``args = [data, indices]``: ``group_size`` gathers along ``axis`` of ``data``,
        dimension 0 of both being the group (``axis`` counts it, so it is at least 1)."""
        checks = _checks()
        return self._one("GroupedGather", args, debugContext, arity=2,
                         axis=checks._int("axis", axis, "groupedgather"),
                         group_size=checks._int("group_size", group_size, "groupedgather"))

    def scatterreduce(self, args: list[str], axis_size: int, axis: int = -1,
                      reduction: Any = ScatterReduction.Sum,
                      enable_index_broadcast: int = 1,
                      debugContext: Any = "") -> str:  # noqa: N803
        """``args = [data, indices]`` or ``[data, indices, initial_values]``: reduce
        ``data`` into ``axis_size`` slots along ``axis`` (torch_scatter's ``scatter``)."""
        return self.groupedscatterreduce(args, axis_size, axis, reduction, 1,
                                         enable_index_broadcast, debugContext)

    def groupedscatterreduce(self, args: list[str], axis_size: int, axis: int = -1,
                             reduction: Any = ScatterReduction.Sum, group_size: int = 1,
                             enable_index_broadcast: int = 1,
                             debugContext: Any = "") -> str:  # noqa: N803
        """``scatterreduce`` done ``group_size`` times: dimension 0 of every input is the
        group (``axis`` counts it)."""
        checks, op = _checks(), "groupedscatterreduce"
        kind = enum_argument(ScatterReduction, reduction, f"aiGraphcore.{op}: reduction")
        attributes = {"axis": checks._int("axis", axis, op),
                      "axis_size": checks._int("axis_size", axis_size, op),
                      "reduction": _REDUCTION_NAMES[kind],
                      "group_size": checks._int("group_size", group_size, op),
                      "enable_index_broadcast": checks._flag(
                          "enable_index_broadcast", enable_index_broadcast, op)}
        return self._node("ScatterReduce", args, attributes, inputs=(2, 3),
                          debug=debugContext)[0]

    # ------------------------------------------------------------------ sequences
    def sequenceslice(self, args: list[str], zeroUnused: int = 0,  # noqa: N803
                      debugContext: Any = "") -> str:  # noqa: N803
        """``args = [source, destination, N, sourceOffset, destOffset]``: the destination
        with rows ``destOffset[i]:+N[i]`` copied from ``source[sourceOffset[i]:]``; the
        rows no run writes are zeroed with ``zeroUnused``."""
        return self._one("SequenceSlice", args, debugContext, arity=5,
                         zeroUnused=_checks()._flag("zeroUnused", zeroUnused,
                                                    "sequenceslice"))

    def packedDataBlock(self, args: list[str], maxSequenceLengths: list[int],  # noqa: N802,N803
                        resultSize: int, callbackBatchSize: int,  # noqa: N803
                        callback: Any, debugContext: Any = "") -> str:  # noqa: N803
        """``args = [data, offsets, lengths] * n + [resultOffsets, resultLengths]``: run
        the ``callback`` subgraph Builder on the unpacked sequences, ``callbackBatchSize``
        at a time, and pack its results into ``resultSize`` rows."""
        from ipuxl.popart.builder import Builder

        checks, op = _checks(), "packedDataBlock"
        if not isinstance(callback, Builder):
            raise TypeError(f"aiGraphcore.packedDataBlock: callback must be a subgraph "
                            f"Builder (builder.createSubgraphBuilder()), got "
                            f"{type(callback).__name__}.")
        attributes = {
            "resultSize": checks._int("resultSize", resultSize, op),
            "callbackBatchSize": checks._int("callbackBatchSize", callbackBatchSize, op),
            "maxSequenceLengths": checks._ints("maxSequenceLengths", maxSequenceLengths, op),
            "callback": callback.graph_proto()}
        return self._node("PackedDataBlock", args, attributes, inputs=(5, 2**31 - 1),
                          debug=debugContext)[0]

    # ------------------------------------------------------------------ sorting, values
    def bucketize(self, args: list[str], right: int = 0,
                  debugContext: Any = "") -> str:  # noqa: N803
        """``args = [input, boundaries]``: the int32 bucket of each element
        (``torch.bucketize``; ``right`` puts values equal to a boundary above it)."""
        right = _checks()._int("right", right, "bucketize")
        if right not in (0, 1):
            raise popart_exception(f"BucketizeOp right = {right} is not valid: must be "
                                   "either 0 or 1.")
        return self._one("Bucketize", args, debugContext, arity=2, right=right)

    def sort(self, args: list[str], axis: int = -1, descending: int = 0, stable: int = 0,
             debugContext: Any = "") -> list[str]:  # noqa: N803
        """``args = [x]``: ``[values, indices]``, ``x`` sorted along ``axis`` and the int32
        positions the values came from."""
        checks = _checks()
        attributes = {"axis": checks._int("axis", axis, "sort"),
                      "descending": checks._flag("descending", descending, "sort"),
                      "stable": checks._flag("stable", stable, "sort")}
        return self._node("Sort", args, attributes, inputs=(1, 1), debug=debugContext,
                          outputs=2)

    def incrementmod(self, args: list[str], increment: float, modulus: float,
                     debugContext: Any = "") -> str:  # noqa: N803
        """``(x + increment) % modulus``, C remainder, in ``x``'s type."""
        checks = _checks()
        return self._one("IncrementMod", args, debugContext,
                         increment=checks._float("increment", increment, "incrementmod"),
                         modulus=checks._float("modulus", modulus, "incrementmod"))

    # ------------------------------------------------------------------ views, plumbing
    def reshape(self, args: str, shape: list[int], debugContext: Any = "") -> str:  # noqa: N803
        """``args`` (one tensor id, as PopART takes it here) reshaped to ``shape``: 0
        copies the input's dimension, one -1 is inferred."""
        if not isinstance(args, str):
            raise TypeError(f"aiGraphcore.reshape takes one tensor id (a string), got "
                            f"{type(args).__name__} {args!r}. Call it as "
                            "aiGraphcore.reshape(x, shape=[...]).")
        return self._one("Reshape", [args], debugContext,
                         shape=_checks()._ints("shape", shape, "reshape"))

    def slice(self, args: list[str], ends: list[int], starts: list[int], axes: list[int],
              debugContext: Any = "") -> str:  # noqa: N803
        """``args = [x]``: ``x[starts:ends]`` on ``axes`` (the first axes in order when
        ``axes`` is empty); bounds are clamped as in NumPy. Note PopART's order: ends
        before starts."""
        checks = _checks()
        ends = checks._ints("ends", ends, "slice")
        starts = checks._ints("starts", starts, "slice")
        axes = checks._ints("axes", axes, "slice")
        if len(ends) != len(starts) or (axes and len(axes) != len(starts)):
            raise popart_exception(f"aiGraphcore.slice: starts {starts}, ends {ends} and "
                                   f"axes {axes} differ in length; give one of each per "
                                   "sliced axis.")
        return self._one("Slice", args, debugContext, axes=axes or None, ends=ends,
                         starts=starts)

    def nop(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        """The input, unchanged (an op PopART's optimisations leave in place)."""
        return self._one("Nop", args, debugContext)

    def tensorremap(self, args: list[str],
                    remap_type: Any = TensorRemapType.FwdBwdReverse,
                    debugPrefix: Any = "") -> str:  # noqa: N803 - PopART's name
        """The input with a new IPU tile layout: the values are unchanged."""
        remap = enum_argument(TensorRemapType, remap_type,
                              "aiGraphcore.tensorremap: remap_type")
        return self._one("TensorRemap", args, debugPrefix, remap_type=int(remap))

    def copyvarupdate(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        """``args = [variable, update]``: write ``update`` into the variable (a weight,
        ``addInitializedInputTensor``); the output is its new value."""
        ids = _checks().tensor_ids(args, "aiGraphcore.copyvarupdate",
                                   "aiGraphcore.copyvarupdate([variable, update])")
        if len(ids) != 2:
            raise popart_exception(f"copyvarupdate should have two args: [variable, "
                                   f"update], got {ids}.")
        if not self._builder.isInitializer(ids[0]):
            raise popart_exception(
                f"The first arg of copyvarupdate should be an initalised tensor: "
                f"{ids[0]!r} is not a weight. Make it with addInitializedInputTensor.")
        return self._one("CopyVarUpdate", ids, debugContext, arity=2)
