"""``builder.aiGraphcore``: PopART's neural-network, loss, normalization, spline and miscellaneous operators.

Mixed into :class:`ipuxl.popart.builder_graphcore.AiGraphcoreOpset1`.
"""

from __future__ import annotations

__all__ = ["NnOpsMixin"]


class NnOpsMixin:
    """Methods of ``AiGraphcoreOpset1`` (see the module docstring)."""
