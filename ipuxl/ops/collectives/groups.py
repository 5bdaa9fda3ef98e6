"""The arguments every collective op shares: the replica group and the reduction, checked
where they enter; and PopXL's legacy group types.

Example:
    >>> import ipuxl as popxl
    >>> ir = popxl.Ir(replication=4)
    >>> with ir.main_graph:
    ...     replica_assignment(ir.replica_grouping(group_size=2), "replicated_all_reduce")
    (0, 0, 1, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from ipuxl import dtypes
from ipuxl.context import get_current_context
from ipuxl.ops.collectives.named_axis import REDUCE_OPS
from ipuxl.ops.type_rules import FLOAT_DTYPES, NUMERIC_DTYPES, require_dtype
from ipuxl.replica_grouping import ReplicaGrouping
from ipuxl.tensor import Tensor

__all__ = ["CommGroup", "CommGroupType", "comm_group_to_replica_grouping",
           "replica_assignment", "reduce_op", "check_reduce_dtype"]


class CommGroupType(Enum):
    """How replicas are grouped for a collective (legacy PopART enum)."""

    All = 0
    Consecutive = 1
    Orthogonal = 2
    Ungrouped = 3

    def __int__(self) -> int:
        """PopART's enums convert to their value: ``int(CommGroupType.Consecutive)``."""
        return self.value


@dataclass(frozen=True)
class CommGroup:
    """A legacy collective group: its type and replica-group size."""

    type: CommGroupType = CommGroupType.All
    replicaGroupSize: int = 0  # noqa: N815 - PopART's name


def comm_group_to_replica_grouping(ir: Any, group: CommGroup, op: str) -> ReplicaGrouping:
    """The ReplicaGrouping a legacy ``CommGroup`` stands for: ``All`` one group of every
    replica, ``Consecutive`` groups of ``replicaGroupSize`` neighbours, ``Orthogonal``
    groups of ``replicaGroupSize`` replicas spaced ``R / size`` apart, ``Ungrouped`` one
    replica per group.

    Raises:
        ValueError: the group size does not divide the replication factor.
    """
    replicas = ir.replication_factor
    size = group.replicaGroupSize
    if group.type is CommGroupType.All:
        return ir.replica_grouping()
    if group.type is CommGroupType.Ungrouped:
        return ir.replica_grouping(group_size=1)
    if not isinstance(size, int) or size < 1 or replicas % size:
        raise ValueError(
            f"{op}: a {group.type.name} CommGroup needs a replicaGroupSize that divides the "
            f"replication factor {replicas}; got {size!r}."
        )
    if group.type is CommGroupType.Consecutive:
        return ir.replica_grouping(group_size=size)
    return ir.replica_grouping(stride=replicas // size, group_size=size)


def replica_assignment(group: Any, op: str) -> tuple[int, ...]:
    """The assignment (replica -> group) of a collective's ``group`` argument.

    Args:
        group: a constant :class:`~ipuxl.replica_grouping.ReplicaGrouping` of the current
            graph's Ir, a legacy :class:`CommGroup`, or None for one group of all replicas.
        op: the op, for messages.

    Raises:
        TypeError: ``group`` is not a ReplicaGrouping (a legacy ``CommGroup``, say).
        NotImplementedError: ``group`` is not a constant grouping.
        ValueError: ``group`` belongs to another Ir, or was made for another replication
            factor.
    """
    ir = get_current_context().graph.ir
    if group is None:
        return tuple(ir.replica_grouping().assignment)
    if isinstance(group, CommGroup):
        group = comm_group_to_replica_grouping(ir, group, op)
    if not isinstance(group, ReplicaGrouping):
        raise TypeError(
            f"{op}: `group` must be a popxl.ReplicaGrouping, a CommGroup or None (all "
            f"replicas), got "
            f"{type(group).__name__} {group!r}. Make one with "
            "`ir.replica_grouping(stride, group_size)`."
        )
    if not group.is_const:
        raise NotImplementedError(
            f"This ReplicaGrouping has a non-constant stride, which collectives do not "
            f"support: {op} got {group!r}. Use a grouping made with "
            "`ir.replica_grouping(stride, group_size)`, whose groups are evenly spaced."
        )
    group.check_belongs_to(ir, op)
    assignment = group.assignment
    return tuple(assignment)


def reduce_op(op: Any) -> str:
    """``op`` checked against PopXL's collective reductions.

    Raises:
        ValueError: ``op`` is not one of ``add``, ``mean``, ``mul``, ``min``, ``max``,
            ``and``, ``or`` or ``square_add``.
    """
    if not isinstance(op, str) or op not in REDUCE_OPS:
        raise ValueError(f"Not a valid op: {op!r}. Must choose from: {', '.join(REDUCE_OPS)}.")
    return op


def check_reduce_dtype(name: str, t: Tensor, op: str) -> None:
    """Raise ``popart_exception`` unless the reduction ``op`` takes ``t``'s dtype: ``and``
    and ``or`` take bool, ``mean`` floating point, the others any number."""
    if op in ("and", "or"):
        require_dtype(name, t, (dtypes.bool,), f"a bool tensor for op={op!r}")
    elif op == "mean":
        require_dtype(name, t, FLOAT_DTYPES, "a floating point tensor for op='mean'")
    else:
        require_dtype(name, t, NUMERIC_DTYPES, f"a numeric tensor for op={op!r}")
