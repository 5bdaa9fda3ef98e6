"""C++ custom op modules served from Python: a program that imports a binding module
(cppimport style: `NAME.cpp` beside it) gets the registered implementation, and an
unknown one a clear error on use."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.custom_ops import (
    BindingModule,
    CustomOp,
    CustomOpNotRegistered,
    load_lib,
    op_binding,
    params_struct,
    register_binding_module,
    registered_modules,
)
from ipuxl.custom_ops import cppimport as ipuxl_cppimport
from ipuxl.custom_ops.loader import install

SCALE_SHIFT = CustomOp("TestScaleShift", domain="test.bindings",
                       lower=lambda x, *, scale, shift: x * scale + shift)


def _module() -> BindingModule:
    op_class = op_binding("ScaleShiftOp", SCALE_SHIFT, attrs=("scale", "shift"))
    params = params_struct("ScaleShiftParams", ["scale", "shift"], {"shift": 0.0})
    return BindingModule("test_scale_shift_binding",
                         {"ScaleShiftOp": op_class, "ScaleShiftParams": params})


register_binding_module(_module, name="test_scale_shift_binding")

# A package laid out like popxl-addons' ops: a Python wrapper and the C++ it compiles.
WRAPPER = '''
import cppimport.import_hook  # noqa: F401
from . import test_scale_shift_binding as binding
import popxl
from popxl.context import get_current_context


def scale_shift(x, scale, shift, style="pybind"):
    ctx = get_current_context()
    g = ctx.graph
    outputs = {0: g._create_tensor_id("scaled")}
    if style == "pybind":
        op = binding.ScaleShiftOp.createOpInGraph(g._pb_graph, {0: x.id}, outputs, scale,
                                                  shift, ctx._get_op_settings("ss"))
    else:
        params = binding.ScaleShiftParams(scale=scale, shift=shift)
        op = binding.ScaleShiftOp.create_op_in_graph(graph=g._pb_graph, inputs={0: x.id},
                                                     outputs=outputs, params=params,
                                                     settings=None)
    ctx._op_created(op)
    return op, popxl.Tensor._from_pb_tensor(op.outTensor(0))
'''


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "fake_addons_pkg"
    (root / "ops").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "ops" / "__init__.py").write_text("")
    (root / "ops" / "scale_shift.py").write_text(WRAPPER)
    (root / "ops" / "test_scale_shift_binding.cpp").write_text("// C++ that is never built\n")
    (root / "ops" / "unknown_thing_binding.cpp").write_text("// nothing registered\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    popxl.alias_popxl()
    yield root
    for name in [m for m in sys.modules if m.startswith("fake_addons_pkg")]:
        del sys.modules[name]


def _ensure_cppimport() -> None:
    """The wrapper imports `cppimport.import_hook`: the real package, or ipuxl's."""
    try:
        importlib.import_module("cppimport.import_hook")
    except ImportError:
        pytest.skip("cppimport resolves neither to a real package nor to ipuxl's alias")


@pytest.mark.parametrize("style", ["pybind", "params"])
def test_a_wrapper_runs_unmodified_with_the_registered_implementation(package, style):
    _ensure_cppimport()
    from fake_addons_pkg.ops.scale_shift import scale_shift

    x_data = np.array([1.0, -2.0, 4.0], np.float32)
    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(x_data)
        op, y = scale_shift(x, 3.0, 0.5, style)
        out = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(out, y)
    assert y.id == "scaled"
    assert type(op).__name__ == "ScaleShiftOp"
    module = sys.modules["fake_addons_pkg.ops.test_scale_shift_binding"]
    assert isinstance(op, module.ScaleShiftOp)
    assert op.opType() == "TestScaleShift"
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[out], x_data * 3.0 + 0.5)


def test_the_binding_checks_its_arguments(package):
    _ensure_cppimport()
    from fake_addons_pkg.ops import test_scale_shift_binding as binding

    ir = popxl.Ir()
    with ir.main_graph:
        x = popxl.variable(np.ones(2, np.float32))
        g = ir.main_graph
        with pytest.raises(TypeError, match="takes \\(graph, inputs, outputs, scale, "
                                            "shift, settings\\); got 4 arguments"):
            binding.ScaleShiftOp.createOpInGraph(g._pb_graph, {0: x.id}, {0: "o"}, 1, 2, 3, 4)
        with pytest.raises(Exception, match="indices must be 0..n-1 with no gaps"):
            binding.ScaleShiftOp.createOpInGraph(g._pb_graph, {1: x.id}, {0: "o"}, 1.0, 2.0)
        with pytest.raises(ValueError, match="the graph already has a tensor with that id"):
            binding.ScaleShiftOp.createOpInGraph(g._pb_graph, {0: x.id}, {0: x.id}, 1.0, 2.0)
        with pytest.raises(TypeError, match="ScaleShiftParams has no field 'bias'"):
            binding.ScaleShiftParams(scale=1.0, bias=2.0)
        with pytest.raises(TypeError, match="ScaleShiftParams needs scale"):
            binding.ScaleShiftParams()


