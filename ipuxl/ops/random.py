"""Random numbers: random_uniform, random_normal, dropout, shaped_dropout, split_random_seed."""

from __future__ import annotations

__all__: list[str] = []
