"""Seed derivation (PopXL's ``ops.random_seed``, not exported from ``popxl.ops``).

A seed tensor is uint32 ``(2,)``. ipuxl reads its two words as the key data of a JAX
threefry2x32 key, so every random op is a pure function of its seed: the same seed value
gives the same numbers, in the forward pass and when autodiff recomputes the op.

Example:
    >>> import ipuxl as popxl
    >>> from ipuxl.ops.random_seed import create_random_seed
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     seed = popxl.variable(popxl.create_seeds(0), popxl.uint32)
    ...     child = create_random_seed(seed, 1)
    >>> child.shape, child.dtype.name
    ((2,), 'uint32')
"""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl import dtypes
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.ops.type_rules import INT_DTYPES
from ipuxl.tensor import Tensor, TensorSpec
from ipuxl.tensor_factories import constant

__all__ = ["create_random_seed", "check_seed", "seed_key", "stream_id"]


def stream_id(name: str) -> np.uint32:
    """A fixed 32-bit number naming one stream of random numbers (an op kind).

    Folding it into a seed's key separates the streams: ``random_uniform`` and
    ``dropout`` on the same seed draw independent numbers.
    """
    return np.uint32(zlib.crc32(f"ipuxl.{name}".encode()))


def seed_key(seed: jax.Array, stream: np.uint32) -> jax.Array:
    """The threefry2x32 key of ``seed`` (uint32 ``(2,)``) for one stream."""
    key = jax.random.wrap_key_data(seed, impl="threefry2x32")
    return jax.random.fold_in(key, stream)


def check_seed(seed: Tensor) -> None:
    """Raise ``ValueError`` unless ``seed`` is a uint32 ``(2,)`` tensor."""
    if seed.shape != (2,) or seed.dtype != dtypes.uint32:
        raise ValueError(
            f"seed Tensor must be shape=(2,) dtype=uint32. Got `{seed.id}` with "
            f"shape={seed.shape} dtype={seed.dtype.name}. Make seeds from "
            "`popxl.create_seeds(...)` data (a variable or an h2d stream of dtype "
            "popxl.uint32), and derive new ones with `ops.split_random_seed`."
        )


_DERIVED = stream_id("create_random_seed")


def _create_rule(seed: Tensor, modifier: Tensor) -> list[TensorSpec]:
    # `create_random_seed` checks the seed before it makes the modifier constant.
    if modifier.nelms != 1 or modifier.dtype not in INT_DTYPES:
        raise ValueError(
            f"create_random_seed: the modifier must be an integer scalar. Got `{modifier.id}` "
            f"with shape={modifier.shape} dtype={modifier.dtype.name}. Pass a Python int "
            "or a uint32 scalar tensor."
        )
    return [TensorSpec((2,), dtypes.uint32)]


def _create(seed: jax.Array, modifier: jax.Array) -> jax.Array:
    key = jax.random.fold_in(seed_key(seed, _DERIVED), modifier.reshape(()).astype(jnp.uint32))
    return jax.random.key_data(key)


_CREATE_RANDOM_SEED = OpDef("create_random_seed", infer=_create_rule, lower=_create)


def create_random_seed(seed: Tensor, modifier: Tensor | int) -> Tensor:
    """A new seed derived from ``seed`` and ``modifier``.

    The result is a deterministic function of the two values: equal inputs give equal
    seeds, and different modifiers give unrelated seeds.

    Args:
        seed: a uint32 ``(2,)`` seed tensor.
        modifier: an integer scalar tensor, or a Python int (made a uint32 constant).

    Returns:
        A uint32 ``(2,)`` seed tensor.

    Raises:
        TypeError: ``seed`` is not a Tensor.
        ValueError: ``seed`` is not uint32 ``(2,)``, or ``modifier`` is not an integer
            scalar.
    """
    check_is_tensor("seed", seed)
    check_seed(seed)
    if not isinstance(modifier, Tensor):
        modifier = constant(modifier, dtypes.uint32, name="modifier")
    return _CREATE_RANDOM_SEED.apply({"seed": seed, "modifier": modifier})[0]
