"""``dtypes`` (spec §2.1) and ``testing``'s dtype lists."""

import copy
import importlib.util
import pickle

import ml_dtypes
import numpy as np
import pytest

from ipuxl import dtypes
from ipuxl.testing import get_all_dtypes, get_all_int_dtypes

S143 = np.dtype([("float8_143", "u1")])
S152 = np.dtype([("float8_152", "u1")])

# name, is_int, is_floating_point, is_signed, is_complex, host numpy dtype (spec §2.1)
TABLE = [
    ("bool", False, False, False, False, np.bool_),
    ("int8", True, False, True, False, np.int8),
    ("int16", True, False, True, False, np.int16),
    ("int32", True, False, True, False, np.int32),
    ("int64", True, False, True, False, np.int64),
    ("uint8", True, False, False, False, np.uint8),
    ("uint16", True, False, False, False, np.uint16),
    ("uint32", True, False, False, False, np.uint32),
    ("uint64", True, False, False, False, np.uint64),
    ("float8_143", False, True, True, False, S143),
    ("float8_152", False, True, True, False, S152),
    ("float16", False, True, True, False, np.float16),
    ("float32", False, True, True, False, np.float32),
    ("float64", False, True, True, False, np.float64),
    ("complex64", False, False, True, True, np.complex64),
    ("complex128", False, False, True, True, np.complex128),
    ("bfloat16", False, True, True, False, ml_dtypes.bfloat16),  # ipuxl extension
]
ALL = [getattr(dtypes, row[0]) for row in TABLE]


@pytest.mark.parametrize("name, is_int, is_fp, is_signed, is_complex, numpy", TABLE)
def test_dtype_table(name, is_int, is_fp, is_signed, is_complex, numpy):
    dtype = getattr(dtypes, name)
    assert isinstance(dtype, dtypes.dtype)
    assert dtype.name == name
    assert (dtype.is_int, dtype.is_floating_point) == (is_int, is_fp)
    assert (dtype.is_signed, dtype.is_complex) == (is_signed, is_complex)
    assert dtype.as_numpy() == np.dtype(numpy)
    assert dtype.is_float8 == name.startswith("float8")
    assert repr(dtype) == f"popxl.dtypes.{name}"
    assert dtype.itemsize == np.dtype(numpy).itemsize


@pytest.mark.parametrize(
    "dtype, jax_dtype",
    [
        (dtypes.float8_143, ml_dtypes.float8_e4m3fnuz),
        (dtypes.float8_152, ml_dtypes.float8_e5m2fnuz),
        (dtypes.bfloat16, ml_dtypes.bfloat16),
        (dtypes.float32, np.float32),
        (dtypes.bool, np.bool_),
    ],
)
def test_jax_dtype(dtype, jax_dtype):
    assert dtype.jax_dtype == np.dtype(jax_dtype)


def test_structured_float8_host_dtypes():
    assert dtypes.np_dtype_float8_143 == S143 and dtypes.np_dtype_float8_152 == S152


def test_aliases_and_exports():
    assert dtypes.half is dtypes.float16
    assert dtypes.float is dtypes.float32
    assert dtypes.double is dtypes.float64
    spec_names = (
        "dtype bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 half float8_143 "
        "float8_152 float16 float float32 double float64 complex64 complex128 "
        "np_dtype_float8_143 np_dtype_float8_152"
    ).split()
    assert set(spec_names) <= set(dtypes.__all__)


def test_constructor_is_closed():
    with pytest.raises(TypeError, match=r"Cannot create popxl\.dtypes\.dtype instances\."):
        dtypes.dtype()


@pytest.mark.parametrize("dtype", ALL, ids=repr)
def test_singletons_survive_copy_and_pickle(dtype):
    assert pickle.loads(pickle.dumps(dtype)) is dtype
    assert copy.copy(dtype) is dtype and copy.deepcopy(dtype) is dtype
    assert dtypes.dtype.from_name(dtype.name) is dtype
    assert dtypes.dtype.as_dtype(dtype) is dtype
    assert dtypes.dtype.as_dtype(dtype.name) is dtype
    assert dtypes.dtype.as_dtype(dtype.as_numpy()) is dtype
    assert {dtype: 1}[dtype] == 1


def test_equality_is_identity():
    assert dtypes.float32 == dtypes.float32 and dtypes.float32 != dtypes.float64
    assert dtypes.float32 != np.float32 and dtypes.float32 != "float32"


@pytest.mark.parametrize("name", ["half", "float", "double", "Float32", "f32", "", None])
def test_from_name_refuses_aliases(name):
    with pytest.raises(ValueError, match=f"There is not a `popxl.dtype` that has a name: {name!r}"):
        dtypes.dtype.from_name(name)


class FakeTorchDtype:
    """Duck-typed ``torch.dtype`` (torch is not installed)."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"torch.{self.name}"


FakeTorchDtype.__module__ = "torch"
FakeTorchDtype.__name__ = "dtype"


@pytest.mark.parametrize(
    "value, expected",
    [
        (int, dtypes.int64),  # through np.dtype(int)
        (float, dtypes.float32),  # Python type rule comes first
        ("float", dtypes.float64),  # numpy's meaning of the string
        (bool, dtypes.bool),
        ("half", dtypes.float16),  # numpy's name, not the popxl alias
        (np.float16, dtypes.float16),
        (np.dtype("uint16"), dtypes.uint16),
        ("int32", dtypes.int32),
        ("i8", dtypes.int64),  # numpy's type code
        (np.zeros(2, np.int8), dtypes.int8),
        (np.complex64(1), dtypes.complex64),
        (S143, dtypes.float8_143),
        (ml_dtypes.float8_e5m2fnuz, dtypes.float8_152),
        (ml_dtypes.bfloat16, dtypes.bfloat16),
        (FakeTorchDtype("float16"), dtypes.float16),
    ],
)
def test_as_dtype(value, expected):
    assert dtypes.dtype.as_dtype(value) is expected


@pytest.mark.parametrize("value", ["no-such-dtype", object(), np.dtype(object), [1.0]])
def test_as_dtype_errors(value):
    match = "There is not a `popxl.dtype` that is compatible with value: "
    with pytest.raises(ValueError, match=match):
        dtypes.dtype.as_dtype(value)


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch installed")
def test_as_torch_without_torch():
    with pytest.raises(ModuleNotFoundError, match="PyTorch is not installed."):
        dtypes.float32.as_torch()


# ----------------------------------------------------------------------------- testing
def test_get_all_dtypes_order():
    assert get_all_dtypes() == [
        dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64,
        dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64,
        dtypes.float8_143, dtypes.float8_152, dtypes.float16, dtypes.float32, dtypes.float64,
        dtypes.complex64, dtypes.complex128,
    ]  # fmt: skip
    assert dtypes.bfloat16 not in get_all_dtypes()  # PopXL's dtypes only


@pytest.mark.parametrize(
    "signed, unsigned, names",
    [
        (True, True, "int8 int16 int32 int64 uint8 uint16 uint32 uint64"),
        (True, False, "int8 int16 int32 int64"),
        (False, True, "uint8 uint16 uint32 uint64"),
        (False, False, ""),
    ],
)
def test_get_all_int_dtypes(signed, unsigned, names):
    result = get_all_int_dtypes(include_signed=signed, include_unsigned=unsigned)
    assert [dtype.name for dtype in result] == names.split()
    result.append(dtypes.bool)  # a new list each call
    assert dtypes.bool not in get_all_int_dtypes(signed, unsigned)
