"""Misuse gives PopXL's error or a clear one, never an internal one (issue 8): dtype
arguments given as NumPy dtypes or names, host conversions of symbolic tensors, tensors
and streams of another Ir, and mixed float8 dtypes (whose suggested fix must work).

Only ``test_the_no_data_message_recipe_reads_values`` builds a Session.
"""

from __future__ import annotations

import operator
import re
import textwrap

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.popart import popart_exception


def scalar_scale():
    return popxl.constant(0, popxl.int32, name="scale")


# ----------------------------------------------------------------------------- dtype arguments
@pytest.mark.parametrize(
    "data_type, expected",
    [
        (np.float32, popxl.float32),
        ("float32", popxl.float32),
        (np.dtype("float16"), popxl.float16),
        ("int32", popxl.int32),
        (np.int8, popxl.int8),
        (bool, popxl.bool),
        (popxl.float64, popxl.float64),
    ],
    ids=str,
)
def test_cast_accepts_numpy_dtypes_and_names(data_type, expected):
    with popxl.Ir().main_graph:
        x = popxl.variable(np.ones(3, np.float32), name="x")
        y = ops.cast(x, data_type)
    assert y.dtype is expected and y.shape == (3,)
    assert y.graph.ops[-1].attrs["data_type"] is expected


@pytest.mark.parametrize(
    "data_type, error, match",
    [
        ("nonsense", TypeError, r"^cast: `data_type` must be a popxl dtype such as "
         r"popxl\.float32 \(or a NumPy dtype or dtype name that has one\); got str 'nonsense'"),
        (None, TypeError, r"^cast: `data_type` must be a popxl dtype .* got NoneType None"),
        (np.dtype(object), TypeError, r"^cast: `data_type` must be a popxl dtype"),
        ("float8_143", TypeError, r"^Data type popxl\.dtypes\.float8_143 not supported for "
         "cast, please consider pow2scale_cast_to_fp8"),
        (popxl.dtypes.np_dtype_float8_152, TypeError, r"^Data type popxl\.dtypes\.float8_152 "
         "not supported for cast"),
    ],
    ids=str,
)
def test_cast_refuses_what_is_not_a_dtype_or_is_float8(data_type, error, match):
    with popxl.Ir().main_graph:
        x = popxl.variable(np.ones(3, np.float32), name="x")
        with pytest.raises(error, match=match):
            ops.cast(x, data_type)


@pytest.mark.parametrize("data_type, expected", [
    ("float8_152", popxl.float8_152), (popxl.dtypes.np_dtype_float8_143, popxl.float8_143)])
def test_pow2scale_cast_to_fp8_accepts_names(data_type, expected):
    with popxl.Ir().main_graph:
        x = popxl.variable(np.ones(3, np.float32), name="x")
        assert ops.pow2scale_cast_to_fp8(x, scalar_scale(), data_type).dtype is expected


@pytest.mark.parametrize("data_type, expected", [
    (np.float32, popxl.float32), ("float16", popxl.float16)])
def test_pow2scale_cast_from_fp8_accepts_numpy_dtypes_and_names(data_type, expected):
    with popxl.Ir().main_graph:
        x = popxl.variable(np.ones(3, np.float32), name="x")
        f8 = ops.pow2scale_cast_to_fp8(x, scalar_scale(), popxl.float8_143)
        assert ops.pow2scale_cast_from_fp8(f8, scalar_scale(), data_type).dtype is expected


@pytest.mark.parametrize(
    "op, data_type, match",
    [
        ("to", np.float32, r"^Data type popxl\.dtypes\.float32 is not supported for "
         "pow2scale_cast_to_fp8"),
        ("to", "bogus", r"^pow2scale_cast_to_fp8: `data_type` must be a popxl dtype"),
        ("from", "float64", r"^Data type popxl\.dtypes\.float64 is not supported for "
         "pow2scale_cast_from_fp8"),
        ("from", object(), r"^pow2scale_cast_from_fp8: `data_type` must be a popxl dtype"),
    ],
    ids=str,
)
def test_pow2scale_casts_refuse_other_data_types(op, data_type, match):
    with popxl.Ir().main_graph:
        x = popxl.variable(np.ones(3, np.float32), name="x")
        f8 = ops.pow2scale_cast_to_fp8(x, scalar_scale(), popxl.float8_143)
        with pytest.raises(TypeError, match=match):
            if op == "to":
                ops.pow2scale_cast_to_fp8(x, scalar_scale(), data_type)
            else:
                ops.pow2scale_cast_from_fp8(f8, scalar_scale(), data_type)


