"""Tensors stored in an ONNX model (initializers, ``Constant`` values) as NumPy arrays.

A ``TensorProto`` holds its data type, its dimensions and its values in one field: the
packed bytes of ``raw_data`` or a typed list (``float_data``, ``int64_data``...). Nothing
in the format ties the amount of data to the dimensions, so a damaged or hand-made tensor
can hold too few or too many values; read as it is, it would fail deep inside NumPy
("cannot reshape array of size 2 into shape (4,)") or, padded or cut, give wrong weights.
:func:`check_tensor_data` is the rule, applied wherever a stored tensor enters ipuxl: the
data holds exactly what the type and the dimensions call for.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from ipuxl.onnx import external_data
from ipuxl.onnx.errors import OnnxImportError

__all__ = ["check_tensor_data", "tensor_array", "dense_array"]

# Element types whose raw_data packs several elements per byte: bits per element.
_PACKED_BITS = {"INT4": 4, "UINT4": 4, "FLOAT4E2M1": 4, "INT2": 2, "UINT2": 2,
                "FLOAT6E2M3": 6, "FLOAT6E3M2": 6}
# Typed fields that hold two numbers per element (real and imaginary parts).
_COMPLEX = {"COMPLEX64", "COMPLEX128"}
_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data",
                 "uint64_data")
# Element types whose raw_data is the NumPy array's own bytes (on a little-endian host).
_PLAIN_RAW = {"FLOAT", "DOUBLE", "FLOAT16", "BOOL", "INT8", "INT16", "INT32", "INT64",
              "UINT8", "UINT16", "UINT32", "UINT64"}


def _raw_bytes(tensor: Any) -> bytes:
    """The tensor's ``raw_data`` (b"" when it has none). Each read of the field copies
    all of it (5 ms for 16 MB), so it is read once per use."""
    return tensor.raw_data if tensor.HasField("raw_data") else b""
_FIX = ("The tensor is damaged, or its dims or data_type do not match its data: export "
        "the model again, or correct the tensor (`onnx.numpy_helper.from_array(array, "
        "name)` writes a consistent one).")


def _type_name(tensor: Any) -> str:
    from onnx import TensorProto

    try:
        return TensorProto.DataType.Name(tensor.data_type)
    except ValueError:
        return f"data_type {tensor.data_type}"


def _element_bits(tensor: Any, kind: str) -> int:
    """The bits one element of ``tensor`` (of ONNX type name ``kind``) takes in
    ``raw_data`` or an external file."""
    from onnx import helper

    bits = _PACKED_BITS.get(kind)
    if bits is None:
        bits = 8 * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    return bits


def check_tensor_data(tensor: Any, what: str, raw: bytes | None = None) -> None:
    """Refuse a ``TensorProto`` whose data does not fit its type and dimensions.

    Args:
        tensor: the ``onnx.TensorProto``.
        what: the tensor, for the message (``"initializer 'w' of the main graph 'g'"``).
        raw: its ``raw_data`` when the caller has read it already (else read here).

    Raises:
        OnnxImportError: the data type is UNDEFINED or unknown, a dimension is negative,
            the data is in two fields or in the wrong one, or holds more or fewer values
            (bytes, for ``raw_data``) than the dimensions call for; or, stored
            externally, its bytes are not there (:mod:`ipuxl.onnx.external_data`) or
            their number does not fit the type and dimensions.
    """
    from onnx import TensorProto, helper

    kind = _type_name(tensor)
    if tensor.data_type == TensorProto.UNDEFINED or kind.startswith("data_type"):
        raise OnnxImportError(
            f"The {what} has the element type {kind}, which is not an ONNX tensor type. "
            f"{_FIX}")
    dims = [int(d) for d in tensor.dims]
    if any(d < 0 for d in dims):
        raise OnnxImportError(f"The {what} has a negative dimension in its dims {dims}. {_FIX}")
    count = math.prod(dims)
    if external_data.is_external(tensor):
        # Checked where it is stored (the file is read by tensor_array, once).
        if tensor.data_type == TensorProto.STRING:
            raise OnnxImportError(
                f"The {what} (STRING) is stored externally; external data holds numbers "
                f"only (raw_data's bytes). Store the strings in the model's string_data.")
        found = len(raw) if raw is not None else external_data.stored_length(tensor, what)
        bits = _element_bits(tensor, kind)
        expected = -(-count * bits // 8)
        if found != expected:
            raise OnnxImportError(
                f"The {what} is stored externally with {found} bytes, but {kind} dims "
                f"{dims} need {expected}: its external_data 'length' (or the file) does "
                f"not match the tensor. {_FIX}")
        return
    fields = [f for f in _TYPED_FIELDS if len(getattr(tensor, f))]
    if raw is None:
        raw = _raw_bytes(tensor)
    if raw:
        fields.append("raw_data")
    if len(fields) > 1:
        raise OnnxImportError(
            f"The {what} holds its values in {' and '.join(fields)}; a tensor keeps them in "
            f"one field. {_FIX}")
    if not fields:
        if count:
            raise OnnxImportError(
                f"The {what} ({kind}, dims {dims}) has no data: {count} value(s) expected. "
                f"{_FIX}")
        return
    (field,) = fields
    if field == "raw_data":
        if tensor.data_type == TensorProto.STRING:
            raise OnnxImportError(f"The {what} stores STRING values in raw_data, which "
                                  f"only holds numbers; strings go in string_data. {_FIX}")
        bits = _element_bits(tensor, kind)
        expected, found = -(-count * bits // 8), len(raw)
        if found != expected:
            raise OnnxImportError(
                f"The {what} has {found} bytes of raw_data, but {kind} dims {dims} "
                f"need {expected} ({count} element(s) of {bits} bits): the data is too "
                f"{'short' if found < expected else 'long'}. {_FIX}")
        return
    storage = helper.tensor_dtype_to_field(tensor.data_type)
    if field != storage:
        raise OnnxImportError(f"The {what} is {kind} but holds its values in {field}; "
                              f"{kind} values go in {storage}. {_FIX}")
    if kind in _PACKED_BITS:
        return  # packed several to an int32: numpy_helper checks the count when reading
    expected = count * (2 if kind in _COMPLEX else 1)
    found = len(getattr(tensor, field))
    if found != expected:
        raise OnnxImportError(
            f"The {what} has {found} value(s) in {field}, but {kind} dims {dims} need "
            f"{expected}: the data is too {'short' if found < expected else 'long'}. {_FIX}")


def tensor_array(tensor: Any, what: str) -> np.ndarray:
    """The NumPy array a ``TensorProto`` holds, after :func:`check_tensor_data`.

    Raises:
        OnnxImportError: see :func:`check_tensor_data`; or the data cannot be read.
    """
    from onnx import helper, numpy_helper

    external = external_data.is_external(tensor)
    raw = external_data.read_bytes(tensor, what) if external else _raw_bytes(tensor)
    check_tensor_data(tensor, what, raw)
    if raw and sys.byteorder == "little" and _type_name(tensor) in _PLAIN_RAW:
        # What numpy_helper.to_array makes (a read-only view of the bytes), without
        # reading the field again.
        dtype = helper.tensor_dtype_to_np_dtype(tensor.data_type)
        return np.frombuffer(raw, dtype).reshape([int(d) for d in tensor.dims])
    try:
        return numpy_helper.to_array(_inline(tensor, raw) if external else tensor)
    except Exception as error:
        raise OnnxImportError(f"The {what} cannot be read: {type(error).__name__}: "
                              f"{error}. {_FIX}") from None


def _inline(tensor: Any, raw: bytes) -> Any:
    """A copy of the externally stored ``tensor`` holding its bytes ``raw`` in
    ``raw_data`` (the typed readers of ``numpy_helper`` read nothing else)."""
    from onnx import TensorProto

    return TensorProto(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims,
                       raw_data=raw)


def dense_array(sparse: Any, what: str) -> np.ndarray:
    """The dense array a ``SparseTensorProto`` stands for (zeros where it has no value)."""
    values = tensor_array(sparse.values, f"values of the {what}")
    indices = tensor_array(sparse.indices, f"indices of the {what}").astype(np.int64)
    dims = tuple(int(d) for d in sparse.dims)
    dense = np.zeros(dims, values.dtype)
    try:
        if indices.ndim == 1:
            dense.reshape(-1)[indices] = values
        else:
            dense[tuple(indices.T)] = values
    except (IndexError, ValueError) as error:
        raise OnnxImportError(
            f"The {what} (dims {list(dims)}) has indices or values that do not fit its "
            f"dims: {error}. {_FIX}") from None
    return dense
