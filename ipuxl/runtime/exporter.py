"""The building side of a package: a Session's program, saved with ``jax.export``.

This is the one module of :mod:`ipuxl.runtime` that reads an Ir; the serving modules never
import it. ``Session.save(path)`` and ``ipuxl.export(ir, path)`` come here.

What is saved:

* the executable: the Session's step as one flat function
  ``(*state, *constants, *inputs) -> (*updated state, *outputs, *masks)``, exported by
  ``jax.export`` (serialized StableHLO with its calling convention) for every platform it
  lowers on (CPU, CUDA, ROCm, TPU), replicas mapped with ``vmap`` so that one device of
  any kind runs a replicated package;
* the state: each variable's and remote buffer's current value in the executable's
  layout (``[R, *shape]`` when replicated), as the tensor data of its Load anchor;
* the large constants (arguments of the executable, as in a Session);
* the metadata: anchors, program flow, replication factor, ``num_host_transfers``,
  versions and the package hash (see :mod:`ipuxl.runtime.model`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import jax
import numpy as np
from jax import export as jax_export
from jax._src import config as jax_config  # traceback_in_locations_limit: no public form

from ipuxl import storage_layout
from ipuxl.host_buffers import StreamLayout
from ipuxl.host_callbacks import _CALLBACK_OPS
from ipuxl.lowering import with_nesting_room
from ipuxl.run_checks import unchecked
from ipuxl.runtime.model import LOAD, MAIN, SAVE, package_hash, runtime_versions
from ipuxl.runtime.package import write_package

__all__ = ["save_session", "PLATFORMS"]

_LOGGER = logging.getLogger(__name__)

# Every platform a package is lowered for when the program lowers on it.
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


def save_session(session: Any, path: str | os.PathLike, *, weights: bool = True) -> None:
    """Write ``session``'s program, current variable values and metadata to ``path``."""
    ir = session._ir
    _check_savable(session)
    flat_step, specs, updated = session._flat_step(portable=True)
    with unchecked():  # a package holds no Python to raise a run-time check's error
        exported, platforms = with_nesting_room(
            ir, lambda: _export(session, flat_step, specs))
    program = session._program
    replicas = session._global_replicas
    per_replica = (replicas,) if replicas > 1 else ()

    blobs: dict[str, bytes | memoryview] = {"executable": exported.serialize()}
    anchors: list[dict[str, Any]] = []
    state_names = []
    state_values = _state_values(session)
    for entry, value in zip((*program.variables, *program.remote_buffers), state_values):
        is_buffer = entry in program.remote_buffers
        name = (f"remote_buffer_{entry.remote_buffer_id}" if is_buffer else entry.id)
        value = np.asarray(value, order="C")  # keeps 0-d (ascontiguousarray: 1-d)
        common = {"kind": "remote_buffer" if is_buffer else "variable",
                  "shape": list(value.shape), "dtype": value.dtype.name,
                  "per_replica": replicas > 1}
        if not is_buffer and entry in program.layouts:
            common["stored_permutation"] = list(program.layouts[entry])
        data = None
        if weights:
            data = f"tensor/{name}"
            blobs[data] = _bytes(value)
        anchors.append({"name": name, "direction": "input", "programs": [LOAD],
                        "data": data, **common})
        anchors.append({"name": f"save/{name}", "direction": "output", "programs": [SAVE],
                        "data": None, **common})
        state_names.append(name)

    layouts_in = session._input_layouts
    input_names = []
    for layout in layouts_in:
        name = layout.stream.tensor_id
        anchors.append({"name": name, "direction": "input", "kind": "stream",
                        "programs": [MAIN], "data": None, **_stream_fields(layout,
                                                                           per_replica)})
        input_names.append(name)
    output_names, mask_names = [], []
    for stream, written in zip(program.d2h_streams, program.static_written):
        layout = StreamLayout.of(stream, "output", session._slots, session._replicas)
        name = stream.tensor_id
        anchors.append({"name": name, "direction": "output", "kind": "stream",
                        "programs": [MAIN], "data": None,
                        "written": None if written is None else sorted(written),
                        **_stream_fields(layout, per_replica)})
        output_names.append(name)
        if written is None:
            mask_names.append(name)
    _check_unique(anchors)

    constants = []
    for index, constant in enumerate(program.arg_constants):
        # In the executable's layout: constants are no anchors, nobody reads them back.
        value = np.asarray(storage_layout.to_device(_host_constant(constant),
                                                    program.layouts.get(constant)), order="C")
        blob = f"constant/{index}"
        blobs[blob] = _bytes(value)
        constants.append({"blob": blob, "shape": list(value.shape),
                          "dtype": value.dtype.name})

    versions = runtime_versions()
    metadata = {
        "kind": "ipuxl package",
        "versions": {**versions,
                     "export_calling_convention": exported.calling_convention_version},
        "package_hash": package_hash(versions),
        "replication_factor": replicas,
        "num_processes": 1,
        "num_host_transfers": session._slots,
        "x64": bool(session._uses_64bit),
        "platforms": list(platforms),
        "programs": {str(LOAD): "load", str(MAIN): "main", str(SAVE): "save"},
        "program_flow": {"load": [LOAD], "main": [MAIN], "save": [SAVE]},
        "anchors": anchors,
        "executable": {"blob": "executable", "state": state_names,
                       "constants": constants, "inputs": input_names,
                       "updated": list(updated), "outputs": output_names,
                       "masks": mask_names},
    }
    write_package(path, metadata, blobs)
    _LOGGER.debug("Saved Ir %d to %s (%d anchors, platforms %s)", ir.id, os.fspath(path),
                  len(anchors), ", ".join(platforms))


