"""popxl-addons' rotary embedding, tensor-parallel layer norm and scaled sum-of-squares
custom ops (ipuxl.custom_ops.shipped.rotary, .layer_norm_distributed,
.grad_reduce_square_add) against NumPy references.

The ops are made as popxl-addons' wrappers make them: through the binding classes'
``createOpInGraph``, with the wrappers' arguments. The references are written
independently: RoPE as a product of complex numbers, the layer norm on each replica's
whole rows (its group's shards put back together), the sum of squares in float64. The
distributed layer norm runs one replicated program per grouping, on the Session's
``vmap`` path here and its ``shard_map`` path (one CPU device per replica) in a
subprocess.
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

ROTARY = binding_module("rotary_pos_embed_binding").members["RotaryPosEmbedOp"]
LAYER_NORM = binding_module("layer_norm_distributed_binding").members["LayerNormDistributedOp"]
SQUARE_ADD = binding_module("grad_reduce_square_add_binding").members["GradReduceSquareAddOp"]


def _create(cls: type, inputs: list, n_outputs: int, *args) -> list[popxl.Tensor]:
    """``cls.createOpInGraph`` as popxl-addons' wrappers call it (settings last)."""
    graph = popxl.gcg()
    op = cls.createOpInGraph(graph._pb_graph, {i: t.id for i, t in enumerate(inputs)},
                             {i: graph._create_tensor_id(f"out{i}") for i in range(n_outputs)},
                             *args, None)
    return [popxl.Tensor._from_pb_tensor(op.outTensor(i)) for i in range(n_outputs)]


def rotary(t, sin, cos, rotary_dim=None):
    """popxl-addons' ``rotary_pos_embed``: 2-D tables get a leading 1."""
    sin = sin.reshape((1, *sin.shape)) if sin.rank == 2 else sin
    cos = cos.reshape((1, *cos.shape)) if cos.rank == 2 else cos
    return _create(ROTARY, [t, sin, cos], 1, rotary_dim or t.shape[-1])[0]


def layer_norm(t, w, b, epsilon=1e-5, group=None):
    group = popxl.gcg().ir.replica_grouping() if group is None else group
    return _create(LAYER_NORM, [t, w, b], 3, epsilon, group._pb_replica_grouping)[0]


def square_add(t, loss_scaling):
    scale = 1 / (loss_scaling * loss_scaling)
    if not isinstance(scale, popxl.Tensor):
        scale = popxl.constant(scale, popxl.float32)
    return _create(SQUARE_ADD, [t, scale], 1)[0]


def _run(ir, outputs: dict) -> dict:
    streams = {}
    with ir.main_graph:
        for name, tensor in outputs.items():
            streams[name] = popxl.d2h_stream(tensor.shape, tensor.dtype, name)
            ops.host_store(streams[name], tensor)
    with popxl.Session(ir, "ipu_model") as session:
        got = session.run()
    return {name: got[stream] for name, stream in streams.items()}


# ------------------------------------------------------------------ rotary embedding


def ref_angles(seq, rotary_dim):
    """popxl-addons' ``trig_tables`` angles: position m times 10000^(-2i / rotary_dim)."""
    return np.outer(np.arange(seq), 10000.0 ** (-np.arange(0, rotary_dim, 2) / rotary_dim))


def ref_tables(seq, rotary_dim):
    angles = ref_angles(seq, rotary_dim)
    return np.sin(angles), np.cos(angles)


def ref_rotate(x, sin, cos, rotary_dim, direction=1):
    """The leading pairs of each head as complex numbers, times exp(±i angle)."""
    width = min(rotary_dim, x.shape[3])
    z = x[..., 0:width:2] + 1j * x[..., 1:width:2]
    turn = (cos + direction * 1j * sin)[:, :, None, :]   # (1 or batch, seq, 1, pairs)
    z = z * turn
    out = x.astype(np.float64).copy()
    out[..., 0:width:2], out[..., 1:width:2] = z.real, z.imag
    return out


