"""Folding a node whose inputs are all known, without compiling anything.

The importer evaluates such a node at import (a ``Shape -> Gather -> Unsqueeze -> Concat
-> Reshape`` chain, the ``Unsqueeze`` of a BatchNormalization scale). Evaluating its rule
with JAX eagerly compiles one small XLA program per primitive and shape: DenseNet-121's 238
``Unsqueeze`` nodes cost 1.4 s of compiles the first time a process imports it.

:func:`evaluate` traces the rule to a jaxpr instead (no compile) and runs that jaxpr with
NumPy, one *twin* per primitive. A twin exists only where NumPy computes exactly what
XLA does: data movement (reshape, broadcast, slice, gather, concatenate, ...), integer and
boolean arithmetic, comparisons, and float additions and products, which IEEE rounds the
same in both. Anything else (a float reduction, an exponential, a float-to-int conversion
of an out-of-range value, a division by zero, a rule that needs a concrete input while
tracing) makes :func:`evaluate` run the rule with JAX as before, so a twin never decides a
result XLA would compute differently. Every twin's output must also have the dtype and
shape that tracing gave, or the rule runs with JAX.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend import core as jax_core

__all__ = ["evaluate"]

# Past this many gathered windows a twin would loop too long in Python: JAX does it.
_GATHER_WINDOWS_LIMIT = 4096


class _NoTwin(Exception):
    """This jaxpr (or these values) has no exact NumPy evaluation: run it with JAX."""


def evaluate(fn: Callable[..., Any], arrays: Sequence[np.ndarray], key: Any = None,
             family: Any = None) -> Any:
    """``fn(*arrays)`` (a rule applied to known values), as NumPy arrays: evaluated with
    NumPy when every primitive of its jaxpr has a twin, else with JAX. ``key`` (None: no
    reuse) names everything but the values of ``arrays`` that the jaxpr depends on: the
    rule, the arrays' shapes and dtypes, its static inputs and attributes; a jaxpr traced
    once is reused for every later call with that key. ``family`` names the rule alone.
    Call it with ``jax.enable_x64(True)`` in effect, as the importer does."""
    if not arrays and family is not None and family in _HOST_ONLY:
        return fn()  # this rule computed its known-only result with NumPy before
    traced = _JAXPRS.get(key) if key is not None else None
    if traced is None:
        try:
            closed, shape = jax.make_jaxpr(fn, return_shape=True)(*arrays)
        except Exception:
            # Tracing failed: the rule needs a concrete input, or rejects it. JAX's
            # eager run gives the same answer or the rule's own error.
            return _eagerly(fn, arrays)
        traced = (closed, jax.tree_util.tree_structure(shape))
        if not arrays and not closed.jaxpr.eqns and family is not None:
            _HOST_ONLY.add(family)
        if key is not None and len(_JAXPRS) < _JAXPRS_LIMIT and sum(
                np.asarray(c).nbytes for c in closed.consts) <= _KEPT_CONSTANTS_BYTES:
            _JAXPRS[key] = traced
    closed, tree = traced
    try:
        flat = _run(closed.jaxpr, closed.consts, list(arrays))
    except _NoTwin:
        return _eagerly(fn, arrays)
    # A result is the importer's own, as JAX's would be: never an input (the caller's
    # array, which the importer marks read-only) nor a view of one.
    flat = [value.copy() if any(np.may_share_memory(value, a) for a in arrays) else value
            for value in flat]
    return jax.tree_util.tree_unflatten(tree, flat)


_JAXPRS: dict[Any, tuple[Any, Any]] = {}
# Rules (by ``family``) whose result from static inputs only held no JAX operation: a
# later such call runs the rule directly. (Were a rule to use JAX for other inputs, that
# call would compile as before: slower, never different.)
_HOST_ONLY: set[Any] = set()
_JAXPRS_LIMIT = 4096
_KEPT_CONSTANTS_BYTES = 1 << 16  # a jaxpr holding more (a folded Range, say) is not kept


def _eagerly(fn: Callable[..., Any], arrays: Sequence[np.ndarray]) -> Any:
    return fn(*(jax.numpy.asarray(a) for a in arrays))


def _run(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> list[np.ndarray]:
    env: dict[Any, np.ndarray] = {}

    def read(atom: Any) -> np.ndarray:
        if isinstance(atom, jax_core.Literal):
            return _checked(np.asarray(atom.val, dtype=atom.aval.dtype), atom.aval)
        return env[atom]

    for var, value in zip(jaxpr.constvars, consts):
        env[var] = _checked(np.asarray(value), var.aval)
    for var, value in zip(jaxpr.invars, args):
        env[var] = _checked(np.asarray(value), var.aval)
    for eqn in jaxpr.eqns:
        twin = _TWINS.get(eqn.primitive.name)
        if twin is None:
            raise _NoTwin(eqn.primitive.name)
        values = [read(atom) for atom in eqn.invars]
        try:
            results = twin(eqn, *values)
        except _NoTwin:
            raise
        except Exception as error:  # a case this twin does not cover: JAX decides
            raise _NoTwin(f"{eqn.primitive.name}: {error}") from error
        if not eqn.primitive.multiple_results:
            results = [results]
        for var, value in zip(eqn.outvars, results):
            env[var] = _checked(np.asarray(value), var.aval)
    return [read(atom) for atom in jaxpr.outvars]


def _checked(value: np.ndarray, aval: Any) -> np.ndarray:
    """``value``, which must have the traced dtype and shape (else JAX evaluates)."""
    if value.dtype != aval.dtype or value.shape != tuple(aval.shape):
        raise _NoTwin(f"{value.dtype}{value.shape} where tracing gave {aval.str_short()}")
    return value


# ------------------------------------------------------------------------------ the twins
def _exact_kind(*values: np.ndarray) -> str:
    """'int' (integers and booleans), 'float' (float16/32/64 and bfloat16), or no twin."""
    kinds = {"b": "int", "i": "int", "u": "int", "f": "float", "V": "float"}
    found = {kinds.get(v.dtype.kind) for v in values}
    if len(found) != 1 or None in found:
        raise _NoTwin("mixed or unsupported dtypes")
    return found.pop()


def _integers_only(function: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def twin(eqn: Any, *values: np.ndarray) -> np.ndarray:
        if _exact_kind(*values) != "int":
            raise _NoTwin(f"{eqn.primitive.name} of floats")
        with np.errstate(over="ignore"):  # XLA wraps around, as NumPy does
            return function(*values).astype(values[0].dtype, copy=False)
    return twin


def _no_subnormals(*values: np.ndarray) -> None:
    """XLA:CPU may flush subnormal floats to zero where NumPy keeps them."""
    for value in values:
        if value.dtype.kind in "fV" and value.size:
            magnitude = np.abs(value.astype(np.float64))
            if np.any((magnitude > 0) & (magnitude < float(_finfo(value.dtype).tiny))):
                raise _NoTwin("a subnormal float")


def _finfo(dtype: np.dtype) -> Any:
    import ml_dtypes

    return ml_dtypes.finfo(dtype)


def _exact_arithmetic(function: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """One IEEE-rounded operation (or integer arithmetic, which wraps in both)."""
    def twin(eqn: Any, *values: np.ndarray) -> np.ndarray:
        _exact_kind(*values)
        _no_subnormals(*values)
        with np.errstate(all="ignore"):
            result = np.asarray(function(*values)).astype(values[0].dtype, copy=False)
        _no_subnormals(result)
        return result
    return twin


def _comparison(function: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def twin(eqn: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        _exact_kind(a, b)
        return np.asarray(function(a, b), dtype=np.bool_)
    return twin


def _integer_division(kind: str) -> Callable[..., np.ndarray]:
    """XLA's integer ``div`` truncates toward zero and ``rem`` takes the dividend's sign;
    a zero divisor, or the most negative value over -1, is left to XLA."""
    def twin(eqn: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if _exact_kind(a, b) != "int" or a.dtype.kind == "b":
            raise _NoTwin(f"{kind} of floats")
        if np.any(b == 0):
            raise _NoTwin("division by zero")
        if a.dtype.kind == "i" and np.any((a == np.iinfo(a.dtype).min) & (b == -1)):
            raise _NoTwin("division overflow")
        if kind == "rem":
            return np.fmod(a, b).astype(a.dtype, copy=False)
        quotient = np.abs(a) // np.abs(b) if a.dtype.kind == "i" else a // b
        negative = (a < 0) != (b < 0) if a.dtype.kind == "i" else np.zeros(a.shape, bool)
        return np.where(negative, -quotient, quotient).astype(a.dtype, copy=False)
    return twin


def _convert(eqn: Any, value: np.ndarray) -> np.ndarray:
    """Casts both sides round the same way: booleans, integers, float widening and
    narrowing (round to nearest even), integers to floats; a float to an integer only
    when every value is finite and in range (both truncate toward zero)."""
    target = np.dtype(eqn.params["new_dtype"])
    if target.kind in "iu" and value.dtype.kind not in "biu":
        if value.dtype.kind not in "fV":
            raise _NoTwin("cast from an unsupported dtype")
        wide = value.astype(np.float64)
        info = np.iinfo(target)
        if not np.all(np.isfinite(wide)) or np.any(np.trunc(wide) < info.min) \
                or np.any(np.trunc(wide) > info.max):
            raise _NoTwin("a float out of the integer's range")
        return np.trunc(wide).astype(target)
    if target.kind == "b":
        return value != 0
    if target.kind not in "biufV" or value.dtype.kind not in "biufV":
        raise _NoTwin("cast of an unsupported dtype")
    _no_subnormals(value)
    with np.errstate(all="ignore"):
        result = value.astype(target)
    _no_subnormals(result)
    return result


def _broadcast_in_dim(eqn: Any, value: np.ndarray, *dynamic: np.ndarray) -> np.ndarray:
    if dynamic:
        raise _NoTwin("dynamic broadcast shape")
    shape = tuple(eqn.params["shape"])
    expanded = [1] * len(shape)
    for source, target in enumerate(eqn.params["broadcast_dimensions"]):
        expanded[target] = value.shape[source]
    return np.broadcast_to(value.reshape(expanded), shape)


def _reshape(eqn: Any, value: np.ndarray, *dynamic: np.ndarray) -> np.ndarray:
    if dynamic or eqn.params.get("dimensions") is not None:
        raise _NoTwin("reshape with dimensions")
    return value.reshape(eqn.params["new_sizes"])


def _slice(eqn: Any, value: np.ndarray) -> np.ndarray:
    strides = eqn.params["strides"] or (1,) * value.ndim
    return value[tuple(slice(start, limit, step) for start, limit, step in zip(
        eqn.params["start_indices"], eqn.params["limit_indices"], strides))]


def _dynamic_slice(eqn: Any, value: np.ndarray, *starts: np.ndarray) -> np.ndarray:
    """Each start clamped so that the window fits, as XLA does."""
    sizes = eqn.params["slice_sizes"]
    if len(starts) != value.ndim:
        raise _NoTwin("dynamic_slice with dynamic sizes")
    clamped = [min(max(int(start), 0), dim - size)
               for start, dim, size in zip(starts, value.shape, sizes)]
    return value[tuple(slice(start, start + size) for start, size in zip(clamped, sizes))]


def _iota(eqn: Any) -> np.ndarray:
    params = eqn.params
    shape, dimension = tuple(params["shape"]), params["dimension"]
    line = np.arange(shape[dimension], dtype=np.dtype(params["dtype"]))
    expanded = [1] * len(shape)
    expanded[dimension] = shape[dimension]
    return np.broadcast_to(line.reshape(expanded), shape)


def _select_n(eqn: Any, which: np.ndarray, *cases: np.ndarray) -> np.ndarray:
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0]) if len(cases) == 2 else cases[0]
    return np.choose(which.astype(np.int64), cases)


def _gather(eqn: Any, operand: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """XLA's gather without batching dimensions (what ``jnp.take`` and indexing emit):
    one window of ``slice_sizes`` per index vector, clamped into range, or filled with
    ``fill_value`` when out of range under FILL_OR_DROP."""
    params = eqn.params
    numbers = params["dimension_numbers"]
    if numbers.operand_batching_dims or numbers.start_indices_batching_dims:
        raise _NoTwin("gather with batching dimensions")
    if indices.dtype.kind not in "iu":
        raise _NoTwin("gather with non-integer indices")
    if indices.size and (int(indices.min()) < -2**31 or int(indices.max()) >= 2**31):
        raise _NoTwin("an index past int32, which JAX may narrow first")
    sizes = tuple(params["slice_sizes"])
    vectors = indices.reshape(-1, indices.shape[-1]) if indices.ndim else indices.reshape(1, 1)
    if len(vectors) > _GATHER_WINDOWS_LIMIT:
        raise _NoTwin("too many windows")
    fill = "FILL_OR_DROP" in str(params["mode"])
    window_shape = [n for d, n in enumerate(sizes) if d not in numbers.collapsed_slice_dims]
    windows = []
    for vector in vectors:
        start = [0] * operand.ndim
        for position, dimension in enumerate(numbers.start_index_map):
            start[dimension] = int(vector[position])
        limits = [operand.shape[d] - sizes[d] for d in range(operand.ndim)]
        if fill and any(not 0 <= start[d] <= limits[d] for d in numbers.start_index_map):
            if params["fill_value"] is None:  # jax.lax.gather always names it
                raise _NoTwin("gather fill without a value")
            windows.append(np.full(window_shape, params["fill_value"], operand.dtype))
            continue
        start = [min(max(s, 0), limit) for s, limit in zip(start, limits)]
        window = operand[tuple(slice(s, s + n) for s, n in zip(start, sizes))]
        windows.append(window.reshape(window_shape))
    batch_shape = indices.shape[:-1] if indices.ndim else ()
    stacked = np.stack(windows).reshape(tuple(batch_shape) + tuple(window_shape))
    first_offset = len(batch_shape)
    return np.moveaxis(stacked, range(first_offset, stacked.ndim), numbers.offset_dims)


def _integer_reduction(function: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def twin(eqn: Any, value: np.ndarray) -> np.ndarray:
        if _exact_kind(value) != "int" or (value.size == 0 and function in (np.max, np.min)):
            raise _NoTwin("float or empty reduction")
        with np.errstate(over="ignore"):
            return function(value, axis=tuple(eqn.params["axes"])).astype(value.dtype)
    return twin


def _nested(eqn: Any, *values: np.ndarray) -> list[np.ndarray]:
    closed = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
    return _run(getattr(closed, "jaxpr", closed), getattr(closed, "consts", ()), values)


def _minmax(function: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Integers only, or floats with no NaN and no pair of zeros (whose sign XLA and
    NumPy may pick differently)."""
    def twin(eqn: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if _exact_kind(a, b) == "float" and (np.any(np.isnan(a)) or np.any(np.isnan(b))
                                              or np.any((a == 0) & (b == 0))):
            raise _NoTwin("NaN or zeros in max/min")
        return function(a, b)
    return twin


_TWINS: dict[str, Callable[..., Any]] = {
    # data movement: exact for every dtype
    "reshape": _reshape,
    "broadcast_in_dim": _broadcast_in_dim,
    "squeeze": lambda eqn, v: np.squeeze(v, tuple(eqn.params["dimensions"])),
    "expand_dims": lambda eqn, v: np.expand_dims(v, tuple(eqn.params["dimensions"])),
    "transpose": lambda eqn, v: np.transpose(v, eqn.params["permutation"]),
    "concatenate": lambda eqn, *vs: np.concatenate(vs, axis=eqn.params["dimension"]),
    "slice": _slice,
    "dynamic_slice": _dynamic_slice,
    "rev": lambda eqn, v: np.flip(v, tuple(eqn.params["dimensions"])),
    "iota": _iota,
    "select_n": _select_n,
    "gather": _gather,
    "copy": lambda eqn, v: v.copy(),
    "copy_p": lambda eqn, v: v.copy(),
    "convert_element_type": _convert,
    "jit": _nested,
    "pjit": _nested,
    "closed_call": _nested,
    # one correctly rounded operation (or wrapping integers)
    "add": _exact_arithmetic(operator.add),
    "sub": _exact_arithmetic(operator.sub),
    "mul": _exact_arithmetic(operator.mul),
    "neg": _exact_arithmetic(operator.neg),
    "max": _minmax(np.maximum),
    "min": _minmax(np.minimum),
    "abs": _integers_only(np.abs),
    "sign": _integers_only(np.sign),
    "div": _integer_division("div"),
    "rem": _integer_division("rem"),
    "and": _integers_only(np.bitwise_and),
    "or": _integers_only(np.bitwise_or),
    "xor": _integers_only(np.bitwise_xor),
    "not": _integers_only(lambda v: np.logical_not(v) if v.dtype == np.bool_ else ~v),
    "eq": _comparison(np.equal),
    "ne": _comparison(np.not_equal),
    "lt": _comparison(np.less),
    "le": _comparison(np.less_equal),
    "gt": _comparison(np.greater),
    "ge": _comparison(np.greater_equal),
    "reduce_sum": _integer_reduction(np.sum),
    "reduce_prod": _integer_reduction(np.prod),
    "reduce_max": _integer_reduction(np.max),
    "reduce_min": _integer_reduction(np.min),
    "reduce_and": _integer_reduction(np.all),
    "reduce_or": _integer_reduction(np.any),
}
