"""popxl-addons' sharded cross-entropy ops (ipuxl.custom_ops.shipped.cross_entropy_sharded)
against an unsharded NumPy cross-entropy.

The ops are made as popxl-addons' wrappers make them, through the binding classes'
``createOpInGraph``. For the replica-sharded op, each replica group holds one problem: the
logits ``[n, vocab]`` split along the vocabulary, member ``k`` of the group holding shard
``k`` and the labels shifted by ``k * shard``, as the wrapper's callers prepare them. Each
grouping runs one replicated program on the Session's ``vmap`` path, and a subprocess with
one CPU device per replica runs the ``shard_map`` path. The within-replica op splits the
vocabulary into uneven shards of one replica.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.custom_ops import binding_module
from ipuxl.popart import popart_exception
from ipuxl.replica_grouping import PopartReplicaGrouping
from ipuxl.transforms import autodiff
from tests.custom_ops.helpers import import_fake_addons_package, run_with_cpu_devices

SHARDED = binding_module("crossentropysharded_binding").members["CrossEntropyShardedOp"]
WR = binding_module("crossentropysharded_wr_binding").members["CrossEntropyShardedOp"]

SAMPLES, SHARD = 6, 5
# (replicas, (stride, group_size)); None: one group of all replicas (the wrapper's default).
GROUPINGS = [(1, None), (4, None), (4, (2, 2)), (8, (1, 2)), (8, (2, 4)), (8, (4, 2)),
             (8, (1, 1))]
GROUPING_IDS = [f"R{r}-{'all' if g is None else f's{g[0]}g{g[1]}'}" for r, g in GROUPINGS]

# ------------------------------------------------------------------ the wrappers' calls


def sharded(logits, indices, grouping=None, proportion=0.4):
    """The op as ``cross_entropy_sharded_loss`` makes it: (loss, -log(softmax) shard)."""
    graph = popxl.gcg()
    group = grouping if grouping is not None else graph.ir.replica_grouping()
    op = SHARDED.createOpInGraph(
        graph._pb_graph, {0: logits.id, 1: indices.id},
        {0: graph._create_tensor_id("loss"), 1: graph._create_tensor_id("nls")},
        group=group._pb_replica_grouping, availableMemoryProportion=proportion, settings=None)
    return tuple(popxl.Tensor._from_pb_tensor(op.outTensor(i)) for i in range(2))


def sharded_wr(logits, indices, ipus):
    """The op as ``cross_entropy_sharded_wr_loss`` makes it: (loss, *-log(softmax))."""
    graph = popxl.gcg()
    outputs = {i: graph._create_tensor_id(f"out{i}") for i in range(1 + len(logits))}
    op = WR.createOpInGraph(graph._pb_graph, {i: t.id for i, t in enumerate(logits + indices)},
                            outputs, ipus, settings=None)
    return tuple(popxl.Tensor._from_pb_tensor(op.outTensor(i)) for i in outputs)


def grads_of(ir, forward, seed, *args, wanted):
    """The gradients of the first ``wanted`` of ``args`` in ``forward(*args)`` for the
    output gradient ``seed``, through the forward call's stashed values."""
    graph = ir.create_graph(forward, *args)
    grads = autodiff(graph, grads_required=graph.inputs[:wanted])
    info = ops.call_with_info(graph, *args)
    return ops.call(grads.graph, seed, inputs_dict=grads.inputs_dict(info))


# ------------------------------------------------------------------ the NumPy reference


