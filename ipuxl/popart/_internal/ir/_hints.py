"""IPU planning hints set through the view: PopART's ``setAvailableMemoryProportion``,
``setUseFullyConnectedPass`` and ``setConvOptions``.

They land in the ipuxl op's ``hints`` (``available_memory_proportion``,
``partials_type``, ``use_fully_connected_pass``, ``enable_conv_dithering``), where the
IPU model (:mod:`ipuxl.sim`) reads them, and they are checked by the rule that
``ops.matmul`` and ``ops.conv`` apply to the same hints: a proportion is in (0, 1].

Example (what popxl-addons' ``set_available_memory_proportion_by_ipu`` does)::

    for op in ir._pb_ir.getMainGraph().getOps():
        if hasattr(op, "setAvailableMemoryProportion"):
            op.setAvailableMemoryProportion(convert_optional_float(0.3))
"""

from __future__ import annotations

import enum
import numbers
from typing import TYPE_CHECKING, Any

from ipuxl import dtypes
from ipuxl.ops.type_rules import check_available_memory_proportion

if TYPE_CHECKING:
    import ipuxl.op

__all__ = ["OptionalFloat", "MatMulPartialsType", "MultiConvOptions", "AvailableMemoryHints", "MatMulHints",
           "ConvHints", "HINT_MIXINS"]

_PARTIALS = {"half": dtypes.float16, "float": dtypes.float32}


class OptionalFloat:
    """PopART's ``OptionalFloat``: a float, or nothing (``OptionalFloat()``)."""

    def __init__(self, value: float | None = None):
        self.value = _optional_float("OptionalFloat", value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OptionalFloat) and other.value == self.value

    def __hash__(self) -> int:
        return hash(("OptionalFloat", self.value))

    def __repr__(self) -> str:
        return f"OptionalFloat({'' if self.value is None else self.value})"


class MatMulPartialsType(enum.Enum):
    """PopART's ``MatMulPartialsType``: the type a matmul accumulates in."""

    HALF = "half"
    FLOAT = "float"


class MultiConvOptions:
    """PopART's ``MultiConvOptions`` as ``getConvOptions`` gives them: lists with one entry
    per conv (ipuxl's convs are one conv). Change a field, then ``setConvOptions``."""

    def __init__(self, hints: dict[str, Any]):
        proportion = hints.get("available_memory_proportion")
        partials = hints.get("partials_type")
        dithering = hints.get("enable_conv_dithering")
        self.availableMemoryProportions = [] if proportion is None else [proportion]  # noqa: N815
        self.partialsTypes = [] if partials is None else [  # noqa: N815
            "half" if partials == dtypes.float16 else "float"]
        self.enableConvDithering = [] if dithering is None else [int(dithering)]  # noqa: N815

    def __repr__(self) -> str:
        return (f"MultiConvOptions(availableMemoryProportions="
                f"{self.availableMemoryProportions}, partialsTypes={self.partialsTypes}, "
                f"enableConvDithering={self.enableConvDithering})")


class AvailableMemoryHints:
    """``setAvailableMemoryProportion`` / ``getAvailableMemoryProportion`` (PopART's
    ``MatMulBaseOp`` and ``GatherOp``)."""

    _object: ipuxl.op.Op

    def setAvailableMemoryProportion(self, value: Any) -> None:  # noqa: N802 - PopART's names
        """Set the hint: a float in (0, 1], None or ``OptionalFloat`` (nothing: unset).

        Raises:
            TypeError: ``value`` is not a number, None or an ``OptionalFloat``.
            ValueError: the proportion is not in (0, 1].
        """
        proportion = _optional_float("setAvailableMemoryProportion", value)
        check_available_memory_proportion(self._object.name, proportion)
        _set_hint(self._object, "available_memory_proportion", proportion)

    def getAvailableMemoryProportion(self) -> OptionalFloat:  # noqa: N802
        return OptionalFloat(self._object.hints.get("available_memory_proportion"))


