"""Caching is counted, not hoped for: a subgraph is traced to JAX once per program
however many call sites, loops and nested calls use it, and ``Session.run`` never
retraces (``lowering.subgraph_trace_count`` and ``lowering.trace_count``).
"""

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl import lowering
from ipuxl.ops.call import call
from ipuxl.ops.conditional import conditional
from ipuxl.ops.repeat import repeat


def test_a_graph_called_from_many_sites_is_traced_once_and_runs_never_retrace():
    sites = 12
    x0 = np.array([0.25, -1.0, 2.0], np.float32)
    ir = popxl.Ir()
    ir.num_host_transfers = 2
    with ir.main_graph:
        x = popxl.variable(x0, name="x")
        bias = popxl.h2d_stream((3,), popxl.float32, name="bias")
        step = ir.create_graph(lambda t: ops.sin(t) * 0.5 + 1.0, x)

        def twice(t):  # calls `step` from inside another graph and inside a loop
            (t,) = call(step, t)
            (t,) = repeat(step, 3, t)
            return t + ops.host_load(bias)

        twice_graph = ir.create_graph(twice, x)
        t = x
        for _ in range(sites):
            (t,) = call(step, t)
        (t,) = repeat(twice_graph, 2, t)
        (t,) = call(twice_graph, t)
        out = popxl.d2h_stream((3,), popxl.float32, name="out")
        ops.host_store(out, t)
    before = {g.id: lowering.subgraph_trace_count(g.id) for g in ir.graphs}
    total_before = lowering.trace_count()
    session = popxl.Session(ir, "cpu")
    assert lowering.trace_count() == total_before + 1
    traced = {g.id: lowering.subgraph_trace_count(g.id) - before[g.id] for g in ir.graphs[1:]}
    assert traced == dict.fromkeys(traced, 1), traced

    bias_data = np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]], np.float32)
    with session:
        results = [session.run({bias: bias_data})[out] for _ in range(3)]
    assert lowering.trace_count() == total_before + 1
    assert all(lowering.subgraph_trace_count(g) - before[g] == 1 for g in traced)

    def f(t):
        return np.sin(t) * np.float32(0.5) + np.float32(1.0)

    want, slot = x0, 0
    for _ in range(sites):
        want = f(want)
    for _ in range(3):  # two repeat iterations, then one call
        want = f(want)
        for _ in range(3):
            want = f(want)
        want = want + bias_data[slot % 2]
        slot += 1
    for result in results:
        np.testing.assert_allclose(result[0], want, rtol=1e-5)


def test_a_long_repeat_is_traced_once():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros(2, np.int32), name="x")
        body = ir.create_graph(lambda t: t + 1, x)
        (y,) = repeat(body, 10_000, x)
        out = popxl.d2h_stream((2,), popxl.int32, name="out")
        ops.host_store(out, y)
    before = lowering.subgraph_trace_count(body.id)
    with popxl.Session(ir, "cpu") as session:
        result = session.run()[out]
    assert lowering.subgraph_trace_count(body.id) - before == 1
    np.testing.assert_array_equal(result, [10_000, 10_000])


def test_a_branch_graph_called_elsewhere_too_is_traced_once():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.array([1.0, -1.0], np.float32), name="x")
        flag = popxl.h2d_stream((1,), popxl.bool, name="flag")
        data = popxl.h2d_stream((2,), popxl.float32, name="data")
        load = ir.create_graph(lambda t: t + ops.host_load(data), x)
        scale = popxl.h2d_stream((2,), popxl.float32, name="scale")
        negate = ir.create_graph(lambda t: t * ops.host_load(scale), x)  # other streams
        (y,) = call(load, x)
        (y,) = conditional(ops.host_load(flag), load, negate, [y], [y])
        (y,) = call(load, y)
        out = popxl.d2h_stream((2,), popxl.float32, name="out")
        ops.host_store(out, y)
    ir.num_host_transfers = 3
    before = lowering.subgraph_trace_count(load.id)
    rows = np.arange(6, dtype=np.float32).reshape(3, 2)
    with popxl.Session(ir, "cpu") as session:
        taken = session.run({flag: np.array([[True]] * 3), data: rows, scale: -rows})[out][0]
        skipped = session.run({flag: np.array([[False]] * 3), data: rows, scale: -rows})[out][0]
    assert lowering.subgraph_trace_count(load.id) - before == 1
    x0 = np.array([1.0, -1.0], np.float32)
    np.testing.assert_array_equal(taken, x0 + rows[0] + rows[1] + rows[2])
    np.testing.assert_array_equal(skipped, (x0 + rows[0]) * -rows[0] + rows[1])