# ----------------------------------------------------------------------------- no host data
NO_DATA = r"^Tensor `x` has no data, so ipuxl cannot {}"
CONVERSIONS = [
    (np.asarray, "convert it to a NumPy array"),
    (np.array, "convert it to a NumPy array"),
    (lambda t: np.array([t, t]), "convert it to a NumPy array"),
    (lambda t: np.float32(1) + np.asarray(t), "convert it to a NumPy array"),
    (float, "convert it to a Python float"),
    (int, "convert it to a Python int"),
    (operator.index, "use it as a Python integer"),
    (range, "use it as a Python integer"),
    (lambda t: [1, 2, 3][t], "use it as a Python integer"),
]


@pytest.mark.parametrize("convert, what", CONVERSIONS)
def test_host_conversions_of_a_tensor_explain_how_to_get_data(convert, what):
    with popxl.Ir().main_graph:
        x = popxl.variable(np.ones((), np.float32), name="x")
    with pytest.raises(TypeError, match=NO_DATA.format(re.escape(what))) as info:
        convert(x)
    message = str(info.value)
    assert "A popxl Tensor is symbolic: a value in a graph being built" in message
    for hint in ("popxl.d2h_stream(t.shape, t.dtype)", "ops.host_store(d2h, t)",
                 "session.run()[d2h]", "session.get_tensor_data(variable)"):
        assert hint in message


def test_the_no_data_message_recipe_reads_values():
    ir = popxl.Ir()
    with ir.main_graph:
        variable = popxl.variable(np.array([1.0, 2.0], np.float32), name="x")
        t = variable * 3.0
        with pytest.raises(TypeError) as info:
            np.asarray(t)
    # The recipe: two lines to write while building, two to run.
    recipe = re.search(r"Session:\n(.*)\nFor a Variable", str(info.value), re.S).group(1)
    lines = textwrap.dedent(recipe).splitlines()
    namespace = {"popxl": popxl, "ops": ops, "ir": ir, "t": t}
    with ir.main_graph:
        exec("\n".join(lines[:2]), namespace)
    exec("\n".join(lines[2:]), namespace)
    np.testing.assert_array_equal(namespace["value"], [3.0, 6.0])
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.get_tensor_data(variable), [1.0, 2.0])


def test_numpy_operands_still_build_ops():
    with popxl.Ir().main_graph:
        x = popxl.variable(np.ones((2, 2), np.float32), name="x")
        results = {
            "add": np.ones((2, 2), np.float32) + x,
            "mul": np.float32(2) * x,
            "sub": np.zeros(2, np.float32) - x,
            "matmul": np.eye(2, dtype=np.float32) @ x,
            "div": x / np.float32(4),
        }
    for name, result in results.items():
        assert isinstance(result, popxl.Tensor) and result.dtype == popxl.float32
        (op,) = [op for op in result.graph.ops if result in op.outputs]
        assert op.name == name and x in op.inputs


# ----------------------------------------------------------------------------- another Ir
def cross_ir_pattern(arg, tensor, own_ir, current_ir):
    return (
        rf"^The input tensor `{arg}` is not in the current Graph main: `{tensor}` belongs to "
        rf"another Ir\. It is in Ir\[id={own_ir.id}\] \(graph 'main'\), and the current graph "
        rf"is in Ir\[id={current_ir.id}\]\. Tensors cannot cross Irs: create the tensor in "
        "this Ir"
    )


def test_a_tensor_of_another_ir_is_refused_naming_both_irs():
    ir1, ir2 = popxl.Ir(), popxl.Ir()
    with ir1.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
    with ir2.main_graph:
        y = popxl.variable(np.ones(2, np.float32), name="y")
        with pytest.raises(ValueError, match=cross_ir_pattern("lhs", "x", ir1, ir2)):
            ops.add(x, y)
        with pytest.raises(ValueError, match=cross_ir_pattern("rhs", "x", ir1, ir2)):
            y + x  # noqa: B018
        with pytest.raises(ValueError, match=cross_ir_pattern("t", "x", ir1, ir2)):
            ops.relu(x)


