"""ipuxl: Graphcore's PopXL programming model on JAX/XLA.

``import ipuxl as popxl`` gives PopXL's public API; ``ipuxl.alias_popxl()`` makes
``import popxl`` (and ``import popart``) resolve to ipuxl in this process.

The API (:mod:`ipuxl.api`) is loaded on first use: ``import ipuxl`` costs little until
a name such as ``ipuxl.Ir`` is looked up, and ``import ipuxl.runtime`` serves saved
packages without loading the building code at all.
"""

# First: sets XLA_FLAGS before JAX's backend starts (see ipuxl.xla_defaults).
from ipuxl import xla_defaults as _xla_defaults  # noqa: F401, I001
# POPART_LOG_LEVEL / POPXL_LOG_LEVEL are read at import, as PopXL does (standard library
# only, so the runtime pays nothing for it).
from ipuxl import logs as _logs  # noqa: F401, I001

import importlib as _importlib
import os as _os
import sys as _sys
import types as _types
from typing import Any as _Any

__version__ = "0.1.0"

# API names that are also submodule names: ``ipuxl.jit`` is the decorator and
# ``ipuxl.remote_buffer`` the factory, never the modules ``ipuxl/jit.py`` and
# ``ipuxl/remote_buffer.py`` (which stay importable by path).
_API_OVER_MODULES = frozenset({"jit", "remote_buffer"})


def _load_api() -> _types.ModuleType:
    api = _importlib.import_module("ipuxl.api")
    package = _sys.modules[__name__]
    for name, value in vars(api).items():
        if not name.startswith("_") or name == "__all__":
            _types.ModuleType.__setattr__(package, name, value)
    return api


def __getattr__(name: str) -> _Any:
    if name.startswith("__") and name != "__all__":  # probes by tools: no API load
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _API_OVER_MODULES and _is_submodule(name):
        # ``ipuxl.dtypes``, ``from ipuxl import ops``: that module only (the building
        # modules import each other this way while the API itself is loading).
        return _importlib.import_module(f"{__name__}.{name}")
    api = _load_api()
    if name not in vars(api):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return vars(api)[name]


def _is_submodule(name: str) -> bool:
    return any(_os.path.exists(_os.path.join(folder, name + suffix))
               for folder in __path__ for suffix in (".py", "/__init__.py"))


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(vars(_load_api())))


class _Package(_types.ModuleType):
    """The ``ipuxl`` module's type: importing ``ipuxl.jit`` or ``ipuxl.remote_buffer``
    must not replace the API name of the same spelling with the module."""

    def __setattr__(self, name: str, value: _Any) -> None:
        if name in _API_OVER_MODULES and isinstance(value, _types.ModuleType):
            return  # the module stays in sys.modules; the package attribute is the API's
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package

# C++ custom op modules (what `cppimport` would compile) resolve to their registered
# Python implementations: see ipuxl.custom_ops.loader.
from ipuxl.custom_ops import loader as _custom_op_loader  # noqa: E402

_custom_op_loader.install()
