"""The inplacing-ambiguity rule checked when a Session is built, and ``in_sequence``
(spec §8.2, §8.3): every program the spec says must raise, and every one it says must be
accepted, in the main graph and inside a subgraph (whose inputs are passed by value).
"""

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops.call import call, call_with_info
from ipuxl.ops.repeat import repeat
from ipuxl.ops.var_updates import copy_var_update_
from ipuxl.popart import popart_exception
from ipuxl.verify import verify_ir

PREFIX = "^Inplacing ambiguity detected."


# Each program gets tensors a, b (f32[2]) and a d2h stream `out` of f32[2].


def relu_then_iadd(a, b, out):
    ops.relu_(a)
    a += b


def relu_read_and_relu_inplace(a, b, out):
    b_ = ops.relu(a)
    c = ops.relu_(a)
    ops.add_(b_, c)


def relu_inplace_twice(a, b, out):
    ops.relu_(a)
    ops.relu_(a)


def relu_then_gelu_inplace(a, b, out):
    ops.relu_(a)
    ops.gelu_(a)


def read_then_copy_update(a, b, out):
    a + 5.0
    copy_var_update_(a, b)


def copy_update_then_store(a, b, out):
    copy_var_update_(a, b)
    ops.host_store(out, a)


def iadd_then_store(a, b, out):
    a += b  # `a` still denotes the tensor before the update
    ops.host_store(out, a)


def read_then_inplace_through_view(a, b, out):
    a + 1.0
    ops.relu_(a.reshape_((2, 1)))


MUST_RAISE = [relu_then_iadd, relu_read_and_relu_inplace, relu_inplace_twice,
              relu_then_gelu_inplace, read_then_copy_update, copy_update_then_store,
              iadd_then_store, read_then_inplace_through_view]


def two_reads_then_inplace_on_an_output(a, b, out):
    c = ops.relu(a)
    ops.exp(a)
    ops.relu_(c)


def read_reaches_the_modifier_through_data(a, b, out):
    g = ops.relu(a)
    a += g


def read_the_inplace_output(a, b, out):
    c = ops.relu_(a)
    ops.host_store(out, c + 1.0)


def unordered_reads_inside_an_ordered_block(a, b, out):
    with popxl.in_sequence(True):
        ops.relu_(a)
        with popxl.in_sequence(False):  # unordered among themselves, after relu_ ...
            c = a + 1.0
            d = a * 2.0
        ops.gelu_(a)  # ... and before gelu_
        ops.host_store(out, c + d)


MUST_ACCEPT = [two_reads_then_inplace_on_an_output, read_reaches_the_modifier_through_data,
               read_the_inplace_output, unordered_reads_inside_an_ordered_block]


def build(program, where, sequence=False):
    """An Ir running ``program`` in the main graph or in a called subgraph."""
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.array([1.0, -2.0], np.float32), name="a")
        b = popxl.variable(np.array([3.0, 4.0], np.float32), name="b")
        out = popxl.d2h_stream((2,), popxl.float32, name="out")

        def body(x, y):
            if sequence:
                with popxl.in_sequence():
                    program(x, y, out)
            else:
                program(x, y, out)

        if where == "main":
            body(a, b)
        else:
            call(ir.create_graph(body, a, b), a, b)
    return ir


@pytest.mark.parametrize("where", ["main", "subgraph"])
@pytest.mark.parametrize("program", MUST_RAISE, ids=lambda p: p.__name__)
def test_must_raise_when_the_session_is_built(program, where):
    ir = build(program, where)
    with pytest.raises(popart_exception, match=PREFIX):
        popxl.Session(ir, "cpu")


@pytest.mark.parametrize("where", ["main", "subgraph"])
@pytest.mark.parametrize("program", MUST_RAISE, ids=lambda p: p.__name__)
def test_the_same_programs_are_accepted_in_sequence(program, where):
    verify_ir(build(program, where, sequence=True))


@pytest.mark.parametrize("where", ["main", "subgraph"])
@pytest.mark.parametrize("program", MUST_ACCEPT, ids=lambda p: p.__name__)
def test_must_accept(program, where):
    verify_ir(build(program, where))


