"""Serving C++ custom ops' modules from their Python implementations.

PopXL programs load C++ custom ops by compiling them: ``import cppimport.import_hook``
then ``from . import my_op_binding`` (next to ``my_op_binding.cpp``), or
``cppimport.imp("my_op_binding")``. ipuxl cannot run that C++. Instead, a registry maps
each binding module's name to a :class:`~ipuxl.custom_ops.bindings.BindingModule`
built from Python implementations, and an import finder (first on ``sys.meta_path``)
serves it when a program imports a module of that name that has a ``.cpp`` file beside
it (or through ``cppimport.imp``). No compiler runs.

A ``.cpp`` module that nothing is registered for imports as a placeholder: using it
raises :class:`CustomOpNotRegistered`, naming the module and the C++ file and pointing
at ``docs/custom_ops.md`` (how to register one) — never a compiler error. Programs that
import such a module without using it run.

Example:
    >>> from ipuxl.custom_ops import BindingModule, register_binding_module
    >>> register_binding_module(BindingModule("doc_example_binding", {"answer": 42}))
    >>> import ipuxl.custom_ops.cppimport as cppimport
    >>> cppimport.imp("doc_example_binding").answer
    42
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # this module stays light: `import ipuxl` installs its finder
    from ipuxl.custom_ops.bindings import BindingModule

__all__ = ["CustomOpNotRegistered", "register_binding_module", "registered_modules",
           "binding_module", "install", "library_module", "install_ctypes_hook"]

DOCS = "docs/custom_ops.md"

_REGISTRY: dict[str, BindingModule | Callable[[], BindingModule]] = {}
_LOCK = threading.Lock()


class CustomOpNotRegistered(ImportError):
    """A C++ custom op module that ipuxl has no Python implementation for."""


def register_binding_module(module: BindingModule | Callable[[], BindingModule],
                            name: str | None = None) -> None:
    """Serve ``module`` (or what the factory returns, built on first import) whenever a
    program imports a C++ custom op module of its name."""
    key = name or getattr(module, "name", None)
    if not key:
        raise ValueError("register_binding_module needs the module's name for a factory: "
                         "pass name='my_op_binding'.")
    with _LOCK:
        _REGISTRY[key] = module


def registered_modules() -> list[str]:
    """The binding module names ipuxl serves, sorted."""
    _load_shipped()
    return sorted(_REGISTRY)


def binding_module(name: str) -> BindingModule | None:
    """The registered module ``name`` (built now if registered as a factory), or None."""
    _load_shipped()
    with _LOCK:
        entry = _REGISTRY.get(name)
        if entry is None or not callable(entry):
            return entry
        built = entry()
        _REGISTRY[name] = built
        return built


_SHIPPED_LOADED = False


def _load_shipped() -> None:
    """Register the implementations ipuxl ships (popxl-addons' ops), once."""
    global _SHIPPED_LOADED
    if _SHIPPED_LOADED:
        return
    _SHIPPED_LOADED = True
    from ipuxl.custom_ops import shipped  # noqa: F401 - registers on import


class _Placeholder(types.ModuleType):
    """A C++ custom op module with no Python implementation: raises on use."""

    __cpp__ = ""

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise CustomOpNotRegistered(
            f"The C++ custom op module {self.__name__!r} ({self.__cpp__}) has no Python "
            f"implementation in ipuxl, so `{attribute}` cannot be used: ipuxl does not "
            f"compile C++ ops. Declare the op with ipuxl.custom_ops.CustomOp and register "
            f"its binding module with register_binding_module (see {DOCS}); registered "
            f"modules: {', '.join(registered_modules()) or 'none'}."
        )


def _module_for(fullname: str, origin: str | None) -> types.ModuleType:
    leaf = fullname.rpartition(".")[2]
    found = binding_module(leaf)
    if found is None:
        module = _Placeholder(fullname)
        module.__cpp__ = origin or f"{leaf}.cpp"
        return module
    module = types.ModuleType(fullname, found.description or f"ipuxl stand-in for {leaf}")
    module.__dict__.update(found.members)
    module.__ipuxl_binding__ = found
    return module


def _cpp_beside(leaf: str, path: Any) -> str | None:
    for folder in path or ():
        if not isinstance(folder, str):
            continue
        cpp = os.path.join(folder, leaf + ".cpp")
        if os.path.exists(cpp) and not os.path.exists(os.path.join(folder, leaf + ".py")):
            return cpp
    return None


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``pkg.NAME`` for a ``NAME.cpp`` beside the package's modules."""

    def find_spec(self, fullname: str, path: Any, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        leaf = fullname.rpartition(".")[2]
        if not path:
            return None  # top-level modules: only through cppimport.imp
        cpp = _cpp_beside(leaf, path)
        if cpp is None:
            return None
        spec = importlib.util.spec_from_loader(fullname, self)
        spec.origin = cpp
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _module_for(spec.name, spec.origin)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once): before any other ``cppimport``
    hook, so a program's C++ ops resolve to ipuxl's implementations."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def import_cpp_module(fullname: str, origin: str | None = None) -> types.ModuleType:
    """``cppimport.imp``: the module for ``fullname``, put in ``sys.modules``."""
    if fullname in sys.modules:
        return sys.modules[fullname]
    module = _module_for(fullname, origin)
    sys.modules[fullname] = module
    return module


def library_module(path: str | os.PathLike) -> BindingModule | None:
    """The module registered for the C++ op library ``path`` (``libNAME.so`` is looked
    up as ``libNAME`` and ``NAME``), or None."""
    leaf = os.path.basename(os.fspath(path)).split(".")[0]
    for name in dict.fromkeys((leaf, leaf[3:] if leaf.startswith("lib") else leaf)):
        found = binding_module(name)
        if found is not None:
            return found
    return None


class _CdllStandIn:
    """``ctypes.cdll`` for PopART programs: a C++ op library that cannot be loaded (it
    needs PopART's C++ runtime, which ipuxl does not have) but whose ops are registered
    in Python loads as a stand-in; every other library loads as ctypes loads it."""

    def __init__(self, real: Any):
        self._real = real

    def LoadLibrary(self, name: str) -> Any:  # noqa: N802 - ctypes' name
        try:
            return self._real.LoadLibrary(name)
        except OSError as error:
            found = library_module(name)
            if found is not None:
                module = types.ModuleType(found.name, f"ipuxl stand-in for {name}")
                module.__dict__.update(found.members)
                return module
            raise OSError(
                f"{error}\nIf this is a PopART custom op library: ipuxl runs no C++, so its "
                f"ops must be declared in Python (ipuxl.custom_ops.CustomOp) and registered "
                f"under the library's name (see {DOCS})."
            ) from error

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def install_ctypes_hook() -> None:
    """Make ``ctypes.cdll.LoadLibrary`` serve registered C++ op libraries (once)."""
    import ctypes

    if not isinstance(ctypes.cdll, _CdllStandIn):
        ctypes.cdll = _CdllStandIn(ctypes.cdll)  # type: ignore[misc]
