"""Collectives within replica groups, on the replica axis: the building blocks of the
collective ops' lowerings.

A replicated program is lowered once, for one replica, and mapped over
:data:`~ipuxl.replica_axis.REPLICA_AXIS` with ``jax.vmap`` or ``shard_map``. The functions
here run inside that per-replica function. Each takes a :class:`Groups`, the static
grouping (which group each replica is in), and means the same under both mappings.

JAX's ``axis_index_groups`` would describe a grouping, but ``vmap`` does not support it.
So a grouped collective gathers every replica's value (``lax.all_gather``) and picks the
members of its own group, in replica order; the common groupings take a direct path: one
group of all replicas uses ``lax.psum``/``pmax``/``all_gather`` as they are, and one
replica per group (or no replication at all) needs no communication.

Example:
    >>> import jax, jax.numpy as jnp
    >>> groups = Groups((0, 0, 1, 1))
    >>> jax.vmap(lambda x: reduce(groups, x, "add"), axis_name=REPLICA_AXIS)(
    ...     jnp.array([1.0, 2.0, 3.0, 4.0]))
    Array([3., 3., 7., 7.], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl.replica_axis import REPLICA_AXIS, replica_count

__all__ = ["REDUCE_OPS", "Groups", "index_in_group", "gather", "reduce", "reduce_stacked",
           "reduction_grad"]

# PopXL's CollectiveOperator names, in its order.
REDUCE_OPS = ("add", "mean", "mul", "min", "max", "and", "or", "square_add")

# Each reduction over the stacked values of a group's members (axis 0).
_STACKED: dict[str, Callable[[jax.Array], jax.Array]] = {
    "add": lambda xs: jnp.sum(xs, axis=0, dtype=xs.dtype),
    "mean": lambda xs: jnp.mean(xs, axis=0, dtype=xs.dtype),
    "mul": lambda xs: jnp.prod(xs, axis=0, dtype=xs.dtype),
    "min": lambda xs: jnp.min(xs, axis=0),
    "max": lambda xs: jnp.max(xs, axis=0),
    "and": lambda xs: jnp.all(xs, axis=0),
    "or": lambda xs: jnp.any(xs, axis=0),
}


@dataclass(frozen=True)
class Groups:
    """A static grouping of the replicas: replica ``r`` is in group ``assignment[r]``.

    The groups are equal in size and numbered in order of their first replica (a
    :class:`~ipuxl.replica_grouping.ReplicaGrouping`'s ``assignment``). A replica's *index
    in its group* counts the group's replicas in increasing order.
    """

    assignment: tuple[int, ...]

    @property
    def replicas(self) -> int:
        return len(self.assignment)

    @property
    def size(self) -> int:
        """The number of replicas in each group (G)."""
        return self.assignment.count(0)

    @cached_property
    def members(self) -> np.ndarray:
        """``members[g]``: the replicas of group ``g`` in increasing order, ``[groups, G]``."""
        count = self.replicas // self.size
        return np.array([[r for r, g in enumerate(self.assignment) if g == group]
                         for group in range(count)], np.int32)

    @cached_property
    def index(self) -> np.ndarray:
        """``index[r]``: replica ``r``'s index in its group, ``[R]``."""
        ranks = np.zeros(self.replicas, np.int32)
        for row in self.members:
            ranks[row] = np.arange(len(row))
        return ranks

    def check_mapped(self, op: str) -> None:
        """Raise unless the function being traced runs on this grouping's replicas.

        Raises:
            ValueError: the replica axis is not bound (the program was not mapped over its
                replicas), or it has another size than the grouping's replica count.
        """
        if self.replicas == 1:
            return
        mapped = replica_count()
        if mapped != self.replicas:
            where = (f"over {mapped} replicas" if mapped > 1
                     else f"without the replica axis {REPLICA_AXIS!r}")
            raise ValueError(
                f"{op}: the op was built for {self.replicas} replicas but is being lowered "
                f"{where}. A replicated program runs through `popxl.Session`, which maps it "
                f"over its replicas; to lower one op by hand, map it yourself: "
                f"`jax.vmap(f, axis_name={REPLICA_AXIS!r})` over {self.replicas} replicas."
            )


def index_in_group(groups: Groups) -> jax.Array:
    """This replica's index in its group (a traced int32)."""
    if groups.size == 1:
        return jnp.int32(0)
    if groups.size == groups.replicas:
        return lax.axis_index(REPLICA_AXIS)
    return jnp.asarray(groups.index)[lax.axis_index(REPLICA_AXIS)]


def gather(groups: Groups, x: jax.Array) -> jax.Array:
    """The values of this replica's group, stacked in replica order: ``[G, *x.shape]``."""
    if groups.size == 1:
        return x[None]
    everyone = lax.all_gather(x, REPLICA_AXIS)
    if groups.size == groups.replicas:
        return everyone
    group = jnp.asarray(groups.assignment, jnp.int32)[lax.axis_index(REPLICA_AXIS)]
    return jnp.take(everyone, jnp.asarray(groups.members)[group], axis=0)


def reduce(groups: Groups, x: jax.Array, op: str) -> jax.Array:
    """The reduction ``op`` (one of :data:`REDUCE_OPS`) of ``x`` over this replica's group.

    ``square_add`` is the sum of the squares; ``and`` and ``or`` take bool values.
    """
    if op == "square_add":
        return reduce(groups, x * x, "add")
    if groups.size == 1:
        return x
    if groups.size == groups.replicas:
        if op == "add":
            return lax.psum(x, REPLICA_AXIS)
        if op == "mean":
            return lax.pmean(x, REPLICA_AXIS)
        if op in ("min", "and"):
            return _as(lax.pmin(_comparable(x), REPLICA_AXIS), x)
        if op in ("max", "or"):
            return _as(lax.pmax(_comparable(x), REPLICA_AXIS), x)
    return reduce_stacked(gather(groups, x), op)


def reduce_stacked(stacked: jax.Array, op: str) -> jax.Array:
    """The reduction ``op`` of ``stacked`` over its first axis (the members' values)."""
    if op == "square_add":
        return _STACKED["add"](stacked * stacked)
    return _STACKED[op](stacked)


def reduction_grad(groups: Groups, op: str, x: jax.Array, y: jax.Array | None,
                   total: jax.Array) -> jax.Array:
    """The gradient of this replica's ``x`` in ``y = reduce(groups, x, op)``, a value that
    every member of the group shares, given ``total``, the gradient of that shared value
    (for an all-reduce, the sum of the members' output gradients).

    Args:
        groups: the grouping.
        op: a floating point reduction (not ``and``/``or``).
        x: this replica's input; read by ``square_add``, ``mul``, ``min`` and ``max``.
        y: the reduction; read by ``min`` and ``max`` (None for the others).
        total: the gradient of the reduced value.

    Returns:
        The gradient of ``x``. Ties of ``min``/``max`` share the gradient equally.
    """
    if op == "add":
        return total
    if op == "mean":
        return total / groups.size
    if op == "square_add":
        return 2 * x * total
    stacked = gather(groups, x)
    if op == "mul":
        # The product of the other members: the products before and after each member.
        ones = jnp.ones_like(stacked[:1])
        before = jnp.cumprod(jnp.concatenate([ones, stacked[:-1]]), axis=0)
        after = jnp.flip(jnp.cumprod(jnp.concatenate([ones, jnp.flip(stacked[1:], 0)]),
                                     axis=0), 0)
        return total * jnp.take(before * after, index_in_group(groups), axis=0)
    ties = jnp.sum(stacked == y, axis=0, dtype=x.dtype)
    return jnp.where(x == y, total / ties, jnp.zeros_like(total))


def _comparable(x: jax.Array) -> jax.Array:
    # pmin/pmax take numbers; a bool's min is its AND, its max its OR.
    return x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x


def _as(result: jax.Array, x: jax.Array) -> jax.Array:
    return result.astype(x.dtype)
