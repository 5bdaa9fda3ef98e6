"""ReplicaGrouping (spec §13.2, §13.3), checked against a brute-force reference.

The IR is a stand-in with only ``replication_factor``, so these tests need no other module.
"""

from __future__ import annotations

import ast
import inspect
import math
import sys
import types

import numpy as np
import pytest

from ipuxl import replica_grouping
from ipuxl.replica_grouping import ReplicaGrouping


def fake_ir(replicas: int = 8) -> types.SimpleNamespace:
    return types.SimpleNamespace(replication_factor=replicas)


def reference_assignment(replicas: int, stride: int, group_size: int) -> list[int]:
    """Spec wording: each new group starts at the first unassigned replica and takes every
    stride-th replica, group_size times."""
    assignment: list[int | None] = [None] * replicas
    group = 0
    while None in assignment:
        start = assignment.index(None)
        for k in range(group_size):
            assert assignment[start + k * stride] is None
            assignment[start + k * stride] = group
        group += 1
    return assignment  # type: ignore[return-value]


def reference_transpose(assignment: list[int]) -> list[int]:
    """Group i of the transpose holds the i-th member (in replica order) of every group."""
    members: dict[int, list[int]] = {}
    for replica, group in enumerate(assignment):
        members.setdefault(group, []).append(replica)
    result = [0] * len(assignment)
    for group_members in members.values():
        for rank, replica in enumerate(group_members):
            result[replica] = rank
    return result


def valid_assignments(replicas: int):
    """Every assignment of R replicas into equal groups numbered by first appearance."""
    for group_size in (d for d in range(1, replicas + 1) if replicas % d == 0):
        yield from _extend_assignment([], [], replicas, group_size)


