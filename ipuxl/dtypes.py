"""PopXL data types.

Every dtype is a singleton of :class:`dtype`; compare them with ``==`` or ``is``.
Each knows its host representation (``as_numpy()``), the dtype JAX computes in
(``jax_dtype``) and its short name in the IR text form (``short_name``, e.g. ``f32``).

Float8 host data uses PopXL's structured numpy dtypes (one ``u1`` field named after the
format); inside ipuxl the bytes are reinterpreted as ``ml_dtypes`` float8 "fnuz" formats,
which are bit-identical. ``bfloat16`` is an ipuxl extension (PopXL has no bfloat16).

Example:
    >>> import ipuxl as popxl
    >>> popxl.dtype.as_dtype("float16") is popxl.float16
    True
"""

from __future__ import annotations

import builtins
import functools
import importlib
import importlib.util
from typing import Any

import ml_dtypes
import numpy as np

__all__ = [
    "dtype",
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "half",
    "float8_143",
    "float8_152",
    "float16",
    "float",
    "float32",
    "double",
    "float64",
    "complex64",
    "complex128",
    "bfloat16",
    "np_dtype_float8_143",
    "np_dtype_float8_152",
]

np_dtype_float8_143 = np.dtype([("float8_143", "u1")])
np_dtype_float8_152 = np.dtype([("float8_152", "u1")])

# PopXL's conversion tables, filled as the dtypes below are defined. `_PT_TO_POPXL` (torch
# dtype -> dtype) is built on first access by the module `__getattr__`, so that importing
# ipuxl never imports torch; it is empty when torch is not installed.
_STR_TO_POPXL: dict[str, dtype] = {}  # canonical name -> dtype (aliases such as half: no)
_NP_TO_POPXL: dict[np.dtype, dtype] = {}  # host numpy dtype -> dtype
_PY_TO_POPXL: dict[type, dtype] = {}  # Python type -> dtype: bool and float only
# Not PopXL's: the dtypes JAX computes in (ml_dtypes float8 "fnuz") and torch's names.
_JAX_TO_POPXL: dict[np.dtype, dtype] = {}
_TORCH_NAME_TO_POPXL: dict[str, dtype] = {}
# Not PopXL's: the ONNX-only extension dtypes (see the end of the module), kept out of
# PopXL's tables above so that those stay exactly PopXL's.
_EXT_STR_TO_POPXL: dict[str, dtype] = {}
_EXT_NP_TO_POPXL: dict[np.dtype, dtype] = {}