# (shape, rotary_dim, tables with the batch dimension, dtype); rotary_dim None: all.
ROTARY_CASES = [
    ((3, 8, 2, 32), None, False, "float32"),
    ((3, 8, 2, 32), 4, False, "float32"),
    ((3, 8, 2, 32), 16, True, "float32"),
    ((2, 5, 3, 6), 64, False, "float32"),
    ((2, 4, 2, 8), 6, False, "float16"),
]


@pytest.mark.parametrize("shape, rotary_dim, batched, dtype", ROTARY_CASES,
                         ids=["all", "r4", "r16 batched tables", "r over hidden", "float16"])
def test_rotary_values_and_gradient_against_numpy(shape, rotary_dim, batched, dtype):
    rng = np.random.default_rng(sum(shape))
    x = rng.normal(size=shape).astype(dtype)
    seed = rng.normal(size=shape).astype(dtype)
    width = min(rotary_dim or shape[3], shape[3])
    angles = ref_angles(shape[1], width)
    if batched:  # one table per batch entry, each turned further
        angles = angles[None] + np.arange(shape[0])[:, None, None]
    sin, cos = np.sin(angles).astype(dtype), np.cos(angles).astype(dtype)
    ir = popxl.Ir()
    with ir.main_graph:
        x_t = popxl.variable(x)
        sin_t, cos_t = popxl.constant(sin), popxl.constant(cos)
        graph = ir.create_graph(rotary, x_t, sin_t, cos_t, rotary_dim)
        grad_info = autodiff(graph, grads_required=graph.inputs[:1])
        call = ops.call_with_info(graph, x_t, sin_t, cos_t)
        (dx,) = ops.call(grad_info.graph, popxl.constant(seed),
                         inputs_dict=grad_info.inputs_dict(call))
        y = call.outputs[0]  # autodiff may add outputs that its gradient graph reads
    got = _run(ir, {"y": y, "dx": dx})
    tables = (sin.astype(np.float64), cos.astype(np.float64))
    tables = tables if batched else tuple(t[None] for t in tables)
    want_y = ref_rotate(x.astype(np.float64), *tables, rotary_dim or shape[3])
    want_dx = ref_rotate(seed.astype(np.float64), *tables, rotary_dim or shape[3], -1)
    tolerance = 1e-6 if dtype == "float32" else 4e-3
    assert got["y"].dtype == np.dtype(dtype) and got["y"].shape == shape
    np.testing.assert_allclose(got["y"], want_y, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(got["dx"], want_dx, rtol=tolerance, atol=tolerance)


def test_rotary_rounds_each_product_before_the_sum():
    # The C++ op's map: re * cos - im * sin with both products rounded to float32 (what
    # popxl-addons' test compares with PyTorch at rtol=1e-7), not one of them in an FMA.
    rng = np.random.default_rng(7)
    x = rng.random((3, 8, 2, 32), dtype=np.float32)
    sin, cos = (t.astype(np.float32) for t in ref_tables(8, 32))
    ir = popxl.Ir()
    with ir.main_graph:
        y = rotary(popxl.variable(x), popxl.constant(sin), popxl.constant(cos))
    got = _run(ir, {"y": y})["y"]
    real, imaginary = x[..., 0::2], x[..., 1::2]
    s, c = sin[None, :, None, :], cos[None, :, None, :]
    np.testing.assert_array_equal(got[..., 0::2], real * c - imaginary * s)
    np.testing.assert_array_equal(got[..., 1::2], imaginary * c + real * s)


def test_rotary_tables_get_no_gradient_as_in_cpp():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((1, 2, 1, 4), np.float32))
        sin, cos = (popxl.variable(t.astype(np.float32)) for t in ref_tables(2, 4))
        graph = ir.create_graph(rotary, x, sin, cos)
    names = [op.name for op in autodiff(graph).graph.ops]
    assert names.count("popxl.addons.ops.RotaryPosEmbedGrad") == 1
    forward = [op for op in graph.ops if op.name == "popxl.addons.ops.RotaryPosEmbed"]
    assert len(forward) == 1 and forward[0].attrs["rotary_dim"] == 4


