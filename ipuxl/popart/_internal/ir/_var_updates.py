"""What PopART's optimizer ops say of themselves, read from ipuxl's var-update ops:
``isOptimizerOp()`` and the accumulators' ``getFactor()`` / ``getAxis()``.

A factor is PopART's ``OptimizerValue``: ``val()`` the number, ``isConst()`` whether it
is one. ipuxl keeps a number factor as the op's attribute (``f``, or ``step`` for
``accumulate_mean_``) and a tensor factor as an input (the attribute is None); PopART
reports a tensor factor as ``OptimizerValue(0, False)``.

Example::

    op = g._pb_graph.getOps()[0]            # ops.var_updates.accumulator_scale_(a, 0.125)
    op.isOptimizerOp(), op.getFactor().val()   # (True, 0.125)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ipuxl.op

__all__ = ["OptimizerValue", "OptimizerOp", "AccumulatorFactor", "SparseAccumulatorGetters",
           "VAR_UPDATE_MIXINS"]

# ipuxl ops whose scale factor is fixed by the op itself: `t += X`, `t = 0`.
_FIXED_FACTOR = {"accumulate_": 1.0, "accumulator_zero_": 0.0}


class OptimizerValue:
    """PopART's ``OptimizerValue`` as an op's getter returns it (read-only)."""

    def __init__(self, value: float, is_const: bool):
        self._value = float(value)
        self._is_const = bool(is_const)

    def val(self) -> float:
        return self._value

    def isConst(self) -> bool:  # noqa: N802 - PopART's name
        return self._is_const

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, OptimizerValue) and other._value == self._value
                and other._is_const == self._is_const)

    def __hash__(self) -> int:
        return hash((self._value, self._is_const))

    def __repr__(self) -> str:
        return f"OptimizerValue({self._value}, isConst={self._is_const})"


class OptimizerOp:
    """PopART's ``VarUpdateOp`` and updater ops: ``isOptimizerOp()`` is True."""

    def isOptimizerOp(self) -> bool:  # noqa: N802
        return True


class AccumulatorFactor(OptimizerOp):
    """``AccumulateBaseOp`` / ``AccumulatorScaleOp``: ``getFactor()``."""

    _object: ipuxl.op.Op

    def getFactor(self) -> OptimizerValue:  # noqa: N802
        return factor_of(self._object)


class SparseAccumulatorGetters(AccumulatorFactor):
    """``SparseAccumulateOp``: ``getFactor()`` and ``getAxis()``."""

    def getAxis(self) -> int:  # noqa: N802
        return int(self._object.attrs["axis"])


def factor_of(op: ipuxl.op.Op) -> OptimizerValue:
    """The scale factor of the accumulator ``op``: its number attribute, or
    ``OptimizerValue(0, False)`` where a tensor input gives it."""
    name = op.opdef.name
    attrs = op.attrs
    key = "step" if "step" in attrs else "f"
    if key not in attrs:
        return OptimizerValue(_FIXED_FACTOR.get(name, 1.0), True)
    value = attrs[key]
    if value is None:
        return OptimizerValue(0.0, False)
    return OptimizerValue(value, True)


# PopART class name -> the optimizer getters its view has.
VAR_UPDATE_MIXINS: dict[str, type] = {
    "AccumulateOp": AccumulatorFactor, "AccumulatorScaleOp": AccumulatorFactor,
    "SparseAccumulateOp": SparseAccumulatorGetters, "CopyVarUpdateOp": OptimizerOp,
    "AdamVarUpdateOp": OptimizerOp, "AdamUpdaterOp": OptimizerOp, "LambSquareOp": OptimizerOp,
}
