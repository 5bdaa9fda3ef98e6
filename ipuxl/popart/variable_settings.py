"""PopART's ``VariableSettings``: which replicas share a weight, and how many copies
``get_tensor_data`` returns.

A setting names its groups one of two ways, as PopART's does:

* a stride and a group size (what ``popxl.ReplicaGrouping._to_variable_settings`` makes):
  with ``R`` replicas, replica ``r`` is in group ``r % stride + stride * (r // (stride *
  group_size))``;
* a legacy :class:`~ipuxl.ops.collectives.groups.CommGroup` (``All``, ``Consecutive``,
  ``Orthogonal``, ``Ungrouped``) and its ``replicaGroupSize``.

Example:
    >>> from ipuxl.popart.variable_settings import VariableSettings
    >>> VariableSettings(2, 2).groups(8)
    [[0, 2], [1, 3], [4, 6], [5, 7]]
"""

from __future__ import annotations

from typing import Any

from ipuxl.ops.collectives.groups import CommGroup, CommGroupType
from ipuxl.popart.errors import popart_exception

__all__ = ["VariableSettings"]


def _retrieval_modes() -> Any:
    from ipuxl.popart import VariableRetrievalMode

    return VariableRetrievalMode


class VariableSettings:
    """How a weight is shared across replicas (PopART's ``VariableSettings``).

    Constructed as PopART's is: ``VariableSettings()`` (one group of all replicas),
    ``VariableSettings(commGroup)``, ``VariableSettings(retrievalMode)``,
    ``VariableSettings(commGroup, retrievalMode)``, ``VariableSettings(stride, groupSize)``
    or ``VariableSettings(stride, groupSize, retrievalMode)``; the keywords
    ``sharedVariableDomain=`` and ``retrievalMode=`` are accepted too. The retrieval mode
    defaults to ``OnePerGroup``.

    Raises:
        popart_exception: a stride or group size below 1, or arguments of no PopART form.
    """

    def __init__(self, *args: Any, sharedVariableDomain: Any = None,  # noqa: N803
                 retrievalMode: Any = None) -> None:  # noqa: N803 - PopART's names
        modes = _retrieval_modes()
        self._use_comm_group = True
        self._comm_group = CommGroup() if sharedVariableDomain is None else sharedVariableDomain
        self._stride = self._group_size = 0
        mode = retrievalMode
        if args and isinstance(args[-1], modes) and mode is None:
            mode, args = args[-1], args[:-1]
        if len(args) == 1 and isinstance(args[0], CommGroup):
            self._comm_group = args[0]
        elif len(args) == 2 and all(isinstance(a, int) and not isinstance(a, bool)
                                    for a in args):
            self._use_comm_group = False
            self._stride, self._group_size = args
            if self._stride < 1 or self._group_size < 1:
                raise popart_exception(
                    f"VariableSettings: the stride and group size must be 1 or more; got "
                    f"stride={self._stride}, groupSize={self._group_size}. Use a "
                    "popxl.ReplicaGrouping's `stride` and `group_size`."
                )
        elif args:
            raise popart_exception(
                f"VariableSettings takes (), (CommGroup), (stride, groupSize), each with an "
                f"optional VariableRetrievalMode last; got {args!r}."
            )
        self._retrieval_mode = modes.OnePerGroup if mode is None else mode

    # ----------------------------------------------------------------- PopART's reads
    def isUsingCommGroup(self) -> bool:  # noqa: N802 - PopART's names, here and below
        """Whether the groups are given by a CommGroup (else by stride and group size)."""
        return self._use_comm_group

    def getSharedVariableDomain(self) -> CommGroup:  # noqa: N802
        """The CommGroup of these settings.

        Raises:
            popart_exception: the settings were made from a stride and group size.
        """
        if not self._use_comm_group:
            raise popart_exception(
                "VariableSettings.getSharedVariableDomain: these settings were not made "
                f"from a CommGroup but from stride={self._stride}, "
                f"groupSize={self._group_size}. Read getStride() and getGroupSize()."
            )
        return self._comm_group

    def getCommGroupType(self) -> CommGroupType:  # noqa: N802
        return self._comm_group.type

    def getRetrievalMode(self) -> Any:  # noqa: N802
        return self._retrieval_mode

    def getStride(self, replicaCount: int | None = None) -> int:  # noqa: N802,N803
        """The stride given (no argument), or the stride of the groups of
        ``replicaCount`` replicas."""
        if replicaCount is None:
            return self._stride
        groups = self.groups(replicaCount)
        return groups[0][1] - groups[0][0] if len(groups[0]) > 1 else 1

    def getGroupSize(self) -> int:  # noqa: N802
        """The group size given (a CommGroup's ``replicaGroupSize``; 0 means all)."""
        return self._group_size if not self._use_comm_group else self._comm_group.replicaGroupSize

    def getRealGroupSize(self, replicaCount: int) -> int:  # noqa: N802,N803
        return len(self.groups(replicaCount)[0])

    def getGroupCount(self, replicaCount: int) -> int:  # noqa: N802,N803
        return len(self.groups(replicaCount))

    def numReplicasReturningVariable(self, replicaCount: int) -> int:  # noqa: N802,N803
        """``replicaCount`` with ``AllReplicas`` retrieval, else one per group."""
        if self._retrieval_mode == _retrieval_modes().AllReplicas:
            return replicaCount
        return self.getGroupCount(replicaCount)

    def getGroupRepresentative(self, group: int) -> int:  # noqa: N802
        """The first replica of ``group`` (group ``g`` of stride ``s`` and size ``n``
        starts at ``(g // s) * s * n + g % s``)."""
        if not self._use_comm_group:
            stride, size = self._stride, self._group_size
            return (group // stride) * stride * size + group % stride
        kind, size = self._comm_group.type, self._comm_group.replicaGroupSize
        if kind is CommGroupType.All:
            return 0
        return group * size if kind is CommGroupType.Consecutive else group

    def groups(self, replicaCount: int) -> list[list[int]]:  # noqa: N803
        """The replicas of each group, groups in the order of their first replica.

        Raises:
            popart_exception: the groups do not tile ``replicaCount`` replicas.
        """
        replicas = int(replicaCount)
        stride, size = self._stride_and_size(replicas)
        if replicas < 1 or size < 1 or replicas % (stride * size):
            raise popart_exception(
                f"VariableSettings: groups of {size} replicas {stride} apart do not tile "
                f"{replicas} replicas. Use a group size and stride whose product divides "
                "the replication factor."
            )
        return [[start + stride * k for k in range(size)]
                for block in range(0, replicas, stride * size)
                for start in range(block, block + stride)]

    def shapeOnReplica(self, shape: Any, replicaCount: int, name: str = "") -> list[int]:  # noqa: N802,N803
        """The host shape without its group dimension (there is one only with several
        groups).

        Raises:
            popart_exception: with several groups, the first dimension is not their count.
        """
        count = self.getGroupCount(replicaCount)
        shape = list(shape)
        if count == 1:
            return shape
        if not shape or shape[0] != count:
            raise popart_exception(
                f"Tensor {name!r} of host shape {tuple(shape)} must have its {count} groups "
                "as its first dimension. Give one value per group."
            )
        return shape[1:]

    def shapeOnHost(self, shape: Any, replicaCount: int) -> list[int]:  # noqa: N802,N803
        """The replica shape with the group dimension added when there are several."""
        count = self.getGroupCount(replicaCount)
        return list(shape) if count == 1 else [count, *shape]

    def _stride_and_size(self, replicas: int) -> tuple[int, int]:
        if not self._use_comm_group:
            return self._stride, self._group_size
        kind, size = self._comm_group.type, self._comm_group.replicaGroupSize
        if kind is CommGroupType.Ungrouped or size == 1:  # PopART: a group per replica
            return 1, 1
        if kind is CommGroupType.All or size == 0:
            return 1, replicas
        if kind is CommGroupType.Consecutive:
            return 1, size
        return max(replicas // max(size, 1), 1), size

    # ----------------------------------------------------------------- dunder
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VariableSettings):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple:
        return (self._use_comm_group, self._comm_group if self._use_comm_group else None,
                self._stride, self._group_size, self._retrieval_mode)

    def __repr__(self) -> str:
        domain = (f"{self._comm_group.type.name}, {self._comm_group.replicaGroupSize}"
                  if self._use_comm_group else f"stride={self._stride}, "
                  f"groupSize={self._group_size}")
        return f"VariableSettings([{domain}], {self._retrieval_mode.name})"