def test_the_message_names_both_ops_and_the_tensor():
    with pytest.raises(popart_exception) as error:
        verify_ir(build(read_then_copy_update, "main"))
    message = str(error.value)
    assert "`copy_var_update_`" in message and "`add`" in message and "`a`" in message
    assert "in_sequence" in message


# ---------------------------------------------------------------- in_sequence modes


def test_in_sequence_false_block_members_are_unordered_among_themselves():
    def two_modifiers_in_a_false_block(a, b, out):
        with popxl.in_sequence(True):
            ops.relu(a)
            with popxl.in_sequence(False):
                ops.relu_(a)
                ops.gelu_(a)

    with pytest.raises(popart_exception, match=PREFIX):
        verify_ir(build(two_modifiers_in_a_false_block, "main"))


def test_pass_mode_and_separate_outer_blocks_do_not_order():
    def pass_inside(a, b, out):
        with popxl.in_sequence(True), popxl.in_sequence("pass"):
            ops.relu_(a)
            ops.relu_(a)

    def separate_blocks(a, b, out):
        with popxl.in_sequence():
            ops.relu_(a)
        with popxl.in_sequence():
            ops.host_store(out, a)

    for program in (pass_inside, separate_blocks):
        with pytest.raises(popart_exception, match=PREFIX):
            verify_ir(build(program, "main"))


def test_decorator_form_orders_the_ops():
    @popxl.in_sequence()
    def ordered(a, b, out):
        copy_update_then_store(a, b, out)

    verify_ir(build(ordered, "main"))
    verify_ir(build(ordered, "subgraph"))


def test_by_ref_and_modified_call_sites_are_modifying_ops():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros(2, np.float32), name="a")

        def by_ref(x: popxl.TensorByRef):
            ops.relu_(x)

        graph = ir.create_graph(by_ref, a)
        call(graph, a)
        ops.exp(a)
    with pytest.raises(popart_exception, match=PREFIX):
        verify_ir(ir)

    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros(2, np.float32), name="a")
        graph = ir.create_graph(lambda x: ops.relu(x), a)
        call_with_info(graph, a).set_parent_input_modified(a)
        verify_ir(ir)  # one op only
        ops.exp(a)
    with pytest.raises(popart_exception, match=PREFIX):
        verify_ir(ir)

    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros(2, np.float32), name="a")

        def step(x: popxl.TensorByRef):
            ops.relu_(x)

        repeat(ir.create_graph(step, a), 3, a)
        ops.exp(a)
    with pytest.raises(popart_exception, match=PREFIX):
        verify_ir(ir)


def test_by_value_call_reading_a_tensor_modified_elsewhere():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros(2, np.float32), name="a")
        call(ir.create_graph(lambda x: ops.exp(x), a), a)
        ops.relu_(a)
    with pytest.raises(popart_exception, match=PREFIX):
        verify_ir(ir)


def test_in_sequence_numerics_follow_creation_order():
    a0, b0 = np.array([1.0, -2.0], np.float32), np.array([3.0, 4.0], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(a0, name="a")
        b = popxl.variable(b0, name="b")
        before = popxl.d2h_stream((2,), popxl.float32, name="before")
        after = popxl.d2h_stream((2,), popxl.float32, name="after")
        block = popxl.d2h_stream((2,), popxl.float32, name="block")
        with popxl.in_sequence():
            ops.host_store(before, a)
            a += b
            ops.host_store(after, a)
            with popxl.in_sequence(False):
                c = a * 2.0
                d = a + 1.0
            ops.relu_(a)
            ops.host_store(block, c + d)
    with popxl.Session(ir, "cpu") as session:
        outputs = session.run()
        value = session.get_tensor_data(a)
    np.testing.assert_array_equal(outputs[before], a0)
    np.testing.assert_array_equal(outputs[after], a0 + b0)
    np.testing.assert_array_equal(outputs[block], (a0 + b0) * 3 + 1)
    np.testing.assert_array_equal(value, np.maximum(a0 + b0, 0))
