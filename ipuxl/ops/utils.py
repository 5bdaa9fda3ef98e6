"""``popxl.ops.utils``: the argument checks that op functions written outside PopXL use.

Client libraries (popxl-addons' custom ops) build their ops with these, as PopXL's own op
functions do: every tensor is passed by keyword so that errors name the argument.

Example:
    >>> import ipuxl as popxl
    >>> from ipuxl.ops.utils import check_in_graph, check_tensor_ipu_and_tile_set
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     a = popxl.constant(1.0)
    ...     check_in_graph(ir.main_graph, a=a)
    ...     check_tensor_ipu_and_tile_set(a=a)
"""

from __future__ import annotations

import numbers
from typing import Any

from ipuxl import op as _op
from ipuxl.errors import UndefinedValue
from ipuxl.graph import Graph
from ipuxl.tensor import Tensor

__all__ = ["check_in_graph", "check_tensor_ipu_and_tile_set", "convert_optional_float",
           "handle_negative_axis"]

_KEYWORDS_ONLY = (
    "Pass every tensor by keyword, e.g. `check_in_graph(graph, x=x, y=y)`, so that errors "
    "can name the argument."
)


def check_in_graph(graph: Graph, *args: Any, **tensors: Tensor) -> None:
    """Raise unless every keyword argument is a Tensor of ``graph``.

    Raises:
        TypeError: a tensor was passed positionally, or a value is not a Tensor.
        ValueError: a tensor belongs to another graph (or another Ir).
    """
    if args:
        raise TypeError(
            f"check_in_graph takes the tensors as keyword arguments; got {len(args)} "
            f"positional. {_KEYWORDS_ONLY}"
        )
    for name, tensor in tensors.items():
        _op.check_in_graph(graph, name, tensor)


def check_tensor_ipu_and_tile_set(*args: Any, **tensors: Tensor) -> None:
    """Raise unless the tensors whose IPU (tile set) is known share one IPU (tile set).

    A tensor with no producer and no consumer yet has neither: it is left out of the check.

    Raises:
        TypeError: a tensor was passed positionally, or a value is not a Tensor.
        ValueError: two tensors are on different IPUs, or on different tile sets.
    """
    if args:
        raise TypeError(
            f"check_tensor_ipu_and_tile_set takes the tensors as keyword arguments; got "
            f"{len(args)} positional. {_KEYWORDS_ONLY}"
        )
    for name, tensor in tensors.items():
        _op.check_is_tensor(name, tensor)
    for attribute, fix in (("ipu", "ops.ipu_copy"), ("tile_set", "ops.io_tile_copy")):
        known = [(name, _placement(tensor, attribute)) for name, tensor in tensors.items()]
        known = [(name, value) for name, value in known if value is not None]
        for name, value in known[1:]:
            first_name, first = known[0]
            if value != first:
                what = "IPUs" if attribute == "ipu" else "tile sets"
                raise ValueError(
                    f"The input tensors `{first_name}` and `{name}` are located on different "
                    f"{what}: {first} != {value}. Copy one with `{fix}` first."
                )


def _placement(tensor: Tensor, attribute: str) -> Any:
    try:
        return getattr(tensor, attribute)
    except UndefinedValue:
        return None


def handle_negative_axis(t: Tensor, axis: int) -> int:
    """``axis`` counted from the front: ``t.rank + axis`` for a negative axis."""
    return t.rank + axis if axis < 0 else axis


def convert_optional_float(value: float | None) -> float | None:
    """An optional float as the op hints take it (``Op.setAvailableMemoryProportion``):
    the value as a float, or None for "not set".

    Raises:
        TypeError: ``value`` is neither None nor a real number.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(
            f"convert_optional_float takes a real number or None, got "
            f"{type(value).__name__}: {value!r}. Pass a float such as 0.6."
        )
    return float(value)
