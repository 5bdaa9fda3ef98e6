"""``Op.getSettings()``: PopART's op settings read from the ipuxl op (tile set, IPU,
execution context, name), and refused as a way to move an op."""

import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.execution_context import ExecutionContext
from ipuxl.popart._internal import ir as _ir


def placed_ops():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(1.0, name="x")
        with popxl.io_tiles():
            ops.add(x, x)
        with popxl.ipu(1):
            ops.mul(x, x)
    return ir, *ir.main_graph._pb_graph.getOps()


def test_settings_give_the_tile_set_the_op_was_built_on():
    _, add, mul = placed_ops()
    assert add.getSettings().tileSet == _ir.TileSet.IO
    assert mul.getSettings().tileSet == _ir.TileSet.Compute


def test_settings_give_the_ipu_name_and_fragment_of_the_op():
    ir, add, mul = placed_ops()
    assert (add.getSettings().vgraphId, mul.getSettings().vgraphId) == (0, 1)
    assert mul.getSettings().vgraphId == mul.getVirtualGraphId()
    assert (add.getSettings().name, mul.getSettings().name) == ("add", "mul")
    assert add.getSettings().executionContext is ExecutionContext.Normal
    assert add.getSettings().getIr() is ir._pb_ir


def test_settings_follow_an_io_tile_copy_placed_by_the_op():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(1.0)
        with popxl.io_tiles():
            y = ops.add(x, x)
        ops.mul(y, y)
    tile_sets = [(op.opType(), op.getSettings().tileSet)
                 for op in ir.main_graph._pb_graph.getOps()]
    assert tile_sets == [("Add", _ir.TileSet.IO), ("IoTileCopy", _ir.TileSet.Compute),
                         ("Mul", _ir.TileSet.Compute)]


def test_settings_cannot_move_an_op():
    _, add, _ = placed_ops()
    with pytest.raises(AttributeError,
                       match=r"Op settings are read-only in ipuxl: `tileSet` was set to "
                             r"<TileSet.Compute: 0> on the settings of Op\[add .*build it under `with popxl.io_tiles\(\):`"):
        add.getSettings().tileSet = _ir.TileSet.Compute
    assert add.getSettings().tileSet == _ir.TileSet.IO
