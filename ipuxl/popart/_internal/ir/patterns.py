"""``popart._internal.ir.patterns``: PopART's ``Patterns`` and ``PatternsLevel``, the
same classes as ``popart.Patterns`` (see :mod:`ipuxl.popart.patterns`)."""

from __future__ import annotations

from ipuxl.popart.patterns import Patterns, PatternsLevel

__all__ = ["Patterns", "PatternsLevel"]
