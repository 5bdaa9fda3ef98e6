"""``utils.to_numpy``, ``downcast_np_dtypes`` and ``table_to_string`` (spec §15.2)."""

import ml_dtypes
import numpy as np
import pytest

from ipuxl import dtypes
from ipuxl.utils import downcast_np_dtypes, table_to_string, to_numpy

F143 = dtypes.float8_143


class FakeTorchTensor:
    """Duck-typed torch tensor (torch is not installed): detach().cpu().numpy()."""

    def __init__(self, data):
        self.data = np.asarray(data)
        self.detached = False

    def detach(self):
        self.detached = True
        return self

    def cpu(self):
        return self

    def numpy(self):
        assert self.detached, "to_numpy must detach first"
        return self.data


FakeTorchTensor.__module__ = "torch"


# ----------------------------------------------------------------------------- plain data
def test_downcast_table_is_keyed_by_numpy_dtype():
    assert downcast_np_dtypes == {
        np.dtype(np.int64): np.dtype(np.int32),
        np.dtype(np.uint64): np.dtype(np.uint32),
        np.dtype(np.float64): np.dtype(np.float32),
    }
    assert all(isinstance(key, np.dtype) for key in downcast_np_dtypes)


@pytest.mark.parametrize(
    "x, downcast, expected_dtype",
    [
        (np.zeros(2, np.int64), True, np.int32),
        (np.zeros(2, np.uint64), True, np.uint32),
        (np.zeros(2, np.float64), True, np.float32),
        (np.zeros(2, np.int64), False, np.int64),
        (np.zeros(2, np.float64), False, np.float64),
        (np.zeros(2, np.int16), True, np.int16),
        (np.zeros(2, np.float16), True, np.float16),
        (np.zeros(2, np.complex128), True, np.complex128),  # not in the table
        (7, True, np.int32),
        (7.5, True, np.float32),
        (True, True, np.bool_),
        ([1, 2, 3], True, np.int32),
        ([[1.0, 2.0]], False, np.float64),
    ],
)
def test_downcast(x, downcast, expected_dtype):
    result = to_numpy(x, downcast=downcast)
    assert result.dtype == expected_dtype
    assert result.shape == np.shape(x)
    np.testing.assert_array_equal(result, np.asarray(x))


@pytest.mark.parametrize(
    "dtype, expected",
    [
        (dtypes.float16, np.float16),
        (dtypes.int64, np.int64),  # an explicit dtype is never downcast
        (dtypes.float64, np.float64),
        (dtypes.bfloat16, ml_dtypes.bfloat16),
        (dtypes.uint8, np.uint8),
        ("float16", np.float16),
        (np.int8, np.int8),
        (float, np.float32),
    ],
)
def test_explicit_dtype(dtype, expected):
    result = to_numpy([1.0, 2.0, 3.0], dtype)
    assert result.dtype == np.dtype(expected)
    assert result.tolist() == [1, 2, 3]


def test_result_is_c_ordered():
    fortran = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    for copy in (True, False):
        result = to_numpy(fortran, copy=copy)
        assert result.flags.c_contiguous
        np.testing.assert_array_equal(result, fortran)
    assert to_numpy(np.arange(12, dtype=np.int32)[::2]).flags.c_contiguous


def test_copy_false_reuses_data_that_needs_no_conversion():
    x = np.arange(6, dtype=np.float32)
    assert np.shares_memory(to_numpy(x, copy=False), x)
    assert not np.shares_memory(to_numpy(x), x)
    assert not np.shares_memory(to_numpy(x, dtypes.float16, copy=False), x)
    wide = np.arange(6, dtype=np.float64)
    assert not np.shares_memory(to_numpy(wide, copy=False), wide)  # downcast converts
    assert np.shares_memory(to_numpy(wide, downcast=False, copy=False), wide)


def test_torch_tensors_are_detached():
    tensor = FakeTorchTensor(np.array([1.0, 2.0]))
    result = to_numpy(tensor)
    assert tensor.detached and result.dtype == np.float32
    assert result.tolist() == [1.0, 2.0]


def test_a_torch_bfloat16_tensor_is_read_through_its_bits():
    torch = pytest.importorskip("torch")
    tensor = torch.tensor([[1.5, -2.0], [0.0078125, 3e38]], dtype=torch.bfloat16)
    result = to_numpy(tensor, copy=False)
    assert result.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(result.astype(np.float32), tensor.float().numpy())
    tensor[0, 0] = 4.0  # the same memory
    assert result[0, 0] == 4.0
    assert to_numpy(tensor, dtypes.float32).tolist() == tensor.float().tolist()


def test_zero_d_scalars_keep_their_shape():
    assert to_numpy(np.float64(2.5)).shape == ()
    assert to_numpy(3, dtypes.uint16).dtype == np.uint16


