"""popxl-addons' collective custom ops (ipuxl.custom_ops.shipped.collectives) against a
NumPy simulation of the replicas.

The ops are made as popxl-addons' wrappers make them: through the binding classes'
``createOpInGraph``, with the wrappers' arguments. Each grouping (consecutive, strided,
one replica per group, all replicas) runs one replicated program holding every op and the
gradient graphs of the all-reduces, on the Session's ``vmap`` path here and its
``shard_map`` path (one CPU device per replica) in a subprocess. The reference groups the
replicas as popxl-addons' tests do: blocks of ``stride * group_size`` consecutive replicas,
each block split into ``stride`` groups of every ``stride``-th replica.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.custom_ops import binding_module
from ipuxl.ops.collectives.collectives import to_collective_op
from ipuxl.popart import popart_exception
from ipuxl.popart._internal.ir.patterns import Patterns, PatternsLevel
from ipuxl.replica_grouping import PopartReplicaGrouping
from ipuxl.transforms import autodiff
from tests.custom_ops.helpers import import_fake_addons_package, run_with_cpu_devices


def _binding(module: str, cls: str) -> type:
    return binding_module(module).members[cls]


GATHER = _binding("replicated_all_gather_strided_binding", "ReplicatedAllGatherStridedOp")
SCATTER = _binding("replicated_reduce_scatter_strided_binding",
                   "ReplicatedReduceScatterStridedOp")
ALL_REDUCE = _binding("replicated_all_reduce_strided_binding", "ReplicatedAllReduceStridedOp")
ALL_REDUCE_TP = _binding("replicated_all_reduce_TP_binding", "ReplicatedAllReduceTPOp")

# (replicas, (stride, group_size)); None: the wrappers' default, all replicas.
GROUPINGS = [(1, None), (4, (2, 2)), (8, None), (8, (1, 2)), (8, (2, 2)), (8, (4, 2)),
             (8, (2, 4)), (8, (1, 1))]
GROUPING_IDS = [f"R{r}-{'all' if g is None else f's{g[0]}g{g[1]}'}" for r, g in GROUPINGS]
SHAPE = (2, 3)


# ------------------------------------------------------------------ the wrappers' calls


def _create(cls: type, x: popxl.Tensor, *args) -> popxl.Tensor:
    """``cls.createOpInGraph`` as popxl-addons' wrappers call it (settings last)."""
    graph = popxl.gcg()
    op = cls.createOpInGraph(graph._pb_graph, {0: x.id}, {0: graph._create_tensor_id("out")},
                             *args, None)
    return popxl.Tensor._from_pb_tensor(op.outTensor(0))


def gather(x, stride, size):
    return _create(GATHER, x, stride, size)


def scatter(x, op, stride, size, sharded=False):
    return _create(SCATTER, x, to_collective_op(op), stride, size, sharded)


def all_reduce(x, op, stride, size, identical_inputs=False, identical_grad_inputs=False):
    return _create(ALL_REDUCE, x, to_collective_op(op), stride, size, identical_inputs,
                   identical_grad_inputs)


def all_reduce_tp(x, grouping, identical_inputs=False, identical_grad_inputs=False):
    return _create(ALL_REDUCE_TP, x, to_collective_op("add"), grouping._pb_replica_grouping,
                   identical_inputs, identical_grad_inputs)


def apply_pre_alias_patterns(ir, level=PatternsLevel.Default):
    """popxl-addons' ``apply_pre_alias_patterns``: PopART's patterns on every graph."""
    ir._pb_ir.setPatterns(Patterns(level))
    for graph in ir._pb_ir.getAllGraphs():
        ir._pb_ir.applyPreAliasPatterns(graph)


# ------------------------------------------------------------------ the NumPy simulation


def ref_members(replicas, stride, size):
    """For each replica, the replicas of its group in order of their index in it."""
    block = stride * size
    return [[r - r % block + r % stride + j * stride for j in range(size)]
            for r in range(replicas)]


