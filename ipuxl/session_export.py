"""Saving an Ir as a package without running it (``ipuxl.export``): an ipuxl extension,
built on ``Session.save`` (see ``docs/runtime.md``); and where PopART's
``compileAndExport`` writes its package (:func:`executable_path`)."""

from __future__ import annotations

import os

from ipuxl import devices
from ipuxl.ir import Ir

__all__ = ["export", "executable_path", "EXECUTABLE_FILENAME"]

# The file ``compileAndExport`` writes into a folder it is given (PopART writes
# ``executable.popef``; ipuxl's package is no PopEF file).
EXECUTABLE_FILENAME = "executable.ipuxl"


def export(ir: Ir, path: str | os.PathLike, *, weights: bool = True) -> None:
    """Save ``ir`` as a package without running or compiling it.

    The variables are saved with their initial values. A program on several IPUs or
    replicas is prepared as on ``"ipu_model"`` (its replicas run together in the
    package, on one device). See ``Session.save`` for what
    a package holds and ``docs/runtime.md`` for running it.

    Args:
        ir: the program (an ``ipuxl.Ir``).
        path: the file to write.
        weights: store the variables' values (False: the runtime takes them from user
            callbacks).

    Raises:
        TypeError: ``ir`` is not an Ir.
        ValueError: the program cannot be saved (see ``Session.save``).

    Example:
        >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops, tempfile, os
        >>> ir = popxl.Ir()
        >>> with ir.main_graph:
        ...     x = popxl.h2d_stream((2,), popxl.float32, "x")
        ...     y = popxl.d2h_stream((2,), popxl.float32, "y")
        ...     ops.host_store(y, ops.host_load(x) * 2)
        >>> path = os.path.join(tempfile.mkdtemp(), "double.ipuxl")
        >>> popxl.export(ir, path)
        >>> from ipuxl.runtime import ModelRunner
        >>> ModelRunner(path).execute({"x": np.float32([1, 2])})["y"]
        array([2., 4.], dtype=float32)
    """
    if not isinstance(ir, Ir):
        raise TypeError(f"ipuxl.export takes an Ir as its first argument; got "
                        f"{type(ir).__name__}: {ir!r}.")
    # Programs on several IPUs or replicas are built as the IPU model builds them (a
    # program that would not fit still saves: the package does not run on an IPU).
    device = "cpu" if devices.devices_needed(ir) == 1 else "ipu_model"
    from ipuxl.session import Session

    session = Session(ir, device, weights_to_host_on_exit=False, _compile=False,
                      allow_out_of_memory="run")
    session.save(path, weights=weights)


def executable_path(path: str | os.PathLike, device_type: str) -> str:
    """The file PopART's ``compileAndExport(path)`` writes: ``path`` itself, or
    ``path/executable.ipuxl`` when ``path`` is a folder; its missing parent folders are
    made, as PopART makes them.

    Args:
        path: a file or folder.
        device_type: PopART's name of the session's device type (``str(DeviceType)``):
            ``"ipu-model"`` and ``"sim"`` programs cannot be saved, as in PopART. ipuxl
            saves ``"cpu"`` programs, which PopART refuses: a package runs on the host.

    Raises:
        popart_exception: the device type cannot be saved (PopART's message).
        TypeError: ``path`` is not a path.
    """
    from ipuxl.popart.errors import popart_exception

    if device_type in ("ipu-model", "sim"):
        raise popart_exception(f"Executables for device type {device_type} cannot be saved")
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"compileAndExport takes the path of a file or folder, got "
                        f"{type(path).__name__}: {path!r}.")
    target = os.fspath(path)
    if os.path.isdir(target):
        return os.path.join(target, EXECUTABLE_FILENAME)
    folder = os.path.dirname(os.path.abspath(target))
    os.makedirs(folder, exist_ok=True)
    return target