def _extend_assignment(prefix: list[int], counts: list[int], replicas: int, group_size: int):
    if len(prefix) == replicas:
        yield prefix
        return
    # The next replica joins an open group, or opens the next one (first-appearance order).
    for group in range(min(len(counts) + 1, replicas // group_size)):
        grown = [*counts, 0] if group == len(counts) else [*counts]
        if grown[group] < group_size:
            grown[group] += 1
            yield from _extend_assignment([*prefix, group], grown, replicas, group_size)


# ---------------------------------------------------------------------------- constant groupings

SPEC_TABLE_R8 = [
    ((1, 8), [0, 0, 0, 0, 0, 0, 0, 0]),
    ((1, 2), [0, 0, 1, 1, 2, 2, 3, 3]),
    ((2, 2), [0, 1, 0, 1, 2, 3, 2, 3]),
    ((2, 4), [0, 1, 0, 1, 0, 1, 0, 1]),
    ((4, 2), [0, 1, 2, 3, 0, 1, 2, 3]),
    ((1, 1), [0, 1, 2, 3, 4, 5, 6, 7]),
]


@pytest.mark.parametrize(("stride_and_size", "expected"), SPEC_TABLE_R8)
def test_spec_table_r8(stride_and_size, expected):
    stride, group_size = stride_and_size
    rg = ReplicaGrouping._from_stride(fake_ir(8), stride, group_size)
    assert rg.assignment == expected
    assert rg.assignment == reference_assignment(8, stride, group_size)
    assert rg.is_const
    assert (rg.stride, rg.group_size, rg.num_groups) == (stride, group_size, 8 // group_size)


@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 6, 8, 12, 16])
def test_every_valid_stride_and_size_matches_reference(replicas):
    for stride in range(1, replicas + 1):
        for group_size in range(1, replicas + 1):
            if replicas % (stride * group_size) != 0:
                continue
            rg = ReplicaGrouping._from_stride(fake_ir(replicas), stride, group_size)
            effective_stride = 1 if group_size == 1 else stride
            assert rg.assignment == reference_assignment(replicas, effective_stride, group_size)
            assert rg.stride == effective_stride
            assert rg.num_groups == replicas // group_size
            # Rebuilt from its assignment, it is the same constant grouping.
            again = ReplicaGrouping._from_assignments(rg._ir, rg.assignment)
            assert again.is_const and again == rg
            assert (again.stride, again.group_size) == (rg.stride, rg.group_size)


@pytest.mark.parametrize(("stride", "expected_group_size"), [(1, 8), (2, 4), (4, 2), (8, 1)])
def test_group_size_defaults_to_replicas_over_stride(stride, expected_group_size):
    rg = ReplicaGrouping._from_stride(fake_ir(8), stride)
    assert rg.group_size == expected_group_size
    assert rg.num_groups == 8 // expected_group_size


def test_group_size_one_forces_stride_one():
    rg = ReplicaGrouping._from_stride(fake_ir(8), stride=4, group_size=1)
    assert rg.stride == 1
    assert rg == ReplicaGrouping._from_stride(rg._ir, 1, 1)
    assert ReplicaGrouping._from_stride(fake_ir(8), stride=8).stride == 1


def test_numpy_integers_are_accepted():
    rg = ReplicaGrouping._from_stride(fake_ir(8), np.int64(2), np.int32(2))
    assert rg.assignment == [0, 1, 0, 1, 2, 3, 2, 3]
    assert ReplicaGrouping._from_assignments(rg._ir, np.array(rg.assignment)) == rg


# ---------------------------------------------------------------------------- errors

STRIDE_ERRORS = [
    # (R, stride, group_size, exception, message regex)
    (
        8,
        0,
        None,
        ValueError,
        r"^Stride must be greater than zero and less than or equal to number of replicas \(8\)",
    ),  # noqa: E501
    (
        8,
        -2,
        2,
        ValueError,
        r"^Stride must be greater than zero and less than or equal to number of replicas",
    ),  # noqa: E501
    (
        8,
        9,
        None,
        ValueError,
        r"^Stride must be greater than zero and less than or equal to number of replicas",
    ),  # noqa: E501
    (8, 3, None, ValueError, r"^Stride must be a factor of the number of replicas \(8\)"),
    (6, 4, 1, ValueError, r"^Stride must be a factor of the number of replicas \(6\)"),
    (8, 1, 0, ValueError, r"^Group size must be greater than zero"),
    (8, 1, -1, ValueError, r"^Group size must be greater than zero"),
    (8, 1, 9, ValueError, r"^Group size must be greater than zero"),
    (8, 1, 3, ValueError, r"^stride \* group_size must be a factor of the number of replicas"),
    (8, 2, 8, ValueError, r"group_size=8 \(product 16\).*valid group sizes are \[1, 2, 4\]"),
    (8, 4, 4, ValueError, r"^stride \* group_size must be a factor"),
    (6, 2, 2, ValueError, r"^stride \* group_size must be a factor"),
    (8, 1.0, None, TypeError, r"^stride must be an int, got float"),
    (8, True, None, TypeError, r"^stride must be an int, got bool"),
    (8, 1, "2", TypeError, r"^group_size must be an int, got str"),
]


@pytest.mark.parametrize(("replicas", "stride", "group_size", "error", "match"), STRIDE_ERRORS)
def test_from_stride_errors(replicas, stride, group_size, error, match):
    with pytest.raises(error, match=match):
        ReplicaGrouping._from_stride(fake_ir(replicas), stride, group_size)


ASSIGNMENT_ERRORS = [
    # (R, assignment, exception, message regex)
    (4, [0, 0, 1], ValueError, r"^The assignment must give a group for every replica.*\(4\)"),
    (4, [0, 0, 1, 1, 0], ValueError, r"must equal the number of replicas \(4\). Got 5 entries"),
    (4, [0, 0, 2, 2], ValueError, r"^The groups must be numbered 0\.\.k-1.*uses \[0, 2\]"),
    (4, [-1, -1, 0, 0], ValueError, r"^The groups must be numbered 0\.\.k-1"),
    (4, [1, 1, 0, 0], ValueError, r"^Group numbers must increase in order of first appearance"),
    (4, [0, 2, 1, 2], ValueError, r"order \[0, 2, 1\]\. Renumber them: \[0, 1, 2, 1\]"),
    (4, [0, 0, 0, 1], ValueError, r"^All groups must have the same size.*\{0: 3, 1: 1\}"),
    (6, [0, 1, 1, 2, 2, 2], ValueError, r"^All groups must have the same size"),
    (2, [0, 1.0], TypeError, r"^assignment\[1\] must be an int, got float"),
]


@pytest.mark.parametrize(("replicas", "assignment", "error", "match"), ASSIGNMENT_ERRORS)
def test_from_assignments_errors(replicas, assignment, error, match):
    with pytest.raises(error, match=match):
        ReplicaGrouping._from_assignments(fake_ir(replicas), assignment)


def test_constructor_raises():
    message = "popxl.ReplicaGrouping cannot be constructed directly (use `ir.replica_grouping`)."
    with pytest.raises(RuntimeError) as info:
        ReplicaGrouping()
    assert str(info.value) == message
    with pytest.raises(RuntimeError, match="cannot be constructed directly"):
        ReplicaGrouping(fake_ir(), 1, 2)


# ---------------------------------------------------------------------------- from assignments


@pytest.mark.parametrize(
    ("assignment", "stride", "group_size"),
    [
        ([0, 0, 0, 0], 1, 4),
        ([0, 0, 1, 1], 1, 2),
        ([0, 1, 0, 1], 2, 2),
        ([0, 1, 2, 3], 1, 1),
    ],
)
def test_from_assignments_detects_constant(assignment, stride, group_size):
    rg = ReplicaGrouping._from_assignments(fake_ir(4), assignment)
    assert rg.is_const
    assert (rg.stride, rg.group_size, rg.num_groups) == (stride, group_size, 4 // group_size)
    assert repr(rg) == (
        f"ReplicaGrouping(num_replicas=4, stride={stride}, group_size={group_size}, "
        f"num_groups={4 // group_size})"
    )


def test_from_assignments_copies_its_input():
    source = [0, 0, 1, 1]
    rg = ReplicaGrouping._from_assignments(fake_ir(4), source)
    source[0] = 5
    rg.assignment[1] = 7
    assert rg.assignment == [0, 0, 1, 1]


@pytest.mark.parametrize(
    ("replicas", "assignment", "const_rg", "to_device_map", "to_host_map"),
    [
        (4, [0, 1, 1, 0], (1, 1), [0, 1, 1, 0], [0, 1]),
        (8, [0, 0, 1, 1, 1, 1, 0, 0], (1, 2), [0, 1, 1, 0], [0, 1]),
        # Gaps 1 and 3: cut at every gap of 3, pieces of 1 and 2 replicas, gcd 1.
        (8, [0, 1, 1, 0, 0, 1, 1, 0], (1, 1), [0, 1, 1, 0, 0, 1, 1, 0], [0, 1]),
        (8, [0, 1, 1, 0, 2, 3, 3, 2], (1, 1), [0, 1, 1, 0, 2, 3, 3, 2], [0, 1, 4, 5]),
        (8, [0, 1, 0, 1, 1, 0, 1, 0], (1, 1), [0, 1, 0, 1, 1, 0, 1, 0], [0, 1]),
        # Smallest gap 2; group 1, {1, 3, 8, 10}, is cut at its gap of 5 into two pieces of
        # 2, the other groups are one piece of 4: gcd 2, so stride 2, group size 2.
        (12, [0, 1, 0, 1, 0, 2, 0, 2, 1, 2, 1, 2], (2, 2), [0, 1, 0, 2, 1, 2], [0, 1, 3]),
    ],
)
def test_non_constant(replicas, assignment, const_rg, to_device_map, to_host_map):
    rg = ReplicaGrouping._from_assignments(fake_ir(replicas), assignment)
    assert not rg.is_const
    assert rg.assignment == assignment
    assert rg.num_groups == max(assignment) + 1
    assert rg.group_size == replicas // rg.num_groups
    assert repr(rg) == f"ReplicaGrouping(assignment={assignment})"
    with pytest.raises(
        NotImplementedError, match=r"is not a constant grouping, so it has no stride"
    ):
        _ = rg.stride
    assert rg.const_rg.is_const
    assert (rg.const_rg.stride, rg.const_rg.group_size) == const_rg
    assert rg.const_rg._ir is rg._ir
    assert rg.to_device_map == to_device_map
    assert rg.to_host_map == to_host_map


def refines(fine: list[int], coarse: list[int]) -> bool:
    """Every group of ``fine`` lies inside one group of ``coarse``."""
    owner: dict[int, int] = {}
    return all(owner.setdefault(f, c) == c for f, c in zip(fine, coarse))


def test_valid_assignments_enumerates_every_partition():
    # Equal-size set partitions of 6: sizes 1, 2, 3, 6 give 1 + 15 + 10 + 1.
    assert len(list(valid_assignments(6))) == 27


@pytest.mark.parametrize("replicas", [1, 2, 4, 6, 8])
def test_every_assignment_round_trips_through_its_maps(replicas):
    """Exhaustive over valid assignments: const detection, const_rg and both maps."""
    ir = fake_ir(replicas)
    constant = {
        tuple(reference_assignment(replicas, s, g))
        for s in range(1, replicas + 1)
        for g in range(1, replicas + 1)
        if replicas % (s * g) == 0
    }
    for assignment in valid_assignments(replicas):
        rg = ReplicaGrouping._from_assignments(ir, assignment)
        assert rg.is_const == (tuple(assignment) in constant)
        const_rg = rg.const_rg
        assert const_rg.is_const
        assert refines(const_rg.assignment, assignment)
        if rg.is_const:
            assert const_rg is rg
            assert rg.to_device_map is None and rg.to_host_map is None
            continue
        assert (const_rg.stride, const_rg.group_size) == popxl_const_rg(assignment)
        # Host data in the user's numbering: write, let each replica take its value, read back.
        host = np.arange(rg.num_groups) * 10
        stored = host[rg.to_device_map]
        per_replica = stored[const_rg.assignment]
        np.testing.assert_array_equal(per_replica, host[assignment])
        np.testing.assert_array_equal(stored[rg.to_host_map], host)


def popxl_const_rg(assignment: list[int]) -> tuple[int, int]:
    """PopXL's (stride, group size) of const_rg, computed by relabelling replicas: each
    member after a gap wider than the smallest gap starts a new group."""
    last: dict[int, int] = {}
    gaps = []
    for replica, group in enumerate(assignment):
        if group in last:
            gaps.append(replica - last[group])
        last[group] = replica
    smallest = min(gaps)
    label, piece_of, last = 0, {}, {}
    relabelled = []
    for replica, group in enumerate(assignment):
        if group not in last or replica - last[group] > smallest:
            piece_of[group] = label
            label += 1
        last[group] = replica
        relabelled.append(piece_of[group])
    size = math.gcd(*(relabelled.count(piece) for piece in set(relabelled)))
    return (smallest if size > 1 else 1, size)


# ---------------------------------------------------------------------------- transpose


@pytest.mark.parametrize(
    ("replicas", "assignment", "expected"),
    [
        (4, [0, 0, 1, 1], [0, 1, 0, 1]),
        (4, [0, 1, 0, 1], [0, 0, 1, 1]),
        (4, [0, 0, 0, 0], [0, 1, 2, 3]),
        (4, [0, 1, 2, 3], [0, 0, 0, 0]),
        (8, [0, 0, 1, 1, 2, 2, 3, 3], [0, 1, 0, 1, 0, 1, 0, 1]),
        (8, [0, 1, 0, 1, 2, 3, 2, 3], [0, 0, 1, 1, 0, 0, 1, 1]),
        (4, [0, 1, 1, 0], [0, 0, 1, 1]),
    ],
)
def test_transpose_examples(replicas, assignment, expected):
    rg = ReplicaGrouping._from_assignments(fake_ir(replicas), assignment)
    transposed = rg.transpose()
    assert transposed.assignment == expected
    assert transposed._ir is rg._ir
    assert (transposed.group_size, transposed.num_groups) == (rg.num_groups, rg.group_size)


@pytest.mark.parametrize("replicas", [4, 6, 8])
def test_transpose_matches_reference(replicas):
    ir = fake_ir(replicas)
    for assignment in valid_assignments(replicas):
        rg = ReplicaGrouping._from_assignments(ir, assignment)
        assert rg.transpose().assignment == reference_transpose(assignment)


def test_transpose_keeps_the_replica_count_of_its_source():
    ir = fake_ir(4)
    rg = ReplicaGrouping._from_stride(ir, 1, 2)
    ir.replication_factor = 8  # editing R later does not change existing groupings
    assert rg.transpose().assignment == [0, 1, 0, 1]
    assert "num_replicas=4" in repr(rg.transpose())


# ---------------------------------------------------------------------------- repr, eq, hash


def test_repr_constant():
    rg = ReplicaGrouping._from_stride(fake_ir(8), 2, 2)
    assert repr(rg) == "ReplicaGrouping(num_replicas=8, stride=2, group_size=2, num_groups=4)"


def test_eq_and_hash():
    ir, other_ir = fake_ir(4), fake_ir(4)
    a = ReplicaGrouping._from_stride(ir, 2, 2)
    b = ReplicaGrouping._from_assignments(ir, [0, 1, 0, 1])
    assert a == b and hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a != ReplicaGrouping._from_stride(ir, 1, 2)
    assert a != ReplicaGrouping._from_stride(other_ir, 2, 2)  # same assignment, other IR
    non_const = ReplicaGrouping._from_assignments(ir, [0, 1, 1, 0])
    assert non_const == ReplicaGrouping._from_assignments(ir, [0, 1, 1, 0])
    assert non_const != a


@pytest.mark.parametrize("other", [None, 1, [0, 1, 0, 1], "rg"])
def test_eq_with_another_type_raises(other):
    rg = ReplicaGrouping._from_stride(fake_ir(4), 2, 2)
    with pytest.raises(TypeError, match=r"^Value must be of type popxl\.ReplicaGrouping"):
        _ = rg == other


def test_module_imports_nothing_heavy_at_import_time():
    """Only the standard library at runtime; ipuxl modules only under TYPE_CHECKING."""
    tree = ast.parse(inspect.getsource(replica_grouping))
    runtime_imports = []
    for node in tree.body:  # top level only: the TYPE_CHECKING block is an `if`, skipped
        if isinstance(node, ast.Import):
            runtime_imports += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            runtime_imports.append(node.module)
    assert all(
        name.split(".")[0] in sys.stdlib_module_names | {"__future__"} for name in runtime_imports
    ), runtime_imports
