"""Placement ops: copy a tensor to another IPU (``ipu_copy``) or tile set
(``io_tile_copy``). Both are identities in value; the output records the new placement,
which the IPU simulator uses.

A tensor made on one tile set and used by an op on the other is copied for that op
automatically (:func:`copy_to_tile_set`, which :meth:`ipuxl.op.OpDef.create` calls), as
PopART's ``IoComputeTileCopy`` transform does: the copy is named ``<name>_fioc`` (from the
IO tiles) or ``<name>_tioc`` (to the IO tiles), and later ops on the same tile set reuse it.
A copy between IPUs is never implicit.

Example:
    >>> import ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph, popxl.ipu(0):
    ...     x = ops.init((2,), popxl.float32, "x")
    ...     y = ops.ipu_copy(x, 1)
    >>> y.name, y.ipu
    ('x_c1', 1)
"""

from __future__ import annotations

from ipuxl.context import get_current_context, ipu
from ipuxl.errors import UndefinedValue
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.ops.type_rules import same_as_input
from ipuxl.tensor import Tensor

__all__ = ["ipu_copy", "io_tile_copy", "copy_to_tile_set"]

_IPU_COPY = OpDef("ipu_copy", infer=same_as_input, lower=lambda x, **attrs: x,
                  check_placement=False)
_IO_TILE_COPY = OpDef("io_tile_copy", infer=same_as_input, lower=lambda x: x,
                      check_placement=False)


def ipu_copy(t: Tensor, destination: int, source: int | None = None) -> Tensor:
    """A copy of ``t`` on IPU ``destination``, named ``<t.name>_c<destination>``.

    Args:
        source: the IPU ``t`` is on; taken from ``t`` when None.

    Raises:
        ValueError: ``source`` is None and ``t``'s IPU is undefined.
    """
    check_is_tensor("t", t)
    if source is None:
        try:
            source = t.ipu
        except UndefinedValue:
            raise ValueError(
                f"Could not infer the ipu for Tensor to be copied `{t.id}`: it has no "
                "producer and no consumer placed on an IPU. Please specify `source` when "
                f"copying this tensor, e.g. `ops.ipu_copy({t.name}, {destination}, source=0)`."
            ) from None
    with ipu(destination):
        return _IPU_COPY.apply({"t": t}, names=[f"{t.name}_c{destination}"],
                               source=int(source), destination=int(destination))[0]


def io_tile_copy(t: Tensor) -> Tensor:
    """A copy of ``t`` on the other tile set (compute <-> IO)."""
    check_is_tensor("t", t)
    context = get_current_context()
    try:
        moving_to_io = t.tile_set == "compute"
    except UndefinedValue:
        moving_to_io = not context.io_tiles
    previous = context.io_tiles
    context.io_tiles = moving_to_io
    try:
        return _IO_TILE_COPY.apply({"t": t})[0]
    finally:
        context.io_tiles = previous


def copy_to_tile_set(t: Tensor, tile_set: str) -> Tensor:
    """``t`` on ``tile_set`` (``"compute"`` or ``"io"``): ``t`` itself when it is there,
    else the copy an earlier op on that tile set made, else a new ``io_tile_copy``
    (PopART's ``IoComputeTileCopy`` rule)."""
    if t.tile_set == tile_set:
        return t
    for op in t.graph._consumers(t):
        if op.opdef is _IO_TILE_COPY and op.tile_set == tile_set:
            return op.outputs[0]
    context = get_current_context()
    previous = context.io_tiles
    context.io_tiles = tile_set == "io"
    try:
        name = f"{t.name}_{'tioc' if tile_set == 'io' else 'fioc'}"
        return _IO_TILE_COPY.apply({"t": t}, names=[name])[0]
    finally:
        context.io_tiles = previous