def test_an_unregistered_cpp_module_imports_and_fails_on_use(package):
    _ensure_cppimport()
    from fake_addons_pkg.ops import unknown_thing_binding

    with pytest.raises(CustomOpNotRegistered,
                       match="'fake_addons_pkg.ops.unknown_thing_binding' "
                             "\\(.*unknown_thing_binding.cpp\\) has no Python implementation"
                             ".*docs/custom_ops.md"):
        unknown_thing_binding.SomeOp  # noqa: B018


def test_cppimport_imp_and_imp_from_filepath_serve_registered_modules(tmp_path):
    module = ipuxl_cppimport.imp("test_scale_shift_binding")
    assert hasattr(module, "ScaleShiftOp")
    cpp = tmp_path / "test_scale_shift_binding.cpp"
    assert ipuxl_cppimport.imp_from_filepath(str(cpp)).ScaleShiftOp is module.ScaleShiftOp
    with pytest.raises(CustomOpNotRegistered, match="no Python implementation"):
        ipuxl_cppimport.imp("never_registered_binding").Op  # noqa: B018
    assert "test_scale_shift_binding" in registered_modules()


def test_load_lib_accepts_registered_libraries_and_refuses_others():
    load_lib("/opt/ops/libtest_scale_shift_binding.so")
    with pytest.raises(CustomOpNotRegistered, match="'/opt/ops/libmystery.so' is C\\+\\+"):
        load_lib("/opt/ops/libmystery.so")


def test_the_finder_is_first_so_it_wins_over_other_cppimport_hooks():
    install()
    from ipuxl.custom_ops.loader import _Finder

    assert isinstance(sys.meta_path[0], _Finder) or any(
        isinstance(f, _Finder) for f in sys.meta_path[:2])


def test_import_cppimport_resolves_to_ipuxl_where_it_is_not_installed(tmp_path):
    code = textwrap.dedent("""
        import importlib.util, sys
        import ipuxl
        ipuxl.alias_popxl()
        import cppimport, cppimport.import_hook
        print(cppimport.__name__)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=str(Path(__file__).resolve().parents[2]))
    assert result.returncode == 0, result.stderr[-2000:]
    # Without a real cppimport (as in this environment), ipuxl's stands in.
    assert result.stdout.strip() in ("ipuxl.custom_ops.cppimport", "cppimport")


def test_a_declared_op_with_the_lowering_of_a_jax_function_is_exact():
    # The binding's op is the CustomOp's: same numbers as the JAX function itself.
    ir = popxl.Ir()
    data = np.linspace(-1, 1, 6, dtype=np.float32)
    with ir.main_graph:
        y = SCALE_SHIFT(popxl.variable(data), scale=0.25, shift=-1.0)
        out = popxl.d2h_stream(y.shape, y.dtype)
        ops.host_store(out, y)
    with popxl.Session(ir, "cpu") as session:
        np.testing.assert_array_equal(session.run()[out],
                                      np.asarray(jnp.asarray(data) * 0.25 - 1.0))


def test_ctypes_serves_registered_op_libraries_and_loads_real_ones():
    import ctypes
    import ctypes.util

    popxl.alias_popxl()  # PopART programs: installs the ctypes stand-in
    library = ctypes.cdll.LoadLibrary("/nowhere/libtest_scale_shift_binding.so")
    assert library.ScaleShiftOp.custom_op is SCALE_SHIFT
    with pytest.raises(OSError, match="ipuxl runs no C\\+\\+, so its ops must be declared"):
        ctypes.cdll.LoadLibrary("/nowhere/libmystery_ops.so")
    libc = ctypes.util.find_library("c")
    if libc:  # a real library still loads as ctypes loads it
        assert isinstance(ctypes.cdll.LoadLibrary(libc), ctypes.CDLL)