def _rotary_in_ir(x_shape, sin_shape, rotary_dim, dtype=np.float32, cos_shape=None,
                  table_dtype=None):
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros(x_shape, dtype))
        sin = popxl.variable(np.zeros(sin_shape, table_dtype or dtype))
        cos = popxl.variable(np.zeros(cos_shape or sin_shape, table_dtype or dtype))
        return _create(ROTARY, [x, sin, cos], 1, rotary_dim)


@pytest.mark.parametrize("args, error, message", [
    (((2, 4, 8), (1, 4, 4), 8), popart_exception, "x should have rank 4"),
    (((1, 4, 2, 8), (4, 4), 8), popart_exception, "trig functions should have rank 3"),
    (((1, 4, 2, 8), (1, 4, 2), 3), popart_exception, "rotary_dim must be a multiple of 2"),
    (((1, 4, 2, 8), (1, 4, 2), -2), TypeError, "`rotaryDim` must be an unsigned integer"),
    (((1, 4, 2, 8), (1, 4, 2), 4.0), TypeError, "`rotaryDim` must be an unsigned integer"),
    (((1, 4, 2, 7), (1, 4, 3), 8), popart_exception, "covers all 7 hidden elements"),
    (((1, 4, 2, 8), (1, 4, 3), 4), popart_exception,
     r"the sin table \[1, 4, 3\] does not broadcast to the rotated pairs"),
    (((1, 4, 2, 8), (2, 4, 4), 8), popart_exception, "the sin table"),
    (((1, 4, 2, 8), (1, 4, 4), 8, np.float32, (1, 5, 4)), popart_exception, "the cos table"),
    (((1, 4, 2, 8), (1, 4, 4), 8, np.float32, None, np.float16), popart_exception,
     "the sin table is float16 but t is float32"),
], ids=["rank 3 x", "rank 2 tables", "odd", "negative", "float", "odd hidden",
        "short table", "table batch", "cos seq", "table dtype"])
def test_rotary_errors(args, error, message):
    with pytest.raises(error, match=message):
        _rotary_in_ir(*args)


# ------------------------------------------------------------------ distributed layer norm

# (replicas, (stride, group_size)); None: the wrapper's default, all replicas.
GROUPINGS = [(1, None), (4, (2, 2)), (8, None), (8, (1, 2)), (8, (4, 2)), (8, (2, 4)),
             (8, (1, 1))]
GROUPING_IDS = [f"R{r}-{'all' if g is None else f's{g[0]}g{g[1]}'}" for r, g in GROUPINGS]
ROWS, SHARD, EPSILON = 3, 4, 1e-3


def ref_members(replicas, stride, size):
    """For each replica, the replicas of its group in order of their index in it."""
    block = stride * size
    return [[r - r % block + r % stride + j * stride for j in range(size)]
            for r in range(replicas)]


def ref_layer_norm(xs, ws, bs, dys, members, epsilon):
    """Per replica: y, and the C++ op's gradients of its shard of x, w and b."""
    want = {"y": [], "mean": [], "inv_std_dev": [], "dx": [], "dw": [], "db": []}
    for r, group in enumerate(members):
        rows = np.concatenate([xs[m] for m in group], axis=1).astype(np.float64)
        grads = np.concatenate([dys[m] for m in group], axis=1).astype(np.float64)
        mean = rows.mean(1, keepdims=True)
        inv = 1 / np.sqrt(rows.var(1, keepdims=True) + epsilon)
        shard = slice(group.index(r) * SHARD, (group.index(r) + 1) * SHARD)
        x_hat = (rows - mean) * inv
        # Unit scale in x's gradient, as the C++ gradient op computes it.
        dx = inv * (grads - grads.mean(1, keepdims=True)
                    - x_hat * (grads * x_hat).mean(1, keepdims=True))
        want["y"].append(x_hat[:, shard] * ws[r] + bs[r])
        want["mean"].append(mean[:, 0])
        want["inv_std_dev"].append(inv[:, 0])
        want["dx"].append(dx[:, shard])
        want["dw"].append((grads * x_hat)[:, shard].sum(0))
        want["db"].append(grads[:, shard].sum(0))
    return {name: np.stack(values) for name, values in want.items()}


