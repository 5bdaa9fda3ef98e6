"""``popxl.ops.collectives`` (spec §11.10) against a NumPy simulation of the replicas.

Each case builds one op in an ``Ir(replication=R)`` and runs the op's lowering for all R
replicas at once, ``jax.vmap`` over the replica axis (what the Session does on one
device); the reference simulates the replicas explicitly with NumPy, one group at a time.
Gradients are ``jax.vjp`` of the lowering, under the same mapping, against NumPy
formulas. A subprocess with four CPU devices checks that ``shard_map`` (one device per
replica) gives the same values and gradients as ``vmap``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.errors import UndefinedValue
from ipuxl.popart import popart_exception
from ipuxl.replica_axis import REPLICA_AXIS
from ipuxl.transforms import autodiff

C = ops.collectives
REDUCE_OPS = ["add", "mean", "mul", "min", "max", "and", "or", "square_add"]

# (R, grouping): None is the default (all replicas), else ir.replica_grouping(stride, size).
GROUPINGS = [
    (1, None),
    (2, None), (2, (1, 1)),
    (4, None), (4, (1, 2)), (4, (2, 2)), (4, (1, 1)),
    (8, None), (8, (1, 2)), (8, (2, 2)), (8, (4, 2)), (8, (2, 4)), (8, (1, 4)),
]
GROUPING_IDS = [f"R{r}-{'all' if g is None else f's{g[0]}g{g[1]}'}" for r, g in GROUPINGS]
# Gradients: each kind of grouping (all, one replica each, consecutive, strided), fewer R.
GRAD_GROUPINGS = [GROUPINGS[i] for i in (0, 2, 3, 4, 5, 10, 11)]
GRAD_GROUPING_IDS = [GROUPING_IDS[i] for i in (0, 2, 3, 4, 5, 10, 11)]


# ------------------------------------------------------------------ the NumPy simulation


def ref_groups(replicas: int, grouping: tuple[int, int] | None) -> list[list[int]]:
    """For each replica, the replicas of its group in increasing order (from the spec's
    rule: group(r) = r % stride + stride * (r // (stride * size)))."""
    stride, size = grouping or (1, replicas)
    group = [r % stride + stride * (r // (stride * size)) for r in range(replicas)]
    return [[s for s in range(replicas) if group[s] == group[r]] for r in range(replicas)]


def ref_reduce(stack: np.ndarray, op: str) -> np.ndarray:
    """The reduction of the members' values (axis 0)."""
    if op == "square_add":
        return (stack * stack).sum(0, dtype=stack.dtype)
    return {
        "add": lambda: stack.sum(0, dtype=stack.dtype),
        "mean": lambda: stack.mean(0, dtype=stack.dtype),
        "mul": lambda: stack.prod(0, dtype=stack.dtype),
        "min": lambda: stack.min(0),
        "max": lambda: stack.max(0),
        "and": lambda: stack.all(0),
        "or": lambda: stack.any(0),
    }[op]()


def ref_shard(x: np.ndarray, index: int, size: int) -> np.ndarray:
    """Chunk ``index`` of ``x`` flattened and zero-padded to ``size`` chunks."""
    flat = x.reshape(-1)
    length = -(-flat.size // size)
    padded = np.concatenate([flat, np.zeros(size * length - flat.size, x.dtype)])
    return padded[index * length:(index + 1) * length]


def ref_all_reduce(xs, groups, op):
    return np.stack([ref_reduce(xs[members], op) for members in groups])


def ref_reduce_scatter(xs, groups, op):
    return np.stack([ref_shard(ref_reduce(xs[m], op), m.index(r), len(m))
                     for r, m in enumerate(groups)])


def ref_sharded_slice(xs, groups):
    return np.stack([ref_shard(xs[r], m.index(r), len(m)) for r, m in enumerate(groups)])


def ref_slice(xs, groups, axis):
    outputs = []
    for r, members in enumerate(groups):
        chunk = np.split(xs[r], len(members), axis=axis)[members.index(r)]
        outputs.append(chunk.squeeze(axis) if chunk.shape[axis] == 1 and
                       xs.shape[1 + axis] == len(members) else chunk)
    return np.stack(outputs)


def ref_gather(xs, groups, output_shape, axis=0, meta_shape=None):
    outputs = []
    for members in groups:
        values = [xs[s] for s in members]
        if output_shape == "new_axis":
            outputs.append(np.stack(values))
        elif output_shape == "concat":
            outputs.append(np.concatenate(values, axis=axis))
        else:
            flat = np.concatenate([v.reshape(-1) for v in values])
            outputs.append(flat[:math.prod(meta_shape)].reshape(meta_shape))
    return np.stack(outputs)


def ref_reduction_grad(xs, groups, op, totals):
    """The gradient of each replica's x in its group's reduction, given the gradient of
    that shared reduction (``totals[r]``, the same for every member)."""
    grads = []
    for r, members in enumerate(groups):
        x, total, stack = xs[r], totals[r], xs[members]
        if op == "add":
            grads.append(total)
        elif op == "mean":
            grads.append(total / len(members))
        elif op == "square_add":
            grads.append(2 * x * total)
        elif op == "mul":
            others = xs[[s for s in members if s != r]].prod(0)
            grads.append(total * others)
        else:
            y = ref_reduce(stack, op)
            grads.append(total * (x == y) / (stack == y).sum(0).astype(x.dtype))
    return np.stack(grads)


def ref_unslice_grad(grads, groups, axis, dropped):
    """The gradient of replicated_slice's input: the members' output gradients, joined
    along ``axis`` (stacked on it when the slice dropped it)."""
    join = np.stack if dropped else np.concatenate
    return np.stack([join([grads[s] for s in m], axis=axis) for m in groups])


def ref_gather_grad(grads, groups, output_shape, axis=0):
    """The gradient of replicated_all_gather's input: this replica's part of its output
    gradient (PopXL's rule: no sum over the replicas)."""
    parts = []
    for r, members in enumerate(groups):
        index, grad = members.index(r), grads[r]
        if output_shape == "new_axis":
            parts.append(grad[index])
        elif output_shape == "concat":
            parts.append(np.split(grad, len(members), axis=axis)[index])
        else:
            parts.append(ref_shard(grad, index, len(members)))
    return np.stack(parts)


def ref_scatter_grad(xs, grads, groups, op):
    """The gradient of reduce-scatter's input: the members' output gradients joined (the
    gradient of the shared reduction), through the reduction."""
    size = xs[0].size
    joined = np.stack([np.concatenate([grads[s] for s in m])[:size].reshape(xs.shape[1:])
                       for m in groups])
    return ref_reduction_grad(xs, groups, op, joined)


# ------------------------------------------------------------------ the table


@dataclass(frozen=True)
class Case:
    """One op of the table.

    Attributes:
        name: the case's name in failure messages.
        make: ``make(x, group) -> Tensor`` builds the op on the graph input ``x``.
        shape: the input shape, from the group size G.
        reference: ``reference(xs, groups) -> outputs``, all replicas at once.
        grad: ``grad(xs, output_grads, groups) -> input_grads`` (None: not differentiated).
        data: the input data: ``float``, ``int`` or ``bool``.
        meta_shape: the input's meta shape, from G.
        out_meta: the output's meta shape, from the input shape.
    """

    name: str
    make: Callable
    shape: Callable[[int], tuple[int, ...]]
    reference: Callable
    grad: Callable | None = None
    data: str = "float"
    meta_shape: Callable[[int], tuple[int, ...]] = lambda size: ()
    out_meta: Callable[[tuple[int, ...]], tuple[int, ...]] = lambda shape: ()


def _reduction_cases(op: str) -> list[Case]:
    data = "bool" if op in ("and", "or") else "float"
    differentiable = data == "float"
    return [
        Case(f"all_reduce {op}", lambda x, g: C.replicated_all_reduce(x, op, g),
             lambda size: (3, 2), lambda xs, gs: ref_all_reduce(xs, gs, op),
             (lambda xs, cts, gs: ref_reduction_grad(xs, gs, op, ref_all_reduce(cts, gs, "add")))
             if differentiable else None, data),
        Case(f"reduce_scatter {op}", lambda x, g: C.replicated_reduce_scatter(x, op, g),
             lambda size: (7,), lambda xs, gs: ref_reduce_scatter(xs, gs, op),
             (lambda xs, cts, gs: ref_scatter_grad(xs, cts, gs, op)) if differentiable else None,
             data),
    ]


def _integer_cases(op: str) -> list[Case]:
    return [
        Case(f"all_reduce {op} int32", lambda x, g: C.replicated_all_reduce(x, op, g),
             lambda size: (5,), lambda xs, gs: ref_all_reduce(xs, gs, op), data="int"),
        Case(f"reduce_scatter {op} int32", lambda x, g: C.replicated_reduce_scatter(x, op, g),
             lambda size: (5,), lambda xs, gs: ref_reduce_scatter(xs, gs, op), data="int"),
    ]


def _slice_case(shape: Callable, axis: int) -> Case:
    def grad(xs, cts, groups):
        positive = axis % xs.ndim - 1 if axis < 0 else axis
        return ref_unslice_grad(cts, groups, positive, xs.shape[1 + positive] == len(groups[0]))

    return Case(f"replicated_slice axis={axis}", lambda x, g: C.replicated_slice(x, axis, g),
                shape, lambda xs, gs: ref_slice(xs, gs, axis % (xs.ndim - 1)), grad)


def _gather_case(output_shape: str, axis: int) -> Case:
    mode = "concat" if output_shape == "auto" else output_shape
    return Case(f"all_gather {output_shape} axis={axis}",
                lambda x, g: C.replicated_all_gather(x, axis, g, output_shape),
                lambda size: (2, 3), lambda xs, gs: ref_gather(xs, gs, mode, axis % 2),
                lambda xs, cts, gs: ref_gather_grad(cts, gs, mode, axis % 2))


def _shard_length(size: int) -> tuple[int, ...]:
    return (-(-9 // size),)  # a shard of a (3, 3) tensor


CASES = [
    *(case for op in REDUCE_OPS for case in _reduction_cases(op)),
    *(case for op in ("add", "mul", "min", "max") for case in _integer_cases(op)),
    Case("all_reduce_ max", lambda x, g: C.replicated_all_reduce_(x, "max", g),
         lambda size: (4,), lambda xs, gs: ref_all_reduce(xs, gs, "max")),
    Case("all_reduce of a shard", lambda x, g: C.replicated_all_reduce(x, "add", g),
         _shard_length, lambda xs, gs: ref_all_reduce(xs, gs, "add"),
         meta_shape=lambda size: (3, 3), out_meta=lambda shape: (3, 3)),
    Case("reduce_scatter for sharding", lambda x, g: C.replicated_reduce_scatter(
        x, "add", g, configure_output_for_replicated_tensor_sharding=True),
         lambda size: (2, 5), lambda xs, gs: ref_reduce_scatter(xs, gs, "add"),
         out_meta=lambda shape: shape),
    *(Case(f"replica_sharded_slice {shape}", lambda x, g: C.replica_sharded_slice(x, g),
           lambda size, shape=shape: shape, ref_sharded_slice,
           lambda xs, cts, gs: ref_gather(cts, gs, "meta_shape", meta_shape=xs.shape[1:]),
           out_meta=lambda shape: shape)
      for shape in [(2, 5), (8,), ()]),
    _slice_case(lambda size: (8, 3), 0),
    _slice_case(lambda size: (3, 8), 1),
    _slice_case(lambda size: (2, 8, 3), -2),
    _slice_case(lambda size: (16,), 0),
    _slice_case(lambda size: (size, 3), 0),  # drops the axis
    _slice_case(lambda size: (2, size, 3), 1),  # drops the axis
    _gather_case("new_axis", 0),
    _gather_case("concat", 0),
    _gather_case("concat", 1),
    _gather_case("concat", -1),
    _gather_case("auto", 1),
    *(Case(f"all_gather {mode} of a shard", lambda x, g, mode=mode: C.replicated_all_gather(
        x, group=g, output_shape=mode), _shard_length,
           lambda xs, gs: ref_gather(xs, gs, "meta_shape", meta_shape=(3, 3)),
           lambda xs, cts, gs: ref_gather_grad(cts, gs, "meta_shape"),
           meta_shape=lambda size: (3, 3))
      for mode in ("meta_shape", "auto")),
]
DTYPES = {"float": popxl.float32, "int": popxl.int32, "bool": popxl.bool}


def sample(data: str, shape: tuple[int, ...], key: str = "", seed: int = 0) -> np.ndarray:
    """Test data: ``float`` values near 1 (products stay small; no ties for min and max),
    ``int`` values in [4, 12), or random ``bool``."""
    rng = np.random.default_rng([zlib.crc32(key.encode()), seed])
    if data == "bool":
        return rng.random(shape) < 0.5
    values = rng.uniform(0.5, 1.5, shape).astype(np.float32)
    return (values * 8).astype(np.int32) if data == "int" else values


def case_data(case: Case, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Inputs of one case; ``shape`` is ``(R, *input_shape)``."""
    return sample(case.data, shape, case.name, seed)


@dataclass
class Table:
    """Every case built in one ``Ir(replication=R)``."""

    replicas: int
    groups: list[list[int]]
    nodes: list[list[Any]]  # the ops of each case, in order (each reads the last's output)
    outputs: list[popxl.Tensor]
    inputs: list[np.ndarray]  # [R, *shape] per case


def build_table(replicas: int, grouping: tuple[int, int] | None, cases=CASES) -> Table:
    ir = popxl.Ir(replication=replicas)
    groups = ref_groups(replicas, grouping)
    size = len(groups[0])
    nodes, outputs, data = [], [], []
    with ir.main_graph:
        group = None if grouping is None else ir.replica_grouping(*grouping)
        for case in cases:
            x = popxl.graph_input(case.shape(size), DTYPES[case.data], "x",
                                  meta_shape=case.meta_shape(size))
            first = len(ir.main_graph.ops)
            outputs.append(case.make(x, group))
            nodes.append(ir.main_graph.ops[first:])
            data.append(case_data(case, (replicas, *x.shape)))
    return Table(replicas, groups, nodes, outputs, data)


def vmapped(one_replica: Callable) -> Callable:
    """``one_replica`` on every replica: the Session's mapping on one device."""
    return jax.vmap(one_replica, axis_name=REPLICA_AXIS)


def lower_chain(chain: list[Any], x: Any) -> Any:
    """One replica's output of a case's ops, each applied to the last one's output."""
    for node in chain:
        x = node.opdef.lower(x, **node.attrs)
    return x


def lowered(nodes: list[list[Any]]) -> Callable:
    """One replica's outputs of every case."""
    return lambda xs: tuple(lower_chain(chain, x) for chain, x in zip(nodes, xs))


def pulled_back(nodes: list[Any]) -> Callable:
    """One replica's input gradients of every op, given its output gradients."""
    def grads(xs: tuple, cts: tuple) -> tuple:
        results = []
        for node, x, ct in zip(nodes, xs, cts):
            _, pullback = jax.vjp(lambda x, node=node: lower_chain(node, x), x)
            results.append(pullback(ct)[0])
        return tuple(results)

    return grads


def run_values(table: Table, mapping: Callable = vmapped) -> list[np.ndarray]:
    return [np.asarray(a) for a in jax.jit(mapping(lowered(table.nodes)))(table.inputs)]


def run_grads(table: Table, cases=CASES, mapping: Callable = vmapped
              ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """The gradients of the differentiable cases: (got, expected, output gradients)."""
    chosen = [k for k, case in enumerate(cases) if case.grad is not None]
    nodes = [table.nodes[k] for k in chosen]
    xs = [table.inputs[k] for k in chosen]
    cts = [case_data(cases[k], (table.replicas, *table.outputs[k].shape), seed=1)
           for k in chosen]
    got = jax.jit(mapping(pulled_back(nodes)))(xs, cts)
    want = [cases[k].grad(x, ct, table.groups) for k, x, ct in zip(chosen, xs, cts)]
    return [np.asarray(g) for g in got], want, chosen


def check(got: np.ndarray, want: np.ndarray, name: str) -> None:
    assert (got.dtype, got.shape) == (want.dtype, want.shape), (name, got.dtype, got.shape,
                                                                want.dtype, want.shape)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6, err_msg=name)


# ------------------------------------------------------------------ values and gradients


@pytest.mark.parametrize("replicas, grouping", GROUPINGS, ids=GROUPING_IDS)
def test_values_and_types(replicas, grouping):
    table = build_table(replicas, grouping)
    for case, output, got, xs in zip(CASES, table.outputs, run_values(table), table.inputs):
        want = case.reference(xs, table.groups)
        assert output.shape == want.shape[1:], (case.name, output.shape, want.shape)
        assert output.dtype.as_numpy() == want.dtype, (case.name, output.dtype)
        assert output.meta_shape == case.out_meta(xs.shape[1:]), (case.name, output.meta_shape)
        check(got, want, case.name)


@pytest.mark.parametrize("replicas, grouping", GRAD_GROUPINGS, ids=GRAD_GROUPING_IDS)
def test_gradients(replicas, grouping):
    table = build_table(replicas, grouping)
    for got, want, k in zip(*run_grads(table)):
        check(got, want, CASES[k].name)


def test_every_op_and_reduction_is_in_the_table():
    names = " ".join(case.name for case in CASES)
    for op in REDUCE_OPS:
        assert f"all_reduce {op}" in names and f"reduce_scatter {op}" in names
    for function in ("all_reduce_", "replica_sharded_slice", "replicated_slice", "new_axis",
                     "concat", "auto", "meta_shape", "for sharding"):
        assert function in names


def test_max_gradient_shares_ties_equally():
    xs = np.array([[1.0, 5.0], [3.0, 5.0], [3.0, 2.0], [0.0, 5.0]], np.float32)
    table = build_table(4, None, [_reduction_cases("max")[0]])
    (got,) = jax.jit(vmapped(pulled_back(table.nodes)))([xs], [np.ones((4, 2), np.float32)])
    np.testing.assert_allclose(got, [[0, 4 / 3], [2, 4 / 3], [2, 0], [0, 4 / 3]], rtol=1e-6)


@pytest.mark.parametrize("replicas, grouping", [(4, None), (8, (2, 2)), (8, (1, 4))])
def test_a_tensor_sharded_and_gathered_again_is_unchanged(replicas, grouping):
    # replica_sharded_slice, reduce-scatter and all-gather agree on the shard layout.
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        group = ir.replica_grouping(*grouping) if grouping else None
        x = popxl.graph_input((3, 5), popxl.float32, "x")
        full = C.replicated_all_gather(C.replica_sharded_slice(x, group), group=group)
        scattered = C.replicated_reduce_scatter(
            x, "mean", group, configure_output_for_replicated_tensor_sharding=True)
        mean = C.replicated_all_gather(scattered, group=group)
    groups = ref_groups(replicas, grouping)
    data = np.random.default_rng(3).normal(size=(replicas, 3, 5)).astype(np.float32)
    shared = data[[m[0] for m in groups]]  # the same value on every member of a group

    def lower(node, x):
        return node.opdef.lower(x, **node.attrs)

    def both(x):
        shard, gather, scatter, gather_mean = ir.main_graph.ops
        return lower(gather, lower(shard, x)), lower(gather_mean, lower(scatter, x))

    run = jax.jit(vmapped(both))
    check(np.asarray(run(shared)[0]), shared, "shard and gather")
    check(np.asarray(run(data)[1]), ref_all_reduce(data, groups, "mean"), "mean")
    assert full.shape == mean.shape == (3, 5)


def test_autodiff_builds_gradient_ops_for_collectives():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        def body(x):
            shard = C.replicated_reduce_scatter(x, "add")
            return C.replicated_all_gather(ops.relu(shard), output_shape="new_axis")

        x = popxl.variable(np.zeros(6, np.float32), name="x")
        info = autodiff(ir.create_graph(body, x))
    grads = info.graph.outputs
    assert [(g.shape, g.dtype) for g in grads] == [((6,), popxl.float32)]
    names = [op.name for op in info.graph.ops]
    assert "replicated_all_gather_grad" in names and "replicated_reduce_scatter_grad" in names


# ------------------------------------------------------------------ through a Session


def _stored(tensor, name):
    stream = popxl.d2h_stream(tensor.shape, tensor.dtype, name=name)
    ops.host_store(stream, tensor)
    return stream


def test_a_single_replica_program_runs_every_collective():
    # With replication_factor 1 every collective is the one-replica reduction or identity.
    data = sample("float", (2, 4))
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(data, name="x")
        shard = C.replicated_reduce_scatter(
            x, "square_add", configure_output_for_replicated_tensor_sharding=True)
        results = {
            "sum": C.replicated_all_reduce(x), "square": shard,
            "mean": C.replicated_all_reduce(x, "mean"),
            "sliced": C.replicated_slice(x, 1), "stacked": C.replicated_all_gather(
                x, output_shape="new_axis"), "gathered": C.replicated_all_gather(shard),
            "shard": C.replica_sharded_slice(x), "within": C.all_reduce([x], op="max")[0],
        }
        z = popxl.variable(data, name="z")
        C.replicated_all_reduce_(z, "mul")
        streams = {name: _stored(t, name) for name, t in results.items()}
    with popxl.Session(ir, "cpu") as session:
        out = session.run()
        final = session.get_tensor_data(z)
    expected = {"sum": data, "square": (data ** 2).reshape(-1), "mean": data, "sliced": data,
                "stacked": data[None], "gathered": data ** 2, "shard": data.reshape(-1),
                "within": data}
    for name, want in expected.items():
        np.testing.assert_allclose(out[streams[name]], want, rtol=1e-6, err_msg=name)
    np.testing.assert_array_equal(final, data)


def test_a_replicated_session_runs_grouped_collectives():
    replicas = 4
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        stream = popxl.h2d_stream((2, 3), popxl.float32, name="x")
        x = ops.host_load(stream)
        group = ir.replica_grouping(stride=2, group_size=2)
        reduced = _stored(C.replicated_all_reduce(x, "max", group), "reduced")
        shard = C.replicated_reduce_scatter(
            x, group=group, configure_output_for_replicated_tensor_sharding=True)
        scattered = _stored(shard, "scattered")
        gathered = _stored(C.replicated_all_gather(shard, group=group), "gathered")
    data = sample("float", (replicas, 2, 3))
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({stream: data})
    groups = ref_groups(replicas, (2, 2))
    check(out[reduced], ref_all_reduce(data, groups, "max"), "all_reduce")
    check(out[scattered], ref_reduce_scatter(data, groups, "add"), "reduce_scatter")
    check(out[gathered], ref_all_reduce(data, groups, "add"), "all_gather")


def test_a_replicated_session_runs_collective_gradients():
    # autodiff's gradient ops lower to jax.vjp of the collectives, inside the replica map.
    replicas = 4
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        x_stream = popxl.h2d_stream((6,), popxl.float32, name="x")
        seed_stream = popxl.h2d_stream((3,), popxl.float32, name="seed")
        group = ir.replica_grouping(group_size=2)

        def forward(x):
            return C.replicated_reduce_scatter(x * x, "add", group)

        x = ops.host_load(x_stream)
        graph = ir.create_graph(forward, x)
        info = autodiff(graph)
        site = ops.call_with_info(graph, x)
        (dx,) = ops.call(info.graph, ops.host_load(seed_stream),
                         inputs_dict=info.inputs_dict(site))
        y, dx = _stored(site.outputs[0], "y"), _stored(dx, "dx")
    data = sample("float", (replicas, 6))
    seeds = sample("float", (replicas, 3), seed=1)
    with popxl.Session(ir, "ipu_model") as session:
        out = session.run({x_stream: data, seed_stream: seeds})
    groups = ref_groups(replicas, (1, 2))
    check(out[y], ref_reduce_scatter(data, groups, "square_add"), "forward")
    check(out[dx], ref_scatter_grad(data, seeds, groups, "square_add"), "gradient")


# ------------------------------------------------------------------ across IPUs


def _on_ipus(count, shape=(3,), dtype=popxl.float32):
    ir = popxl.Ir()
    tensors = []
    with ir.main_graph:
        for k in range(count):
            with popxl.ipu(k):
                tensors.append(ops.init(shape, dtype, f"t{k}"))
    return ir, tensors


@pytest.mark.parametrize("op", REDUCE_OPS)
def test_all_reduce_across_ipus(op):
    ir, ts = _on_ipus(3, dtype=popxl.bool if op in ("and", "or") else popxl.float32)
    with ir.main_graph:
        outputs = C.all_reduce(ts, op=op)
    xs = sample("bool" if op in ("and", "or") else "float", (3, 3))
    assert [t.ipu for t in outputs] == [0, 1, 2]
    for node in ir.main_graph.ops[3:]:
        check(np.asarray(node.opdef.lower(*xs, **node.attrs)), ref_reduce(xs, op), op)


def test_all_reduce_takes_the_given_ipus():
    ir, ts = _on_ipus(2)
    with ir.main_graph:
        outputs = C.all_reduce(ts, ipus=[3, 1])
    assert [t.ipu for t in outputs] == [3, 1]


def _grads(node, xs, grad):
    _, pullback = jax.vjp(lambda *xs: node.opdef.lower(*xs, **node.attrs), *xs)
    return [np.asarray(g) for g in pullback(grad)]


@pytest.mark.parametrize("variant", ["all_reduce", "identical_inputs", "identical_grad_inputs"])
def test_all_reduce_across_ipus_values_and_gradients(variant):
    function = {"all_reduce": C.all_reduce,
                "identical_inputs": C.all_reduce_identical_inputs,
                "identical_grad_inputs": C.all_reduce_identical_grad_inputs}[variant]
    ir, ts = _on_ipus(3)
    with ir.main_graph:
        function(ts)
    xs, cts = sample("float", (3, 3)), sample("float", (3, 3), seed=1)
    # The gradient of each input summed over the three outputs (as autodiff accumulates).
    total = [np.zeros(3, np.float32) for _ in range(3)]
    for k, node in enumerate(ir.main_graph.ops[3:]):
        value = np.asarray(node.opdef.lower(*xs, **node.attrs))
        check(value, xs[k] if variant == "identical_inputs" else xs.sum(0), variant)
        for j, g in enumerate(_grads(node, xs, cts[k])):
            total[j] += g
    want = cts if variant == "identical_grad_inputs" else [cts.sum(0)] * 3
    np.testing.assert_allclose(np.stack(total), np.stack(want), rtol=1e-6)


# ------------------------------------------------------------------ the IR


@pytest.mark.parametrize("output_shape, axis, ops_built, shape", [
    ("concat", 0, ["reshape", "replicated_all_gather", "reshape"], (4, 5, 7)),
    ("new_axis", 0, ["reshape", "replicated_all_gather", "reshape"], (2, 2, 5, 7)),
    ("concat", 2, ["transpose", "reshape", "replicated_all_gather", "reshape", "transpose"],
     (2, 5, 14)),
])
def test_a_gather_is_built_from_popxl_ops(output_shape, axis, ops_built, shape):
    # PopXL flattens the input (its axis moved first), gathers flat values and reshapes, so
    # its graph holds those tensors: PopXL's unit test counts 4 for a concat on axis 0.
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(np.zeros((2, 5, 7), np.float32), name="x")
        out = C.replicated_all_gather(x, axis, output_shape=output_shape)
    assert [op.name for op in ir.main_graph.ops] == ops_built
    assert len(ir.main_graph.tensors) == len(ops_built) + 1
    assert out.shape == shape


def test_print_shows_the_op_the_reduction_and_the_groups():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        x = popxl.variable(np.zeros((4, 2), np.float32), name="x")
        group = ir.replica_grouping(stride=2, group_size=2)
        C.replicated_all_reduce(x, "max", group)
        C.replicated_reduce_scatter(x, configure_output_for_replicated_tensor_sharding=True)
        C.replicated_all_gather(x, axis=1, group=group)
        C.replicated_slice(x, 0)
    text = str(ir)
    for line in [
        "replicated_all_reduce_out: f32[4,2] = replicated_all_reduce[op='max', "
        "assignment=(0, 1, 0, 1)](x)",
        "replicated_reduce_scatter_out: f32[2] meta[4,2] = replicated_reduce_scatter[op='add', "
        "assignment=(0, 0, 0, 0), meta_shape=(4, 2)](x)",
        # PopXL's structure: axis 1 moved first, flattened, gathered, reshaped, moved back
        "transpose_out: f32[2,4] = transpose[permutation=(1, 0)](x)",
        "transpose_out_reshaped: f32[8] = reshape[shape=(8,)](transpose_out)",
        "replicated_all_gather_out: f32[16] = replicated_all_gather[output_shape='concat', "
        "assignment=(0, 1, 0, 1)](transpose_out_reshaped)",
        "replicated_all_gather_out_reshaped: f32[4,4] = reshape[shape=(4, 4)]("
        "replicated_all_gather_out)",
        "transpose_out__t0: f32[4,4] = transpose[permutation=(1, 0)]("
        "replicated_all_gather_out_reshaped)",
        "replicated_slice_out: f32[2] = replicated_slice[axis=0, assignment=(0, 0, 0, 0)](x)",
    ]:
        assert line in text, text


def test_lowering_outside_the_replica_axis_names_the_fix():
    ((node,),) = build_table(4, None, _reduction_cases("add")[:1]).nodes
    with pytest.raises(ValueError, match="built for 4 replicas but is being lowered without"):
        node.opdef.lower(jnp.zeros((3, 2)), **node.attrs)
    with pytest.raises(ValueError, match="lowered over 2 replicas"):
        vmapped(lambda x: node.opdef.lower(x, **node.attrs))(jnp.zeros((2, 3, 2)))


# ------------------------------------------------------------------ errors


def _in_ir(replicas, make, shape=(4, 2), dtype=popxl.float32, meta_shape=()):
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        x = popxl.graph_input(shape, dtype, "x", meta_shape=meta_shape)
        return make(ir, x)


ERRORS = [
    ("invalid op", lambda ir, x: C.replicated_all_reduce(x, "sum"), ValueError,
     "^Not a valid op: 'sum'"),
    ("op not a string", lambda ir, x: C.replicated_reduce_scatter(x, 1), ValueError,
     "^Not a valid op: 1"),
    ("invalid op in-place", lambda ir, x: C.replicated_all_reduce_(x, "Add"), ValueError,
     "^Not a valid op"),
    ("invalid op across IPUs", lambda ir, x: C.all_reduce([x], op="local"), ValueError,
     "^Not a valid op"),
    ("non-constant group",
     lambda ir, x: C.replicated_all_reduce(x, group=ir.replica_grouping_from_assignments(
         [0, 1, 1, 0])), NotImplementedError, "^This ReplicaGrouping has a non-constant stride"),
    ("constant group from an assignment",
     lambda ir, x: C.replicated_all_gather(x, group=ir.replica_grouping_from_assignments(
         [0, 0, 1, 1]).transpose().transpose()), None, None),
    ("group of another Ir",
     lambda ir, x: C.replicated_slice(x, group=popxl.Ir(replication=4).replica_grouping()),
     ValueError, "belongs to another Ir"),
    ("group for another replication factor",
     lambda ir, x: C.replicated_all_reduce(x, group=popxl.Ir(replication=2).replica_grouping()),
     ValueError, "is for 2 replicas, but the Ir has replication_factor=4"),
    ("a string as group", lambda ir, x: C.replicated_all_reduce(x, group="all"),
     TypeError, "must be a popxl.ReplicaGrouping"),
    ("slice not divisible", lambda ir, x: C.replicated_slice(x, 1), ValueError,
     "^Replicated slice must equally divide axis 1"),
    ("slice axis not an int", lambda ir, x: C.replicated_slice(x, 0.0), TypeError,
     "`axis` must be an integer"),
    ("slice axis out of range", lambda ir, x: C.replicated_slice(x, 2), ValueError,
     "axis 2 is out of range"),
    ("gather axis not an int", lambda ir, x: C.replicated_all_gather(x, "0"), ValueError,
     "^Axis should be an int"),
    ("gather axis a float", lambda ir, x: C.replicated_all_gather(x, 1.0), ValueError,
     "^Axis should be an int"),
    ("gather output shape", lambda ir, x: C.replicated_all_gather(x, output_shape="stack"),
     ValueError, "`output_shape` must be one of"),
    ("gather axis out of range", lambda ir, x: C.replicated_all_gather(x, 2), ValueError,
     "axis 2 is out of range"),
    ("gather meta shape without one",
     lambda ir, x: C.replicated_all_gather(x, output_shape="meta_shape"), ValueError,
     "has no meta shape"),
    ("and on floats", lambda ir, x: C.replicated_all_reduce(x, "and"), popart_exception,
     "needs a bool tensor"),
    ("tensor not a Tensor", lambda ir, x: C.replicated_all_reduce(np.zeros(2)), TypeError,
     "is not a Tensor"),
    ("across IPUs, not a list", lambda ir, x: C.all_reduce(x), TypeError,
     "`ts` must be a list of Tensors"),
    ("across IPUs, empty", lambda ir, x: C.all_reduce([]), ValueError, "`ts` is empty"),
    ("across IPUs, shapes differ", lambda ir, x: C.all_reduce([x, ops.reshape(x, (8,))],
                                                              ipus=[0, 1]),
     ValueError, "same shape and dtype"),
    ("across IPUs, ipus length", lambda ir, x: C.all_reduce([x, x], ipus=[0]), ValueError,
     "one IPU per tensor"),
    ("across IPUs, ipu not an int",
     lambda ir, x: C.all_reduce_identical_inputs([x], ipus=[0.5]), TypeError,
     "must be an integer"),
    ("across IPUs, undefined ipu", lambda ir, x: C.all_reduce_identical_grad_inputs([x]),
     UndefinedValue, "Pass `ipus="),
]


@pytest.mark.parametrize("make, error, match", [e[1:] for e in ERRORS],
                         ids=[e[0] for e in ERRORS])
def test_errors(make, error, match):
    if error is None:  # a constant grouping made from an assignment is accepted
        _in_ir(4, make)
        return
    with pytest.raises(error, match=match):
        _in_ir(4, make)


def test_dtype_errors():
    with pytest.raises(popart_exception, match="needs a floating point tensor for op='mean'"):
        _in_ir(2, lambda ir, x: C.replicated_all_reduce(x, "mean"), dtype=popxl.int32)
    with pytest.raises(popart_exception, match="needs a numeric tensor for op='add'"):
        _in_ir(2, lambda ir, x: C.replicated_reduce_scatter(x), dtype=popxl.bool)
    with pytest.raises(ValueError, match="hold fewer elements than its meta shape"):
        _in_ir(2, lambda ir, x: C.replicated_all_gather(x, output_shape="meta_shape"),
               shape=(2,), meta_shape=(3, 3))


# ------------------------------------------------------------------ shard_map


SHARD_MAP_SCRIPT = r"""
import json, sys
import jax, numpy as np
from jax.sharding import Mesh, PartitionSpec
sys.path.insert(0, sys.argv[1])
import test_collectives as tc
from ipuxl.replica_axis import REPLICA_AXIS

R = 4
mesh = Mesh(np.array(jax.devices("cpu")[:R]), (REPLICA_AXIS,))


def sharded(one_replica):
    # shard_map hands each device a block of one replica: drop and restore that axis.
    def block(*args):
        outputs = one_replica(*jax.tree.map(lambda a: a[0], args))
        return jax.tree.map(lambda a: a[None], outputs)

    def all_replicas(*args):
        by_replica = PartitionSpec(REPLICA_AXIS)
        return jax.shard_map(block, mesh=mesh, in_specs=(by_replica,) * len(args),
                             out_specs=by_replica, check_vma=False)(*args)

    return all_replicas


report = {"devices": len(jax.devices("cpu")), "cases": 0, "grads": 0, "differ": []}
for grouping in (None, (2, 2)):
    table = tc.build_table(R, grouping)
    values = zip(tc.CASES, table.inputs, tc.run_values(table, sharded), tc.run_values(table))
    for case, xs, mapped, vmapped_ in values:
        tc.check(mapped, case.reference(xs, table.groups), case.name)
        # The same up to rounding (XLA may fuse x * x + y differently on each path).
        if not np.allclose(mapped, vmapped_, rtol=1e-6, atol=0):
            report["differ"].append(case.name)
        report["cases"] += 1
    for got, want, k in zip(*tc.run_grads(table, mapping=sharded)):
        tc.check(got, want, tc.CASES[k].name)
        report["grads"] += 1
print(json.dumps(report))
"""


def test_shard_map_matches_vmap():
    # shard_map needs one device per replica: JAX makes four CPU devices if told before it
    # starts, so this runs in a new interpreter.
    env = dict(os.environ, JAX_NUM_CPU_DEVICES="4", JAX_PLATFORMS="cpu")
    tests = os.path.dirname(os.path.abspath(__file__))
    result = subprocess.run([sys.executable, "-c", SHARD_MAP_SCRIPT, tests],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["devices"] == 4
    assert report["cases"] == 2 * len(CASES)
    assert report["grads"] == 2 * sum(case.grad is not None for case in CASES)
    assert report["differ"] == [], report


def test_legacy_comm_groups_stand_for_replica_groupings():
    from ipuxl import popart
    from ipuxl.ops.collectives.groups import replica_assignment

    ir = popxl.Ir(replication=8)
    with ir.main_graph:
        cases = [
            (popart.CommGroup(popart.CommGroupType.All, 0), [0] * 8),
            (popart.CommGroup(popart.CommGroupType.Consecutive, 4), [0, 0, 0, 0, 1, 1, 1, 1]),
            (popart.CommGroup(popart.CommGroupType.Orthogonal, 4), [0, 1, 0, 1, 0, 1, 0, 1]),
            (popart.CommGroup(popart.CommGroupType.Ungrouped, 0), list(range(8))),
        ]
        for group, expected in cases:
            assert list(replica_assignment(group, "replicated_all_reduce")) == expected
        with pytest.raises(ValueError, match="replicaGroupSize that divides the replication"):
            replica_assignment(popart.CommGroup(popart.CommGroupType.Consecutive, 3), "op")
        v = popxl.variable(np.zeros(2, np.float32),
                           retrieval_mode=popart.VariableRetrievalMode.AllReplicas)
        assert v.retrieval_mode == "all_replicas"
