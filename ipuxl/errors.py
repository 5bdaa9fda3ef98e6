"""PopXL's exceptions that are not built-in types (``popxl.errors``)."""

from __future__ import annotations

__all__ = ["UndefinedValue"]


class UndefinedValue(Exception):
    """A tensor property that has no value yet, e.g. ``t.ipu`` outside any ``ipu()`` scope."""
