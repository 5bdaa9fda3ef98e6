"""Tensor operators (spec §3.5), ``t[key]`` indexing and the Tensor helper methods.

The numerical checks build one Ir, run it in one Session and compare every stored result
with numpy.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.popart import popart_exception

X = np.array([[1.5, -2.0, 3.0], [-4.5, 5.0, 0.5]], np.float32)
Y = np.array([0.5, 2.0, -1.5], np.float32)
W = np.array([[1.0, 2.0], [0.0, -1.0], [2.0, 0.5]], np.float32)
N = np.array([[7, -7, 3], [-8, 9, 2]], np.int32)
B = np.array([[True, False, True], [False, False, True]])
T = np.arange(20, dtype=np.float32).reshape(4, 5)

# name -> (build from the variables, numpy reference)
Case = tuple[Callable[..., popxl.Tensor], Callable[..., np.ndarray]]
OPERATORS: dict[str, Case] = {
    "add": (lambda v: v["x"] + v["y"], lambda: X + Y),
    "add_scalar": (lambda v: v["x"] + 1, lambda: X + 1),
    "radd_scalar": (lambda v: 1 + v["x"], lambda: 1 + X),
    "radd_ndarray": (lambda v: Y + v["x"], lambda: Y + X),
    "sub": (lambda v: v["x"] - v["y"], lambda: X - Y),
    "rsub": (lambda v: 10 - v["x"], lambda: 10 - X),
    "mul": (lambda v: v["x"] * 2, lambda: X * 2),
    "rmul": (lambda v: [[2.0], [3.0]] * v["x"], lambda: np.array([[2.0], [3.0]]) * X),
    "truediv": (lambda v: v["x"] / 2, lambda: X / 2),
    "rtruediv": (lambda v: 3 / v["y"], lambda: 3 / Y),
    "int_truediv_truncates": (lambda v: v["n"] / 2, lambda: np.trunc(N / 2)),
    "mod_sign_of_dividend": (lambda v: v["n"] % 3, lambda: np.fmod(N, 3)),
    "rmod": (lambda v: 20 % v["n"], lambda: np.fmod(20, N)),
    "float_mod": (lambda v: v["x"] % 2, lambda: np.fmod(X, 2)),
    "pow_scalar_takes_tensor_dtype": (lambda v: v["x"] ** 2, lambda: X**2),
    "pow_tensor": (lambda v: v["abs_y"] ** v["y"], lambda: np.abs(Y) ** Y),
    "rpow": (lambda v: 2 ** v["x"], lambda: 2.0**X),
    "neg": (lambda v: -v["x"], lambda: -X),
    "matmul": (lambda v: v["x"] @ v["w"], lambda: X @ W),
    "rmatmul": (lambda v: W.T @ v["x"].T, lambda: W.T @ X.T),
    "and": (lambda v: v["b"] & v["x"], lambda: B & (X != 0)),
    "rand": (lambda v: True & v["b"], lambda: B),
    "or": (lambda v: v["b"] | False, lambda: B),
    "ror": (lambda v: [True, False, False] | v["b"], lambda: B | [True, False, False]),
    "invert": (lambda v: ~v["b"], lambda: ~B),
    "invert_float": (lambda v: ~v["x"], lambda: X == 0),
    "getitem_int": (lambda v: v["t"][1], lambda: T[1]),
    "getitem_negative_int": (lambda v: v["t"][-1], lambda: T[-1]),
    "getitem_slice": (lambda v: v["t"][1:3], lambda: T[1:3]),
    "getitem_step": (lambda v: v["t"][::2], lambda: T[::2]),
    "getitem_reverse": (lambda v: v["t"][::-1], lambda: T[::-1]),
    "getitem_negative_step": (lambda v: v["t"][3:0:-2], lambda: T[3:0:-2]),
    "getitem_negative_step_to_start": (lambda v: v["t"][:, 3::-3], lambda: T[:, 3::-3]),
    "getitem_tuple": (lambda v: v["t"][1, 2], lambda: T[1, 2]),
    "getitem_column": (lambda v: v["t"][:, -2], lambda: T[:, -2]),
    "getitem_mixed": (lambda v: v["t"][1:, ::2], lambda: T[1:, ::2]),
    "getitem_clamped_stop": (lambda v: v["t"][2:100, -100:2], lambda: T[2:100, -100:2]),
    "getitem_int_tensor": (lambda v: v["t"][popxl.constant(np.array([2, 0], np.int32))],
                           lambda: T[[2, 0]]),
    "getitem_list": (lambda v: v["t"][[3, 1]], lambda: T[[3, 1]]),
    "getitem_ndarray_2d": (lambda v: v["t"][np.array([[0], [3]])], lambda: T[[[0], [3]]]),
    "getitem_bool_mask": (lambda v: v["x"][v["b"]], lambda: np.where(B, X, 0)),
    "getitem_bool_rows": (lambda v: v["t"][np.array([[True], [False], [True], [False]])],
                          lambda: np.where([[True], [False], [True], [False]], T, 0)),
    "T": (lambda v: v["x"].T, lambda: X.T),
    "diag_square": (lambda v: v["t"][:, :4].diag(), lambda: np.diag(T[:, :4])),
    "diag_wide": (lambda v: v["t"][:2].diag(), lambda: np.diag(T[:2])),
    # PopXL's rule, flatten()[::cols+1], also takes later rows of a tall matrix.
    "diag_tall": (lambda v: v["t"][:, :2].diag(), lambda: T[:, :2].ravel()[::3]),
    "reshape": (lambda v: v["t"].reshape((5, 4)), lambda: T.reshape(5, 4)),
    "flatten": (lambda v: v["t"].flatten(), lambda: T.ravel()),
    "transpose": (lambda v: v["t"].transpose((1, 0)), lambda: T.T),
    "detach": (lambda v: v["x"].detach(), lambda: X),
}


def test_operators_and_indexing_match_numpy() -> None:
    ir = popxl.Ir()
    results = {}
    with ir.main_graph:
        v = {
            "x": popxl.variable(X, name="x"),
            "y": popxl.variable(Y, name="y"),
            "abs_y": popxl.variable(np.abs(Y), name="abs_y"),
            "w": popxl.variable(W, name="w"),
            "n": popxl.variable(N, name="n"),
            "b": popxl.variable(B, name="b"),
            "t": popxl.variable(T, name="t"),
        }
        for name, (build, _) in OPERATORS.items():
            out = build(v)
            stream = popxl.d2h_stream(out.shape, out.dtype, name=name)
            ops.host_store(stream, out)
            results[name] = (out, stream)
    with popxl.Session(ir, "cpu") as session:
        outputs = session.run()
    failures = []
    for name, (_, reference) in OPERATORS.items():
        out, stream = results[name]
        expected = np.asarray(reference())
        got = outputs[stream]
        if out.shape != expected.shape or not np.allclose(
                got.astype(np.float64), expected.astype(np.float64), rtol=1e-6):
            failures.append(f"{name}: {out.shape} {got!r}, numpy gives {expected!r}")
    assert not failures, "\n".join(failures)


def test_operand_dtypes() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        half = popxl.variable(np.ones(2, np.float16))
        ints = popxl.variable(np.ones(2, np.int32))
        assert (half + 1.5).dtype == popxl.float16  # the host value takes the tensor's dtype
        assert (2 * ints).dtype == popxl.int32
        assert (half**2).dtype == popxl.float16
        assert (half & 1).dtype == popxl.bool
        assert (ints == ints) is True  # identity, not elementwise
        assert (ints == half) is False
        with pytest.raises(popart_exception, match="incompatible types"):
            half + ints  # noqa: B018 - building the op raises
        with pytest.raises(TypeError, match="The input `rhs` is not a Tensor"):
            ops.add(half, 1)


def test_in_place_add_returns_self_and_mutates_the_variable() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        v = popxl.variable(np.array([1.0, 2.0], np.float32), name="v")
        before = v
        with popxl.in_sequence():  # both modify `v`: order them
            v += popxl.constant(np.array([10.0, 20.0], np.float32))
            v += 1
        assert v is before
        assert isinstance(v, popxl.Variable)
        modifiers = [op for op in ir.main_graph.ops if op.name == "add_"]
        assert len(modifiers) == 2
        assert modifiers[0].outputs[0].name == "add_lhs_inplace_out"
    with popxl.Session(ir, "cpu") as session:
        session.run()
        np.testing.assert_array_equal(session.get_tensor_data(v), [12.0, 23.0])


def test_list_plus_tensor_is_reflected() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        total = [1.0, 2.0]
        total += x  # list.__iadd__ fails, so Tensor.__radd__ runs
        assert isinstance(total, popxl.Tensor)
        empty: list = []
        with pytest.raises(ValueError, match="The value has 0 elements - this is most likely"):
            empty += x


@pytest.mark.parametrize("key", ["a", 1.5, True, None, Ellipsis, (0, "a"), (1.0,)])
def test_bad_index_keys(key: object) -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(T)
        with pytest.raises(TypeError, match=r"Only integers, slices \(`:`\), integer tensors and "
                                            "boolean tensors are valid indices"):
            t[key]  # noqa: B018


def test_float_tensor_key_is_refused() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(T)
        with pytest.raises(TypeError, match="Only integers, slices"):
            t[popxl.constant(np.array([1.0], np.float32))]  # noqa: B018


def test_index_errors() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(T)
        with pytest.raises(IndexError, match="index 4 is out of bounds for axis 0 with size 4"):
            t[4]  # noqa: B018
        with pytest.raises(IndexError, match="Too many indices"):
            t[0, 0, 0]  # noqa: B018
        with pytest.raises(ValueError, match="slice step cannot be zero"):
            t[::0]  # noqa: B018


def test_indexing_builds_the_documented_ops() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(T, name="t")
        assert t[:] is t  # a full slice adds no op
        t[1:3]
        assert [op.name for op in ir.main_graph.ops] == ["slice"]
        t[::-2, 1]
        assert [op.name for op in ir.main_graph.ops][1:] == ["slice", "subsample", "reshape"]
        t[popxl.constant(np.array([0], np.int32))]
        t[popxl.constant(np.ones((4, 5), bool))]
        assert [op.name for op in ir.main_graph.ops][-2:] == ["gather", "where"]


def test_tensor_helpers() -> None:
    ir = popxl.Ir()
    with ir.main_graph:
        t = popxl.variable(T, name="t")
        s = popxl.variable(np.float32(1), name="s")
        assert len(t) == 4
        with pytest.raises(ValueError, match="Tensor is a scalar and doesn't have a length."):
            len(s)
        with pytest.raises(ValueError, match="Diag expected a 2d tensor."):
            t.flatten().diag()
        with pytest.raises(TypeError):
            list(t)
        with pytest.raises(TypeError):
            1 in t  # noqa: B015
        assert t.T.shape == (5, 4)
        assert t.reshape((2, 10)).shape == (2, 10)
        assert t.detach().shape == (4, 5)
        with pytest.raises(ValueError, match="The value has 0 elements - this is most likely"):
            t._ensure_tensor([])
        with pytest.raises(ValueError, match="The value has 0 elements"):
            t._ensure_tensor(np.zeros((0, 3)))
        assert t._ensure_tensor([], raise_on_empty=False).shape == (0,)
        assert t._ensure_tensor(3).dtype == popxl.float32
        assert t._ensure_tensor(3, popxl.int8).dtype == popxl.int8
        assert t._ensure_tensor(t) is t
