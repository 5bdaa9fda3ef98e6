"""Integer division by zero: the note the IPU model adds when it can see one coming.

The numbers of a ``"cpu"`` or ``"ipu_model"`` Session come from XLA, which defines what an
integer division by zero gives (no error, no signal):

* ``ops.div`` / ``x / y`` and ONNX ``Div``: ``-1`` (all bits set: the largest value of
  an unsigned type);
* ``ops.fmod`` / ``x % y`` and ONNX ``Mod``: the dividend ``x``;
* the signed overflow ``INT_MIN / -1`` gives ``INT_MIN``, and its remainder ``0``.

Poplar documents no result for either on the IPU, so a program that relies on these
values is wrong on hardware. The IPU model cannot see data at run time, but it sees the
common case for free while it walks the program: an integer division whose divisor is a
constant holding a zero. :func:`zero_divisions` finds those ops; ``ipuxl.sim.estimate``
logs one warning per estimate (so once per Session) and keeps it in ``report.warnings``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ipuxl.tensor import Constant

__all__ = ["zero_divisions", "division_note"]

# The ops that divide integers: PopXL's, and the ONNX importer's (name prefixes).
_DIVIDING_OPS = ("div", "div_", "fmod", "fmod_")
_DIVIDING_PREFIXES = ("onnx.Div-", "onnx.Mod-", "graphcore.Fmod-", "graphcore.Remainder-")


def zero_divisions(ir: Any) -> list[Any]:
    """The ops of ``ir`` that divide integers by a constant holding a zero, in graph order.

    Only the divisor as written is looked at (a constant input of the op itself): a zero
    that arrives through a stream, a variable or another op's output is not found.
    """
    found = []
    has_zero: dict[int, bool] = {}  # per constant: a divisor is often shared by many ops
    for graph in ir.graphs:
        for op in graph.ops:
            name = op.name
            if name not in _DIVIDING_OPS and not name.startswith(_DIVIDING_PREFIXES):
                continue
            if len(op.inputs) < 2 or not isinstance(op.inputs[1], Constant):
                continue
            divisor = op.inputs[1]
            zero = has_zero.get(id(divisor))
            if zero is None:
                data = getattr(divisor, "_data", None)
                zero = has_zero[id(divisor)] = bool(
                    data is not None and np.issubdtype(data.dtype, np.integer)
                    and not data.all())
            if zero:
                found.append(op)
    return found


def division_note(ops: list[Any]) -> str:
    """The warning for the ops :func:`zero_divisions` found (at least one)."""
    first = ops[0]
    file, line = first.location
    more = f" and {len(ops) - 1} more" if len(ops) > 1 else ""
    return (
        f"Integer division by zero: `{first.name}` at {file}:{line}{more} divides by a "
        "constant holding 0. XLA gives a value without an error (x / 0 is -1, fmod(x, 0) is "
        "x; see docs/simulator.md), but Poplar defines no result on the IPU. Make the "
        "divisor non-zero, or select around it with ops.where."
    )