def ref_reduce(stack, op):
    return stack.sum(0) if op == "add" else stack.mean(0)


def ref_all_reduce(xs, members, op):
    return np.stack([ref_reduce(xs[m], op) for m in members])


def ref_gather(xs, members):
    return np.stack([np.concatenate([xs[s].reshape(-1) for s in m]) for m in members])


def ref_scatter(xs, members, op):
    outputs = []
    for r, m in enumerate(members):
        flat = ref_reduce(xs[m], op).reshape(-1)
        length = -(-flat.size // len(m))
        padded = np.concatenate([flat, np.zeros(len(m) * length - flat.size, flat.dtype)])
        index = m.index(r)
        outputs.append(padded[index * length:(index + 1) * length])
    return np.stack(outputs)


# ------------------------------------------------------------------ one program per grouping


def _grad_of(ir, x, seed, forward):
    """The gradient of ``forward`` at ``x`` for the output gradient ``seed``."""
    graph = ir.create_graph(forward, x)
    (dx,) = ops.call(autodiff(graph).graph, seed)
    return dx


def run_grouping(replicas, grouping, mode):
    """Run every op for one grouping; return {name: (got, want)}."""
    stride, size = grouping or (1, replicas)
    ir = popxl.Ir(replication=replicas)
    group = ir.replica_grouping(stride, size)
    made = {}
    with ir.main_graph:
        x_in = popxl.h2d_stream(SHAPE, popxl.float32, "x")
        seed_in = popxl.h2d_stream(SHAPE, popxl.float32, "seed")
        x, seed = ops.host_load(x_in), ops.host_load(seed_in)
        made["gather"] = gather(x, stride, size)
        made["scatter add"] = scatter(x, "add", stride, size)
        made["scatter mean"] = scatter(x, "mean", stride, size, sharded=True)
        made["all_reduce add"] = all_reduce(x, "add", stride, size)
        made["all_reduce mean"] = all_reduce(x, "mean", stride, size)
        made["identical inputs"] = all_reduce(x, "add", stride, size, True)
        made["identical grad inputs"] = all_reduce(x, "add", stride, size, False, True)
        made["TP identical inputs"] = all_reduce_tp(x, group, True)
        made["TP identical grad inputs"] = all_reduce_tp(x, group, False, True)
        for op in ("add", "mean"):
            made[f"grad {op}"] = _grad_of(ir, x, seed,
                                          lambda t, op=op: all_reduce(t, op, stride, size))
        made["grad identical inputs"] = _grad_of(
            ir, x, seed, lambda t: all_reduce(t, "add", stride, size, True))
        made["grad identical grad inputs"] = _grad_of(
            ir, x, seed, lambda t: all_reduce(t, "add", stride, size, False, True))
        made["TP grad identical inputs"] = _grad_of(ir, x, seed,
                                                    lambda t: all_reduce_tp(t, group, True))
        made["TP grad identical grad inputs"] = _grad_of(
            ir, x, seed, lambda t: all_reduce_tp(t, group, False, True))
        streams = {}
        for name, tensor in made.items():
            streams[name] = popxl.d2h_stream(tensor.shape, tensor.dtype, name.replace(" ", "_"))
            ops.host_store(streams[name], tensor)
    apply_pre_alias_patterns(ir)
    rng = np.random.default_rng(replicas * 10 + stride)
    xs = rng.normal(size=(replicas, *SHAPE)).astype(np.float32)
    seeds = rng.normal(size=(replicas, *SHAPE)).astype(np.float32)
    with popxl.Session(ir, "ipu_model", replication_mode=mode) as session:
        # One replica's streams take its data without the replica axis.
        feeds = (xs, seeds) if replicas > 1 else (xs[0], seeds[0])
        got = session.run(dict(zip((x_in, seed_in), feeds)))
    members = ref_members(replicas, stride, size)
    want = {
        "gather": ref_gather(xs, members),
        "scatter add": ref_scatter(xs, members, "add"),
        "scatter mean": ref_scatter(xs, members, "mean"),
        "all_reduce add": ref_all_reduce(xs, members, "add"),
        "all_reduce mean": ref_all_reduce(xs, members, "mean"),
        "identical inputs": xs,
        "identical grad inputs": ref_all_reduce(xs, members, "add"),
        "TP identical inputs": xs,
        "TP identical grad inputs": ref_all_reduce(xs, members, "add"),
        # The gradient of each replica's x: the sum (mean) of its group's output gradients;
        # an identical-grad-inputs all-reduce takes its own output gradient for that sum.
        "grad add": ref_all_reduce(seeds, members, "add"),
        "grad mean": ref_all_reduce(seeds, members, "mean"),
        "grad identical inputs": ref_all_reduce(seeds, members, "add"),
        "grad identical grad inputs": seeds,
        "TP grad identical inputs": ref_all_reduce(seeds, members, "add"),
        "TP grad identical grad inputs": seeds,
    }
    results = {name: (got[stream], want[name]) for name, stream in streams.items()}
    return results, made


def check_results(results):
    for name, (got, want) in results.items():
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6, atol=1e-6,
                                   err_msg=name)


