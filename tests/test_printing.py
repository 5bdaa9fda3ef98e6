"""Golden tests of the IR text form (``print(ir)``, ``print(graph)``; see docs/ir.md).

Each ``build_*`` function below makes one Ir; its text must equal
``tests/golden/<name>.txt``. The text names this file's source lines, so editing this file
usually changes the goldens. After checking that a change is intended, regenerate with::

    UPDATE_GOLDEN=1 pytest tests/test_printing.py

and review the diff of ``tests/golden/``.
"""

import os
import pathlib

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.context import _execution_context
from ipuxl.execution_context import ExecutionContext
from ipuxl.fp8_utils import host_pow2scale_cast_to_fp8
from ipuxl.ops.call import call
from ipuxl.printing import format_graph, format_ir, format_type, format_value

GOLDEN = pathlib.Path(__file__).parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


def build_streams() -> popxl.Ir:
    """Streams in and out, a name scope and a constant made by an operator."""
    ir = popxl.Ir()
    ir.num_host_transfers = 2
    with ir.main_graph:
        x_stream = popxl.h2d_stream((4, 8), popxl.float32, name="x")
        y_stream = popxl.d2h_stream((4, 8), popxl.float32, name="y")
        popxl.h2d_stream((1,), popxl.int32, name="unused")
        x = ops.host_load(x_stream)
        with popxl.name_scope("layer"):
            y = ops.relu(x) * 2.0
        ops.host_store(y_stream, y)
    return ir


def build_tensors() -> popxl.Ir:
    """Variables (plain, grouped, float8, scalar, large), constants and multi-output ops."""
    ir = popxl.Ir(replication=2)
    with ir.main_graph:
        w = popxl.variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="w")
        popxl.variable(
            np.array([[1, 2], [3, 4]], np.int32),
            name="per_replica",
            replica_grouping=ir.replica_grouping(group_size=1),
        )
        popxl.variable(np.zeros(2, np.float16), name="gathered", retrieval_mode="all_replicas")
        step = popxl.variable(0, popxl.uint32, name="step")
        popxl.variable(np.ones((16, 16), np.float32), name="big")
        fp8 = popxl.variable(
            host_pow2scale_cast_to_fp8(np.array([0.5, -2.0, 240.0]), popxl.float8_143),
            name="fp8")
        popxl.constant(np.array([1.0, 0.25], np.float32), popxl.float8_152, name="fp8_const")
        flags = popxl.constant([True, False], name="flags")
        ops.increment_mod_(step, 1, 10)
        a, b = ops.split(w, [1, 2], axis=1)
        ops.where(flags, ops.reshape(a, (2,)), popxl.constant(0.0, name="zero"))
        ops.reshape(fp8, (3, 1))
        ops.matmul(ops.transpose(b), w)
    return ir


def build_inplace() -> popxl.Ir:
    """In-place and view ops, in_sequence constraints, placement and execution contexts."""
    ir = popxl.Ir()
    with ir.main_graph:
        w = popxl.variable(np.zeros((2, 2), np.float32), name="w")
        g = popxl.variable(np.ones((2, 2), np.float32), name="g")
        out = popxl.d2h_stream((2, 2), popxl.float32, name="out")
        with popxl.in_sequence():
            w += g
            flat = w.reshape_((4,))
            ops.relu_(flat)
            with popxl.in_sequence(False):
                ops.host_store(out, w)
                ops.host_store(out, g)
            ops.var_updates.accumulate_(w.transpose_(), g)
        with popxl.ipu(1), popxl.io_tiles():
            ops.exp(g)
        with _execution_context(ExecutionContext.WeightsToHostFragment):
            ops.identity(w, "saved")
    return ir


class Scale(popxl.Module):
    """A traced subgraph: its id comes from the class name."""

    def build(self, x: popxl.Tensor, acc: popxl.TensorByRef) -> popxl.Tensor:
        with popxl.name_scope("inner"):
            y = x * 3.0
        ops.add_(acc, y)
        return y


