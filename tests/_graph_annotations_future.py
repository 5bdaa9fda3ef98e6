"""Graph functions whose annotations are strings (``from __future__ import annotations``).

``test_create_graph.py`` checks that ``TensorByRef`` still marks by-reference inputs here
(PopXL compares the raw annotation with ``TensorByRef`` and so misses them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Tuple  # noqa: UP035 - the spelling PopXL matches

import ipuxl as popxl
from ipuxl.ops import var_updates

if TYPE_CHECKING:
    from collections.abc import Sequence  # unresolvable at run time, on purpose


def by_ref_scalar(x: popxl.TensorByRef, y: popxl.Tensor) -> None:
    var_updates.accumulate_(x, y)


def by_ref_lists(xs: List[popxl.TensorByRef], ys: Tuple[popxl.TensorByRef],  # noqa: UP006
                 zs: list) -> None:
    for t in [*xs, *ys, *zs]:
        var_updates.accumulator_zero_(t)


def by_ref_varargs(*args: popxl.TensorByRef, **kwargs: popxl.TensorByRef) -> None:
    for t in [*args, *kwargs.values()]:
        var_updates.accumulator_zero_(t)


def by_ref_with_unresolvable(x: popxl.TensorByRef, names: Sequence[str] = ()) -> None:
    """One annotation names a type imported only for type checkers."""
    var_updates.accumulator_zero_(x)