def test_a_tensor_of_another_graph_of_the_same_ir_keeps_the_graph_message():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32), name="x")
    with ir.create_empty_graph("sub"), pytest.raises(ValueError) as info:
        ops.relu(x)
    assert re.match(r"^The input tensor `t` is not in the current Graph sub_subgraph\(0\)\. "
                    r"`x` belongs to graph 'main'\. A graph cannot use another graph's "
                    "tensors", str(info.value))
    assert "another Ir" not in str(info.value)


def stream_pattern(stream, own_ir, current_ir, graph, factory):
    return (
        rf"^The stream `{stream}` belongs to another Ir: it is in Ir\[id={own_ir.id}\], and "
        rf"the current graph '{graph}' is in Ir\[id={current_ir.id}\]\. Streams cannot "
        rf"cross Irs: create the stream with `popxl\.{factory}\(shape, dtype\)` while "
        "building this Ir"
    )


def test_streams_of_another_ir_are_refused_naming_both_irs():
    ir1, ir2 = popxl.Ir(), popxl.Ir()
    with ir1.main_graph:
        h2d = popxl.h2d_stream((2,), popxl.float32, name="input")
        d2h = popxl.d2h_stream((2,), popxl.float32, name="output")
    with ir2.main_graph:
        y = popxl.variable(np.ones(2, np.float32), name="y")
        with pytest.raises(ValueError, match=stream_pattern("input", ir1, ir2, "main",
                                                            "h2d_stream")):
            ops.host_load(h2d)
        with pytest.raises(ValueError, match=stream_pattern("output", ir1, ir2, "main",
                                                            "d2h_stream")):
            ops.host_store(d2h, y)
    with ir2.create_empty_graph("sub"):
        with pytest.raises(ValueError, match=stream_pattern("input", ir1, ir2, "sub_subgraph\\(0\\)",
                                                            "h2d_stream")):
            ops.host_load(h2d)
    assert not ir2.main_graph.ops and not ir2.get_all_h2d_streams()


def test_streams_of_the_same_ir_work_in_any_graph():
    ir = popxl.Ir()
    with ir.main_graph:
        h2d = popxl.h2d_stream((2,), popxl.float32, name="input")
        d2h = popxl.d2h_stream((2,), popxl.float32, name="output")
    with ir.create_empty_graph("sub"):
        ops.host_store(d2h, ops.host_load(h2d))
    assert ir.get_all_h2d_streams() == {h2d} and ir.get_all_d2h_streams() == {d2h}


# ----------------------------------------------------------------------------- float8 hints
def suggested_code(message):
    """The code after "first: " in a dtype error: the conversion it suggests."""
    return re.search(r"first: `(.+?)`\.?$", message).group(1)


def make_tensors(lhs_dtype, rhs_dtype):
    """Variables `a` and `b` of the given dtypes (float8 ones made by pow2scale casts)."""
    tensors = []
    for name, dtype in (("a", lhs_dtype), ("b", rhs_dtype)):
        if dtype.is_float8:
            wide = popxl.variable(np.ones(3, np.float32), name=f"{name}_wide")
            tensors.append(ops.rename(ops.pow2scale_cast_to_fp8(wide, scalar_scale(), dtype),
                                      name))
        else:
            tensors.append(popxl.variable(np.ones(3, dtype.as_numpy()), dtype, name=name))
    return tensors


F8_143, F8_152 = popxl.float8_143, popxl.float8_152
S0 = "popxl.constant(0, popxl.int32)"