class dtype:
    """A PopXL data type. Instances are module-level singletons; the constructor is closed."""

    def __init__(self) -> None:
        raise TypeError("Cannot create popxl.dtypes.dtype instances.")

    @classmethod
    def _new(
        cls,
        name: str,
        short_name: str,
        numpy: np.dtype,
        jax_dtype: Any,
        *,
        is_int: builtins.bool = False,
        is_floating_point: builtins.bool = False,
        is_signed: builtins.bool = False,
        is_complex: builtins.bool = False,
        torch_name: str | None = None,
        python_type: type | None = None,
        extension: builtins.bool = False,
    ) -> dtype:
        self = object.__new__(cls)
        self._name = name
        self._short_name = short_name
        self._numpy = numpy
        self._jax_dtype = np.dtype(jax_dtype)
        self._is_int = is_int
        self._is_floating_point = is_floating_point
        self._is_signed = is_signed
        self._is_complex = is_complex
        self._torch_name = torch_name
        if extension:  # an ONNX type: its own tables, PopXL's are untouched
            _EXT_STR_TO_POPXL[name] = self
            _EXT_NP_TO_POPXL[numpy] = self
            return self
        _STR_TO_POPXL[name] = self
        _NP_TO_POPXL[numpy] = self
        _JAX_TO_POPXL.setdefault(self._jax_dtype, self)
        if torch_name is not None:
            _TORCH_NAME_TO_POPXL[torch_name] = self
        if python_type is not None:
            _PY_TO_POPXL[python_type] = self
        return self

    # ----------------------------------------------------------------- properties
    @property
    def name(self) -> str:
        return self._name

    @property
    def short_name(self) -> str:
        """The name used in the IR text form: ``f32``, ``i8``, ``bool``, ``f8_143``..."""
        return self._short_name

    @property
    def is_complex(self) -> builtins.bool:
        return self._is_complex

    @property
    def is_int(self) -> builtins.bool:
        return self._is_int

    @property
    def is_floating_point(self) -> builtins.bool:
        return self._is_floating_point

    @property
    def is_signed(self) -> builtins.bool:
        return self._is_signed

    @property
    def is_float8(self) -> builtins.bool:
        return self._name in ("float8_143", "float8_152")

    @property
    def jax_dtype(self) -> np.dtype:
        """The dtype device arrays of this type have (ml_dtypes float8 for the float8s)."""
        return self._jax_dtype

    @property
    def itemsize(self) -> int:
        return self._jax_dtype.itemsize

    # ----------------------------------------------------------------- conversions
    def as_numpy(self) -> np.dtype:
        """The host numpy dtype (structured ``u1`` dtypes for float8)."""
        return self._numpy

    def as_torch(self) -> Any:
        try:
            import torch
        except ModuleNotFoundError as error:
            raise ModuleNotFoundError("PyTorch is not installed.") from error
        if self._torch_name is None:
            raise TypeError(f"There is no torch dtype equivalent to {self!r}.")
        return getattr(torch, self._torch_name)

    @classmethod
    def from_name(cls, name: str) -> dtype:
        """The dtype with canonical name ``name`` (aliases such as ``half`` are refused;
        the ONNX extension dtypes are found by their names too)."""
        try:
            return _STR_TO_POPXL.get(name) or _EXT_STR_TO_POPXL[name]
        except (KeyError, TypeError):
            raise ValueError(f"There is not a `popxl.dtype` that has a name: {name!r}.") from None

    @classmethod
    def as_dtype(cls, value: Any) -> dtype:
        """Convert a name, Python type, numpy or torch dtype, or array to a dtype.

        The sources are tried in PopXL's order: a canonical name, a Python type, a numpy
        dtype, a torch dtype, ``np.dtype(value)``, then ``value.dtype``. So
        ``as_dtype(int)`` is int64 (numpy's meaning of ``int``), ``as_dtype(float)`` is
        float32 and ``as_dtype("float")`` is float64 (numpy's meaning of the string).

        Raises:
            ValueError: no dtype matches ``value``.
        """
        if isinstance(value, dtype):
            return value
        if isinstance(value, str) and value in _STR_TO_POPXL:
            return _STR_TO_POPXL[value]
        if isinstance(value, type) and value in _PY_TO_POPXL:
            return _PY_TO_POPXL[value]
        found = _from_numpy(value) or _from_torch(value)
        if found is not None:
            return found
        try:
            found = _from_numpy(np.dtype(value))
        except TypeError:
            found = None
        if found is not None:
            return found
        inner = getattr(value, "dtype", None)
        if inner is not None and inner is not value:
            found = _from_numpy(inner) or _from_torch(inner)
            if found is not None:
                return found
        raise ValueError(f"There is not a `popxl.dtype` that is compatible with value: {value!r}.")

    # ----------------------------------------------------------------- dunder
    def __repr__(self) -> str:
        return f"popxl.dtypes.{self._name}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (dtype.from_name, (self._name,))

    def __hash__(self) -> int:
        return hash(self._name)

    def __eq__(self, other: object) -> builtins.bool:
        return self is other

    def __copy__(self) -> dtype:
        return self

    def __deepcopy__(self, memo: dict) -> dtype:
        return self


def _from_numpy(value: Any) -> dtype | None:
    """The dtype of a numpy dtype: a host dtype, or a dtype JAX computes in."""
    if not isinstance(value, np.dtype):
        return None
    return (_NP_TO_POPXL.get(value) or _JAX_TO_POPXL.get(value)
            or _EXT_NP_TO_POPXL.get(value))


def _from_torch(value: Any) -> dtype | None:
    """The dtype of a ``torch.dtype``, recognised by its type and name (no torch import)."""
    if type(value).__module__ != "torch" or type(value).__name__ != "dtype":
        return None
    return _TORCH_NAME_TO_POPXL.get(str(value).removeprefix("torch."))


@functools.cache
def _torch_to_popxl() -> dict[Any, dtype]:
    """PopXL's ``_PT_TO_POPXL``: the torch dtypes of PopXL's own dtypes, each with a numpy
    equivalent (so not ``torch.bfloat16``, which ``as_dtype`` still converts); empty when
    torch is not installed."""
    if importlib.util.find_spec("torch") is None:
        return {}
    torch = importlib.import_module("torch")
    return {getattr(torch, name): popxl for name, popxl in _TORCH_NAME_TO_POPXL.items()
            if popxl is not bfloat16}


def __getattr__(name: str) -> Any:
    if name == "_PT_TO_POPXL":
        return _torch_to_popxl()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_int = {"is_int": True}
