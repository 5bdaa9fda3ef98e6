"""The replica axis: how the lowered step sees replication.

A replicated program is lowered once, for one replica, and the Session maps that function
over a named axis, :data:`REPLICA_AXIS`, with ``jax.vmap`` (one device) or ``shard_map``
(one device per replica). Ops that talk across replicas (collectives) lower to JAX's
named-axis collectives on that axis, which mean the same under both mappings; an op
outside any replicated program sees no such axis (:func:`replica_count` is 1).

Example:
    >>> import jax, jax.numpy as jnp
    >>> jax.vmap(lambda x: replica_index() + 0 * x, axis_name=REPLICA_AXIS)(jnp.zeros(3))
    Array([0., 1., 2.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

import jax
from jax import lax

__all__ = ["REPLICA_AXIS", "replica_index", "replica_count"]

REPLICA_AXIS = "replica"


def replica_count() -> int:
    """How many replicas the function being traced runs on (1 outside replication)."""
    try:
        return int(lax.axis_size(REPLICA_AXIS))
    except (NameError, KeyError, ValueError):
        return 1


def replica_index() -> Any:
    """The index of the replica running this code, as a traced int32 (0 without
    replication)."""
    if replica_count() == 1:
        return jax.numpy.int32(0)
    return lax.axis_index(REPLICA_AXIS)