def run_layer_norm(replicas, grouping, mode, dtype="float32"):
    """One program: the op's three outputs and its gradients; returns {name: (got, want)}."""
    stride, size = grouping or (1, replicas)
    ir = popxl.Ir(replication=replicas)
    group = ir.replica_grouping(stride, size)
    shapes = {"x": (ROWS, SHARD), "w": (SHARD,), "b": (SHARD,), "dy": (ROWS, SHARD)}
    streams, loaded = {}, {}
    with ir.main_graph:
        for name, shape in shapes.items():
            streams[name] = popxl.h2d_stream(shape, popxl.dtypes.dtype.as_dtype(dtype), name)
            loaded[name] = ops.host_load(streams[name])
        x, w, b, dy = (loaded[n] for n in shapes)

        def forward(x, w, b):
            return tuple(_create(LAYER_NORM, [x, w, b], 3, EPSILON,
                                 group._pb_replica_grouping))

        graph = ir.create_graph(forward, x, w, b)
        grad_info = autodiff(graph, grads_provided=graph.outputs[:1])
        call = ops.call_with_info(graph, x, w, b)
        dx, dw, db = ops.call(grad_info.graph, dy, inputs_dict=grad_info.inputs_dict(call))
        made = dict(zip(("y", "mean", "inv_std_dev"), call.outputs))
        made.update(dx=dx, dw=dw, db=db)
        outs = {}
        for name, tensor in made.items():
            outs[name] = popxl.d2h_stream(tensor.shape, tensor.dtype, f"{name}_out")
            ops.host_store(outs[name], tensor)
    rng = np.random.default_rng(replicas * 10 + stride)
    data = {name: rng.normal(size=(replicas, *shape)).astype(dtype)
            for name, shape in shapes.items()}
    data["x"] = data["x"] * 3 + 1
    with popxl.Session(ir, "ipu_model", replication_mode=mode) as session:
        # One replica's streams take its data without the replica axis.
        feeds = {streams[n]: (v if replicas > 1 else v[0]) for n, v in data.items()}
        got = session.run(feeds)
    want = ref_layer_norm(data["x"], data["w"], data["b"], data["dy"],
                          ref_members(replicas, stride, size), EPSILON)
    return {name: (got[outs[name]].reshape(want[name].shape), want[name]) for name in made}


def check_results(results, tolerance=2e-5):
    for name, (got, want) in results.items():
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance, err_msg=name)


@pytest.mark.parametrize("replicas, grouping", GROUPINGS, ids=GROUPING_IDS)
def test_layer_norm_values_and_gradients_against_numpy(replicas, grouping):
    check_results(run_layer_norm(replicas, grouping, "vmap"))


def test_layer_norm_in_float16():
    results = run_layer_norm(4, (2, 2), "vmap", "float16")
    assert all(got.dtype == np.float16 for got, _ in results.values())
    check_results(results, tolerance=2e-2)


def test_layer_norm_the_shard_map_path_gives_the_same_values():
    # shard_map needs one device per replica: a subprocess with eight CPU devices.
    code = textwrap.dedent("""
        from tests.custom_ops.test_shipped_rotary_layernorm import check_results, run_layer_norm
        for grouping in [None, (2, 2), (4, 2), (2, 4), (1, 1)]:
            check_results(run_layer_norm(8, grouping, "shard_map"))
        check_results(run_layer_norm(4, (2, 2), "shard_map"))
        print("ok")
    """)
    run_with_cpu_devices(code, 8)


