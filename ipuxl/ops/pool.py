"""Pooling: average_pool and max_pool."""

from __future__ import annotations

__all__: list[str] = []
