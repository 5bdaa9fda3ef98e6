"""The PopXL module surface that real code imports (issue 8): names in ``popxl.tensor``,
``Tensor.strides``, the ``popxl.dtypes`` conversion tables, ``random_seed.MAX_UINT64``,
``create_graph``'s ``*args`` rule and ``fp8_utils.host_fp8_mse_scale``.

Nothing here builds a Session.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import ml_dtypes
import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.api
import ipuxl.tensor
import ipuxl.tensor_factories
from ipuxl import dtypes
from ipuxl.fp8_utils import (
    host_fp8_mse_scale,
    host_fp8_mse_scale_pb,
    host_pow2scale_cast_from_fp8,
    host_pow2scale_cast_to_fp8,
)

ALL_DTYPES = list(dtypes._STR_TO_POPXL.values())
FACTORIES = ["variable", "constant", "graph_input", "graph_output"]


# ----------------------------------------------------------------------------- popxl.tensor
@pytest.mark.parametrize("name", FACTORIES)
def test_tensor_module_exports_the_factories(name):
    factory = getattr(ipuxl.tensor_factories, name)
    assert getattr(ipuxl.tensor, name) is factory
    assert getattr(popxl, name) is factory
    assert name in ipuxl.tensor.__all__
    namespace = {}
    exec(f"from ipuxl.tensor import {name}", namespace)
    assert namespace[name] is factory


def test_star_import_of_the_tensor_module_gives_the_factories():
    namespace = {}
    exec("from ipuxl.tensor import *", namespace)
    for name in FACTORIES:
        assert namespace[name] is getattr(ipuxl.tensor_factories, name)
    assert namespace["Tensor"] is popxl.Tensor


def test_the_tensor_module_still_refuses_unknown_names():
    with pytest.raises(AttributeError, match="module 'ipuxl.tensor' has no attribute 'nothing'"):
        ipuxl.tensor.nothing  # noqa: B018


def test_factories_imported_from_the_tensor_module_build_tensors():
    from ipuxl.tensor import constant, graph_input, graph_output, variable

    ir = popxl.Ir()
    with ir.main_graph:
        w = variable(np.ones(2, np.float32), name="w")
        c = constant(2, popxl.int32, name="c")
    with ir.create_empty_graph("sub") as graph:
        x = graph_input((2,), popxl.float32, "x")
        graph_output(x)
    assert (type(w), w.dtype, type(c), c.dtype) == (
        popxl.Variable, popxl.float32, popxl.Constant, popxl.int32)
    assert graph.outputs == (x,)


# ----------------------------------------------------------------------------- strides
STRIDE_SHAPES = [(), (5,), (2, 3), (2, 3, 4), (1, 3), (3, 1), (2, 1, 1), (0,), (0, 5), (4, 0, 2)]


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=repr)
@pytest.mark.parametrize("shape", STRIDE_SHAPES, ids=str)
def test_strides_equal_numpy_strides(dtype, shape):
    with popxl.Ir().create_empty_graph():
        t = popxl.graph_input(shape, dtype)
    expected = np.empty(shape, dtype.as_numpy()).strides
    assert isinstance(t.strides(), tuple)
    assert t.strides() == expected
    # The host array of a tensor has the tensor's strides (float8: the structured dtype).
    assert np.zeros(shape, dtype.as_numpy()).strides == t.strides()


@pytest.mark.parametrize("dtype", [popxl.int32, popxl.float16, popxl.float8_152], ids=repr)
@pytest.mark.parametrize("shape", [(6,), (3, 2), [2, 1, 3], (0, 6), np.array([2, 3])], ids=str)
def test_strides_of_another_shape(dtype, shape):
    with popxl.Ir().create_empty_graph():
        t = popxl.graph_input((7, 7), dtype)
    expected = np.empty(tuple(shape), dtype.as_numpy()).strides
    assert t.strides(shape) == expected and isinstance(t.strides(shape), tuple)


@pytest.mark.parametrize(
    "shape, error, match",
    [
        ((2.0, 3), TypeError, r"dimension 0 of \(2\.0, 3\) is float"),
        ((2, -1), ValueError, "Tensor dimensions cannot be negative"),
        (3, TypeError, "must be a sequence of integers; got int"),
    ],
)
def test_strides_of_an_invalid_shape(shape, error, match):
    with popxl.Ir().create_empty_graph():
        t = popxl.graph_input((2,), popxl.float32)
    with pytest.raises(error, match=match):
        t.strides(shape)


# ----------------------------------------------------------------------------- dtype tables
def test_str_table_holds_every_canonical_name():
    names = ("bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float8_143 float8_152 "
             "float16 float32 float64 complex64 complex128 bfloat16").split()
    assert list(dtypes._STR_TO_POPXL) == names
    for name, dtype in dtypes._STR_TO_POPXL.items():
        assert getattr(dtypes, name) is dtype and dtype.name == name
        assert dtypes.dtype.from_name(name) is dtype
        assert dtypes.dtype.as_dtype(name) is dtype
    assert "half" not in dtypes._STR_TO_POPXL and "float" not in dtypes._STR_TO_POPXL


def test_numpy_table_maps_each_host_dtype():
    expected = {
        np.dtype(np.bool_): dtypes.bool, np.dtype(np.int8): dtypes.int8,
        np.dtype(np.int16): dtypes.int16, np.dtype(np.int32): dtypes.int32,
        np.dtype(np.int64): dtypes.int64, np.dtype(np.uint8): dtypes.uint8,
        np.dtype(np.uint16): dtypes.uint16, np.dtype(np.uint32): dtypes.uint32,
        np.dtype(np.uint64): dtypes.uint64,
        np.dtype([("float8_143", "u1")]): dtypes.float8_143,
        np.dtype([("float8_152", "u1")]): dtypes.float8_152,
        np.dtype(np.float16): dtypes.float16, np.dtype(np.float32): dtypes.float32,
        np.dtype(np.float64): dtypes.float64, np.dtype(np.complex64): dtypes.complex64,
        np.dtype(np.complex128): dtypes.complex128,
        np.dtype(ml_dtypes.bfloat16): dtypes.bfloat16,
    }  # fmt: skip
    assert dtypes._NP_TO_POPXL == expected
    for np_dtype, dtype in dtypes._NP_TO_POPXL.items():
        assert dtype.as_numpy() == np_dtype
        assert dtypes.dtype.as_dtype(np_dtype) is dtype
        assert dtypes.dtype.as_dtype(np.zeros(2, np_dtype)) is dtype


def test_numpy_table_holds_host_dtypes_only():
    # ml_dtypes float8 arrays (what JAX computes with) convert, but are not host dtypes.
    assert np.dtype(ml_dtypes.float8_e4m3fnuz) not in dtypes._NP_TO_POPXL
    assert np.dtype(np.uint8) in dtypes._NP_TO_POPXL
    assert dtypes.dtype.as_dtype(ml_dtypes.float8_e4m3fnuz) is dtypes.float8_143


def test_python_type_table_is_popxls():
    assert dtypes._PY_TO_POPXL == {bool: dtypes.bool, float: dtypes.float32}
    for py_type, dtype in dtypes._PY_TO_POPXL.items():
        assert dtypes.dtype.as_dtype(py_type) is dtype
    # int has no entry: as_dtype reaches int64 through numpy's meaning of `int`.
    assert int not in dtypes._PY_TO_POPXL and dtypes.dtype.as_dtype(int) is dtypes.int64


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch installed")
def test_torch_table_is_empty_without_torch():
    assert dtypes._PT_TO_POPXL == {}
    from ipuxl.dtypes import _PT_TO_POPXL

    assert _PT_TO_POPXL == {}


def test_torch_table_is_filled_from_torch_when_torch_is_importable(monkeypatch):
    # A stand-in torch module: the table maps its dtype objects by name.
    fake_torch = types.ModuleType("torch")
    names = ("bool int8 int16 int32 int64 uint8 float16 float32 float64 complex64 "
             "complex128 bfloat16").split()
    for name in names:
        setattr(fake_torch, name, object())
    real_find_spec = importlib.util.find_spec
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "torch" else real_find_spec(name, *a))
    dtypes._torch_to_popxl.cache_clear()
    try:
        table = dtypes._PT_TO_POPXL
    finally:
        dtypes._torch_to_popxl.cache_clear()
    # PopXL's table: bfloat16, an ipuxl extension with no numpy equivalent, is left out
    # (as_dtype still converts torch.bfloat16 by name).
    assert table == {getattr(fake_torch, name): getattr(dtypes, name) for name in names
                     if name != "bfloat16"}


def test_dtypes_module_still_refuses_unknown_names():
    with pytest.raises(AttributeError, match="module 'ipuxl.dtypes' has no attribute '_NOPE'"):
        dtypes._NOPE  # noqa: B018


# ----------------------------------------------------------------------------- random_seed
def test_max_uint64():
    from ipuxl.random_seed import MAX_UINT64, two_uint32_to_uint64, uint64_to_two_uint32

    assert MAX_UINT64 == 18446744073709551615 and type(MAX_UINT64) is int
    assert uint64_to_two_uint32(MAX_UINT64) == (2**32 - 1, 2**32 - 1)
    assert two_uint32_to_uint64(2**32 - 1, 2**32 - 1) == MAX_UINT64
    with pytest.raises(ValueError, match="out of range for uint64"):
        uint64_to_two_uint32(MAX_UINT64 + 1)


# ----------------------------------------------------------------------------- create_graph
@pytest.fixture
def ir_and_x():
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.zeros(2, np.float32), name="x")
    return ir, x


def test_var_positional_mixing_tensors_and_other_values_raises(ir_and_x):
    ir, x = ir_and_x

    def fn(*args):
        return args[0]

    def fn_xs(a, *xs):
        return a

    with pytest.raises(TypeError, match=(
            r"^A \*args argument can't contain a mixture of Tensors and other types\. "
            r"Parameter `\*args` got \['Variable', 'int'\]; pass the other values through "
            r"named parameters")):
        ir.create_graph(fn, x, 7)
    with pytest.raises(TypeError, match=r"Parameter `\*xs` got \['TensorSpec', 'str'\]"):
        ir.create_graph(fn_xs, x, x.spec, "text")
    assert len(ir.graphs) == 1  # nothing was traced


def test_var_positional_of_only_tensors_or_only_other_values(ir_and_x):
    ir, x = ir_and_x
    seen = []

    def fn(a, *args):
        seen.append(args)
        return a

    graph = ir.create_graph(fn, x, x, x.spec)
    assert [t.name for t in graph.inputs] == ["a", "args_0", "args_1"]
    assert seen[-1] == tuple(graph.inputs[1:])
    graph = ir.create_graph(fn, x, 1, "two", None)
    assert [t.name for t in graph.inputs] == ["a"] and seen[-1] == (1, "two", None)


# ----------------------------------------------------------------------------- fp8 MSE scale
FORMATS = {  # dtype: (smallest subnormal, largest finite)
    dtypes.float8_143: (2.0**-10, 240.0),
    dtypes.float8_152: (2.0**-17, 57344.0),
}
SPANS = [(dtypes.float8_143, 0.00098, 240.0), (dtypes.float8_152, 2.0**-17, 57344.0)]


def exact_mse(x, dtype, scale):
    """The round trip's mean squared error, computed by casting (overflow saturates)."""
    fp8 = host_pow2scale_cast_to_fp8(x, dtype, scale, nan_on_overflow=False)
    back = host_pow2scale_cast_from_fp8(fp8, dtypes.float64, -scale)
    return float(np.mean((back - x.astype(np.float64)) ** 2))


