"""Convolutions: conv, conv_transpose and their float8 pow2-scaled forms."""

from __future__ import annotations

__all__: list[str] = []
