"""View members PopXL's unit tests read: ``Tensor.isAliased``, ``MatMulOp.getPartialsType``
(``op.MatMulPartialsType``), ``Op.isOptimizerOp`` and the accumulators' ``getFactor`` /
``getAxis``, each read from ipuxl's IR."""

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.popart._internal import ir as _ir


def only_op(graph):
    (op,) = graph._pb_graph.getOps()
    return op


# ------------------------------------------------------------------ isAliased
def test_is_aliased_by_view_op():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((1, 2, 3), np.float32))
        b = popxl.variable(np.ones((1, 2, 3), np.float32))
        c = ops.reshape_(a, (3, 2, 1))
    assert a._pb_tensor.isAliased() is True
    assert c._pb_tensor.isAliased() is True
    assert b._pb_tensor.isAliased() is False


def test_is_aliased_out_of_place_and_in_place():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.ones((2, 3), np.float32))
        c = ops.reshape(a, (3, 2))
    assert a._pb_tensor.isAliased() is False
    assert c._pb_tensor.isAliased() is False
    with ir.main_graph:
        d = ops.add_(c, c)
    assert c._pb_tensor.isAliased() is True
    assert d._pb_tensor.isAliased() is True
    assert a._pb_tensor.isAliased() is False


# ------------------------------------------------------------------ MatMulPartialsType
def matmul_op(partials_option=None, partials_type=None):
    ir = popxl.Ir()
    if partials_option is not None:
        ir._pb_ir.getSessionOptions().partialsTypeMatMuls = partials_option
    with ir.main_graph:
        a = popxl.variable(np.ones((4, 4), np.float32))
        b = popxl.variable(np.ones((4, 4), np.float32))
        ops.matmul(a, b, partials_type=partials_type)
    return only_op(ir.main_graph)


@pytest.mark.parametrize("option, expected", [
    (None, _ir.op.MatMulPartialsType.FLOAT), ("", _ir.op.MatMulPartialsType.FLOAT),
    ("float", _ir.op.MatMulPartialsType.FLOAT), ("half", _ir.op.MatMulPartialsType.HALF),
])
def test_partials_type_from_session_option(option, expected):
    op = matmul_op(option)
    assert isinstance(op, _ir.op.MatMulOp)
    assert op.getPartialsType() is expected


def test_partials_type_hint_wins_over_session_option():
    assert matmul_op("float", popxl.float16).getPartialsType() is _ir.op.MatMulPartialsType.HALF
    assert matmul_op("half", popxl.float32).getPartialsType() is _ir.op.MatMulPartialsType.FLOAT


def test_partials_type_session_option_must_be_a_string():
    options = popxl.Ir()._pb_ir.getSessionOptions()
    with pytest.raises(TypeError, match="SessionOptions.partialsTypeMatMuls takes a str"):
        options.partialsTypeMatMuls = 2


@pytest.mark.parametrize("option", ["foo", "double"])
def test_partials_type_bad_session_option_refuses_the_matmul(option):
    # PopXL reads the option when it builds a matmul without partials_type.
    with pytest.raises(ValueError, match=r"^matmul: the session option partialsTypeMatMuls "
                                         rf"must be 'float', 'half' or '' \(float\), got "
                                         rf"{option!r}\. "):
        matmul_op(option)


def test_partials_type_session_option_is_read_in_any_case_and_ignored_with_the_argument():
    assert matmul_op("HALF").getPartialsType() is _ir.op.MatMulPartialsType.HALF
    assert matmul_op("foo", popxl.float16).getPartialsType() is _ir.op.MatMulPartialsType.HALF


# ------------------------------------------------------------------ isOptimizerOp
@pytest.mark.parametrize("build", [
    lambda m, v: ops.var_updates.adam_updater(m, v),
    lambda m, v: ops.var_updates.lamb_updater(m, v),
    lambda m, v: ops.var_updates.accumulate_(m, v),
    lambda m, v: ops.var_updates.accumulator_zero_(m),
    lambda m, v: ops.var_updates.copy_var_update_(m, v),
])
def test_is_optimizer_op(build):
    ir = popxl.Ir()
    with ir.main_graph:
        m = popxl.variable(1.0, name="m")
        v = popxl.variable(2.0, name="v")
        build(m, v)
    assert only_op(ir.main_graph).isOptimizerOp() is True


def test_other_ops_are_not_optimizer_ops():
    ir = popxl.Ir()
    with ir.main_graph:
        m = popxl.variable(1.0)
        ops.add_(m, m)
    assert only_op(ir.main_graph).isOptimizerOp() is False


# ------------------------------------------------------------------ getFactor, getAxis
@pytest.mark.parametrize("constant_", [True, False])
def test_accumulator_scale_factor(constant_):
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(1.0)
        f = 0.125 if constant_ else popxl.variable(0.125)
        ops.var_updates.accumulator_scale_(a, f)
    op = only_op(ir.main_graph)
    assert isinstance(op, _ir.op.AccumulatorScaleOp)
    assert op.getFactor().val() == (0.125 if constant_ else 0.0)
    assert op.getFactor().isConst() is constant_


def test_fixed_factors():
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(1.0)
        b = popxl.variable(1.0)
        ops.var_updates.accumulator_zero_(a)
        ops.var_updates.accumulate_(b, a)
        ops.var_updates.accumulate_mean_(b, a, 3.0)
    zero, plain, mean = ir.main_graph._pb_graph.getOps()
    assert isinstance(zero, _ir.op.AccumulatorScaleOp)
    assert (zero.getFactor().val(), zero.getFactor().isConst()) == (0.0, True)
    assert (plain.getFactor().val(), plain.getFactor().isConst()) == (1.0, True)
    assert (mean.getFactor().val(), mean.getFactor().isConst()) == (3.0, True)


@pytest.mark.parametrize("constant_", [True, False])
def test_sparse_accumulate_getters(constant_):
    ir = popxl.Ir()
    with ir.main_graph:
        a = popxl.variable(np.zeros((2, 2), np.float32))
        b = popxl.variable(np.ones((2, 1), np.float32))
        c = popxl.constant(np.array([1], np.int32))
        f = 0.125 if constant_ else popxl.variable(0.125)
        ops.var_updates.sparse_accumulate_(a, b, c, 1, f)
    op = only_op(ir.main_graph)
    assert isinstance(op, _ir.op.SparseAccumulateOp)
    assert op.getAxis() == 1
    assert op.getFactor().val() == (0.125 if constant_ else 0.0)
    assert op.isOptimizerOp() is True