def ref_cross_entropy(logits, labels, seed):
    """Unsharded: -log(softmax), each sample's loss at its label (0 for a label outside
    the vocabulary), and the logits' gradient for the loss gradient ``seed``."""
    logits = logits.astype(np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    nls = np.log(np.exp(shifted).sum(axis=1, keepdims=True)) - shifted
    hits = np.arange(logits.shape[1]) == labels[:, None]
    loss = np.where(hits, nls, 0.0).sum(axis=1)
    grad = (np.exp(-nls) - hits) * seed[:, None]
    return loss, nls, grad


def ref_members(replicas, stride, size):
    """For each replica: its group's replicas in order of their index in the group."""
    block = stride * size
    return [[r - r % block + r % stride + j * stride for j in range(size)]
            for r in range(replicas)]


def labels_for(rng, vocab):
    """Labels covering each shard, one below and one above the vocabulary (no loss)."""
    labels = rng.integers(0, vocab, SAMPLES)
    labels[:2] = [-1, vocab]
    return labels


# ------------------------------------------------------------------ the replica-sharded op


def run_grouping(replicas, grouping, mode):
    """Run the op and its gradient for one grouping; return {name: (got, want)}."""
    stride, size = grouping or (1, replicas)
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        logits_in = popxl.h2d_stream((SAMPLES, SHARD), popxl.float32, "logits")
        labels_in = popxl.h2d_stream((SAMPLES,), popxl.int32, "labels")
        seed_in = popxl.h2d_stream((SAMPLES,), popxl.float32, "seed")
        logits, labels, seed = (ops.host_load(s) for s in (logits_in, labels_in, seed_in))
        group = ir.replica_grouping(stride, size)
        loss, nls = sharded(logits, labels, group if grouping else None)
        (dlogits,) = grads_of(ir, lambda x, i: sharded(x, i, group)[0], seed, logits, labels,
                              wanted=1)
        made = {"loss": loss, "nls": nls, "grad": dlogits}
        streams = {}
        for name, tensor in made.items():
            streams[name] = popxl.d2h_stream(tensor.shape, tensor.dtype, name)
            ops.host_store(streams[name], tensor)
    rng = np.random.default_rng(replicas * 10 + stride)
    members = ref_members(replicas, stride, size)
    vocab = size * SHARD
    # One problem per group: the full logits, labels and loss gradient.
    problems = {tuple(m): (rng.normal(size=(SAMPLES, vocab)).astype(np.float32),
                           labels_for(rng, vocab), rng.normal(size=SAMPLES).astype(np.float32))
                for m in members}
    feeds = {s: [] for s in (logits_in, labels_in, seed_in)}
    want = {name: [] for name in made}
    for r in range(replicas):
        full, labels_data, seed_data = problems[tuple(members[r])]
        k = members[r].index(r)
        columns = slice(k * SHARD, (k + 1) * SHARD)
        feeds[logits_in].append(full[:, columns])
        feeds[labels_in].append((labels_data - k * SHARD).astype(np.int32))
        feeds[seed_in].append(seed_data)
        loss_ref, nls_ref, grad_ref = ref_cross_entropy(full, labels_data, seed_data)
        want["loss"].append(loss_ref)
        want["nls"].append(nls_ref[:, columns])
        want["grad"].append(grad_ref[:, columns])
    # One replica's streams take its data without the replica axis.
    feeds = {s: np.stack(v) if replicas > 1 else v[0] for s, v in feeds.items()}
    with popxl.Session(ir, "ipu_model", replication_mode=mode) as session:
        got = session.run(feeds)
    return {name: (got[streams[name]], np.stack(want[name]).reshape(got[streams[name]].shape))
            for name in made}


def check_results(results):
    for name, (got, want) in results.items():
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("replicas, grouping", GROUPINGS, ids=GROUPING_IDS)
def test_sharded_loss_and_gradient_against_numpy(replicas, grouping):
    check_results(run_grouping(replicas, grouping, "vmap"))


def test_the_shard_map_path_gives_the_same_values():
    # shard_map needs one device per replica: a subprocess with eight CPU devices.
    code = textwrap.dedent("""
        from tests.custom_ops.test_shipped_cross_entropy import check_results, run_grouping
        for replicas, grouping in [(8, None), (8, (2, 4)), (8, (4, 2)), (8, (1, 1)),
                                   (4, (2, 2))]:
            check_results(run_grouping(replicas, grouping, "shard_map"))
        print("ok")
    """)
    run_with_cpu_devices(code, 8)


def test_only_the_loss_gradient_flows_as_in_cpp():
    # The C++ gradient op reads the loss's gradient only: a use of -log(softmax) gives the
    # logits no gradient through the op.
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((SAMPLES, SHARD), np.float32))
        labels = popxl.variable(np.zeros(SAMPLES, np.int32))
        (dx,) = grads_of(ir, lambda t, i: ops.sum(sharded(t, i)[1]) + ops.sum(t * 3.0),
                         popxl.constant(np.float32(1.0)), x, labels, wanted=1)
        out = popxl.d2h_stream(dx.shape, dx.dtype, "dx")
        ops.host_store(out, dx)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[out]
    np.testing.assert_array_equal(got, np.full((SAMPLES, SHARD), 3.0, np.float32))