def spanning_data(kind, low, high):
    return {
        "ends": np.array([low, high]),
        "signed": np.array([-high, -low, low, high]),
        "linear": np.linspace(low, high, 50),
        "geometric": np.geomspace(low, high, 50),
    }[kind]


def assert_best_of_all_candidates(x, dtype, scale):
    """The scale's true round-trip error is the lowest of every candidate's."""
    errors = {s: exact_mse(x, dtype, s) for s in range(-31, 32)}
    assert errors[scale] == min(errors.values())


@pytest.mark.parametrize("kind", ["ends", "signed", "linear", "geometric"])
@pytest.mark.parametrize("host", [np.float16, np.float32])
@pytest.mark.parametrize("dtype, low, high", SPANS, ids=["143", "152"])
def test_mse_scale_of_data_spanning_the_format_is_zero(dtype, low, high, host, kind):
    x = spanning_data(kind, low, high).astype(host)
    mse, scale = host_fp8_mse_scale(x, dtype)
    assert scale == 0 and host_fp8_mse_scale_pb(x, dtype) == 0
    assert_best_of_all_candidates(x, dtype, scale)


@pytest.mark.parametrize("host", [np.float16, np.float32])
@pytest.mark.parametrize("dtype", list(FORMATS), ids=["143", "152"])
def test_mse_scale_of_data_near_overflow_is_negative(dtype, host):
    _, largest = FORMATS[dtype]
    for x in (np.linspace(largest, 1.1 * largest, 20), np.array([1.1 * largest])):
        x = x.astype(host)
        scale = host_fp8_mse_scale(x, dtype)[1]
        assert scale < 0
        assert exact_mse(x, dtype, scale) < exact_mse(x, dtype, 0)
        assert_best_of_all_candidates(x, dtype, scale)


