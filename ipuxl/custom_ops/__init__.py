"""Custom ops: declared in Python, and the stand-ins for C++ custom ops programs load.

* :class:`CustomOp` (:mod:`.declare`) declares an op as ipuxl declares its own: a name
  and PopART operator identifier, a type rule, a JAX lowering, its gradient, in-place
  behaviour, an IPU-model cost family. Collectives for replica-aware lowerings are in
  :mod:`.replicas`.
* :mod:`.bindings` and :mod:`.loader` serve a C++ custom op's pybind11 module (what
  ``cppimport`` would compile) from a registered Python implementation, so programs
  that load C++ ops run unmodified; :mod:`.shipped` holds the implementations ipuxl
  ships (popxl-addons' ops).

See ``docs/custom_ops.md``.
"""

from __future__ import annotations

import importlib as _importlib
from typing import Any as _Any

# Name -> submodule; loaded on first use, so `import ipuxl` (which installs the import
# finder of :mod:`.loader`) stays light.
_LAZY = {
    "BindingModule": "bindings", "op_binding": "bindings", "params_struct": "bindings",
    "CustomOp": "declare", "GradContext": "declare", "OperatorIdentifier": "declare",
    "COST_KINDS": "declare", "CustomOpNotRegistered": "loader", "binding_module": "loader",
    "install": "loader", "register_binding_module": "loader",
    "registered_modules": "loader",
}


def __getattr__(name: str) -> _Any:
    if name in _LAZY:
        return getattr(_importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CustomOp", "GradContext", "OperatorIdentifier", "COST_KINDS", "BindingModule",
           "op_binding", "params_struct", "register_binding_module", "registered_modules",
           "binding_module", "CustomOpNotRegistered", "install", "load_lib"]


def load_lib(path: str) -> None:
    """Load a C++ custom op library (``.so``): ipuxl runs no C++, so the ops it would
    register must be registered in Python; this checks that the library's module name
    is registered and raises :class:`CustomOpNotRegistered` otherwise."""
    import os

    from ipuxl.custom_ops.loader import CustomOpNotRegistered, library_module

    if library_module(path) is None:
        raise CustomOpNotRegistered(
            f"The custom op library {os.fspath(path)!r} is C++, which ipuxl does not run, and "
            "no Python implementation is registered under its name. Declare its ops with "
            "ipuxl.custom_ops.CustomOp and register them (docs/custom_ops.md)."
        )