class MatMulHints(AvailableMemoryHints):
    """``MatMulBaseOp``'s hints: the available memory and the fully connected pass."""

    def setUseFullyConnectedPass(self, value: bool) -> None:  # noqa: N802
        """Whether the matmul is planned as a fully connected layer pass.

        Raises:
            TypeError: ``value`` is not a bool.
        """
        if not isinstance(value, bool):
            raise TypeError(
                f"setUseFullyConnectedPass takes a bool, got {type(value).__name__} "
                f"{value!r}. Pass True or False."
            )
        _set_hint(self._object, "use_fully_connected_pass", value)

    def useFullyConnectedPass(self) -> bool:  # noqa: N802
        return bool(self._object.hints.get("use_fully_connected_pass", True))

    def getPartialsType(self) -> MatMulPartialsType:  # noqa: N802
        """The op's ``partials_type`` hint, else the Ir's session option
        ``partialsTypeMatMuls`` (``"half"``, ``"float"``; empty: FLOAT), as PopART's.

        Raises:
            ValueError: the session option is another string.
        """
        partials = self._object.hints.get("partials_type")
        if partials is not None:
            return (MatMulPartialsType.HALF if partials == dtypes.float16
                    else MatMulPartialsType.FLOAT)
        from ipuxl.session_options import PbIr

        option = PbIr(self._object.graph.ir).getSessionOptions().partialsTypeMatMuls
        name = str(option).lower()
        if name == "":
            return MatMulPartialsType.FLOAT
        if name not in _PARTIALS:
            raise ValueError(
                f"Unable to get the partials type of {self._object.name}: the session "
                f"option partialsTypeMatMuls is {option!r}; use 'half', 'float' or ''."
            )
        return MatMulPartialsType(name)


class ConvHints:
    """``MultiConvBaseOp``'s ``getConvOptions`` / ``setConvOptions``."""

    _object: ipuxl.op.Op

    def getConvOptions(self) -> MultiConvOptions:  # noqa: N802
        return MultiConvOptions(self._object.hints)

    def setConvOptions(self, options: MultiConvOptions) -> None:  # noqa: N802
        """Set the hints from ``options`` (one entry per list, or none: unset).

        Raises:
            TypeError: ``options`` is not a ``MultiConvOptions``.
            ValueError: a list has more than one entry, a proportion is not in (0, 1],
                a partials type is not ``"half"`` or ``"float"``, or dithering is not 0/1.
        """
        if not isinstance(options, MultiConvOptions):
            raise TypeError(
                f"setConvOptions takes the MultiConvOptions that getConvOptions returns, "
                f"got {type(options).__name__} {options!r}."
            )
        op = self._object
        proportion = _single(op, "availableMemoryProportions",
                             options.availableMemoryProportions)
        proportion = _optional_float("setConvOptions", proportion)
        check_available_memory_proportion(op.name, proportion)
        partials = _single(op, "partialsTypes", options.partialsTypes)
        if partials is not None and partials not in _PARTIALS:
            raise ValueError(
                f"setConvOptions: partialsTypes entries are 'half' or 'float', got "
                f"{partials!r} for {op.name}."
            )
        dithering = _single(op, "enableConvDithering", options.enableConvDithering)
        if dithering is not None and dithering not in (0, 1):
            raise ValueError(
                f"setConvOptions: enableConvDithering entries are 0 or 1, got {dithering!r} "
                f"for {op.name}."
            )
        _set_hint(op, "available_memory_proportion", proportion)
        _set_hint(op, "partials_type", None if partials is None else _PARTIALS[partials])
        _set_hint(op, "enable_conv_dithering", None if dithering is None else bool(dithering))


# PopART class name -> the hint methods its view has.
HINT_MIXINS: dict[str, type] = {
    "MatMulOp": MatMulHints, "GatherOp": AvailableMemoryHints,
    "TiedGatherOp": AvailableMemoryHints, "ConvOp": ConvHints, "ConvTransposeOp": ConvHints,
}


def _optional_float(what: str, value: Any) -> float | None:
    """The float in ``value`` (a real number, None or ``OptionalFloat``), or None."""
    if isinstance(value, OptionalFloat):
        return value.value
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"{what} takes a float, None or an OptionalFloat, got "
            f"{type(value).__name__} {value!r}. Pass for example "
            "`convert_optional_float(0.6)`."
        )
    return float(value)


def _single(op: ipuxl.op.Op, field: str, values: Any) -> Any:
    values = list(values)
    if len(values) > 1:
        raise ValueError(
            f"setConvOptions: {field} has {len(values)} entries ({values}), and {op.name} "
            "is one conv: give one entry (or none to unset it)."
        )
    return values[0] if values else None


def _set_hint(op: ipuxl.op.Op, key: str, value: Any) -> None:
    if value is None:
        op.hints.pop(key, None)
    else:
        op.hints[key] = value
    op.graph.ir._edited()
