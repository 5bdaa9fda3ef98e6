"""Random seeds (PopXL's ``popxl.random_seed``).

A seed tensor is uint32 ``(2,)``: the high and low halves of a uint64. ``create_seeds``
must stay bit-identical to PopXL so that seeded programs give the same random numbers.

Example:
    >>> create_seeds(0).shape, create_seeds(0, replicas=4).shape
    ((2,), (4, 2))
"""

from __future__ import annotations

import operator

import numpy as np

__all__ = ["MAX_UINT64", "create_seeds", "uint64_to_two_uint32", "two_uint32_to_uint64"]

# The largest unsigned 64-bit integer: seeds are drawn from [0, MAX_UINT64].
MAX_UINT64 = 2**64 - 1

_UINT32_MAX = 2**32 - 1


def create_seeds(
    seed: int,
    offset: int = 0,
    batches_per_step: int = 1,
    gradient_accumulation_factor: int = 1,
    replicas: int = 1,
) -> np.ndarray:
    """Draw seed pairs for every batch, accumulation step and replica.

    Args:
        seed: the seed of ``np.random.default_rng(seed + offset)``.
        offset: added to ``seed`` (for example an epoch number).
        batches_per_step: leading dimension.
        gradient_accumulation_factor: second dimension.
        replicas: third dimension.

    Returns:
        A uint32 array of shape ``(batches_per_step, gradient_accumulation_factor,
        replicas, 2)`` with dimensions of size 1 squeezed out: ``(2,)`` by default.

    Raises:
        ValueError: ``seed + offset`` is negative (from numpy).
    """
    shape = (batches_per_step, gradient_accumulation_factor, replicas)
    rng = np.random.default_rng(seed + offset)
    draws = rng.integers(0, MAX_UINT64, size=int(np.prod(shape)), endpoint=True, dtype="uint64")
    pairs = [uint64_to_two_uint32(int(draw)) for draw in draws]
    return np.squeeze(np.array(pairs, dtype=np.uint32).reshape(*shape, 2))


def uint64_to_two_uint32(num: int) -> tuple[int, int]:
    """Split an unsigned 64-bit integer into its high and low 32-bit halves.

    Args:
        num: an int in [0, 2**64).

    Returns:
        ``(high, low)`` with ``num == high * 2**32 + low``.

    Raises:
        ValueError: ``num`` is out of range.
    """
    num = operator.index(num)
    if not 0 <= num <= MAX_UINT64:
        raise ValueError(f"Integer {num} out of range for uint64: expected 0 <= num < 2**64.")
    return num >> 32, num & _UINT32_MAX


def two_uint32_to_uint64(hi: int, lo: int) -> int:
    """Join high and low 32-bit halves into an unsigned 64-bit integer.

    Args:
        hi: the high half, an int in [0, 2**32).
        lo: the low half, an int in [0, 2**32).

    Returns:
        ``hi * 2**32 + lo``.

    Raises:
        ValueError: ``hi`` or ``lo`` is out of range.
    """
    for name, value in (("hi", operator.index(hi)), ("lo", operator.index(lo))):
        if not 0 <= value <= _UINT32_MAX:
            raise ValueError(
                f"Integer {name}={value} out of range for uint32: expected 0 <= {name} < 2**32."
            )
    return (operator.index(hi) << 32) | operator.index(lo)