def test_the_ops_and_the_memory_proportion_hint():
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        x = popxl.variable(np.ones((SAMPLES, SHARD), np.float32))
        labels = popxl.variable(np.zeros(SAMPLES, np.int32))
        loss, nls = sharded(x, labels, proportion=0.25)
        (op,) = ir.main_graph.ops
        assert op.name == "popxl.addons.ops.CrossEntropySharded"
        assert (loss.shape, nls.shape) == ((SAMPLES,), (SAMPLES, SHARD))
        assert op.hints["available_memory_proportion"] == 0.25
        (view,) = ir._pb_ir.getMainGraph().getOps()
        assert isinstance(view, SHARDED) and view.opType() == "CrossEntropySharded"
        view.setAvailableMemoryProportion(0.5)
        assert op.hints["available_memory_proportion"] == 0.5


# ------------------------------------------------------------------ the within-replica op

WR_SHARDS = (4, 3, 2)  # uneven shards of a vocabulary of 9


@pytest.mark.parametrize("labels_dtype", [popxl.int32, popxl.uint32])
def test_within_replica_loss_and_gradient_against_numpy(labels_dtype):
    rng = np.random.default_rng(3)
    vocab = sum(WR_SHARDS)
    full = rng.normal(size=(SAMPLES, vocab)).astype(np.float32)
    labels = rng.integers(0, vocab, SAMPLES)
    labels[0] = vocab  # outside the vocabulary: no loss, no one-hot
    if labels_dtype == popxl.int32:
        labels[1] = -1
    seed = rng.normal(size=SAMPLES).astype(np.float32)
    starts = np.cumsum((0, *WR_SHARDS))
    shards = [full[:, a:b] for a, b in zip(starts, starts[1:])]
    ir = popxl.Ir()
    with ir.main_graph:
        logits = [popxl.variable(s, name=f"logits{i}") for i, s in enumerate(shards)]
        indices = [popxl.variable(labels, labels_dtype, name=f"labels{i}")
                   for i in range(len(shards))]
        made = dict(zip(["loss", "nls0", "nls1", "nls2"],
                        sharded_wr(logits, indices, [0, 1, 2])))
        made.update(zip(["grad0", "grad1", "grad2"], grads_of(
            ir, lambda *ts: sharded_wr(list(ts[:3]), list(ts[3:]), [0, 1, 2])[0],
            popxl.constant(seed), *logits, *indices, wanted=3)))
        streams = {}
        for name, tensor in made.items():
            streams[name] = popxl.d2h_stream(tensor.shape, tensor.dtype, name)
            ops.host_store(streams[name], tensor)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()
    loss, nls, grad = ref_cross_entropy(full, labels, seed)
    want = {"loss": loss}
    for i, (a, b) in enumerate(zip(starts, starts[1:])):
        want[f"nls{i}"], want[f"grad{i}"] = nls[:, a:b], grad[:, a:b]
    check_results({name: (got[streams[name]], want[name]) for name in made})
    grad_ops = [op.name for graph in ir.graphs for op in graph.ops]
    assert grad_ops.count("popxl.addons.ops.CrossEntropyShardedGradWR") == 1