def _layer_norm_in_ir(x_shape=(2, 4), w_shape=(4,), dtype=np.float32, w_dtype=None,
                      epsilon=1e-5, group=None, replicas=4):
    ir = popxl.Ir(replication=replicas)
    with ir.main_graph:
        x = popxl.variable(np.zeros(x_shape, dtype))
        w = popxl.variable(np.ones(w_shape, w_dtype or dtype))
        b = popxl.variable(np.zeros((4,), dtype))
        group = ir.replica_grouping()._pb_replica_grouping if group is None else group
        return _create(LAYER_NORM, [x, w, b], 3, epsilon, group)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"x_shape": (2, 2, 4)}, popart_exception, r"t must be \(N, H\)"),
    ({"w_shape": (3,)}, popart_exception, r"w must be this replica's shard .* float32\[4\]"),
    ({"w_dtype": np.float16}, popart_exception, r"got float16\[4\]"),
    ({"dtype": np.int32}, popart_exception, "t must be float16 or float32, got int32"),
    ({"epsilon": "small"}, TypeError, "`epsilon` must be a float"),
    ({"group": "all"}, TypeError, "`group` must be a popart ReplicaGrouping"),
    ({"group": PopartReplicaGrouping(8, 1, 2)}, popart_exception,
     "the replica grouping is of 8 replicas, but the Ir has replication_factor=4"),
], ids=["rank 3", "w shape", "w dtype", "int", "epsilon", "group type", "group replicas"])
def test_layer_norm_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        _layer_norm_in_ir(**kwargs)


def test_layer_norm_outputs_are_named_and_typed_as_in_cpp():
    y, mean, inv_std_dev = _layer_norm_in_ir(x_shape=(5, 4), dtype=np.float16)
    assert (y.shape, mean.shape, inv_std_dev.shape) == ((5, 4), (5,), (5,))
    assert {t.dtype for t in (y, mean, inv_std_dev)} == {popxl.float16}


# ------------------------------------------------------------------ sum of squares


@pytest.mark.parametrize("dtype, loss_scaling", [("float32", 64), ("float16", 8),
                                                 ("float32", "tensor")])
def test_square_add_against_numpy(dtype, loss_scaling):
    x = (np.arange(24).reshape(2, 3, 4) - 11.5).astype(dtype)
    ir = popxl.Ir()
    with ir.main_graph:
        scaling = popxl.constant(np.float32(4.0)) if loss_scaling == "tensor" else loss_scaling
        y = square_add(popxl.variable(x), scaling)
    assert (y.shape, y.dtype) == ((), popxl.float32)
    got = _run(ir, {"y": y})["y"]
    factor = 4.0 if loss_scaling == "tensor" else loss_scaling
    np.testing.assert_allclose(got, np.sum(np.square(x.astype(np.float64) / factor)),
                               rtol=1e-6)


def test_square_add_has_no_gradient_as_in_cpp():
    # The C++ op has no gradient op: x gets the gradient of its other use only.
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones((2, 3), np.float32))
        graph = ir.create_graph(lambda t: square_add(t, 2) + ops.sum(t * 3.0), x)
        (dx,) = ops.call(autodiff(graph).graph, popxl.constant(np.float32(1.0)))
    np.testing.assert_array_equal(_run(ir, {"dx": dx})["dx"], np.full((2, 3), 3.0))


@pytest.mark.parametrize("x_dtype, scale, message", [
    (np.int32, np.float32(1.0), "t must be a float tensor, got int32"),
    (np.float32, np.ones(2, np.float32), r"must have one element.* got shape \[2\]"),
    (np.float32, np.int32(1), "scale must be a float tensor"),
], ids=["int t", "two scales", "int scale"])
def test_square_add_errors(x_dtype, scale, message):
    ir = popxl.Ir()
    with ir.main_graph, pytest.raises(popart_exception, match=message):
        _create(SQUARE_ADD, [popxl.variable(np.ones(3, x_dtype)), popxl.constant(scale)], 1)


# ------------------------------------------------------------------ the import path


def test_popxl_addons_layout_imports_the_modules(tmp_path, monkeypatch):
    # A package laid out as popxl-addons' op folders: a .cpp beside the wrapper module.
    names = ["rotary_pos_embed_binding", "layer_norm_distributed_binding",
             "grad_reduce_square_add_binding"]
    wrappers = import_fake_addons_package(tmp_path, monkeypatch, "fake_addons_rotary_layernorm", names)
    assert wrappers.rotary_pos_embed_binding.RotaryPosEmbedOp is ROTARY
    assert wrappers.layer_norm_distributed_binding.LayerNormDistributedOp is LAYER_NORM
    assert wrappers.grad_reduce_square_add_binding.GradReduceSquareAddOp is SQUARE_ADD