def build_subgraphs() -> popxl.Ir:
    """Traced and hand-built subgraphs: a by-reference input, a meta shape, outputs,
    constants, name scopes, a call site that writes back, and a remote buffer."""
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable([1.0, 2.0], name="v")
        acc = popxl.variable([0.0, 0.0], name="acc")
        scale = ir.create_graph(Scale(), v, acc)
        (scaled,) = call(scale, v, acc)
        ops.negate(scaled)
        popxl.remote_buffer((3,), popxl.float16, entries=4).meta_shape = (6,)
    empty = ir.create_empty_graph()
    with empty:
        shard = popxl.graph_input((1,), popxl.float32, "shard", meta_shape=(2,))
        popxl.graph_output(popxl.constant(7, popxl.int64, name="seven"))
        popxl.graph_output(shard)
    return ir


BUILDERS = {
    "streams": build_streams,
    "tensors": build_tensors,
    "inplace": build_inplace,
    "subgraphs": build_subgraphs,
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_golden(name):
    text = str(BUILDERS[name]()) + "\n"
    path = GOLDEN / f"{name}.txt"
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"{path} is missing: run `UPDATE_GOLDEN=1 pytest {__file__}`."
    assert text == path.read_text(), (
        f"The text form of build_{name}() differs from {path}. If the change is intended, "
        "regenerate with UPDATE_GOLDEN=1 (see this module's docstring)."
    )


def test_text_does_not_depend_on_the_ir_id_or_numpy_print_options():
    first = str(build_tensors())
    with np.printoptions(precision=2, floatmode="fixed", sign="+", legacy="1.13"):
        second = str(build_tensors())
    assert first == second


def test_print_graph_is_its_block_of_print_ir():
    ir = build_subgraphs()
    blocks = str(ir).split("\n\n")
    assert blocks[0] == "ir(num_host_transfers=1, replication_factor=1)"
    assert blocks[1:] == [str(graph) for graph in ir.graphs]
    assert blocks[2].startswith("graph Scale_subgraph(0)(x: f32[2], by_ref acc: f32[2]) {")
    assert blocks[3].startswith("graph graph_subgraph(1)(shard: f32[1] meta[2]) {")


def test_locations_and_data_can_be_left_out():
    ir = build_streams()
    text = format_ir(ir, locations=False, data=False)
    assert "#" not in text and " = 2." not in text
    assert "  constant layer/t: f32[]\n" in text
    assert format_graph(ir.main_graph, locations=False) in format_ir(ir, locations=False)


def test_op_lines_name_the_source_line():
    with popxl.Ir().main_graph as main:
        v = popxl.variable(1.0, name="v")
        ops.relu(v)
    line = main.ops[0].location[1]
    assert str(main).splitlines()[-2].endswith(f"  # test_printing.py:{line}")


@pytest.mark.parametrize(
    "shape, dtype, expected",
    [
        ((4, 8), popxl.float32, "f32[4,8]"),
        ((), popxl.int32, "i32[]"),
        ((3,), popxl.float8_143, "f8_143[3]"),
        ((0, 2), popxl.bool, "bool[0,2]"),
    ],
)
def test_format_type(shape, dtype, expected):
    assert format_type(popxl.TensorSpec(shape, dtype)) == expected


def test_format_type_shows_a_meta_shape():
    assert format_type(popxl.TensorSpec((2,), popxl.float16, (4,))) == "f16[2] meta[4]"


@pytest.mark.parametrize(
    "value, expected",
    [
        (popxl.float16, "f16"),
        ((1, 2), "(1, 2)"),
        ((1,), "(1,)"),
        ([1, 2], "(1, 2)"),
        (0.1, "0.1"),
        ("auto", "'auto'"),
        (True, "True"),
        (slice(1, None), "1:"),
        (slice(None, 4, 2), ":4:2"),
        (np.array([[1, 2], [3, 4]]), "[[1, 2], [3, 4]]"),
    ],
)
def test_format_value(value, expected):
    assert format_value(value) == expected


def test_format_value_of_ir_objects():
    ir = popxl.Ir()
    with ir.main_graph:
        stream = popxl.h2d_stream((1,), popxl.float32, "s")
        buffer = popxl.remote_buffer((1,), popxl.float32)
        v = popxl.variable(1.0, name="v")
    graph = ir.create_empty_graph("g")
    assert [format_value(x) for x in (stream, buffer, v, graph)] == [
        "s", "remote_buffer(1)", "v", "g_subgraph(0)"]
