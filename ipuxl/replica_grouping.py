"""Replica groupings: which replicas share one value of a variable (spec §13.2, §13.3).

A grouping partitions the R replicas of an :class:`~ipuxl.ir.Ir` into ``num_groups`` groups of
``group_size`` replicas each. Its ``assignment`` lists, for each replica, the index of its
group. A *constant* grouping is described by a ``stride``: each new group starts at the first
unassigned replica and takes every ``stride``-th replica, ``group_size`` times, which is

    group(r) = r % stride + stride * (r // (stride * group_size))

Any other partition into equal groups, made with ``ir.replica_grouping_from_assignments``, is
*non-constant*: it has no stride, and PopXL describes its storage with ``const_rg``, a constant
grouping whose groups each lie inside one of its groups (see :attr:`const_rg`).

:class:`PopartReplicaGrouping` is PopART's C++ ``ReplicaGrouping`` (a constant grouping as
``numReplicas``, ``stride``, ``groupSize``), which ``_pb_replica_grouping`` gives.

Example:
    >>> import ipuxl as popxl
    >>> ir = popxl.Ir(replication=8)
    >>> ir.replica_grouping(stride=2, group_size=2).assignment
    [0, 1, 0, 1, 2, 3, 2, 3]
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ipuxl.ir import Ir

__all__ = ["ReplicaGrouping", "PopartReplicaGrouping"]

_CONSTRUCTOR_ERROR = (
    "popxl.ReplicaGrouping cannot be constructed directly (use `ir.replica_grouping`)."
)


class ReplicaGrouping:
    """A partition of an IR's replicas into equal-size groups.

    Create one with ``ir.replica_grouping(stride, group_size)`` or
    ``ir.replica_grouping_from_assignments(assignment)``; the constructor raises.

    Example:
        >>> ir = popxl.Ir(replication=4)
        >>> rg = ir.replica_grouping(group_size=2)
        >>> rg
        ReplicaGrouping(num_replicas=4, stride=1, group_size=2, num_groups=2)
        >>> rg.transpose().assignment
        [0, 1, 0, 1]
    """

    __slots__ = ("_ir", "_num_replicas", "_assignment", "_stride", "_group_size", "_const")

    _ir: Ir
    _num_replicas: int
    _assignment: tuple[int, ...]
    _stride: int | None  # None for a non-constant grouping.
    _group_size: int
    # (const_rg, to_device_map, to_host_map) of a non-constant grouping, computed on first use.
    _const: tuple[ReplicaGrouping, list[int], list[int]] | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(_CONSTRUCTOR_ERROR)

    # ------------------------------------------------------------------ creation
    @classmethod
    def _create(
        cls, ir: Ir, num_replicas: int, assignment: Sequence[int], stride: int | None
    ) -> ReplicaGrouping:
        """Build a grouping from an already validated assignment (no checks)."""
        self = object.__new__(cls)
        self._ir = ir
        self._num_replicas = num_replicas
        self._assignment = tuple(assignment)
        self._stride = stride
        self._group_size = self._assignment.count(0)
        self._const = None
        return self

    @classmethod
    def _from_stride(
        cls, ir: Ir, stride: int = 1, group_size: int | None = None
    ) -> ReplicaGrouping:
        """The constant grouping behind ``ir.replica_grouping(stride, group_size)``.

        Args:
            ir: the IR; only its ``replication_factor`` (R) is read.
            stride: the distance between consecutive replicas of a group.
            group_size: replicas per group; defaults to ``R // stride``.

        Returns:
            The grouping with ``group(r) = r % stride + stride * (r // (stride * group_size))``.

        Raises:
            TypeError: if ``stride`` or ``group_size`` is not an integer.
            ValueError: if ``stride`` is not in ``1..R`` or does not divide R, if
                ``group_size`` is not in ``1..R``, or if ``stride * group_size`` does not
                divide R.

        Example:
            >>> ir = popxl.Ir(replication=8)
            >>> ir.replica_grouping(stride=4, group_size=2).assignment
            [0, 1, 2, 3, 0, 1, 2, 3]
        """
        num_replicas = int(ir.replication_factor)
        stride = _as_int("stride", stride)
        if not 0 < stride <= num_replicas:
            raise ValueError(
                "Stride must be greater than zero and less than or equal to number of replicas "
                f"({num_replicas}). Got stride={stride}."
            )
        if num_replicas % stride != 0:
            raise ValueError(
                f"Stride must be a factor of the number of replicas ({num_replicas}). "
                f"Got stride={stride}; valid strides are {_divisors(num_replicas)}."
            )
        group_size = num_replicas // stride if group_size is None else group_size
        group_size = _as_int("group_size", group_size)
        if not 0 < group_size <= num_replicas:
            raise ValueError(
                "Group size must be greater than zero and less than or equal to number of "
                f"replicas ({num_replicas}). Got group_size={group_size}."
            )
        if group_size == 1:
            # A one-replica group has no second member, so the stride is meaningless.
            stride = 1
        if num_replicas % (stride * group_size) != 0:
            # PopXL only finds this in its C++ layer, later; checking here names the arguments.
            raise ValueError(
                "stride * group_size must be a factor of the number of replicas "
                f"({num_replicas}), because the groups tile blocks of stride * group_size "
                f"consecutive replicas. Got stride={stride}, group_size={group_size} "
                f"(product {stride * group_size}). With stride={stride} the valid group sizes "
                f"are {_divisors(num_replicas // stride)}."
            )
        assignment = _strided_assignment(num_replicas, stride, group_size)
        return cls._create(ir, num_replicas, assignment, stride)

    @classmethod
    def _from_assignments(cls, ir: Ir, assignment: Sequence[int]) -> ReplicaGrouping:
        """The grouping behind ``ir.replica_grouping_from_assignments(assignment)``.

        Args:
            ir: the IR; only its ``replication_factor`` (R) is read.
            assignment: for each replica ``r`` in ``0..R-1``, the index of its group.

        Returns:
            The equivalent constant grouping if every group is evenly spaced with the same
            stride (and so matches the strided rule), otherwise a non-constant grouping.

        Raises:
            TypeError: if an entry is not an integer.
            ValueError: if ``len(assignment) != R``; if the groups are not numbered
                ``0..k-1``; if group numbers do not first appear in increasing order; or if
                the groups differ in size.

        Example:
            >>> ir = popxl.Ir(replication=4)
            >>> ir.replica_grouping_from_assignments([0, 1, 0, 1])
            ReplicaGrouping(num_replicas=4, stride=2, group_size=2, num_groups=2)
            >>> ir.replica_grouping_from_assignments([0, 1, 1, 0])
            ReplicaGrouping(assignment=[0, 1, 1, 0])
        """
        return cls._checked_assignment(ir, int(ir.replication_factor), assignment)

    @classmethod
    def _checked_assignment(
        cls, ir: Ir, num_replicas: int, assignment: Sequence[int]
    ) -> ReplicaGrouping:
        """``_from_assignments`` for a given R (derived groupings keep their source's R)."""
        assignment = [_as_int(f"assignment[{r}]", group) for r, group in enumerate(assignment)]
        if len(assignment) != num_replicas:
            raise ValueError(
                "The assignment must give a group for every replica: its length must equal the "
                f"number of replicas ({num_replicas}). Got {len(assignment)} entries: "
                f"{assignment}."
            )
        num_groups = max(assignment) + 1
        if min(assignment) < 0 or set(assignment) != set(range(num_groups)):
            raise ValueError(
                f"The groups must be numbered 0..k-1 with every number used. Got {assignment}, "
                f"which uses {sorted(set(assignment))}."
            )
        first_seen = list(dict.fromkeys(assignment))
        if first_seen != sorted(first_seen):
            raise ValueError(
                "Group numbers must increase in order of first appearance (the first replica "
                f"is in group 0, the next new group is 1, and so on). Got {assignment}, where "
                f"the groups first appear in the order {first_seen}. Renumber them: "
                f"{_renumbered(assignment)}."
            )
        sizes = [assignment.count(group) for group in range(num_groups)]
        if len(set(sizes)) != 1:
            raise ValueError(
                f"All groups must have the same size. Got {assignment}, whose group sizes are "
                f"{dict(enumerate(sizes))}."
            )
        group_size = sizes[0]
        stride = _common_stride(assignment, num_groups)
        # Equal gaps should force the strided layout; comparing makes sure (and checks R).
        if stride is not None:
            if _strided_assignment(num_replicas, stride, group_size) != assignment:
                stride = None
        return cls._create(ir, num_replicas, assignment, stride)

    # ------------------------------------------------------------------ members
    @property
    def stride(self) -> int:
        """The distance between consecutive replicas of a group (1 when ``group_size == 1``).

        Raises:
            NotImplementedError: for a non-constant grouping, which has no single stride.
        """
        if self._stride is None:
            raise NotImplementedError(
                f"{self!r} is not a constant grouping, so it has no stride. Use `assignment`, "
                "or `const_rg` for the constant grouping it is stored with."
            )
        return self._stride

    @property
    def group_size(self) -> int:
        """The number of replicas in each group."""
        return self._group_size

    @property
    def num_groups(self) -> int:
        """The number of groups, ``R // group_size``."""
        return self._num_replicas // self._group_size

    @property
    def assignment(self) -> list[int]:
        """A new list giving, for each replica in order, the index of its group.

        Example:
            >>> popxl.Ir(replication=8).replica_grouping(stride=2, group_size=4).assignment
            [0, 1, 0, 1, 0, 1, 0, 1]
        """
        return list(self._assignment)

    @property
    def is_const(self) -> bool:
        """Whether the grouping follows the strided rule (always true unless made from an
        assignment that does not)."""
        return self._stride is not None

    @property
    def const_rg(self) -> ReplicaGrouping:
        """The constant grouping that describes how a variable with this grouping is stored.

        For a constant grouping this is ``self``. For a non-constant one it is PopXL's
        choice: the stride is the smallest gap between consecutive replicas of one group;
        each group is cut wherever two consecutive members are further apart; the group
        size is the greatest common divisor of the pieces' sizes (stride 1 when that is 1).
        Each of its groups lies inside one group of ``self``.

        Example:
            >>> rg = popxl.Ir(replication=8).replica_grouping_from_assignments(
            ...     [0, 0, 1, 1, 1, 1, 0, 0])
            >>> rg.const_rg
            ReplicaGrouping(num_replicas=8, stride=1, group_size=2, num_groups=4)
        """
        return self._const_maps()[0]

    @property
    def to_device_map(self) -> list[int] | None:
        """For each group ``c`` of ``const_rg``, the group of ``self`` that contains it;
        None for a constant grouping (PopXL's value: there is nothing to map).

        Host data ``data`` of shape ``(self.num_groups, *shape)`` in the user's numbering
        becomes ``data[to_device_map]``, of shape ``(const_rg.num_groups, *shape)`` in
        ``const_rg``'s numbering, when written; replica ``r`` then receives
        ``data[to_device_map][const_rg.assignment[r]] == data[self.assignment[r]]``.

        Example:
            >>> rg = popxl.Ir(replication=8).replica_grouping_from_assignments(
            ...     [0, 0, 1, 1, 1, 1, 0, 0])
            >>> rg.to_device_map
            [0, 1, 1, 0]
        """
        return None if self.is_const else list(self._const_maps()[1])

    @property
    def to_host_map(self) -> list[int] | None:
        """For each group ``u`` of ``self``, the group of ``const_rg`` holding its first
        replica; None for a constant grouping.

        Stored data ``stored`` of shape ``(const_rg.num_groups, *shape)`` in ``const_rg``'s
        numbering becomes ``stored[to_host_map]``, of shape ``(self.num_groups, *shape)`` in the
        user's numbering, when read; so ``data[to_device_map][to_host_map] == data``. Taking the
        first replica's group matches ``one_per_group`` retrieval (spec §13.3).

        Example:
            >>> rg = popxl.Ir(replication=8).replica_grouping_from_assignments(
            ...     [0, 0, 1, 1, 1, 1, 0, 0])
            >>> rg.to_host_map
            [0, 1]
        """
        return None if self.is_const else list(self._const_maps()[2])

    @property
    def _pb_replica_grouping(self) -> PopartReplicaGrouping:
        """This grouping as PopART's C++ ``ReplicaGrouping``.

        Raises:
            NotImplementedError: a non-constant grouping (PopART has no form for it).
        """
        return PopartReplicaGrouping(self._num_replicas, self.stride, self._group_size)

    def check_belongs_to(self, ir: Ir, what: str) -> None:
        """Refuse this grouping in ``ir`` unless ``ir`` made it for its current replication
        factor. Groupings never cross Irs: a variable's and a collective's group are
        replicas of the Ir being built, and a grouping counts the replicas it was made for.

        Args:
            ir: the Ir the grouping is used in (the current graph's).
            what: the function or op using it, for the message (``"popxl.variable"``).

        Raises:
            ValueError: the grouping is for another replication factor, or another Ir.

        Example:
            >>> other = popxl.Ir(replication=4)
            >>> other.replica_grouping(group_size=2).check_belongs_to(popxl.Ir(replication=2),
            ...                                                      "popxl.variable")
            Traceback (most recent call last):
            ...
            ValueError: popxl.variable: the replica grouping ReplicaGrouping(num_replicas=4, stride=1, group_size=2, num_groups=2) is for 4 replicas, but the Ir has replication_factor=2. Make the grouping after setting the replication factor.
        """
        if self._num_replicas != ir.replication_factor:
            raise ValueError(
                f"{what}: the replica grouping {self!r} is for {self._num_replicas} replicas, "
                f"but the Ir has replication_factor={ir.replication_factor}. Make the grouping "
                "after setting the replication factor."
            )
        if self._ir is not ir:
            raise ValueError(
                f"{what}: the replica grouping {self!r} belongs to another Ir, and the current "
                f"graph is in {ir!r}. Groupings cannot cross Irs: make it with "
                "`ir.replica_grouping(stride, group_size)` of the Ir you are building."
            )

    def transpose(self) -> ReplicaGrouping:
        """The grouping whose group ``i`` holds the ``i``-th replica of every group of ``self``.

        It has ``num_groups`` replicas per group and ``group_size`` groups.

        Returns:
            A constant grouping when the result follows the strided rule, else a non-constant one.

        Example:
            >>> ir = popxl.Ir(replication=4)
            >>> ir.replica_grouping(group_size=4).transpose().assignment
            [0, 1, 2, 3]
        """
        seen_per_group = [0] * self.num_groups
        transposed = []
        for group in self._assignment:
            # Replicas come in increasing order, so this is the replica's rank in its group.
            transposed.append(seen_per_group[group])
            seen_per_group[group] += 1
        # Numbered by rank, the new groups first appear in increasing order, as required.
        return ReplicaGrouping._checked_assignment(self._ir, self._num_replicas, transposed)

    def _to_variable_settings(self, retrieval_mode: str | None = None) -> Any:
        """This grouping as PopART's ``popart.VariableSettings`` (its stride and group
        size), with ``retrieval_mode`` (``"one_per_group"``, the default, or
        ``"all_replicas"``) as its ``VariableRetrievalMode``.

        Raises:
            NotImplementedError: a non-constant grouping (PopART has no form for it).
            ValueError: an unknown ``retrieval_mode``.
        """
        from ipuxl.popart import VariableRetrievalMode
        from ipuxl.popart.variable_settings import VariableSettings

        modes = {None: VariableRetrievalMode.OnePerGroup,
                 "one_per_group": VariableRetrievalMode.OnePerGroup,
                 "all_replicas": VariableRetrievalMode.AllReplicas}
        if retrieval_mode not in modes:
            raise ValueError(
                f"Invalid retrieval_mode: {retrieval_mode!r}. Use \"one_per_group\" or "
                "\"all_replicas\"."
            )
        return VariableSettings(self.stride, self.group_size, modes[retrieval_mode])

    def __repr__(self) -> str:
        if self._stride is None:
            return f"ReplicaGrouping(assignment={list(self._assignment)})"
        return (
            f"ReplicaGrouping(num_replicas={self._num_replicas}, stride={self._stride}, "
            f"group_size={self._group_size}, num_groups={self.num_groups})"
        )

    def __eq__(self, other: object) -> bool:
        """Same IR (by identity) and same assignment.

        Raises:
            TypeError: if ``other`` is not a :class:`ReplicaGrouping`.
        """
        if not isinstance(other, ReplicaGrouping):
            raise TypeError(
                "Value must be of type popxl.ReplicaGrouping. "
                f"Type: {type(other).__name__}. Value: {other!r}."
            )
        return self._ir is other._ir and self._assignment == other._assignment

    def __hash__(self) -> int:
        return hash((id(self._ir), self._assignment))

    # ------------------------------------------------------------------ helpers
    def _const_maps(self) -> tuple[ReplicaGrouping, list[int], list[int]]:
        if self._stride is not None:
            identity = list(range(self.num_groups))
            return self, identity, identity
        if self._const is None:
            const_rg = self._constant_refinement()
            const_assignment = const_rg._assignment
            to_device_map = [0] * const_rg.num_groups
            for replica, const_group in enumerate(const_assignment):
                to_device_map[const_group] = self._assignment[replica]
            to_host_map = [
                const_assignment[self._assignment.index(u)] for u in range(self.num_groups)
            ]
            self._const = (const_rg, to_device_map, to_host_map)
        return self._const

    def _constant_refinement(self) -> ReplicaGrouping:
        """``const_rg`` of a non-constant grouping (the rule its docstring gives)."""
        members: list[list[int]] = [[] for _ in range(self.num_groups)]
        for replica, group in enumerate(self._assignment):
            members[group].append(replica)
        gaps = [[b - a for a, b in zip(group, group[1:])] for group in members]
        stride = min(gap for group in gaps for gap in group)
        piece_sizes = []
        for group_gaps in gaps:
            size = 1
            for gap in group_gaps:
                if gap > stride:
                    piece_sizes.append(size)
                    size = 0
                size += 1
            piece_sizes.append(size)
        group_size = functools.reduce(math.gcd, piece_sizes)
        stride = stride if group_size > 1 else 1
        assignment = _strided_assignment(self._num_replicas, stride, group_size)
        return ReplicaGrouping._create(self._ir, self._num_replicas, assignment, stride)


class PopartReplicaGrouping:
    """PopART's C++ ``ReplicaGrouping`` (``popart._internal.ir.ReplicaGrouping``): a constant
    grouping of ``numReplicas`` replicas as a stride and a group size (all replicas in one
    group when only ``numReplicas`` is given). Group and replica numbers follow the strided
    rule of this module. Groups of one replica have stride 1, as in PopART.

    Example:
        >>> from ipuxl.replica_grouping import PopartReplicaGrouping
        >>> PopartReplicaGrouping(8, 2, 4).getReplicasAt(1)
        [1, 3, 5, 7]

    Raises:
        popart_exception: a count is not positive, or ``stride * groupSize`` does not
            divide ``numReplicas``.
    """

    __slots__ = ("_num_replicas", "_stride", "_group_size")

    def __init__(self, numReplicas: int, stride: int = 1,  # noqa: N803 - PopART's names
                 groupSize: int | None = None) -> None:  # noqa: N803
        group_size = numReplicas if groupSize is None else groupSize
        for name, value in (("number of replicas", numReplicas), ("stride", stride),
                            ("group size", group_size)):
            if _as_int(name, value) <= 0:
                raise _popart_error(f"The {name} in a `popart::ReplicaGrouping` must be a "
                                    f"positive integer, got {value}.")
        if numReplicas % (stride * group_size):
            raise _popart_error(
                "The number of replicas in a `popart::ReplicaGrouping` must be divisible by "
                f"the product of the stride and the group size: {numReplicas} replicas, "
                f"stride {stride}, group size {group_size}. Use a group size from "
                f"{_divisors(numReplicas // stride)}."
            )
        self._num_replicas = int(numReplicas)
        self._stride = int(stride) if group_size > 1 else 1
        self._group_size = int(group_size)

    def getNumReplicas(self) -> int:  # noqa: N802 - PopART's names throughout
        return self._num_replicas

    def getStride(self) -> int:  # noqa: N802
        return self._stride

    def getGroupSize(self) -> int:  # noqa: N802
        return self._group_size

    def getNumGroups(self) -> int:  # noqa: N802
        return self._num_replicas // self._group_size

    def getGroupAt(self, replica: int) -> int:  # noqa: N802
        self._check("replica index", replica, self._num_replicas)
        stride, block = self._stride, self._stride * self._group_size
        return replica % stride + stride * (replica // block)

    def getIndexInGroupAt(self, replica: int) -> int:  # noqa: N802
        return (replica - self.getReplicaAt(self.getGroupAt(replica))) // self._stride

    def getReplicaAt(self, group: int, index: int = 0) -> int:  # noqa: N802
        self._check("group index", group, self.getNumGroups())
        self._check("index in group", index, self._group_size)
        stride = self._stride
        return (group // stride) * stride * self._group_size + group % stride + index * stride

    def getReplicasAt(self, group: int) -> list[int]:  # noqa: N802
        first = self.getReplicaAt(group)
        return [first + i * self._stride for i in range(self._group_size)]

    def getTranspose(self) -> PopartReplicaGrouping:  # noqa: N802
        """The grouping whose groups take one replica from each group of this one.

        Raises:
            popart_exception: the transpose is not a constant grouping.
        """
        if self._stride == 1:
            return PopartReplicaGrouping(self._num_replicas, self._group_size,
                                         self.getNumGroups())
        if self._stride * self._group_size == self._num_replicas:
            return PopartReplicaGrouping(self._num_replicas, 1, self._stride)
        raise _popart_error(
            f"The transpose of '{self.str()}' cannot be represented as a "
            "`popart::ReplicaGrouping`: its groups are not evenly spaced. Use "
            "`popxl.ReplicaGrouping.transpose()`, which has non-constant groupings."
        )

    def str(self) -> str:
        return (f"ReplicaGrouping(numReplicas={self._num_replicas}, stride={self._stride}, "
                f"groupSize={self._group_size})")

    __repr__ = str

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PopartReplicaGrouping):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[int, int, int]:
        return (self._num_replicas, self._stride, self._group_size)

    def _check(self, what: str, value: int, bound: int) -> None:
        if not 0 <= _as_int(what, value) < bound:
            raise _popart_error(
                f"The requested {what} {value} is outside the valid range 0..{bound - 1} "
                f"for '{self.str()}'."
            )


def _popart_error(message: str) -> Exception:
    from ipuxl.popart import popart_exception

    return popart_exception(message)


def _strided_assignment(num_replicas: int, stride: int, group_size: int) -> list[int]:
    block = stride * group_size
    return [r % stride + stride * (r // block) for r in range(num_replicas)]


def _common_stride(assignment: list[int], num_groups: int) -> int | None:
    """The distance between consecutive members shared by all groups, if there is one."""
    members: list[list[int]] = [[] for _ in range(num_groups)]
    for replica, group in enumerate(assignment):
        members[group].append(replica)
    gaps = {b - a for group in members for a, b in zip(group, group[1:])}
    if not gaps:  # every group has one replica
        return 1
    return gaps.pop() if len(gaps) == 1 else None


def _renumbered(assignment: list[int]) -> list[int]:
    order = {group: i for i, group in enumerate(dict.fromkeys(assignment))}
    return [order[group] for group in assignment]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got bool {value!r}.")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}.") from None