def _check_savable(session: Any) -> None:
    for graph in session._ir.graphs:
        for op in graph.ops:
            if op.name in _CALLBACK_OPS:
                file, line = op.location
                raise ValueError(
                    f"This program cannot be saved as a package: its op {op.name!r} "
                    f"({file}:{line}) calls back into Python while it runs, and a saved "
                    "executable holds no Python. Remove the op (for example a "
                    "print_tensor used for debugging) before saving."
                )
    if session._processes > 1:
        raise ValueError(
            f"This program runs in {session._processes} processes (popdist); a package "
            "holds a single-process program. Save it from a one-process run of the same "
            "program."
        )


def _export(session: Any, flat_step: Any, specs: list) -> tuple[Any, tuple[str, ...]]:
    """``jax.export`` of the step for every platform it lowers on (at least the
    Session's own)."""
    jitted = jax.jit(flat_step, keep_unused=True)
    own = session._device.platform
    candidates = [PLATFORMS, tuple(dict.fromkeys(("cpu", own))), (own,)]
    error: Exception | None = None
    # No source locations in the StableHLO (op names stay): a package does not depend
    # on the folders it was built in, so one program gives the same bytes anywhere.
    with session._x64(), jax_config.traceback_in_locations_limit(0):
        for platforms in candidates:
            try:
                return jax_export.export(jitted, platforms=platforms)(*specs), platforms
            except Exception as failure:  # a platform this program does not lower on
                _LOGGER.debug("export for %s failed: %s", platforms, failure)
                error = failure
    raise ValueError(f"This program cannot be exported with jax.export: {error}") from error


def _state_values(session: Any) -> list[np.ndarray]:
    """Every variable's and remote buffer's current value, in the executable's layout:
    the device's when attached (the freshest), else the host copies'."""
    program = session._program
    if session._attached and session._device_state is not None:
        arrays = session._device_state
    else:
        arrays = session._variables_to_device((*program.variables, *program.remote_buffers))
    # A package holds each variable as the host does (ipuxl.storage_layout).
    perms = [program.layouts.get(v) for v in program.variables]
    return [storage_layout.to_host(np.asarray(array), perm)
            for array, perm in zip(arrays, [*perms, *[None] * len(program.remote_buffers)])]


def _stream_fields(layout: StreamLayout, per_replica: tuple[int, ...]) -> dict[str, Any]:
    return {"shape": [*per_replica, *layout.stream.shape],
            "dtype": layout.device_dtype.name,
            "per_replica": bool(per_replica),
            "host_shape": list(layout.host_shape),
            "device_shape": list(layout.device_shape)}


def _host_constant(constant: Any) -> np.ndarray:
    from ipuxl.lowering import host_to_device_array

    return host_to_device_array(constant._data)


def _bytes(value: np.ndarray) -> memoryview:
    """The bytes of a C-contiguous array (ml_dtypes' arrays, such as bfloat16 ones, have
    no buffer protocol of their own)."""
    return memoryview(value.reshape(-1).view(np.uint8))


def _check_unique(anchors: list[dict[str, Any]]) -> None:
    seen: dict[str, str] = {}
    for anchor in anchors:
        name = anchor["name"]
        if name in seen:
            raise ValueError(
                f"This program cannot be saved: two of its anchors are named {name!r} (a "
                f"{seen[name]} and a {anchor['kind']}). Anchor names must be unique: rename "
                "the stream or variable."
            )
        seen[name] = anchor["kind"]