@pytest.mark.parametrize(
    "lhs, rhs, converted, target, code",
    [
        (F8_143, popxl.float32, "a", popxl.float32,
         f"ops.pow2scale_cast_from_fp8(a, {S0}, popxl.float32)"),
        (popxl.float16, F8_152, "b", popxl.float16,
         f"ops.pow2scale_cast_from_fp8(b, {S0}, popxl.float16)"),
        (F8_143, F8_152, "b", F8_143,
         f"ops.pow2scale_cast_to_fp8(ops.pow2scale_cast_from_fp8(b, {S0}, popxl.float32), "
         f"{S0}, popxl.float8_143)"),
        (popxl.float64, F8_143, "b", popxl.float64,
         f"ops.cast(ops.pow2scale_cast_from_fp8(b, {S0}, popxl.float32), popxl.float64)"),
        (popxl.int32, F8_143, "b", popxl.int32,
         f"ops.cast(ops.pow2scale_cast_from_fp8(b, {S0}, popxl.float32), popxl.int32)"),
        (popxl.float16, popxl.float32, "b", popxl.float16, "ops.cast(b, popxl.float16)"),
    ],
    ids=lambda v: getattr(v, "name", None) if isinstance(v, popxl.dtypes.dtype) else None,
)
def test_mixed_dtype_error_suggests_a_conversion_that_works(lhs, rhs, converted, target, code):
    with popxl.Ir().main_graph:
        a, b = make_tensors(lhs, rhs)
        with pytest.raises(popart_exception, match=(
                rf"^np broadcasting failed on add, incompatible types {lhs.name} and "
                rf"{rhs.name} \(`a`, `b`\)\. Binary ops need equal dtypes: convert "
                rf"`{converted}` first: `")) as info:
            ops.add(a, b)
        assert suggested_code(str(info.value)) == code
        namespace = {"a": a, "b": b}
        namespace[converted] = eval(code, {"ops": ops, "popxl": popxl}, namespace)
        assert namespace[converted].dtype is target
        result = ops.add(namespace["a"], namespace["b"])
    assert result.dtype is target


@pytest.mark.parametrize("op, allowed", [(ops.relu, popxl.float32), (ops.exp, popxl.float32)])
def test_float8_input_to_a_float_op_suggests_a_conversion_that_works(op, allowed):
    with popxl.Ir().main_graph:
        (a, _) = make_tensors(F8_143, popxl.float32)
        with pytest.raises(popart_exception, match=(
                rf"^{op.__name__} does not support dtype float8_143 \(tensor `a`\).*Convert "
                r"it first: `")) as info:
            op(a)
        code = suggested_code(str(info.value))
        assert code == f"ops.pow2scale_cast_from_fp8(a, {S0}, popxl.float32)"
        converted = eval(code, {"ops": ops, "popxl": popxl, "a": a})
        assert op(converted).dtype is allowed


def test_host_store_dtype_mismatch_suggests_a_conversion_that_works():
    with popxl.Ir().main_graph:
        (a, _) = make_tensors(F8_143, popxl.float32)
        d2h = popxl.d2h_stream((3,), popxl.float32, name="out")
        with pytest.raises(ValueError, match=r"^dtype of stream `out` \(popxl\.dtypes\.float32\) "
                           r"does not match dtype of provided tensor `a`") as info:
            ops.host_store(d2h, a)
        code = re.search(r"Convert the tensor \(`(.+?)`\)", str(info.value)).group(1)
        assert code == f"ops.pow2scale_cast_from_fp8(a, {S0}, popxl.float32)"
        ops.host_store(d2h, eval(code, {"ops": ops, "popxl": popxl, "a": a}))


# ------------------------------------------------------------ build-time arguments
@pytest.mark.parametrize("make, error, message", [
    (lambda: popxl.Ir(replication="a"), TypeError,
     r"^replication must be an integer of at least 1, got str 'a'"),
    (lambda: popxl.Ir(replication=2.0), TypeError, r"got float 2\.0"),
    (lambda: popxl.Ir(replication=0), ValueError, r"at least 1, got 0"),
    (lambda: setattr(popxl.Ir(), "num_host_transfers", 2.5), TypeError,
     r"^num_host_transfers must be an integer of at least 1, got float 2\.5"),
    (lambda: popxl.ipu(-1).__enter__(), ValueError, r"the IPU index must be 0 or more, got -1"),
    (lambda: popxl.ipu(1.5).__enter__(), TypeError, r"an integer; got float 1\.5"),
    (lambda: popxl.name_scope(5).__enter__(), TypeError, r"^name_scope takes a string, got int"),
])
def test_build_arguments_are_checked(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_tensor_names_must_be_strings():
    ir = popxl.Ir()
    with ir.main_graph:
        with pytest.raises(TypeError, match=r"^A tensor name must be a string, got int 5"):
            popxl.variable(1.0, name=5)
        assert not ir.main_graph.tensors
