"""``cppimport`` as PopXL programs use it, served by ipuxl (no compiler runs).

``cppimport.imp("my_op_binding")`` and ``cppimport.imp_from_filepath("path/my_op.cpp")``
return the registered Python implementation of the module (see
:mod:`ipuxl.custom_ops.loader`); ``import cppimport.import_hook`` installs ipuxl's import
finder, which is installed anyway when ipuxl is imported. ``import cppimport`` resolves
here when the real package is not installed (``ipuxl.alias_popxl``).
"""

from __future__ import annotations

import os
import types

from ipuxl.custom_ops.loader import import_cpp_module, install

__all__ = ["imp", "imp_from_filepath", "build", "settings"]

# cppimport's settings dict; ipuxl compiles nothing, so they are kept and not read.
settings: dict = {"force_rebuild": False, "file_exts": [".cpp", ".c"],
                  "rtld_flags": 0, "remove_strict_prototypes": True,
                  "release_mode": False}


def imp(fullname: str, opt_in: bool = False) -> types.ModuleType:
    """The module ``fullname`` (``pkg.my_op_binding`` or ``my_op_binding``)."""
    install()
    return import_cpp_module(fullname)


def imp_from_filepath(filepath: str, fullname: str | None = None) -> types.ModuleType:
    """The module of the C++ file ``filepath`` (named after the file unless ``fullname``)."""
    install()
    name = fullname or os.path.splitext(os.path.basename(os.fspath(filepath)))[0]
    return import_cpp_module(name, os.fspath(filepath))


def build(filepath: str) -> str:
    """Nothing to build: ipuxl serves registered modules. Returns ``filepath``."""
    return filepath
