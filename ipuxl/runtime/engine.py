"""The executable of a package on one device (Poplar's ``Engine``): compile, hold the
state, run.

``Engine(model, jax_device)`` deserializes the package's ``jax.export`` executable,
checks that the metadata describes it (:func:`ipuxl.runtime.verification.check_executable`)
and compiles it for the device (or loads it from the executable cache when one is
configured, ``POPXL_CACHE_DIR`` or ``cache_dir=``: see :mod:`ipuxl.runtime.compile`). It
then runs the
three programs as array operations, with no callbacks and no anchors (that is
:class:`ipuxl.runtime.Session`'s job):

* ``load(arrays)``: the state (variables, remote buffers) onto the device;
* ``run(inputs)``: one Main step on arrays in the executable's input layout; returns the
  output arrays and, per output stream, the slots written;
* ``save()``: the state back to the host.

A run is all or nothing: the state is replaced only when the step has finished.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import jax
import numpy as np
from jax import export as jax_export

from ipuxl import storage_layout
from ipuxl.runtime.compile import compile_exported, compile_fresh, forget
from ipuxl.runtime.model import Model
from ipuxl.runtime.verification import check_executable

__all__ = ["Engine", "direct_call"]


class Engine:
    """A compiled package on ``device`` (see the module docstring).

    Raises:
        RuntimeError: the package was not lowered for the device's platform.
        PackageError: the metadata does not describe the executable.
    """

    def __init__(self, model: Model, device: jax.Device, cache_dir: str | None = None):
        self.model = model
        self.device = device
        meta = model.metadata.entries()
        self._x64 = bool(meta.get("x64", False))
        executable = meta["executable"]
        self.state_names: list[str] = list(executable["state"])
        anchors = {anchor.name(): anchor for anchor in model.metadata.anchors()}
        # Variables the executable keeps permuted: converted on load and save.
        self._permutations = [anchors[name].storedPermutation() for name in self.state_names]
        self.input_names: list[str] = list(executable["inputs"])
        self.output_names: list[str] = list(executable["outputs"])
        self._updated: list[int] = list(executable["updated"])
        self._masked = {name: index for index, name in enumerate(executable["masks"])}
        platforms = model.metadata.platforms()
        if device.platform not in platforms:
            raise RuntimeError(
                f"The package {model.path} was exported for {', '.join(platforms)}; the "
                f"device {device} is a {device.platform} device. Run it on one of those "
                "(jax.devices('cpu')[0] is always there), or save it again where the "
                "program lowers for this platform."
            )
        with self._mode():
            self.exported = jax_export.deserialize(model.executable_bytes())
            check_executable(model, self.exported)
            self._compiled, self._cache_entry = compile_exported(self.exported, device,
                                                                 cache_dir)
            self._constants = tuple(jax.device_put(value, device)
                                    for value in model.constants())
        self._call = direct_call(self._compiled)
        self._state: tuple[jax.Array, ...] | None = None
        self._lock = threading.Lock()

    def _mode(self) -> contextlib.AbstractContextManager:
        return jax.enable_x64(True) if self._x64 else contextlib.nullcontext()

    @property
    def loaded(self) -> bool:
        """Whether state is on the device (always true for a package without state)."""
        return self._state is not None or not self.state_names

    def load(self, arrays: list[np.ndarray]) -> None:
        """Copy ``arrays`` (one per state entry, in order) to the device."""
        with self._mode():
            state = tuple(jax.device_put(_device_value(a, perm), self.device)
                          for a, perm in zip(arrays, self._permutations))
        with self._lock:
            self._state = state

    def unload(self) -> None:
        with self._lock:
            self._state = None

    def run(self, inputs: list[np.ndarray]) -> tuple[list[np.ndarray], dict[str, Any]]:
        """One Main step. Returns the output arrays (``[slots, (R,) *shape]``, host
        copies) and, for outputs whose written slots are known only at run time, the
        bool mask of written slots by output name."""
        with self._lock:
            state = self._state if self._state is not None else ()
            try:
                results = self._step(state, inputs)
            except Exception:
                if self._cache_entry is None:
                    raise
                # An executable from the cache that does not run here: compile it.
                forget(self._cache_entry)
                self._cache_entry = None
                with self._mode():
                    self._compiled = compile_fresh(self.exported, self.device)
                self._call = direct_call(self._compiled)
                results = self._step(state, inputs)
            self._cache_entry = None  # it ran: keep it
            first = len(self._updated)
            count = len(self.output_names)
            outputs = [np.asarray(r) for r in results[first:first + count]]
            masks = {name: np.asarray(results[first + count + index])
                     for name, index in self._masked.items()}
            if self._updated:
                new_state = list(state)
                for index, value in zip(self._updated, results):
                    new_state[index] = value
                self._state = tuple(new_state)
        return outputs, masks

    def _step(self, state: tuple, inputs: list[np.ndarray]) -> Any:
        if self._x64:
            with jax.enable_x64(True):
                results = self._call(*state, *self._constants, *inputs)
        else:
            results = self._call(*state, *self._constants, *inputs)
        if results:
            results[0].block_until_ready()
        return results

    def save(self) -> list[np.ndarray]:
        """The state on the host (read-only arrays, in order)."""
        with self._lock:
            if self._state is None:
                raise RuntimeError("The Load programs have not run: no state is on the "
                                   "device to save.")
            return [storage_layout.to_host(value, perm) if perm else np.asarray(value)
                    for value, perm in zip(self._state, self._permutations)]


def _device_value(array: np.ndarray, perm: tuple[int, ...] | None) -> np.ndarray:
    """A host state value as the executable takes it. A read-only array (the package's
    data) cannot change later, so the device may share its memory; the caller's writable
    arrays are copied first."""
    if perm is not None:
        return storage_layout.to_device(array, perm)
    return np.array(array) if array.flags.writeable else array


def direct_call(compiled: Any) -> Any:
    """The C++ call of a compiled executable (what ``Compiled.__call__`` forwards to
    after its first call), or the executable itself where JAX does not offer one (a
    private JAX API, so it may go away). ``ipuxl.Session`` runs through it too."""
    try:
        call = compiled._executable.create_cpp_call(compiled._params)
    except Exception:
        call = None
    return call if call is not None else compiled