@pytest.mark.parametrize("replicas, grouping", GROUPINGS, ids=GROUPING_IDS)
def test_values_and_gradients_against_numpy(replicas, grouping):
    results, made = run_grouping(replicas, grouping, "vmap")
    check_results(results)
    size = grouping[1] if grouping else replicas
    assert made["gather"].shape == (size * 6,)
    assert made["scatter add"].shape == (-(-6 // size),)
    assert made["scatter add"].meta_shape == ()
    assert made["scatter mean"].meta_shape == SHAPE


def test_the_shard_map_path_gives_the_same_values():
    # shard_map needs one device per replica: a subprocess with eight CPU devices.
    code = textwrap.dedent("""
        from tests.custom_ops.test_shipped_collectives import check_results, run_grouping
        for grouping in [None, (2, 2), (4, 2), (1, 1)]:
            check_results(run_grouping(8, grouping, "shard_map")[0])
        check_results(run_grouping(4, (2, 2), "shard_map")[0])
        print("ok")
    """)
    run_with_cpu_devices(code, 8)


# ------------------------------------------------------------------ gradients, patterns


def test_gather_and_scatter_have_no_gradient_as_in_cpp():
    # The C++ ops have no gradient op: x gets the gradient of its other use only.
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        x = popxl.variable(np.ones(SHAPE, np.float32))

        def forward(t):
            gathered = ops.sum(gather(t, 2, 2))
            scattered = ops.sum(scatter(t, "add", 2, 2))
            return gathered + scattered + ops.sum(t * 3.0)

        graph = ir.create_graph(forward, x)
        (dx,) = ops.call(autodiff(graph).graph, popxl.constant(np.float32(1.0)))
        out = popxl.d2h_stream(dx.shape, dx.dtype, "dx")
        ops.host_store(out, dx)
    with popxl.Session(ir, "ipu_model", replication_mode="vmap") as session:
        got = session.run()[out]
    np.testing.assert_array_equal(got, np.full((4, *SHAPE), 3.0, np.float32))


def test_the_pattern_replaces_identical_inputs_all_reduces_by_identities():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        x = popxl.variable(np.ones(SHAPE, np.float32))
        y = all_reduce(x, "add", 2, 2, identical_inputs=True)
        z = all_reduce_tp(y, ir.replica_grouping(), identical_grad_inputs=True)
    names = [op.name for op in ir.main_graph.ops]
    assert names == ["popxl.addons.ops.ReplicatedAllReduceStrided",
                     "popxl.addons.ops.ReplicatedAllReduceTP"]
    apply_pre_alias_patterns(ir, PatternsLevel.NoPatterns)
    assert [op.name for op in ir.main_graph.ops] == names
    apply_pre_alias_patterns(ir)
    identity, tp = ir.main_graph.ops
    assert (identity.name, tp.name) == ("identity", names[1])
    assert identity.outputs == (y,) and tp.inputs == (y,) and tp.outputs == (z,)


def test_identical_inputs_without_the_pattern_do_not_run():
    ir = popxl.Ir(replication=4)
    with ir.main_graph:
        x = popxl.variable(np.ones(SHAPE, np.float32))
        graph = ir.create_graph(lambda t: all_reduce(t, "add", 2, 2, False, True), x)
        (dx,) = ops.call(autodiff(graph).graph, x)
        out = popxl.d2h_stream(dx.shape, dx.dtype, "dx")
        ops.host_store(out, dx)
    with pytest.raises(popart_exception, match="You need to run the `OpToIdentityPattern`"):
        with popxl.Session(ir, "ipu_model") as session:
            session.run()


# ------------------------------------------------------------------ errors


def _in_ir(build, replicas=4):
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        return build(ir, popxl.variable(np.ones(SHAPE, np.float32)))


@pytest.mark.parametrize("build, error, message", [
    (lambda ir, x: gather(x, 0, 2), popart_exception, "stride and group size must be > 0"),
    (lambda ir, x: scatter(x, "add", 1, -1), popart_exception,
     "stride and group size must be > 0"),
    (lambda ir, x: all_reduce(x, "add", 3, 1), popart_exception,
     "stride \\* groupSize = 3, which does not divide 4"),
    (lambda ir, x: gather(x, 2.0, 2), TypeError, "`stride` must be an integer"),
    (lambda ir, x: all_reduce(x, "mul", 1, 2), popart_exception,
     "implements only CollectiveOperator::Add and CollectiveOperator::Mean, got "
     "CollectiveOperator::Mul"),
    (lambda ir, x: scatter(x, "max", 1, 2), popart_exception, "got CollectiveOperator::Max"),
    (lambda ir, x: _create(ALL_REDUCE_TP, x, to_collective_op("mean"),
                           ir.replica_grouping()._pb_replica_grouping, False, False),
     popart_exception, "implements only CollectiveOperator::Add, got CollectiveOperator::Mean"),
    (lambda ir, x: _create(ALL_REDUCE, x, "add", 1, 2, False, False), TypeError,
     "`op` must be a popart CollectiveOperator"),
    (lambda ir, x: _create(ALL_REDUCE_TP, x, to_collective_op("add"),
                           ir.replica_grouping(), False, False), TypeError,
     "`group` must be a popart ReplicaGrouping"),
    (lambda ir, x: _create(ALL_REDUCE_TP, x, to_collective_op("add"),
                           PopartReplicaGrouping(8, 1, 2), False, False), popart_exception,
     "the replica grouping is of 8 replicas, but the Ir has replication_factor=4"),
    (lambda ir, x: all_reduce(ops.cast(x, popxl.int32), "mean", 1, 2), popart_exception,
     "floating point tensor for op='mean'"),
], ids=["stride 0", "negative size", "blocks", "float stride", "mul", "max", "TP mean",
        "op string", "popxl grouping", "other replica count", "int mean"])
def test_argument_errors(build, error, message):
    with pytest.raises(error, match=message):
        _in_ir(build)


# ------------------------------------------------------------------ the import path


def test_popxl_addons_layout_imports_the_modules(tmp_path, monkeypatch):
    # A package laid out as popxl-addons' op folders: a .cpp beside the wrapper module.
    names = ["replicated_all_gather_strided_binding", "replicated_reduce_scatter_strided_binding",
             "replicated_all_reduce_strided_binding", "replicated_all_reduce_TP_binding"]
    wrappers = import_fake_addons_package(tmp_path, monkeypatch, "fake_addons_collectives", names)
    assert wrappers.replicated_all_reduce_TP_binding.ReplicatedAllReduceTPOp is ALL_REDUCE_TP
    assert wrappers.replicated_all_gather_strided_binding.ReplicatedAllGatherStridedOp is GATHER
