"""ipu_copy / io_tile_copy: identities in value that record the new placement."""

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops


def test_ipu_copy_names_places_and_keeps_the_value():
    ir = popxl.Ir()
    with ir.main_graph:
        with popxl.ipu(0):
            x = ops.init((2,), popxl.float32, "x")
            x1 = x + 3.0
        y = ops.ipu_copy(x1, 1)
        z = x1.copy_to_ipu(2)
        with popxl.in_sequence():
            out = popxl.d2h_stream((2,), popxl.float32, name="out")
            ops.host_store(out, ops.ipu_copy(y, 0))
    assert (y.name, y.ipu, z.ipu) == ("add_out_c1", 1, 2)
    assert ir.main_graph.ops[-2].attrs == {"source": 1, "destination": 0}
    with popxl.Session(ir, "ipu_model") as session:
        np.testing.assert_array_equal(session.run()[out], [3.0, 3.0])


def test_ipu_copy_needs_a_source_for_an_unplaced_tensor():
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros(2, np.float32), name="w")
        with pytest.raises(ValueError, match=r"^Could not infer the ipu for Tensor to be copied "
                           r"`w`: .* Please specify `source` when copying this tensor"):
            ops.ipu_copy(w, 1)
        assert ops.ipu_copy(w, 1, source=0).ipu == 1
        with pytest.raises(TypeError, match="The input `t` is not a Tensor"):
            ops.ipu_copy(np.zeros(2), 1)


def test_io_tile_copy_moves_between_tile_sets():
    ir = popxl.Ir()
    with ir.main_graph:
        x = ops.init((2,), popxl.float32, "x")
        on_io = ops.io_tile_copy(x)
        back = ops.io_tile_copy(on_io)
        with popxl.io_tiles():
            y = ops.init((2,), popxl.float32, "y")
    assert (x.tile_set, on_io.tile_set, back.tile_set, y.tile_set) == (
        "compute", "io", "compute", "io")