@pytest.mark.parametrize("host", [np.float16, np.float32])
@pytest.mark.parametrize("dtype", list(FORMATS), ids=["143", "152"])
def test_mse_scale_of_data_near_underflow_is_positive(dtype, host):
    smallest, _ = FORMATS[dtype]
    for x in (np.geomspace(smallest / 16, smallest / 4, 20), np.array([smallest / 8])):
        x = x.astype(host)
        scale = host_fp8_mse_scale(x, dtype)[1]
        assert scale > 0
        assert exact_mse(x, dtype, scale) < exact_mse(x, dtype, 0)
        assert_best_of_all_candidates(x, dtype, scale)


# ----------------------------------------------------------------------------- the package
LAZY_PACKAGE = """
import sys
import ipuxl
assert "ipuxl.api" not in sys.modules and "ipuxl.ir" not in sys.modules
from ipuxl import dtypes  # a submodule alone does not load the API
import ipuxl.jit, ipuxl.remote_buffer  # the modules, imported before the API
assert "ipuxl.api" not in sys.modules and dtypes.float32.name == "float32"
assert callable(ipuxl.jit) and callable(ipuxl.remote_buffer)
assert ipuxl.Ir is sys.modules["ipuxl.ir"].Ir and "ipuxl.api" in sys.modules
assert ipuxl.jit is sys.modules["ipuxl.jit"].jit
assert ipuxl.remote_buffer is sys.modules["ipuxl.remote_buffer"].remote_buffer
print("ok")
"""