_signed_int = {"is_int": True, "is_signed": True}
_float = {"is_floating_point": True, "is_signed": True}

bool = dtype._new(
    "bool", "bool", np.dtype(np.bool_), np.bool_, torch_name="bool", python_type=builtins.bool
)
int8 = dtype._new("int8", "i8", np.dtype(np.int8), np.int8, **_signed_int, torch_name="int8")
int16 = dtype._new("int16", "i16", np.dtype(np.int16), np.int16, **_signed_int, torch_name="int16")
int32 = dtype._new("int32", "i32", np.dtype(np.int32), np.int32, **_signed_int, torch_name="int32")
int64 = dtype._new("int64", "i64", np.dtype(np.int64), np.int64, **_signed_int, torch_name="int64")
uint8 = dtype._new("uint8", "u8", np.dtype(np.uint8), np.uint8, **_int, torch_name="uint8")
uint16 = dtype._new("uint16", "u16", np.dtype(np.uint16), np.uint16, **_int)
uint32 = dtype._new("uint32", "u32", np.dtype(np.uint32), np.uint32, **_int)
uint64 = dtype._new("uint64", "u64", np.dtype(np.uint64), np.uint64, **_int)
float8_143 = dtype._new("float8_143", "f8_143", np_dtype_float8_143, ml_dtypes.float8_e4m3fnuz, **_float)
float8_152 = dtype._new("float8_152", "f8_152", np_dtype_float8_152, ml_dtypes.float8_e5m2fnuz, **_float)
float16 = dtype._new("float16", "f16", np.dtype(np.float16), np.float16, **_float, torch_name="float16")
float32 = dtype._new(
    "float32", "f32", np.dtype(np.float32), np.float32, **_float, torch_name="float32",
    python_type=builtins.float,
)
float64 = dtype._new("float64", "f64", np.dtype(np.float64), np.float64, **_float, torch_name="float64")
complex64 = dtype._new(
    "complex64", "c64", np.dtype(np.complex64), np.complex64, is_complex=True, is_signed=True,
    torch_name="complex64",
)
complex128 = dtype._new(
    "complex128", "c128", np.dtype(np.complex128), np.complex128, is_complex=True,
    is_signed=True, torch_name="complex128",
)
bfloat16 = dtype._new(
    "bfloat16", "bf16", np.dtype(ml_dtypes.bfloat16), ml_dtypes.bfloat16, **_float,
    torch_name="bfloat16",
)

half = float16
float = float32  # noqa: A001 - PopXL's public alias
double = float64


# ------------------------------------------------------------------ ONNX extension dtypes
# Not PopXL's, and not in ``__all__``: the ONNX tensor types PopXL has no dtype for, so
# that imported ONNX models (``ipuxl.onnx``) can hold them. Host and device arrays are
# the ``ml_dtypes`` types (no structured host bytes, unlike float8_143/float8_152). They
# live in their own tables (``_EXT_STR_TO_POPXL``, ``_EXT_NP_TO_POPXL``), which
# ``as_dtype`` and ``from_name`` consult after PopXL's, so no PopXL conversion changes.
# ONNX's FLOAT8E4M3FNUZ and FLOAT8E5M2FNUZ are PopXL's float8_143 and float8_152 (the
# same bits), which ``as_dtype`` already gives for ``ml_dtypes.float8_e4m3fnuz/e5m2fnuz``.
_unsigned_float = {"is_floating_point": True}


def _onnx_type(name: str, short_name: str, ml_type: Any, **flags: Any) -> dtype:
    return dtype._new(name, short_name, np.dtype(ml_type), ml_type, extension=True, **flags)


float8_e4m3fn = _onnx_type("float8_e4m3fn", "f8e4m3fn", ml_dtypes.float8_e4m3fn, **_float)
float8_e5m2 = _onnx_type("float8_e5m2", "f8e5m2", ml_dtypes.float8_e5m2, **_float)
float8_e8m0fnu = _onnx_type("float8_e8m0fnu", "f8e8m0", ml_dtypes.float8_e8m0fnu,
                            **_unsigned_float)
float4_e2m1fn = _onnx_type("float4_e2m1fn", "f4e2m1", ml_dtypes.float4_e2m1fn, **_float)
int4 = _onnx_type("int4", "i4", ml_dtypes.int4, **_signed_int)
uint4 = _onnx_type("uint4", "u4", ml_dtypes.uint4, **_int)
int2 = _onnx_type("int2", "i2", ml_dtypes.int2, **_signed_int)
uint2 = _onnx_type("uint2", "u2", ml_dtypes.uint2, **_int)