def test_within_replica_shards_made_on_their_ipus():
    # As the C++ op's, its inputs may come from several IPUs (one shard on each).
    rng = np.random.default_rng(4)
    full = rng.normal(size=(SAMPLES, sum(WR_SHARDS))).astype(np.float32)
    labels = rng.integers(0, full.shape[1], SAMPLES).astype(np.int32)
    starts = np.cumsum((0, *WR_SHARDS))
    ir = popxl.Ir()
    with ir.main_graph:
        logits, indices = [], []
        for ipu, (a, b) in enumerate(zip(starts, starts[1:])):
            with popxl.ipu(ipu):
                logits.append(popxl.variable(full[:, a:b]) + 0)
                indices.append(popxl.variable(labels) + 0)
        loss = sharded_wr(logits, indices, [0, 1, 2])[0]
        out = popxl.d2h_stream(loss.shape, loss.dtype, "loss")
        ops.host_store(out, loss)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()[out]
    want = ref_cross_entropy(full, labels, np.ones(SAMPLES))[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ errors


def _in_ir(build, replicas=2):
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        x = popxl.variable(np.ones((SAMPLES, SHARD), np.float32), name="x")
        labels = popxl.variable(np.zeros(SAMPLES, np.int32), name="labels")
        return build(ir, x, labels)


@pytest.mark.parametrize("build, error, message", [
    (lambda ir, x, i: sharded(ops.reshape(x, (SAMPLES * SHARD,)), i), popart_exception,
     "logits must be of rank 2"),
    (lambda ir, x, i: sharded(x, ops.reshape(i, (2, 3))), popart_exception,
     "indices must be of rank 1"),
    (lambda ir, x, i: sharded(x, i[:3]), popart_exception,
     "must have the same number of samples: logits \\[6, 5\\], indices \\[3\\]"),
    (lambda ir, x, i: sharded(x, ops.cast(i, popxl.float32)), popart_exception,
     "indices must be integers"),
    (lambda ir, x, i: sharded(ops.cast(x, popxl.int32), i), popart_exception,
     "logits must be floating point"),
    (lambda ir, x, i: SHARDED.createOpInGraph(
        ir.main_graph._pb_graph, {0: x.id, 1: i.id}, {0: "a", 1: "b"},
        ir.replica_grouping(), 0.4, None), TypeError, "`group` must be a popart ReplicaGrouping"),
    (lambda ir, x, i: SHARDED.createOpInGraph(
        ir.main_graph._pb_graph, {0: x.id, 1: i.id}, {0: "a", 1: "b"},
        PopartReplicaGrouping(4), 0.4, None), popart_exception,
     "grouping is of 4 replicas, but the Ir has replication_factor=2"),
    (lambda ir, x, i: sharded(x, i, proportion=1.5), ValueError,
     "available_memory_proportion must be in \\(0, 1\\]"),
    (lambda ir, x, i: sharded_wr([x, x], [i], [0, 1]), popart_exception,
     "number of inputs \\(3\\) does not equal twice the number of ipus \\(2\\)"),
    (lambda ir, x, i: sharded_wr([x, ops.cast(x, popxl.float16)], [i, i], [0, 1]),
     popart_exception, "not all logits inputs have the same datatype"),
    (lambda ir, x, i: sharded_wr([x, x[:2]], [i, i], [0, 1]), popart_exception,
     "all logits must be of rank 2, \\(n_samples, sub_n_classes\\), with the same number"),
    (lambda ir, x, i: sharded_wr([x, x], [i, ops.cast(i, popxl.uint32)], [0, 1]),
     popart_exception, "not all indices inputs have the same datatype"),
    (lambda ir, x, i: sharded_wr([x, x], [i, i[:2]], [0, 1]), popart_exception,
     "all indices must be of rank 1, \\(n_samples,\\), with the logits' 6 samples"),
    (lambda ir, x, i: WR.createOpInGraph(ir.main_graph._pb_graph, {0: x.id, 1: i.id},
                                         {0: "a", 1: "b"}, 0, None), TypeError,
     "`ipus` must be a list of IPU numbers"),
    (lambda ir, x, i: WR.createOpInGraph(ir.main_graph._pb_graph, {0: x.id, 1: i.id},
                                         {0: "a"}, [0], None), ValueError,
     "has 2 outputs for these inputs; 1 output ids were given"),
], ids=["logits rank", "indices rank", "samples", "float indices", "int logits",
        "popxl grouping", "other replica count", "proportion", "wr inputs", "wr logits dtype",
        "wr logits shape", "wr indices dtype", "wr indices shape", "wr ipus", "wr outputs"])
def test_argument_errors(build, error, message):
    with pytest.raises(error, match=message):
        _in_ir(build)


# ------------------------------------------------------------------ the import path


def test_popxl_addons_layout_imports_the_modules(tmp_path, monkeypatch):
    # A package laid out as popxl-addons' op folders: a .cpp beside the wrapper module.
    names = ["crossentropysharded_binding", "crossentropysharded_wr_binding"]
    wrappers = import_fake_addons_package(tmp_path, monkeypatch, "fake_addons_cross_entropy", names)
    assert wrappers.crossentropysharded_binding.CrossEntropyShardedOp is SHARDED
    assert wrappers.crossentropysharded_wr_binding.CrossEntropyShardedOp is WR
