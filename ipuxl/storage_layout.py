"""Device storage layouts: variables kept on the device in the layout their ops read fastest.

XLA:CPU multiplies ``x @ W`` fastest when the weight ``W`` (``[K, N]``) is stored
``[N, K]``: with ``[K, N]`` its matmul kernels repack the whole weight on every call
(measured in ``benchmarks/onnx_inference.py``: an MLP at batch 32 runs about twice as fast
with its weights stored transposed). Its convolutions read kernels ``[*spatial, I, O]``
and transpose ONNX's ``[O, I, *spatial]`` on every call. ONNX's ``MatMul`` and PopXL's
``matmul`` take the weight ``[K, N]``, ONNX's ``Conv`` the kernel ``OIHW``, so a Session
stores such a weight permuted on the device instead:

* An op declares the layouts it prefers with :attr:`ipuxl.op.OpDef.operand_layouts`
  (``{input index: permutation}``, e.g. ``{1: (1, 0)}`` for a dense layer's weight).
* :func:`choose` picks the variables (and large constants, passed to the executable as
  arguments) of the main graph that only such ops read, all preferring the same
  permutation (so the program never writes them: no op that prefers a layout modifies
  its operand).
* The device holds ``numpy.transpose(value, permutation)`` (:func:`to_device`); the
  program reads it back through the inverse permutation (:func:`in_program`), which XLA
  folds into the matmul, so no copy is made at run time.
* A dense layer reading such a weight with few rows multiplies it as it is stored,
  ``(W @ x^T)^T`` (:func:`few_rows_product`): XLA:CPU's kernels run that orientation
  a third faster than ``x @ W^T`` (one long operand instead of two short ones), and the
  activations of a chain of such layers stay transposed between them.
* Everything the user sees is the host value, unchanged: weights to and from the host,
  ``get_tensor_data``, ``write_variable_data``, saved packages (:func:`to_host`).

``IPUXL_STORAGE_LAYOUTS=0`` turns the layouts off (every variable stored as it is), to
measure what they buy.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import Any

import numpy as np

__all__ = ["choose", "conv_kernel", "dense_weight", "enabled", "in_program", "to_device", "to_host",
           "to_storage", "device_shape", "begin_trace", "rows_first", "few_rows_product",
           "rows_first_product"]

Permutation = tuple[int, ...]


def enabled() -> bool:
    """Whether Sessions store variables in their preferred layouts (the default)."""
    return os.environ.get("IPUXL_STORAGE_LAYOUTS", "1").strip() != "0"


def channels_last_enabled() -> bool:
    """Whether ONNX convolution networks are traced channels-last
    (:mod:`ipuxl.onnx.channels_last`; ``IPUXL_CHANNELS_LAST``, on unless ``0``)."""
    return os.environ.get("IPUXL_CHANNELS_LAST", "1").strip() != "0"


# When a dense weight is worth storing [N, K] (benchmarks/README.md, storage layouts):
# XLA:CPU repacks a [K, N] weight on every call, which costs about as much as a matmul
# with a few rows, so the layout pays for a large weight read by few rows (an MLP at
# batch 32: 1.9x -> 1.3x of onnxruntime). For small weights (256 x 256) the [K, N] kernels
# are faster, and at 256 rows the gain (a few %) does not pay for transposing the weight
# when it is uploaded (first run, peak memory).
DENSE_MIN_ELEMENTS = 1 << 20
DENSE_MAX_ROWS = 64


def dense_weight(index: int) -> Any:
    """An ``operand_layouts`` rule: input ``index`` is a dense layer's ``[K, N]`` weight
    (a rank-2 right-hand side of a matmul; input 0 the rows), stored ``[N, K]`` when it
    has at least :data:`DENSE_MIN_ELEMENTS` elements and the matmul at most
    :data:`DENSE_MAX_ROWS` rows."""

    def layouts(op: Any) -> dict[int, Permutation]:
        if index >= len(op.inputs) or len(op.inputs[index].shape) != 2:
            return {}
        rows = int(np.prod(op.inputs[0].shape[:-1], dtype=np.int64))
        if op.inputs[index].nelms >= DENSE_MIN_ELEMENTS and rows <= DENSE_MAX_ROWS:
            return {index: (1, 0)}
        return {}

    return layouts


def conv_kernel(index: int, keep: Any = None) -> Any:
    """An ``operand_layouts`` rule: input ``index`` is a convolution's ``[O, I, *spatial]``
    kernel, fastest stored ``[*spatial, I, O]`` (XLA:CPU's convolutions read HWIO and
    otherwise transpose the kernel on every call), unless ``keep(op)`` says the op reads
    it as it is (a pointwise convolution multiplied as a matrix)."""

    def layouts(op: Any) -> dict[int, Permutation]:
        if keep is not None and keep(op):
            return {}
        if index < len(op.inputs) and len(op.inputs[index].shape) >= 3:
            rank = len(op.inputs[index].shape)
            return {index: (*range(2, rank), 1, 0)}
        return {}

    return layouts


def choose(graphs: Iterable[Any], main: Any, variables: Iterable[Any]
           ) -> dict[Any, Permutation]:
    """``{variable: permutation}`` for the ``variables`` of ``main`` that every reader
    (across ``graphs``) wants stored permuted the same way; the rest are left out."""
    if not enabled():
        return {}
    wanted: dict[Any, Permutation | None] = {}
    for graph in graphs:
        for op in graph.ops:
            rule = op.opdef.operand_layouts
            preferred = rule(op) if rule is not None and graph is main else {}
            for index, tensor in enumerate(op.inputs):
                perm = preferred.get(index)
                if tensor in wanted and wanted[tensor] != perm:
                    perm = None  # two readers disagree (or one wants it as it is)
                wanted[tensor] = perm
    chosen = {}
    for var in variables:
        perm = wanted.get(var)
        if perm is not None and perm != tuple(range(len(perm))) and len(var.shape) == len(perm):
            chosen[var] = perm
    return chosen


def _full(perm: Permutation, ndim: int) -> Permutation:
    """``perm`` applied to the last axes of an array with leading (replica) axes."""
    lead = ndim - len(perm)
    return (*range(lead), *(lead + p for p in perm))


def device_shape(shape: Iterable[int], perm: Permutation | None) -> tuple[int, ...]:
    """The shape a variable of ``shape`` has on the device."""
    shape = tuple(shape)
    return shape if perm is None else tuple(shape[i] for i in _full(perm, len(shape)))


def to_device(array: np.ndarray, perm: Permutation | None) -> np.ndarray:
    """A host value (with any leading replica axes) in its device layout (a new array)."""
    if perm is None:
        return array
    if perm == (1, 0) and array.ndim == 2:
        return _transposed(array)
    out = _aligned_empty(device_shape(array.shape, perm), array.dtype)
    np.copyto(out, np.transpose(array, _full(perm, np.ndim(array))))
    return out


def _aligned_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A new C-contiguous array whose data starts on a 64-byte boundary: JAX's CPU client
    then uses it as the device buffer instead of copying it (a 2048 x 2048 float32
    upload: 6-17 ms -> 1 ms). Only for arrays nothing else holds: the device value
    shares their memory."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(size + _ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % _ALIGNMENT
    return raw[start:start + size].view(dtype).reshape(shape)


_ALIGNMENT = 64


def _transposed(matrix: np.ndarray, strip: int = 16) -> np.ndarray:
    """``matrix.T`` as a new C-contiguous array, copied in strips of ``strip`` rows (each
    strip's columns of the result stay in the cache), the strips shared between up to
    :data:`_TRANSPOSE_THREADS` threads (NumPy releases the GIL while it copies).
    Measured on the 2-core machine against square 256 x 256 blocks in one thread:
    784 x 2048 6.7 -> 2.4 ms, 2048 x 2048 17.7 -> 5.9 ms, 9216 x 4096 174 -> 61 ms (the
    Session transposes such weights when it uploads them: ``to_device``)."""
    rows, cols = matrix.shape
    out = _aligned_empty((cols, rows), matrix.dtype)

    def copy(first: int, stop: int) -> None:
        for i in range(first, stop, strip):
            end = min(i + strip, stop)
            out[:, i:end] = matrix[i:end].T

    parts = max(1, min(_TRANSPOSE_THREADS, os.cpu_count() or 1, rows // (64 * strip)))
    bounds = [rows * k // parts // strip * strip for k in range(parts)] + [rows]
    if parts == 1:
        copy(0, rows)
        return out
    pool = _transpose_pool()
    others = [pool.submit(copy, lo, hi) for lo, hi in zip(bounds[1:-1], bounds[2:])]
    copy(bounds[0], bounds[1])
    for future in others:
        future.result()
    return out


#: The most threads one transpose uses.
_TRANSPOSE_THREADS = 4
_POOL_LOCK = threading.Lock()
_POOL: Any = None


def _transpose_pool() -> Any:
    """The worker threads of :func:`_transposed` (made on first use)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            _POOL = ThreadPoolExecutor(_TRANSPOSE_THREADS - 1,
                                       thread_name_prefix="ipuxl-transpose")
        return _POOL


def to_host(array: Any, perm: Permutation | None) -> np.ndarray:
    """A device value read back (``np.asarray`` of it) in the host's layout."""
    if perm is None:
        return array
    if perm == (1, 0) and np.ndim(array) == 2:
        return _transposed(np.asarray(array))
    return np.ascontiguousarray(np.transpose(np.asarray(array), np.argsort(
        _full(perm, np.ndim(array)))))


# The dense weights of the program being traced (in this thread) that are stored
# ``[N, K]``: ``id(view)`` -> ``(view, stored)``, for :func:`rows_first`.
_TRACE = threading.local()


def begin_trace() -> None:
    """Forget the stored weights of an earlier trace (a Session calls this as it starts
    tracing its program), and run the hooks of :func:`on_trace_start`."""
    _TRACE.transposed = {}
    for hook in _TRACE_STARTS:
        hook()


# Functions run as a program's trace starts: other per-trace layout tables
# (``ipuxl.onnx.channels_last``) forget the earlier trace's values.
_TRACE_STARTS: list[Any] = []


def on_trace_start(hook: Any) -> None:
    """Run ``hook()`` each time :func:`begin_trace` runs."""
    if hook not in _TRACE_STARTS:
        _TRACE_STARTS.append(hook)


def in_program(value: Any, perm: Permutation | None) -> Any:
    """Inside the traced program: the stored (one replica's) ``value`` as the variable's
    value. A dense weight stored ``[N, K]`` is remembered, so that its matmuls can read
    it as it is stored (:func:`rows_first`)."""
    if perm is None:
        return value
    import jax.numpy as jnp

    view = jnp.transpose(value, tuple(int(i) for i in np.argsort(perm)))
    if perm == (1, 0):
        if not hasattr(_TRACE, "transposed"):
            begin_trace()
        _TRACE.transposed[id(view)] = (view, value)
    return view


def rows_first(weight: Any) -> Any:
    """The ``[N, K]`` array a ``[K, N]`` matmul weight of the traced program is stored as
    (see :func:`in_program`), or None when it is not stored transposed."""
    entry = getattr(_TRACE, "transposed", {}).get(id(weight))
    return entry[1] if entry is not None and entry[0] is weight else None


def few_rows_product(x: Any, weight: Any, out_dtype: Any) -> Any | None:
    """``x @ weight`` for a dense layer whose ``[K, N]`` weight is stored ``[N, K]``
    (:func:`rows_first`) and read by at most :data:`DENSE_MAX_ROWS` rows, computed the
    way XLA:CPU multiplies fastest: ``(stored @ x^T)^T``, one long operand of ``N`` rows
    (measured with the MLP of ``benchmarks/onnx_inference.py``: 6.1 -> 4.7 ms at batch 32,
    3.8 -> 2.4 ms at batch 8). An optimization barrier keeps XLA from turning the product
    back into ``x @ weight``. None when the weight is not stored so, or ``x`` has more rows
    (the caller multiplies as usual)."""
    stored = rows_first(weight)
    return None if stored is None else rows_first_product(x, stored, out_dtype)


def rows_first_product(x: Any, stored: Any, out_dtype: Any) -> Any | None:
    """``x @ stored.T`` computed as :func:`few_rows_product` says, for a weight held
    ``[N, K]`` (ONNX ``Gemm`` with ``transB``, or a stored one) of at least
    :data:`DENSE_MIN_ELEMENTS` elements read by at most :data:`DENSE_MAX_ROWS` rows; None
    otherwise."""
    if (x.ndim < 1 or stored.ndim != 2 or x.shape[-1] != stored.shape[1]
            or stored.size < DENSE_MIN_ELEMENTS):
        return None
    rows = int(np.prod(x.shape[:-1], dtype=np.int64))
    if rows > DENSE_MAX_ROWS:
        return None
    import jax

    flat = x.reshape(rows, x.shape[-1])
    product = jax.lax.dot_general(stored.astype(x.dtype), flat, (((1,), (1,)), ((), ())),
                                  preferred_element_type=out_dtype)  # [N, rows]
    product = jax.lax.optimization_barrier(product)
    return product.T.reshape(*x.shape[:-1], stored.shape[0])


def to_storage(value: Any, perm: Permutation | None) -> Any:
    """Inside the traced program: a new value of the variable in its stored layout."""
    if perm is None:
        return value
    import jax.numpy as jnp

    return jnp.transpose(value, perm)
