"""Make ``import popxl`` (and ``import popart``) resolve to ipuxl in this process.

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
import importlib.util
import sys
from types import ModuleType
from typing import Any

__all__ = ["alias_popxl"]

# Imported as `popxl.<name>` but not a module of its own in ipuxl.
_ATTRIBUTE_MODULES: dict[str, str] = {}


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``popxl.X`` as ``ipuxl.X`` and ``popart`` as ``ipuxl.popart``."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        target_name = _target(fullname)
        if target_name is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> ModuleType:
        module = importlib.import_module(_target(spec.name))  # type: ignore[arg-type]
        return module

    def exec_module(self, module: ModuleType) -> None:
        return None


def _target(fullname: str) -> str | None:
    if fullname == "popxl" or fullname.startswith("popxl."):
        return "ipuxl" + fullname[len("popxl"):]
    if fullname == "popart" or fullname.startswith("popart."):
        return "ipuxl.popart" + fullname[len("popart"):]
    return None


_FINDER = _AliasFinder()


def alias_popxl() -> None:
    """After this call ``import popxl``, ``import popxl.ops`` and ``import popart`` give
    ipuxl's modules. Calling it again does nothing."""
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
    for name, module in list(sys.modules.items()):
        if name == "ipuxl" or name.startswith("ipuxl."):
            alias = "popxl" + name[len("ipuxl"):]
            sys.modules.setdefault(alias, module)
    sys.modules.setdefault("popart", importlib.import_module("ipuxl.popart"))