# ----------------------------------------------------------------------------- memmaps
@pytest.fixture
def memmap(tmp_path):
    def make(dtype, shape=(4, 6)):
        result = np.memmap(tmp_path / f"data_{np.dtype(dtype).name}", dtype, "w+", shape=shape)
        result[...] = 1
        return result

    return make


def test_valid_memmap_is_returned_without_copy(memmap):
    data = memmap(np.float32)
    assert to_numpy(data) is data
    assert to_numpy(data, dtypes.float32, copy=True) is data

# PopXL's rules for a memmap (used as it is, never copied): the requested dtype, the
# layout, and no 64-bit data (PopXL holds only 32-bit values of those), whatever
# `downcast` and `dtype` say.
@pytest.mark.parametrize(
    "make_args, kwargs, match",
    [
        ((np.float32,), {"dtype": dtypes.float16},
         "the `dtype` parameter must be None or the same as the array's dtype: got "
         "dtype=popxl.dtypes.float16 for a memmap of float32"),
        ((np.int64,), {}, "requires downcasting the memmap's int64 data to int32"),
        ((np.int64,), {"downcast": False}, "requires downcasting the memmap's int64 data"),
        ((np.int64,), {"dtype": dtypes.int64}, "requires downcasting the memmap's int64"),
        ((np.float64,), {}, "requires downcasting the memmap's float64 data to float32"),
    ],
)
def test_memmap_errors(memmap, make_args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        to_numpy(memmap(*make_args), **kwargs)


def test_non_contiguous_memmap_is_refused(memmap):
    with pytest.raises(ValueError, match="it must already be in C-ordered and aligned form"):
        to_numpy(memmap(np.float32)[:, ::2])


def test_memmap_rules_come_before_argument_checks(memmap):
    with pytest.raises(ValueError, match="the `dtype` parameter must be None"):
        to_numpy(memmap(np.float32), dtypes.int32, log2_scale=1)


# ----------------------------------------------------------------------------- float8
def test_float8_from_floats_uses_scale_and_overflow_mode():
    x = [0.75, 1000.0]
    assert to_numpy(x, F143).view(np.uint8).tolist() == [0b00111100, 0x80]
    saturated = to_numpy(x, F143, nan_on_overflow=False)
    assert saturated.dtype == dtypes.np_dtype_float8_143
    assert saturated.view(np.uint8).tolist() == [0b00111100, 0x7F]
    assert to_numpy(x, F143, log2_scale=1).view(np.uint8).tolist() == [0b01000100, 0x80]
    assert to_numpy(np.float16(0.25), "float8_152").view(np.uint8).tolist() == 0b00111000


def test_float8_data_is_kept_as_is():
    host = np.array([1, 2, 0x80], np.uint8).view(dtypes.np_dtype_float8_143)
    kept = to_numpy(host, F143, log2_scale=5)  # already float8: not rescaled
    assert not np.shares_memory(kept, host)
    assert kept.view(np.uint8).tolist() == [1, 2, 0x80]
    assert to_numpy(host, F143, copy=False) is host
    assert to_numpy(host) is not host and to_numpy(host).dtype == host.dtype


@pytest.mark.parametrize(
    "x, dtype, match",
    [
        (np.array([1, 2], np.int32), F143, "Type int32 is not supported for float8 tensors"),
        ([1, 2], F143, "Type int64 is not supported for float8 tensors"),
        (
            np.zeros(2, np.uint8).view(dtypes.np_dtype_float8_152),
            F143,
            r"Type \[\('float8_152', 'u1'\)\] is not supported for float8 tensors",
        ),
        (np.zeros(2, ml_dtypes.bfloat16), dtypes.float8_152, "Type bfloat16 is not supported"),
    ],
)
def test_float8_source_type_errors(x, dtype, match):
    with pytest.raises(TypeError, match=match):
        to_numpy(x, dtype)


@pytest.mark.parametrize("dtype", [None, dtypes.float32, dtypes.int8])
def test_float8_arguments_are_refused_for_other_dtypes(dtype):
    with pytest.raises(RuntimeError, match="Non-default value for 'log2scale' is not supported"):
        to_numpy([1.0], dtype, log2_scale=0)
    with pytest.raises(
        RuntimeError, match="Non-default value for 'nan_on_overflow' is not supported"
    ):
        to_numpy([1.0], dtype, nan_on_overflow=True)


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="There is not a `popxl.dtype` that is compatible"):
        to_numpy([1.0], "no-such-dtype")


# ----------------------------------------------------------------------------- tables
@pytest.mark.parametrize(
    "rows, expected",
    [
        ([], ""),
        ([["a"]], "a\n-"),
        (
            [["name", "shape"], ["x", "(2, 3)"], ["longer"]],
            "name   | shape\n-------+-------\nx      | (2, 3)\nlonger |",
        ),
        ([["id", "n"], ["t", 12]], "id | n\n---+---\nt  | 12"),
    ],
)
def test_table_to_string(rows, expected):
    assert table_to_string(rows) == expected
