"""The op table: one record per op, checked by ``test_ops.py`` and ``test_ops_errors.py``.

A record says how to build the op from ipuxl tensors, gives an independent NumPy reference
(this module never imports JAX), the inputs to run it on, the dtypes to run it in (and
the dtypes it accepts at build time), tolerances, and error inputs with the exception and
message each must raise.

Inputs are described by :class:`Arg`: a shape and value range in the dtype under test, or
a fixed dtype, or fixed data. References receive float inputs as float64, integer inputs as
int64 and bool inputs as bool; they return one array or a tuple of arrays (for ops with
several outputs). Integer results are wrapped into the output dtype before comparing, as
device integer arithmetic wraps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops import var_updates
from ipuxl.popart import popart_exception

SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTS = SIGNED + UNSIGNED
FLOATS = ("float16", "float32", "float64", "bfloat16")
NUMERIC = INTS + FLOATS
ALL = NUMERIC + ("bool",)
FLOAT8 = ("float8_143", "float8_152")
# The dtypes each record is built in to check that unsupported ones fail at build time.
CHECKED = ALL + FLOAT8
# The dtypes numerics run in (one Session per dtype and device).
RUN_DTYPES = ALL + ("float8_143",)

# (rtol, atol) per float dtype.
TOLERANCES = {
    "float16": (2e-3, 2e-3),
    "bfloat16": (1.6e-2, 1.6e-2),
    "float32": (1e-5, 1e-6),
    "float64": (1e-12, 1e-12),
}


@dataclass(frozen=True)
class Arg:
    """One op input, created as a variable.

    Attributes:
        shape: the shape (ignored when ``data`` is given).
        dtype: a fixed dtype name; None means the dtype under test.
        low, high: the value range of random data (clipped to the dtype's range).
        data: fixed values (cast to the dtype).
        distinct: random values without repeats (for sorts, argmax and topk).
    """

    shape: tuple[int, ...] = ()
    dtype: str | None = None
    low: float = -3.0
    high: float = 3.0
    data: Any = None
    distinct: bool = False


@dataclass(frozen=True)
class ErrorCase:
    """``call(*variables)`` must raise ``error`` with a message matching ``match``."""

    args: tuple[Arg, ...]
    call: Callable[..., Any]
    error: type[BaseException]
    match: str
    dtype: str = "float32"


@dataclass(frozen=True)
class OpRecord:
    """One op of the table.

    Attributes:
        name: the record's name (the op, or the op and a variant).
        build: ``build(*tensors)`` creates the op; returns a tensor or a tuple of tensors.
        reference: the NumPy reference, ``reference(*arrays)``.
        args: the inputs.
        dtypes: the dtypes to run the numerics in.
        accepts: the dtypes the op accepts at build time (None: every dtype); the others in
            ``CHECKED`` must raise ``dtype_error`` when the op is built.
        tolerance: (rtol, atol) per dtype name, overriding ``TOLERANCES``.
        errors: error inputs.
        inplace: the op overwrites its first input (a variable) with its first output.
    """

    name: str
    build: Callable[..., Any]
    reference: Callable[..., Any]
    args: tuple[Arg, ...]
    dtypes: tuple[str, ...]
    accepts: tuple[str, ...] | None = None
    dtype_error: type[BaseException] = popart_exception
    tolerance: dict[str, tuple[float, float]] = field(default_factory=dict)
    errors: tuple[ErrorCase, ...] = ()
    inplace: bool = False


def variant(dtypes: tuple[str, ...]) -> tuple[str, ...]:
    """The dtypes a variant of an op runs in (an in-place or view form, another attribute).

    Each op runs in every dtype it supports; its variants share its lowering, so they run
    in float32 and int32 (where supported) to keep the suite fast.
    """
    return tuple(d for d in ("float32", "int32") if d in dtypes) or dtypes[:1]


def popxl_dtype(name: str) -> popxl.dtype:
    return popxl.bfloat16 if name == "bfloat16" else popxl.dtype.from_name(name)


def host_dtype(name: str) -> np.dtype:
    return popxl_dtype(name).as_numpy()


_ML_FLOAT8 = {"float8_143": ml_dtypes.float8_e4m3fnuz, "float8_152": ml_dtypes.float8_e5m2fnuz}


def encode_float8(values: Any, name: str) -> np.ndarray:
    """float values -> PopXL's structured float8 host array (rounding by ml_dtypes)."""
    bits = np.asarray(values, np.float32).astype(_ML_FLOAT8[name]).view(np.uint8)
    return bits.view(host_dtype(name))


def decode_float8(array: np.ndarray, name: str) -> np.ndarray:
    return array.view(np.uint8).view(_ML_FLOAT8[name]).astype(np.float64)


def make_input(arg: Arg, test_dtype: str, rng: np.random.Generator) -> tuple[np.ndarray, str]:
    """The host data of ``arg`` and its dtype name."""
    name = arg.dtype or test_dtype
    if arg.data is not None:
        values = np.asarray(arg.data)
    elif name == "bool":
        values = rng.random(arg.shape) < 0.5
    elif name in INTS:
        info = np.iinfo(host_dtype(name))
        count = math.prod(arg.shape)
        if arg.distinct:
            offset = 0 if name in UNSIGNED else -(count // 2)
            values = (rng.permutation(count) + offset).reshape(arg.shape)
        else:
            low, high = max(arg.low, info.min), min(arg.high, info.max)
            values = rng.integers(math.ceil(low), math.floor(high) + 1, arg.shape)
    else:
        count = math.prod(arg.shape)
        if arg.distinct:
            values = ((rng.permutation(count) - count // 2) / 4).reshape(arg.shape)
        else:
            # Multiples of 1/16 are exact in every float type, so inputs carry no rounding.
            values = np.round(rng.uniform(arg.low, arg.high, arg.shape) * 16) / 16
    if name in FLOAT8:
        return encode_float8(values, name), name
    if name not in FLOATS and values.dtype.kind == "f":
        values = np.nan_to_num(values, nan=0, posinf=0, neginf=0)  # float data in an int type
    return values.astype(host_dtype(name)), name


def reference_input(array: np.ndarray, name: str) -> np.ndarray:
    """The array a reference sees: float64 for floats, int64 for ints, bool for bool."""
    if name in FLOAT8:
        return decode_float8(array, name)
    if name in FLOATS:
        return array.astype(np.float64)
    if name in INTS:
        return array.astype(np.int64)
    return array


# ------------------------------------------------------------------ numpy helpers


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _lower_median(x: np.ndarray, axis: int) -> np.ndarray:
    ordered = np.sort(x, axis=axis)
    return np.take(ordered, (x.shape[axis] - 1) // 2, axis=axis)


def _topk(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    keys = -x if largest else x
    order = np.argsort(keys, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, indices, axis=axis), indices


def _histogram(x: np.ndarray, levels: list[float], absolute: bool) -> np.ndarray:
    values = np.abs(x) if absolute else x
    bins = [values < levels[0]]
    bins += [(values >= lo) & (values < hi) for lo, hi in zip(levels[:-1], levels[1:])]
    bins.append(values >= levels[-1])
    return np.array([np.count_nonzero(b) for b in bins])


def _scatter_elements(t: np.ndarray, indices: np.ndarray, values: np.ndarray, axis: int
                      ) -> np.ndarray:
    out = t.copy()
    for position in np.ndindex(*indices.shape):
        target = list(position)
        target[axis] = indices[position]
        out[tuple(target)] = values[position]
    return out


def _scatter_reduce(data: np.ndarray, indices: np.ndarray, initial: np.ndarray,
                    reduction: str, axis: int) -> np.ndarray:
    out = initial.copy()
    combine = {"sum": np.add, "max": np.maximum, "min": np.minimum}.get(reduction)
    for position in np.ndindex(*data.shape):
        target = list(position)
        target[axis] = indices[position]
        target = tuple(target)
        out[target] = data[position] if combine is None else combine(out[target],
                                                                     data[position])
    return out


def _onehot(indices: np.ndarray, depth: int, off: float, on: float, axis: int) -> np.ndarray:
    wrapped = np.where(indices < 0, indices + depth, indices)
    hot = np.stack([wrapped == c for c in range(depth)], axis=axis)
    return np.where(hot, on, off)


# ------------------------------------------------------------------ builder helpers


def _scale(value: int) -> popxl.Tensor:
    return popxl.constant(value, popxl.int32)


def _int32(data: Any) -> Arg:
    return Arg(data=np.asarray(data), dtype="int32")


X34 = Arg((3, 4))
X4 = Arg((4,))
POSITIVE = Arg((3, 4), low=0.25, high=3.0)
NONZERO = Arg((3, 4), low=1, high=3)  # integer divisors
BOOL34 = Arg((3, 4), dtype="bool")
F32 = Arg((3, 4), dtype="float32")
I32 = Arg((3, 4), dtype="int32")


def _e(args: tuple[Arg, ...], call: Callable[..., Any], error: type[BaseException], match: str,
       dtype: str = "float32") -> ErrorCase:
    return ErrorCase(args, call, error, match, dtype)


NOT_A_TENSOR = _e((X34,), lambda x: ops.add(x, 1), TypeError, "The input `rhs` is not a Tensor")
DTYPE_MISMATCH = _e((X34, I32), ops.add, popart_exception,
                    "np broadcasting failed.*incompatible types")

# ------------------------------------------------------------------ elementwise


def _unary(name: str, fn: Callable, reference: Callable, dtypes: tuple[str, ...],
           arg: Arg = X34, inplace: bool = False, accepts: Any = "same",
           tolerance: dict | None = None, errors: tuple = ()) -> OpRecord:
    return OpRecord(name, fn, reference, (arg,), variant(dtypes) if inplace else dtypes,
                    accepts=dtypes if accepts == "same" else accepts, inplace=inplace,
                    tolerance=tolerance or {}, errors=errors)


UNARY = [
    _unary("abs", ops.abs, np.abs, NUMERIC),
    _unary("ceil", ops.ceil, np.ceil, FLOATS),
    _unary("floor", ops.floor, np.floor, FLOATS),
    _unary("cos", ops.cos, np.cos, FLOATS),
    _unary("sin", ops.sin, np.sin, FLOATS),
    _unary("tanh", ops.tanh, np.tanh, FLOATS),
    _unary("sqrt", ops.sqrt, np.sqrt, FLOATS, POSITIVE),
    _unary("log", ops.log, np.log, FLOATS, POSITIVE),
    _unary("log2", ops.log2, np.log2, FLOATS, POSITIVE),
    _unary("exp", ops.exp, np.exp, FLOATS),
    _unary("exp_", ops.exp_, np.exp, FLOATS, inplace=True),
    _unary("negate", ops.negate, np.negative, SIGNED + FLOATS),
    _unary("sign", ops.sign, np.sign, NUMERIC),
    _unary("relu", ops.relu, lambda x: np.maximum(x, 0), SIGNED + FLOATS),
    _unary("relu_", ops.relu_, lambda x: np.maximum(x, 0), SIGNED + FLOATS, inplace=True),
    # PopXL builds gelu of any dtype; a Session refuses the non-floats (test_ops_structure).
    _unary("gelu", ops.gelu, _gelu_tanh, FLOATS, accepts=None),
    _unary("gelu_", ops.gelu_, _gelu_tanh, FLOATS, inplace=True, accepts=None),
    _unary("geluerf", ops.geluerf, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), FLOATS),
    _unary("geluerf_", ops.geluerf_, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), FLOATS,
           inplace=True),
    # PopXL builds swish of any dtype; a Session refuses the non-floats (test_ops_structure).
    _unary("swish", ops.swish, lambda x: x * _sigmoid(x), FLOATS, accepts=None),
    _unary("swish_", ops.swish_, lambda x: x * _sigmoid(x), FLOATS, inplace=True,
           accepts=None),
    _unary("sigmoid", ops.sigmoid, _sigmoid, FLOATS),
    _unary("isnan", ops.isnan, np.isnan, NUMERIC, accepts=None),
    _unary("isinf", ops.isinf, np.isinf, NUMERIC, accepts=None),
    _unary("isfinite", ops.isfinite, np.isfinite, NUMERIC, accepts=None),
    _unary("logical_not", ops.logical_not, lambda x: x == 0, ALL, accepts=None),
    _unary("identity", ops.identity, lambda x: x, ALL + ("float8_143",), accepts=None),
    _unary("rename", lambda x: ops.rename(x, "renamed"), lambda x: x, variant(ALL),
           accepts=None),
    _unary("detach", ops.detach, lambda x: x, ALL, accepts=None),
    _unary("detach_", ops.detach_, lambda x: x, variant(ALL), accepts=None),
    _unary("cast_float32", lambda x: ops.cast(x, popxl.float32), lambda x: x, ALL,
           accepts=None, errors=(
               _e((X34,), lambda x: ops.cast(x, popxl.float8_143), TypeError,
                  "Data type .* not supported for .*please consider pow2scale_cast_to_fp8"),
           )),
    _unary("cast_int32", lambda x: ops.cast(x, popxl.int32),
           lambda x: np.trunc(x.astype(np.float64)), ALL,
           accepts=None),
    _unary("clip", lambda x: ops.clip(x, -1, 2), lambda x: np.clip(x, -1, 2), NUMERIC),
    _unary("clamp", lambda x: ops.clamp(x, min=0.5), lambda x: np.maximum(x, 0.5),
           ("float32",),
           accepts=NUMERIC),
    _unary("increment_mod", lambda x: ops.increment_mod(x, 1, 3),
           lambda x: np.fmod(x + 1, 3), NUMERIC, errors=(
               _e((X34,), lambda x: ops.increment_mod(x, 1, 0), ValueError,
                  "modulus must be non-zero"),
           )),
    _unary("increment_mod_", lambda x: ops.increment_mod_(x, 2, 4),
           lambda x: np.fmod(x + 2, 4), NUMERIC, inplace=True),
    _unary("print_tensor", lambda x: ops.print_tensor(x, title="record"), lambda x: x,
           variant(ALL) + ("bool", "float8_143"),
           accepts=None, errors=(
               _e((X34,), lambda x: ops.print_tensor(x, separator=", "), ValueError,
                  "Parameter separator must be 1 character exactly"),
               _e((X34,), lambda x: ops.print_tensor(x, open_bracket=""), ValueError,
                  "Parameter open_bracket must be 1 character exactly"),
               _e((X34,), lambda x: ops.print_tensor(x, close_bracket="]]"), ValueError,
                  "Parameter close_bracket must be 1 character exactly"),
               _e((X34,), lambda x: ops.print_tensor(x, float_format="hex"), ValueError,
                  "Parameter float_format must be one of"),
           )),
]


def _binary(name: str, fn: Callable, reference: Callable, dtypes: tuple[str, ...],
            args: tuple[Arg, ...] = (X34, X4), inplace: bool = False, accepts: Any = None,
            errors: tuple = ()) -> OpRecord:
    return OpRecord(name, fn, reference, args, variant(dtypes) if inplace else dtypes,
                    accepts=accepts, inplace=inplace, errors=errors)


BINARY = [
    _binary("add", ops.add, np.add, NUMERIC, errors=(
        NOT_A_TENSOR, DTYPE_MISMATCH,
        _e((X34, Arg((3,))), ops.add, popart_exception, "np broadcasting failed"),
    )),
    _binary("add_", ops.add_, np.add, NUMERIC, inplace=True, errors=(
        _e((X4, X34), ops.add_, popart_exception, "add_ writes into"),
    )),
    _binary("sub", ops.sub, np.subtract, NUMERIC),
    _binary("mul", ops.mul, np.multiply, NUMERIC),
    _binary("mul_half_single", lambda x, s: ops.mul(x, s), np.multiply, ("float16",),
            (X34, Arg((1,), dtype="float32")), errors=(
                _e((Arg((3, 4), dtype="float16"), F32), ops.mul, popart_exception,
                   "incompatible types"),
            )),
    _binary("mul_single_half", lambda x, s: ops.mul(s, x), lambda x, s: s * x, ("float16",),
            (X34, Arg((), dtype="float32"))),
    _binary("div_int", ops.div, lambda a, b: np.trunc(a / b), INTS, (X34, NONZERO)),
    _binary("div_float", ops.div, np.divide, FLOATS, (X34, POSITIVE)),
    _binary("fmod", ops.fmod, np.fmod, NUMERIC, (X34, Arg((3, 4), low=1, high=3))),
    _binary("pow_int", ops.pow, np.power, INTS, (Arg((3, 4), low=0, high=3),
                                                 Arg((3, 4), low=0, high=3))),
    _binary("pow_float", ops.pow, np.power, FLOATS, (POSITIVE, X4)),
    _binary("pow_host_exponent", lambda x: ops.pow(x, 2), np.square, ("int32",), (X34,),
            errors=(_e((X34,), lambda x: ops.pow(x, 2), popart_exception,
                       "incompatible types"),)),
    _binary("maximum", ops.maximum, lambda a, b, c: np.maximum(np.maximum(a, b), c), NUMERIC,
            (X34, X4, Arg((3, 1)))),
    _binary("equal", ops.equal, np.equal, ALL, (Arg((3, 4), low=-1, high=1),
                                                Arg((4,), low=-1, high=1))),
    _binary("greater", ops.greater, np.greater, NUMERIC),
    _binary("logical_and", ops.logical_and, lambda a, b: (a != 0) & (b != 0), ALL),
    _binary("logical_or", ops.logical_or, lambda a, b: (a != 0) | (b != 0), ALL),
    _binary("where", ops.where, np.where, ALL, (BOOL34, X34, X4)),
    _binary("scaled_add", lambda x, y: ops.scaled_add(x, y, 2.0, 3.0),
            lambda x, y: 2 * x + 3 * y, NUMERIC, (X34, X34), errors=(
                _e((X34, X4), ops.scaled_add, popart_exception, "scaled_add does not broadcast"),
            )),
    _binary("scaled_add_", lambda x, y, a: ops.scaled_add_(x, y, a, 0.5),
            lambda x, y, a: a * x + 0.5 * y, FLOATS, (X34, X34, Arg((), dtype="float32")),
            inplace=True),
    OpRecord("matmul", ops.matmul, np.matmul, (Arg((2, 3, 4)), Arg((4, 5))), NUMERIC,
             tolerance={"float16": (4e-3, 4e-2), "bfloat16": (2e-2, 2e-1)}, errors=(
                 _e((X34, Arg((4, 2), dtype="int32")), ops.matmul, popart_exception,
                    "matmul: incompatible types"),
                 _e((X34, X34), ops.matmul, popart_exception, "contracted sizes differ"),
                 _e((X34, Arg((4, 2))), lambda a, b: ops.matmul(a, b, partials_type=popxl.int32),
                    ValueError, "partials_type must be"),
             )),
    OpRecord("matmul_vector", ops.matmul, np.matmul, (X4, Arg((4,))), variant(NUMERIC)),
    OpRecord("matmul_output_type", lambda a, b: ops.matmul(a, b, output_type=popxl.float32),
             lambda a, b: a @ b, (Arg((2, 3)), Arg((3, 2))), ("float16",)),
]

# ------------------------------------------------------------------ shape

SHAPE = [
    OpRecord("reshape", lambda x: ops.reshape(x, (2, -1)), lambda x: x.reshape(2, -1),
             (X34,), RUN_DTYPES, errors=(
                 _e((X34,), lambda x: ops.reshape(x, (0, 12)), ValueError,
                    "Invalid shape value in reshape. Must be '>0' or '-1'"),
                 _e((X34,), lambda x: ops.reshape(x, (-2, 6)), ValueError,
                    "Invalid shape value in reshape"),
                 _e((X34,), lambda x: ops.reshape(x, (-1, -1)), ValueError,
                    "Reshape shape can contain at most one '-1' value"),
                 _e((X34,), lambda x: ops.reshape(x, (5,)), ValueError, "Cannot reshape"),
             )),
    OpRecord("reshape_", lambda x: ops.reshape_(x, (12,)), lambda x: x.reshape(12), (X34,),
             variant(ALL)),
    OpRecord("flatten", ops.flatten, np.ravel, (Arg((2, 3, 2)),), variant(ALL)),
    OpRecord("flatten_", ops.flatten_, np.ravel, (Arg((2, 3, 2)),), variant(ALL)),
    OpRecord("transpose", ops.transpose, np.transpose, (Arg((2, 3, 4)),), RUN_DTYPES, errors=(
        _e((X34,), lambda x: ops.transpose(x, (0, 0)), ValueError, "is not a permutation"),
    )),
    OpRecord("transpose_", lambda x: ops.transpose_(x, (1, 0, 2)),
             lambda x: np.transpose(x, (1, 0, 2)), (Arg((2, 3, 4)),), variant(ALL)),
    OpRecord("squeeze", lambda x: ops.squeeze(x, [0, -1]), lambda x: np.squeeze(x, (0, 3)),
             (Arg((1, 3, 1, 1)),), variant(ALL), errors=(
                 _e((Arg((1, 3)),), lambda x: ops.squeeze(x, [0, 0]), ValueError,
                    "Axes contains duplicates"),
                 _e((Arg((1, 3)),), lambda x: ops.squeeze(x, [1]), ValueError,
                    "Can't squeeze axis '1' as length of axis is >1"),
                 _e((Arg((1, 3)),), lambda x: ops.squeeze(x, [2]), ValueError,
                    "Can't squeeze axis '2' as tensor has rank"),
             )),
    OpRecord("squeeze_all", ops.squeeze, np.squeeze, (Arg((1, 3, 1)),), variant(ALL)),
    OpRecord("concat", lambda a, b: ops.concat([a, b], axis=1),
             lambda a, b: np.concatenate([a, b], axis=1), (X34, Arg((3, 2))), RUN_DTYPES,
             errors=(
                 _e((X34, I32), lambda a, b: ops.concat([a, b]), TypeError,
                    "^All inputs to a concat operation must have the same type: `.*` is "
                    "float32 but `.*` is int32"),
             )),
    OpRecord("concat_", lambda a, b: ops.concat_([a, b], axis=-1),
             lambda a, b: np.concatenate([a, b], axis=-1), (X34, Arg((3, 2))), variant(ALL)),
    OpRecord("split", lambda x: tuple(ops.split(x, 2, axis=1)),
             lambda x: tuple(np.split(x, 2, axis=1)), (X34,), ALL, errors=(
                 _e((X34,), lambda x: ops.split(x, 3, axis=1), ValueError,
                    "Split 3 does not equally divide tensor axis"),
             )),
    OpRecord("split_sizes", lambda x: tuple(ops.split(x, [1, 3], axis=1)),
             lambda x: (x[:, :1], x[:, 1:]), (X34,), variant(ALL)),
    OpRecord("slice", lambda x: ops.slice(x, start=[1, -1], stop=[3, 0], step=[1, -1],
                                          axis=[0, 1]),
             lambda x: x[1:3, -1:0:-1], (X34,), RUN_DTYPES, errors=(
                 _e((X34,), lambda x: ops.slice(x, start=[0, 1], stop=[1]), ValueError,
                    "All inputs must have same length"),
             )),
    OpRecord("slice_reverse_to_zero", lambda x: ops.slice(x, start=2, step=-1, axis=1),
             lambda x: x[:, 2::-1], (X34,), variant(ALL)),
    OpRecord("slice_", lambda x: ops.slice_(x, start=1, stop=3), lambda x: x[1:3], (X34,),
             variant(ALL)),
    OpRecord("subsample", lambda x: ops.subsample(x, [2]), lambda x: x[::2],
             (Arg((5, 3)),), ALL, errors=(
                 _e((X34,), lambda x: ops.subsample(x, [1, 1, 1]), ValueError,
                    "subsample got 3 strides"),
             )),
]

# ------------------------------------------------------------------ var_updates

_UPDATE_ARGS = (X34, X34)


def _update(name: str, fn: Callable, reference: Callable, dtypes: tuple[str, ...] = FLOATS,
            args: tuple[Arg, ...] = _UPDATE_ARGS, errors: tuple = ()) -> OpRecord:
    return OpRecord(name, fn, reference, args, dtypes, inplace=True, errors=errors)


VAR_UPDATES = [
    _update("accumulate_", var_updates.accumulate_, np.add, NUMERIC, errors=(
        _e((X34, X4), var_updates.accumulate_, popart_exception,
           "accumulate_ does not broadcast"),
    )),
    _update("accumulate_scaled", lambda t, x: var_updates.accumulate_(t, x, 0.5),
            lambda t, x: t + 0.5 * x),
    _update("accumulate_tensor_factor", lambda t, x, f: var_updates.accumulate_(t, x, f),
            lambda t, x, f: t + f * x, args=(X34, X34, Arg((), dtype="float32"))),
    _update("accumulate_square_", lambda t, x: var_updates.accumulate_square_(t, x, 2.0),
            lambda t, x: t + 2 * x * x),
    _update("accumulate_mean_", lambda t, x: var_updates.accumulate_mean_(t, x, 3.0),
            lambda t, x: 3 / 4 * t + x / 4),
    _update("accumulate_moving_average_",
            lambda t, x: var_updates.accumulate_moving_average_(t, x, 0.25),
            lambda t, x: 0.25 * t + 0.75 * x),
    _update("accumulate_moving_average_square_",
            lambda t, x: var_updates.accumulate_moving_average_square_(t, x, 0.25),
            lambda t, x: 0.25 * t + 0.75 * x * x),
    _update("accumulator_scale_", lambda t: var_updates.accumulator_scale_(t, 0.5),
            lambda t: 0.5 * t, args=(X34,)),
    _update("accumulator_zero_", var_updates.accumulator_zero_, np.zeros_like, ALL,
            args=(X34,)),
    _update("copy_var_update_", var_updates.copy_var_update_, lambda t, x: x, ALL),
    _update("accumulate_scaled_int", lambda t, x: var_updates.accumulate_(t, x, 2),
            lambda t, x: t + 2 * x, ("int32", "uint8")),
]

# ------------------------------------------------------------------ reductions


def _reduction(name: str, fn: Callable, reference: Callable, dtypes: tuple[str, ...],
               arg: Arg = Arg((2, 3, 4)), tolerance: dict | None = None,
               errors: tuple = (), accepts: tuple[str, ...] | None = None) -> OpRecord:
    return OpRecord(name, fn, reference, (arg,), dtypes, accepts=accepts or dtypes,
                    tolerance=tolerance or {}, errors=errors)


def _axis_error(fn: Callable) -> ErrorCase:
    return _e((X34,), lambda x: fn(x, 2), ValueError, "axis 2 is out of range")


SMALL = Arg((2, 3, 4), low=-2, high=2)

REDUCTIONS = [
    _reduction("sum", lambda x: ops.sum(x, axis=(0, -1)), lambda x: x.sum(axis=(0, 2)),
               NUMERIC, errors=(
                   _axis_error(ops.sum),
                   _e((BOOL34,), ops.sum, popart_exception, "sum does not support dtype bool"),
               )),
    _reduction("sum_all_keepdims", lambda x: ops.sum(x, keepdims=True),
               lambda x: x.sum(keepdims=True), variant(NUMERIC), SMALL, accepts=NUMERIC),
    _reduction("mean", lambda x: ops.mean(x, axis=1), lambda x: x.mean(axis=1), FLOATS,
               errors=(_e((I32,), ops.mean, popart_exception, "mean does not support dtype"),)),
    _reduction("max", lambda x: ops.max(x, axis=[0, 1]), lambda x: x.max(axis=(0, 1)),
               NUMERIC),
    _reduction("min", lambda x: ops.min(x, keepdims=True), lambda x: x.min(keepdims=True),
               NUMERIC),
    _reduction("prod", lambda x: ops.prod(x, axis=0), lambda x: x.prod(axis=0), NUMERIC,
               Arg((3, 2, 4), low=-2, high=2)),
    _reduction("sumsquare", lambda x: ops.sumsquare(x, axis=2),
               lambda x: (x * x).sum(axis=2), NUMERIC),
    _reduction("l1", lambda x: ops.l1(x, axis=2), lambda x: np.abs(x).sum(axis=2), NUMERIC),
    _reduction("l2", lambda x: ops.l2(x, axis=(1, 2)),
               lambda x: np.sqrt((x * x).sum(axis=(1, 2))), FLOATS),
    _reduction("logsum", lambda x: ops.logsum(x, axis=1), lambda x: np.log(x.sum(axis=1)),
               FLOATS, Arg((2, 3, 4), low=0.25, high=3)),
    _reduction("logsumexp", lambda x: ops.logsumexp(x, axis=2, keepdims=True),
               lambda x: np.log(np.exp(x).sum(axis=2, keepdims=True)), FLOATS),
    _reduction("median_even", lambda x: ops.median(x, axis=2),
               lambda x: _lower_median(x, 2), NUMERIC),
    _reduction("median_odd_keepdims", lambda x: ops.median(x, axis=1, keepdims=True),
               lambda x: np.expand_dims(_lower_median(x, 1), 1), variant(NUMERIC),
               accepts=NUMERIC),
    _reduction("median_all", ops.median,
               lambda x: _lower_median(x.reshape(-1), 0), variant(NUMERIC), accepts=NUMERIC),
    _reduction("argmax", lambda x: ops.argmax(x, dim=1), lambda x: np.argmax(x, axis=1),
               NUMERIC, Arg((2, 3, 4), distinct=True), errors=(
                   _e((X34,), lambda x: ops.argmax(x, dim=2), ValueError,
                      "argmax: axis 2 is out of range"),
               )),
    _reduction("argmin", lambda x: ops.argmin(x, dim=-1, keepdim=True),
               lambda x: np.argmin(x, axis=-1)[..., None], NUMERIC,
               Arg((2, 3, 4), distinct=True)),
    OpRecord("argmax_ties", lambda x: ops.argmax(x, 1), lambda x: np.argmax(x, axis=1),
             (Arg(data=[[1, 3, 3, 0], [2, 2, 1, 2]]),), ("int32", "float32")),
    OpRecord("topk_largest", lambda x: ops.topk(x, 2, axis=-1, largest=True, sorted=True),
             lambda x: _topk(x, 2, -1, True), (Arg((2, 3, 4), distinct=True),), NUMERIC,
             accepts=NUMERIC, errors=(
                 _e((X34,), lambda x: ops.topk(x, 0, 1, True, True), ValueError,
                    r"topk: k must be an int in \[1, 4\]"),
                 _e((X34,), lambda x: ops.topk(x, 5, 1, True, True), ValueError,
                    "topk: k must be"),
                 _e((X34,), lambda x: ops.topk(x, 1, 1, True, True, 1.5), ValueError,
                    "available_memory_proportion must be in"),
             )),
    OpRecord("topk_smallest", lambda x: ops.topk(x, 3, axis=0, largest=False, sorted=True),
             lambda x: _topk(x, 3, 0, False), (Arg((4, 3), distinct=True),),
             variant(NUMERIC)),
    OpRecord("topk_ties", lambda x: ops.topk(x, 3, axis=1, largest=True, sorted=True),
             lambda x: _topk(x, 3, 1, True),
             (Arg(data=[[1, 3, 3, 0, 3], [2, 2, 1, 2, 0]]),), ("int32", "float32")),
    _reduction("cumsum", lambda x: ops.cumsum(x, dim=2), lambda x: np.cumsum(x, axis=2),
               NUMERIC, SMALL, errors=(
                   _e((X34,), lambda x: ops.cumsum(x, 3), ValueError, "cumsum: axis 3"),
               )),
    # PopXL builds lamb_square of any dtype; a Session refuses the non-floats
    # (test_ops_structure).
    OpRecord("lamb_square", ops.lamb_square, lambda x: (x * x).sum(), (X34,),
             FLOATS, accepts=None),
    OpRecord("histogram", lambda x: ops.histogram(x, [-1.0, 0.0, 1.5], False),
             lambda x: _histogram(x, [-1.0, 0.0, 1.5], False), (X34,), FLOATS,
             accepts=FLOATS, errors=(
                 _e((X34,), lambda x: ops.histogram(x, [0.0, 0.0], False), ValueError,
                    r"The input levels `\[0.0, 0.0\]` is not a monotonically increasing list"),
                 _e((X34,), lambda x: ops.histogram(x, [1.0, -1.0], True), ValueError,
                    "is not a monotonically increasing list"),
             )),
    OpRecord("histogram_absolute", lambda x: ops.histogram(x, [0.0, 0.5, 2.0], True),
             lambda x: _histogram(x, [0.0, 0.5, 2.0], True),
             (Arg(data=[[np.nan, -0.5, 2.0], [np.inf, -np.inf, 0.25]]),), variant(FLOATS)),
]

# ------------------------------------------------------------------ indexing

INDEX_ERRORS = (
    _e((X34, Arg(data=np.array([0.0, 1.0]), dtype="float32")),
       lambda x, i: ops.dynamic_slice(x, i, [0, 1], [1, 1], False), TypeError,
       "must be int32 or uint32"),
    _e((X34, _int32([0, 1])), lambda x, i: ops.dynamic_slice(x, i, [0], [1], False),
       ValueError, "must give one entry per sliced axis"),
    _e((X34, _int32([0, 1])), lambda x, i: ops.dynamic_slice(x, i, [0, 1], [4, 1], False),
       ValueError, r"size 4 for axis 0 must be in \[1, 3\]"),
    _e((X34, _int32([0, 1])), lambda x, i: ops.dynamic_slice(x, i, [1, -1], [1, 1], False),
       ValueError, "contain duplicates"),
)


def _dynamic_slice_reference(x: np.ndarray, index: np.ndarray) -> np.ndarray:
    return x[index[0]:index[0] + 2, :, index[1]:index[1] + 3]


def _dynamic_update_reference(x: np.ndarray, index: np.ndarray, update: np.ndarray
                              ) -> np.ndarray:
    out = x.copy()
    out[:, index[0]:index[0] + 2] = update
    return out


_SCATTER_INDICES = np.array([[1, 0, 2, 1], [0, 2, 1, 0]])
_GATHER_INDICES = np.array([[0, 2], [-1, 1], [3, -4]])

INDEXING = [
    OpRecord("dynamic_slice",
             lambda x, i: ops.dynamic_slice(x, i, [0, 2], [2, 3], no_overlap=True),
             _dynamic_slice_reference, (Arg((3, 2, 5)), _int32([1, 2])), RUN_DTYPES,
             errors=INDEX_ERRORS),
    OpRecord("dynamic_slice_clamped",
             lambda x, i: ops.dynamic_slice(x, i, [0], [2], no_overlap=False),
             lambda x, i: x[1:3], (X34, Arg(data=np.array([7]), dtype="uint32")), ("float32",)),
    OpRecord("dynamic_update",
             lambda x, i, u: ops.dynamic_update(x, i, u, [1], [2], no_overlap=False),
             _dynamic_update_reference, (X34, _int32([1]), Arg((3, 2))), ALL, errors=(
                 _e((X34, _int32([1]), Arg((3, 2), dtype="int32")),
                    lambda x, i, u: ops.dynamic_update(x, i, u, [1], [2], False),
                    popart_exception, "dynamic_update: `t_update` is int32"),
             )),
    OpRecord("dynamic_update_",
             lambda x, i, u: ops.dynamic_update_(x, i, u, [1], [2], no_overlap=False),
             _dynamic_update_reference, (X34, _int32([2]), Arg((3, 2))), variant(ALL),
             inplace=True),
    OpRecord("gather", lambda x, i: ops.gather(x, i, axis=1),
             lambda x, i: np.take(x, i, axis=1), (Arg((2, 4, 3)), _int32(_GATHER_INDICES)),
             RUN_DTYPES, errors=(
                 _e((X34, F32), ops.gather, TypeError, "the indices .* must be an integer"),
                 _e((X34, I32), lambda x, i: ops.gather(x, i, 2), ValueError,
                    "gather: axis 2 is out of range"),
                 _e((X34, I32), lambda x, i: ops.gather(x, i, available_memory_proportion=0),
                    ValueError, "available_memory_proportion must be in"),
             )),
    OpRecord("gather_clamped", ops.gather, lambda x, i: x[[0, 3, 3]],
             (Arg((4, 2)), _int32([-9, 4, 100])), ("float32", "int32")),
    OpRecord("gather_zero_OOR", lambda x, i: ops.gather(x, i, zero_OOR=True),
             lambda x, i: np.where((i >= -4) & (i < 4), x[np.clip(i, -4, 3)], 0),
             (Arg((4,)), _int32([0, 4, -5, -1, 3])), ("float32", "int32")),
    OpRecord("gather_zero_OOR_rows", lambda x, i: ops.gather(x, i, axis=0, zero_OOR=True),
             lambda x, i: np.where((i[:, None] >= 0) & (i[:, None] < 3), x[np.clip(i, 0, 2)], 0),
             (Arg((3, 2)), _int32([2, 3, 0])), ("float32",)),
    OpRecord("gather_indices_in_test_dtype", ops.gather, lambda x, i: x[i],
             (Arg((3, 2), dtype="float32"), Arg(data=[2, 0, 1])), INTS),
    OpRecord("gather_unsigned_indices", ops.gather, lambda x, i: np.take(x, i, axis=0),
             (X34, Arg(data=np.array([2, 0]), dtype="uint32")), ("float32",)),
    OpRecord("tied_gather", ops.tied_gather, lambda x, i: np.take(x, i, axis=0),
             (X34, _int32([[2, 0], [1, 1]])), variant(ALL)),
    OpRecord("groupedgather", lambda x, i: ops.groupedgather(x, i, axis=1, group_size=2),
             lambda x, i: np.stack([np.take(x[g], i[g], axis=0) for g in range(2)]),
             (Arg((2, 4, 3)), _int32([[0, 3, 1], [2, 2, 0]])), ("float32", "int32"), errors=(
                 _e((Arg((2, 4)), _int32([[0], [1]])),
                    lambda x, i: ops.groupedgather(x, i, axis=0, group_size=2), ValueError,
                    "axis 0 is the group dimension"),
                 _e((Arg((3, 4)), _int32([[0], [1]])),
                    lambda x, i: ops.groupedgather(x, i, axis=1, group_size=2), ValueError,
                    "must both have group_size=2"),
             )),
    OpRecord("scatter", lambda t, i, v: ops.scatter(t, i, v, axis=0),
             lambda t, i, v: _scatter_elements(t, i, v, 0),
             (X34, _int32(_SCATTER_INDICES[:, :3]), Arg((2, 3))), ALL, errors=(
                 _e((X34, _int32([[0, 1]]), Arg((1, 3))), ops.scatter, ValueError,
                    "must have the same shape"),
                 _e((X34, _int32([[0, 1]]), Arg((1, 2), dtype="int32")), ops.scatter,
                    popart_exception, "scatter: `values` is int32"),
             )),
    OpRecord("scatter_axis1", lambda t, i, v: ops.scatter(t, i, v, axis=-1),
             lambda t, i, v: _scatter_elements(t, np.where(i < 0, i + 4, i), v, 1),
             (X34, _int32([[3, 0], [-1, 1], [2, 0]]), Arg((3, 2))), ("float32", "int32")),
    OpRecord("scatter_reduce_sum",
             lambda d, i: ops.scatter_reduce(d, i, "sum", axis=1, axis_size=3),
             lambda d, i: _scatter_reduce(d, _SCATTER_INDICES, np.zeros((2, 3)), "sum", 1),
             (Arg((2, 4)), _int32(_SCATTER_INDICES)), NUMERIC, accepts=NUMERIC, errors=(
                 _e((X34, I32), lambda d, i: ops.scatter_reduce(d, i, "mean", axis_size=3),
                    ValueError, "The reduction must be one of"),
                 _e((X34, I32), lambda d, i: ops.scatter_reduce(d, i, "sum"), ValueError,
                    "One of initial_values and axis_size must be specified"),
                 _e((X34, _int32([0, 1])),
                    lambda d, i: ops.scatter_reduce(d, i, "sum", axis_size=3), ValueError,
                    r"`indices` \(2,\) must have the shape of `data` \(3, 4\), or broadcast"),
                 _e((X34, _int32([0, 1, 2])),
                    lambda d, i: ops.scatter_reduce(d, i, "sum", axis_size=3,
                                                    enable_index_broadcast=False),
                    ValueError, "when enable_index_broadcast is False"),
                 _e((X34, I32, Arg((2, 5))),
                    lambda d, i, v: ops.scatter_reduce(d, i, "max", v), ValueError,
                    "`initial_values` .* must have the output shape"),
             )),
    OpRecord("scatter_reduce_max_initial",
             lambda d, i, v: ops.scatter_reduce(d, i, "max", initial_values=v, axis=1),
             lambda d, i, v: _scatter_reduce(d, _SCATTER_INDICES, v, "max", 1),
             (Arg((2, 4)), _int32(_SCATTER_INDICES), Arg((2, 3))), NUMERIC),
    OpRecord("scatter_reduce_min_identity",
             lambda d, i: ops.scatter_reduce(d, i, "min", axis=0, axis_size=3),
             lambda d, i: _scatter_reduce(
                 d, np.broadcast_to(i[:, None], d.shape),
                 np.full((3, 2), np.finfo(np.float32).max if d.dtype.kind == "f"
                         else np.iinfo(np.int32).max), "min", 0),
             (Arg((4, 2)), _int32([0, 2, 0, 2])), ("float32", "int32")),
    OpRecord("scatter_reduce_max_identity",
             lambda d, i: ops.scatter_reduce(d, i, "max", axis=0, axis_size=3),
             lambda d, i: _scatter_reduce(
                 d, np.broadcast_to(i[:, None], d.shape),
                 np.full((3, 2), np.finfo(np.float32).min if d.dtype.kind == "f"
                         else np.iinfo(np.int32).min), "max", 0),
             (Arg((4, 2)), _int32([0, 2, 0, 2])), ("float32", "int32")),
    OpRecord("scatter_reduce_none",
             lambda d, i: ops.scatter_reduce(d, i, "none", axis=1, axis_size=5),
             lambda d, i: _scatter_reduce(d, np.broadcast_to(i[None, :, None], d.shape),
                                          np.zeros((2, 5, 2)), "none", 1),
             (Arg((2, 3, 2)), _int32([4, 0, 2])), ("float32", "int32")),
    OpRecord("onehot", lambda t, v: ops.onehot(t, popxl.constant(4), v, axis=-1),
             lambda t, v: _onehot(t, 4, v[0], v[1], -1),
             (_int32([[0, 3], [-1, 7]]), Arg(data=[1, 2])), NUMERIC, errors=(
                 _e((I32, X4), lambda t, v: ops.onehot(t, v, v, 0), ValueError,
                    "`num_classes` must be a constant one-element tensor"),
                 _e((I32, X4), lambda t, v: ops.onehot(t, popxl.constant(2), v, 0), ValueError,
                    r"`values` must have shape \(2,\)"),
             )),
    OpRecord("onehot_axis0", lambda t, v: ops.onehot(t, popxl.constant(3), v, axis=0),
             lambda t, v: _onehot(t, 3, v[0], v[1], 0),
             (_int32([2, 0, 1, 2]), Arg(data=[0, 1], dtype="float32")), ("float32",)),
    OpRecord("init", lambda x: ops.init(x.shape, x.dtype, "zeros"), np.zeros_like, (X34,),
             ALL + ("float8_143",), errors=(
                 _e((), lambda: ops.init((2,), popxl.float32, init_type="random"), ValueError,
                    "Unknown init_type"),
             )),
    OpRecord("init_undef", lambda x: ops.init(x.shape, x.dtype, init_type="undef"),
             np.zeros_like, (X34,), ("float32",)),
]

# ------------------------------------------------------------------ float8


def _to_fp8_reference(x: np.ndarray) -> np.ndarray:
    return x * 2.0**3  # rounded and checked for overflow when encoded


FP8_DATA = [0.75, -0.0, 30.0, 30.5, 31.0, 32.0, 1000.0, -0.0001, 1.5, -2.25, np.nan, -np.inf]

FP8 = [
    OpRecord("pow2scale_cast_to_fp8",
             lambda x: ops.pow2scale_cast_to_fp8(x, _scale(3), popxl.float8_143),
             _to_fp8_reference, (Arg(data=FP8_DATA),), ("float16", "float32"),
             accepts=("float16", "float32", "bfloat16"), dtype_error=TypeError, errors=(
                 _e((X34,), lambda x: ops.pow2scale_cast_to_fp8(x, _scale(0), popxl.float16),
                    TypeError, "Data type .* is not supported for pow2scale_cast_to_fp8"),
                 _e((X34,), lambda x: ops.pow2scale_cast_to_fp8(
                     x, popxl.constant(1.0), popxl.float8_143),
                    TypeError, "Log2 scale tensor must be of type popxl.int32"),
                 _e((X34,), lambda x: ops.pow2scale_cast_to_fp8(
                     x, popxl.constant([1], popxl.int32), popxl.float8_152),
                    ValueError, "Log2 scale argument must be a scalar tensor"),
             )),
    OpRecord("pow2scale_cast_to_fp8_152",
             lambda x: ops.pow2scale_cast_to_fp8(x, _scale(3), popxl.float8_152),
             _to_fp8_reference, (Arg(data=FP8_DATA + [7200.0, 7700.0]),), ("float32",)),
    OpRecord("pow2scale_cast_from_fp8",
             lambda x: ops.pow2scale_cast_from_fp8(x, _scale(-2), popxl.float32),
             lambda x: x * 2.0**-2, (Arg((3, 4), dtype="float8_143"),), ("float32",),
             errors=(
                 _e((X34,), lambda x: ops.pow2scale_cast_from_fp8(x, _scale(0), popxl.float32),
                    TypeError, "pow2scale_cast_from_fp8 converts float8 tensors"),
                 _e((Arg((3, 4), dtype="float8_143"),),
                    lambda x: ops.pow2scale_cast_from_fp8(x, _scale(0), popxl.float64),
                    TypeError, "Data type .* is not supported for pow2scale_cast_from_fp8"),
                 _e((Arg((3, 4), dtype="float8_143"),),
                    lambda x: ops.pow2scale_cast_from_fp8(x, popxl.constant(0, popxl.uint32)),
                    TypeError, "Log2 scale tensor must be of type popxl.int32"),
             )),
    OpRecord("pow2scale_round_trip",
             lambda x: ops.pow2scale_cast_from_fp8(
                 ops.pow2scale_cast_to_fp8(x, _scale(2), popxl.float8_152), _scale(-2),
                 x.dtype),
             lambda x: x, (Arg(data=[0.75, -1.5, 0.25, 3.0, -0.125]),), ("float16", "float32")),
]

RECORDS: list[OpRecord] = UNARY + BINARY + SHAPE + VAR_UPDATES + REDUCTIONS + INDEXING + FP8

# Extra error paths shared by every op (checked once, on representative ops).
SHARED_ERRORS = (
    NOT_A_TENSOR,
    _e((X34,), lambda x: ops.relu("x"), TypeError, "The input `t` is not a Tensor"),
    _e((X34,), lambda x: ops.gather(x, [0]), TypeError, "The input `indices` is not a Tensor"),
    _e((), lambda: ops.sum(np.ones(3)), TypeError, "The input `t` is not a Tensor"),
    _e((), lambda: ops.argmax([1, 2]), TypeError, "The input `t` is not a Tensor"),
    _e((), lambda: ops.topk([1, 2], 1, 0, True, True), TypeError, "The input `t` is not"),
    _e((), lambda: ops.cumsum(1.0), TypeError, "The input `t` is not a Tensor"),
    _e((), lambda: ops.reshape(np.ones(3), (3,)), TypeError, "The input `t` is not a Tensor"),
    _e((), lambda: ops.flatten([1]), TypeError, "The input `t` is not a Tensor"),
    _e((), lambda: ops.squeeze([1]), TypeError, "The input `t` is not a Tensor"),
    _e((), lambda: ops.transpose([1]), TypeError, "The input `t` is not a Tensor"),
    _e((), lambda: ops.split([1], 1), TypeError, "The input `t` is not a Tensor"),
    _e((), lambda: ops.slice([1], 0), TypeError, "The input `t` is not a Tensor"),
    _e((), lambda: ops.subsample([1], 1), TypeError, "The input `t` is not a Tensor"),
    _e((X34,), lambda x: ops.dynamic_slice(x, [0], [0], [1], False), TypeError,
       "The input `index` is not a Tensor"),
    _e((X34,), lambda x: ops.scatter_reduce(x, 0, "sum", axis_size=2), TypeError,
       "The input `indices` is not a Tensor"),
    _e((X34,), lambda x: ops.onehot(x, 3, x, 0), TypeError,
       "The input `num_classes` is not a Tensor"),
    _e((X34,), lambda x: ops.pow2scale_cast_to_fp8(x, 2), TypeError,
       "The input `log2_scale` is not a Tensor"),
)
