"""Host streams as IR objects (spec §5): creation, naming, identity and their host ops."""

import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.popart._internal import ir as _ir


@pytest.mark.parametrize("factory", [popxl.h2d_stream, popxl.d2h_stream])
def test_streams_need_a_graph_on_the_stack(factory):
    with pytest.raises(RuntimeError, match="Trying to access a graph, but no graph has been "
                                           "selected"):
        factory((2,), popxl.float32)


@pytest.mark.parametrize("cls", [popxl.HostToDeviceStream, popxl.DeviceToHostStream])
def test_constructor_raises_not_implemented_error(cls):
    with pytest.raises(NotImplementedError, match=f"Cannot construct a {cls.__name__} "
                                                  "directly"):
        cls()


def test_properties():
    with popxl.Ir().main_graph:
        s = popxl.h2d_stream((2, 3), popxl.float16, name="x")
    assert (s.shape, s.dtype, s.tensor_id) == ((2, 3), popxl.float16, "x")
    assert s.spec == popxl.TensorSpec((2, 3), popxl.float16)


def test_default_names_are_made_unique():
    with popxl.Ir().main_graph:
        ids = [
            popxl.h2d_stream((1,), popxl.float32).tensor_id,
            popxl.h2d_stream((1,), popxl.float32).tensor_id,
            popxl.d2h_stream((1,), popxl.float32).tensor_id,
            popxl.d2h_stream((1,), popxl.float32).tensor_id,
            popxl.h2d_stream((1,), popxl.float32, "x").tensor_id,
            popxl.d2h_stream((1,), popxl.float32, "x").tensor_id,
        ]
    assert ids == ["h2d_stream", "h2d_stream__t0", "d2h_stream", "d2h_stream__t1", "x",
                   "x__t2"]


def test_stream_names_share_the_main_graph_tensor_ids():
    with popxl.Ir().main_graph:
        popxl.variable(1.0, name="data")
        s = popxl.h2d_stream((1,), popxl.float32, "data")
    assert s.tensor_id == "data__t0"


def test_streams_follow_name_scopes():
    with popxl.Ir().main_graph, popxl.name_scope("layer"):
        s = popxl.h2d_stream((1,), popxl.float32, "x")
    assert s.tensor_id == "layer/x"


def test_streams_always_go_to_the_main_graph():
    ir = popxl.Ir()
    body = ir.create_empty_graph()
    with body:
        s = popxl.d2h_stream((2,), popxl.int32, "out")
    assert s.tensor_id == "out"  # no graph scope
    assert ir.main_graph.get_tensor("out").shape == (2,)
    assert not body.tensors


def test_str_and_repr():
    with popxl.Ir().main_graph:
        h = popxl.h2d_stream((2,), popxl.float32, name="x")
        d = popxl.d2h_stream((), popxl.int32, name="y")
    assert str(h) == "HostToDeviceStream Tensor[x popxl.dtypes.float32 (2,)]"
    assert str(d) == "DeviceToHostStream Tensor[y popxl.dtypes.int32 ()]"
    assert repr(h) == str(h)


def test_streams_are_equal_through_their_tensor():
    ir = popxl.Ir()
    with ir.main_graph:
        s = popxl.h2d_stream((2,), popxl.float32, name="x")
        other = popxl.h2d_stream((2,), popxl.float32, name="x")
    same = popxl.HostToDeviceStream._create(ir.main_graph.get_tensor("x"))
    assert same is not s and same == s and hash(same) == hash(s)
    assert {s: 1}[same] == 1
    assert s != other and s != "x"


def test_host_load_and_store_in_any_graph():
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((2,), popxl.float32, name="x")
        d = popxl.d2h_stream((2,), popxl.float32, name="y")
        with ir.create_empty_graph() as body:
            loaded = ops.host_load(h)
            ops.host_store(d, loaded)
        named = ops.host_load(h, "named")
    assert loaded.id == "graph_subgraph(0)/x_hostload" and loaded.spec == h.spec
    assert named.id == "named_hostload"
    assert [op.name for op in body.ops] == ["init", "host_load", "host_store"]
    assert body.ops[2].outputs == ()


def test_host_load_fills_an_undefined_init_named_after_the_load():
    """PopXL's structure: ``init`` (undefined contents) of ``<name>_init``, then the
    ``host_load`` op taking it as input 0, on the same tile set."""
    ir = popxl.Ir()
    with ir.main_graph:
        h = popxl.h2d_stream((2, 3), popxl.float16, name="s")
        with popxl.io_tiles():
            named = ops.host_load(h, "x")
        default = ops.host_load(h)
    init, load, default_init, default_load = ir.main_graph.ops
    assert [op.name for op in ir.main_graph.ops] == ["init", "host_load"] * 2
    assert (init.attrs["init_type"], init.outputs[0].id) == ("undef", "x_init")
    assert init.outputs[0].spec == h.spec
    assert load.inputs == init.outputs and load.outputs == (named,)
    assert (named.id, named.spec) == ("x_hostload", h.spec)
    assert init.tile_set == load.tile_set == "io"
    assert (default_init.outputs[0].id, default.id) == ("s_init", "s_hostload")
    assert default_load.inputs == default_init.outputs
    assert [t.id for t in ir.main_graph.tensors] == [
        "s", "x_init", "x_hostload", "s_init", "s_hostload"]
    views = ir.main_graph._pb_graph.getOps()
    assert isinstance(views[0], _ir.op.InitOp)
    assert isinstance(views[1], _ir.op.exchange.HostLoadOp)
    assert views[1].inTensor(0).id == "x_init" and views[1].outTensor(0).id == "x_hostload"


def test_host_store_checks_dtype_and_shape():
    with popxl.Ir().main_graph:
        d = popxl.d2h_stream((2,), popxl.float32, name="y")
        wrong_dtype = popxl.variable([1, 2], name="ints")
        wrong_shape = popxl.variable([1.0, 2.0, 3.0], name="three")
        with pytest.raises(ValueError, match="dtype of stream `y` .* does not match dtype of "
                                             "provided tensor `ints`"):
            ops.host_store(d, wrong_dtype)
        with pytest.raises(ValueError, match="shape of stream `y` .* does not match shape of "
                                             "provided tensor `three`"):
            ops.host_store(d, wrong_shape)


def test_streams_of_the_wrong_direction_raise_type_error():
    with popxl.Ir().main_graph:
        h = popxl.h2d_stream((2,), popxl.float32)
        d = popxl.d2h_stream((2,), popxl.float32)
        with pytest.raises(TypeError, match="host_load needs a HostToDeviceStream"):
            ops.host_load(d)
        with pytest.raises(TypeError, match="host_store needs a DeviceToHostStream"):
            ops.host_store(h, ops.host_load(h))
