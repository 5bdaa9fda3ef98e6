"""Make ``import popxl`` (and ``import popart``) resolve to ipuxl in this process.

After :func:`alias_popxl`, ``popxl`` *is* the ``ipuxl`` package: ``popxl.ops is
ipuxl.ops``, ``popxl.X`` is ``ipuxl.X`` for every submodule, ``popart`` is the
compatibility shim ``ipuxl.popart``, ``popart.ir`` (PopXL's predecessor) is ipuxl too, and
``popdist`` (the launcher's library, with ``popdist.popart``) is ``ipuxl.popdist``, and
``cppimport``, where it is not installed, is ``ipuxl.custom_ops.cppimport``.
The ipuxl modules keep their own ``__name__`` and ``__spec__``.

Example:
    >>> import ipuxl
    >>> ipuxl.alias_popxl()
    >>> import popxl, popxl.ops
    >>> popxl.ops is ipuxl.ops
    True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any

__all__ = ["alias_popxl"]

# Alias package name -> the ipuxl module it stands for. Longest prefixes first, so that
# `popart.ir` wins over `popart`.
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("popart.ir", "ipuxl"),
    ("popxl", "ipuxl"),
    ("popart", "ipuxl.popart"),
    ("popdist", "ipuxl.popdist"),
)


# Aliases added only where the real package is missing: `cppimport` (ipuxl serves C++
# custom ops from Python; see ipuxl.custom_ops.loader).
_FALLBACKS: tuple[tuple[str, str], ...] = (("cppimport", "ipuxl.custom_ops.cppimport"),)
_fallbacks_used: list[tuple[str, str]] = []


def _target(fullname: str) -> str | None:
    """The ipuxl module that the alias ``fullname`` stands for, or None if not an alias."""
    for alias, target in (*_PREFIXES, *_fallbacks_used):
        if fullname == alias or fullname.startswith(alias + "."):
            return target + fullname[len(alias):]
    return None


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``popxl.X`` as the module ``ipuxl.X`` itself (not a copy)."""

    def __init__(self) -> None:
        # The ipuxl module's own spec, by alias name, between create_module and exec_module.
        self._own_specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(self, fullname: str, path: Any, target: Any = None
                  ) -> importlib.machinery.ModuleSpec | None:
        target_name = _target(fullname)
        if target_name is None:
            return None
        try:
            found = importlib.util.find_spec(target_name)
        except ModuleNotFoundError:
            found = None
        if found is None:
            return None  # the usual "No module named 'popxl.X'"
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(_target(spec.name))  # type: ignore[arg-type]
        self._own_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system has just overwritten `module.__spec__` with the alias spec (it
        # always does); give the ipuxl module its own spec back, since `importlib.reload`,
        # pickling and `python -m` rely on it. `__name__`, `__loader__`, `__package__` and
        # `__path__` were already set, so the import system left them alone.
        spec = module.__spec__
        assert spec is not None
        module.__spec__ = self._own_specs.pop(spec.name)


_FINDER = _AliasFinder()


def alias_popxl() -> None:
    """Make ``import popxl``, ``import popxl.ops``, ``from popxl.tensor import Tensor``,
    ``import popart`` and ``import popdist`` give ipuxl's modules in this process. Calling
    it again does nothing.

    Modules already imported under the alias names (a real PopXL) are left in place.
    """
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    for alias, target in _FALLBACKS:
        if (alias, target) not in _fallbacks_used and importlib.util.find_spec(alias) is None:
            _fallbacks_used.append((alias, target))
    # PopART programs load C++ op libraries with ctypes: registered ones load as stand-ins.
    from ipuxl.custom_ops.loader import install_ctypes_hook

    install_ctypes_hook()
    for name, module in list(sys.modules.items()):
        if name == "ipuxl" or name.startswith("ipuxl."):
            sys.modules.setdefault("popxl" + name[len("ipuxl"):], module)
    popart = sys.modules.setdefault("popart", importlib.import_module("ipuxl.popart"))
    # `popart.ir` is PopXL's predecessor, ipuxl itself, not a module of `ipuxl.popart`:
    # register it directly.
    if popart is sys.modules["ipuxl.popart"]:
        popart_ir = sys.modules.setdefault("popart.ir", sys.modules["ipuxl"])
        popart.ir = popart_ir  # type: ignore[attr-defined]
