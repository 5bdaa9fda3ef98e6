"""Collectives for custom op lowerings, over the replicas of a replicated program.

A lowering runs once per replica (the Session maps it over the replica axis with
``vmap`` or ``shard_map``). These functions, called inside a lowering, communicate with
the other replicas of the same group. A group is given as a grouping's ``assignment``
(replica ``r`` is in group ``assignment[r]``), which an op keeps as a hashable
attribute: ``assignment_of(popxl.gcg().ir.replica_grouping(...))``. Outside a replicated
program (one replica) each is the identity of its single member.
"""

from __future__ import annotations

from typing import Any

import jax

from ipuxl.context import get_current_context
from ipuxl.ops.collectives.named_axis import Groups, gather, index_in_group, reduce
from ipuxl.popart.errors import popart_exception
from ipuxl.replica_grouping import PopartReplicaGrouping

__all__ = ["assignment_of", "all_reduce", "all_gather", "index_in_group_of", "replica_count",
           "popart_grouping_assignment"]


def assignment_of(grouping: Any, replicas: int | None = None) -> tuple[int, ...]:
    """The ``assignment`` tuple of a ``ReplicaGrouping`` (or of an assignment given as one)."""
    if isinstance(grouping, tuple):
        return grouping
    return tuple(int(g) for g in grouping.assignment)


def all_reduce(x: jax.Array, assignment: tuple[int, ...], op: str = "add") -> jax.Array:
    """``op`` ("add", "mean", "mul", "min", "max"...) of ``x`` over each replica's group."""
    return reduce(Groups(assignment), x, op)


def all_gather(x: jax.Array, assignment: tuple[int, ...]) -> jax.Array:
    """The group members' ``x`` stacked on a new axis 0, in replica order."""
    return gather(Groups(assignment), x)


def index_in_group_of(assignment: tuple[int, ...]) -> jax.Array:
    """This replica's index in its group (a scalar int32 while the program runs)."""
    return index_in_group(Groups(assignment))


def replica_count(assignment: tuple[int, ...]) -> int:
    """How many replicas a grouping's assignment covers."""
    return len(assignment)


def popart_grouping_assignment(op_type: str, group: Any) -> tuple[int, ...]:
    """The assignment of a PopART ``ReplicaGrouping`` (what C++ op bindings take) of the
    current Ir's replicas, checked: ``op_type`` names the op in errors.

    Raises:
        TypeError: ``group`` is not a PopART ReplicaGrouping.
        popart_exception: it is a grouping of another number of replicas.
    """
    if not isinstance(group, PopartReplicaGrouping):
        raise TypeError(
            f"{op_type}.createOpInGraph: `group` must be a popart ReplicaGrouping, got "
            f"{type(group).__name__} {group!r}. Pass `replica_grouping._pb_replica_grouping`."
        )
    replicas = get_current_context().graph.ir.replication_factor
    if group.getNumReplicas() != replicas:
        raise popart_exception(
            f"{op_type}: the replica grouping is of {group.getNumReplicas()} replicas, but "
            f"the Ir has replication_factor={replicas}. Make the grouping with "
            "`ir.replica_grouping(...)` after setting the replication factor."
        )
    return tuple(group.getGroupAt(r) for r in range(replicas))
