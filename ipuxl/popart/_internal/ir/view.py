"""PopART's ``view.Region``: a box of a tensor, here only whole or empty.

popxl-addons passes regions to say whether a call site modifies an input
(``CallOp.addModified``); ipuxl's in-place ops write whole tensors, so a region is
either the full tensor or nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["Region"]


class Region:
    """``Region.getFull(shape)`` or ``Region.getEmpty(rank)``."""

    def __init__(self, lower: Sequence[int], upper: Sequence[int]):
        if len(lower) != len(upper):
            raise ValueError(
                f"A Region's lower and upper bounds need one entry per dimension: got "
                f"lower={list(lower)} and upper={list(upper)}."
            )
        self._lower = [int(v) for v in lower]
        self._upper = [int(v) for v in upper]
        self._empty = False

    @staticmethod
    def getFull(shape: Sequence[int]) -> Region:  # noqa: N802 - PopART's names
        """The whole of a tensor of this shape."""
        return Region([0] * len(shape), list(shape))

    @staticmethod
    def getEmpty(rank: int) -> Region:  # noqa: N802
        """No element of a tensor of this rank (also of a scalar, whose box of no
        dimensions would otherwise hold its one element)."""
        region = Region([0] * rank, [0] * rank)
        region._empty = True
        return region

    def rank(self) -> int:
        return len(self._lower)

    def getLower(self) -> list[int]:  # noqa: N802
        return list(self._lower)

    def getUpper(self) -> list[int]:  # noqa: N802
        return list(self._upper)

    def nelms(self) -> int:
        if self._empty:
            return 0
        count = 1
        for low, high in zip(self._lower, self._upper):
            count *= max(high - low, 0)
        return count

    def isEmpty(self) -> bool:  # noqa: N802
        return self.nelms() == 0

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Region) and other._lower == self._lower
                and other._upper == self._upper and other._empty == self._empty)

    def __hash__(self) -> int:
        return hash((tuple(self._lower), tuple(self._upper), self._empty))

    def __repr__(self) -> str:
        return f"Region(lower={self._lower}, upper={self._upper})"