def test_the_package_loads_the_api_on_first_use():
    import subprocess

    result = subprocess.run([sys.executable, "-c", LAZY_PACKAGE], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_the_package_gives_every_api_name_and_only_those():
    for name in [*ipuxl.api.__all__, "ops", "jit", "export", "OutOfMemoryError"]:
        assert getattr(popxl, name) is getattr(ipuxl.api, name), name
    assert set(popxl.__all__) <= set(dir(popxl))
    namespace = {}
    exec("from ipuxl import *", namespace)
    assert namespace["Ir"] is ipuxl.api.Ir and "ops" not in namespace
    with pytest.raises(AttributeError, match="module 'ipuxl' has no attribute 'Nothing'"):
        popxl.Nothing  # noqa: B018
    with pytest.raises(AttributeError, match="has no attribute '__wrapped__'"):
        popxl.__wrapped__  # noqa: B018


def test_api_names_that_shadow_modules_are_declared():
    """The package keeps ``ipuxl.jit`` the decorator even when ``ipuxl/jit.py`` is
    imported later; that list must hold every API name that is also a module name."""
    import pkgutil

    modules = {m.name for m in pkgutil.iter_modules(popxl.__path__)}
    shadowing = {name for name in vars(ipuxl.api) if name in modules
                 and not isinstance(getattr(ipuxl.api, name), types.ModuleType)}
    assert shadowing == popxl._API_OVER_MODULES
