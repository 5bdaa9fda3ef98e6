"""Saving an Ir as a package without running it (``ipuxl.export``): an ipuxl extension,
built on ``Session.save`` (see ``docs/runtime.md``)."""

from __future__ import annotations

import os

from ipuxl import devices
from ipuxl.ir import Ir

__all__ = ["export"]


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
