"""``ModelRunner``: a package as a function from input arrays to output arrays.

The high-level form of Model Runtime: it acquires a device, loads the executable, runs
the Load programs with the package's tensor data, and then each ``execute(inputs)`` is
one Main run. Inputs and outputs are dicts keyed by anchor name (for a PopXL program,
the stream's name) in the layout ``Session.run`` uses: ``[num_host_transfers,]
[replicas,] *shape``, with size-1 leading dimensions left out. A replicated package
runs all its replicas in each call (on one device: the package maps them with vmap).

Example:
    >>> runner = ModelRunner("model.ipuxl")  # doctest: +SKIP
    >>> runner.execute({"x": x})["y"]  # doctest: +SKIP
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ipuxl.host_values import cast, check_numbers
from ipuxl.runtime.devices import Device, DeviceManager, DeviceWaitConfig
from ipuxl.runtime.engine import Engine
from ipuxl.runtime.model import Anchor
from ipuxl.runtime.verification import as_model, check_versions

__all__ = ["ModelRunner"]


class ModelRunner:
    """Run a package by anchor names (see the module docstring).

    Args:
        model_or_path: a package path or an ``ipuxl.runtime.Model``.
        weights: values for variables the package holds no data for (saved with
            ``weights=False``), or to use instead of its data: ``{name: array}``.
        wait_config: how to wait for a device held elsewhere.
        check_package_hash: refuse a package saved by another ipuxl/JAX (default).
        cache_dir: a folder for JAX's persistent compilation cache.
        device: a ``Device`` from ``DeviceManager().getDevice(model)`` to run on (it stays
            the caller's: ``close`` does not detach it). Default: the runner acquires
            one (JAX's default backend first) and gives it back on ``close``.
        ipus_per_device: how many virtual IPUs each JAX device offers when the runner
            acquires its device (default: ``IPUXL_RUNTIME_IPUS_PER_DEVICE``, else no
            limit; see :mod:`ipuxl.runtime.devices`).

    Raises:
        PackageError, PackageVersionMismatch, NoDeviceAvailable: as ``Session``.
        ValueError: a variable has neither package data nor a value in ``weights``.
    """

    def __init__(self, model_or_path: Any, *, weights: Mapping[str, Any] | None = None,
                 wait_config: DeviceWaitConfig | None = None, check_package_hash: bool = True,
                 cache_dir: str | None = None, device: Device | None = None,
                 ipus_per_device: int | None = None):
        self.model = as_model(model_or_path)
        if check_package_hash:
            check_versions(self.model)
        self._anchors = {a.name(): a for a in self.model.metadata.anchors()}
        if device is not None and not isinstance(device, Device):
            raise TypeError(f"device must be a Device from ipuxl.runtime.DeviceManager()."
                            f"getDevice(model); got {type(device).__name__}.")
        self._owned = device is None
        self._device = device or DeviceManager(ipus_per_device).getDevice(self.model,
                                                                           wait_config)
        try:
            self._engine = Engine(self.model, self._device.jax_device, cache_dir)
            self._engine.load(self._state(dict(weights or {})))
        except BaseException:
            if self._owned:
                self._device.detach()
            raise
        self._inputs = [self._anchors[n] for n in self._engine.input_names]
        self._outputs = [self._anchors[n] for n in self._engine.output_names]
        self._lock = threading.Lock()  # runs, and closing
        self._pool_lock = threading.Lock()  # the worker thread of executeAsync
        self._pool: ThreadPoolExecutor | None = None
        self._closing = False  # executeAsync refuses new calls
        self._closed = False  # everything refuses

    def _state(self, weights: dict[str, Any]) -> list[np.ndarray]:
        unknown = set(weights) - set(self._engine.state_names)
        if unknown:
            raise ValueError(f"weights names {sorted(unknown)}, which are not variables of "
                             f"the package; its variables are {self._engine.state_names}.")
        arrays = []
        for name in self._engine.state_names:
            anchor = self._anchors[name]
            if name in weights:
                arrays.append(_checked(anchor, weights[name], anchor.tensorInfo().shape(),
                                       "weight"))
            elif anchor.hasTensorData():
                arrays.append(self.model.tensor_data(anchor))
            else:
                raise ValueError(
                    f"The package {self.model.path} holds no data for variable {name!r} "
                    "(it was saved with weights=False): pass its value, "
                    f"ModelRunner(path, weights={{{name!r}: array}}).")
        return arrays

    def getExecuteInputs(self) -> list[Anchor]:
        """The anchors ``execute`` takes, in order."""
        return list(self._inputs)

    def getExecuteOutputs(self) -> list[Anchor]:
        """The anchors ``execute`` returns, in order."""
        return list(self._outputs)

    def execute(self, inputs: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
        """One Main run. Returns a new array per output anchor (slots the run does not
        write are zero).

        Raises:
            TypeError: ``inputs`` is not a mapping, or an input is not numbers (None, a
                string) or not of a float8 anchor's format.
            ValueError: missing or unexpected names, or an array of the wrong shape, or
                values that would change in the anchor's dtype (``ipuxl.host_values.cast``).
            RuntimeError: the runner was closed, or its device detached.
        """
        self._check_open("execute")
        inputs = {} if inputs is None else inputs
        if not isinstance(inputs, Mapping):
            raise TypeError(f"execute takes a dict of arrays by anchor name; got "
                            f"{type(inputs).__name__}.")
        expected = {a.name() for a in self._inputs}
        if inputs.keys() != expected:
            missing, extra = expected - inputs.keys(), inputs.keys() - expected
            raise ValueError(
                f"execute needs exactly the input anchors {sorted(expected)}"
                + (f"; missing {sorted(missing)}" if missing else "")
                + (f"; unexpected {sorted(map(str, extra))}" if extra else "") + ".")
        arrays = [_checked(a, inputs[a.name()], a.hostShape(), "input")
                  for a in self._inputs]
        with self._lock:
            self._check_open("execute")
            outputs, masks = self._engine.run(arrays)
        result = {}
        for anchor, value in zip(self._outputs, outputs):
            host_shape = anchor.hostShape()
            written = anchor.writtenSlots()
            if written is None:
                written = np.flatnonzero(masks[anchor.name()]).tolist()
            if len(written) == value.shape[0]:
                result[anchor.name()] = np.array(value).reshape(host_shape)
            else:
                full = np.zeros_like(value)
                full[written] = value[written]
                result[anchor.name()] = full.reshape(host_shape)
        return result

    def executeAsync(self, inputs: Mapping[str, Any] | None = None) -> Future:
        """``execute`` on the runner's worker thread; the future's result is its outputs.
        Calls run in the order they were made.

        Raises:
            RuntimeError: the runner was closed (or is closing), or its device detached.
        """
        with self._pool_lock:
            self._check_open("executeAsync", closing=True)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="ipuxl-runner")
            return self._pool.submit(self.execute, inputs)

    def save(self) -> dict[str, np.ndarray]:
        """Run the Save programs: every variable's current value by name (``[R, ...]``
        for a replicated package).

        Raises:
            RuntimeError: the runner was closed, or its device detached.
        """
        with self._lock:
            self._check_open("save")
            values = self._engine.save()
        return {name: np.array(value) for name, value in zip(self._engine.state_names,
                                                             values)}

    def close(self) -> None:
        """Finish queued ``executeAsync`` calls, drop the state and give the device back.
        Every later call refuses (``RuntimeError``); closing again does nothing."""
        with self._pool_lock:
            self._closing = True
            pool = self._pool
        if pool is not None:
            pool.shutdown(wait=True)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._engine.unload()
            if self._owned:
                self._device.detach()

    def _check_open(self, what: str, closing: bool = False) -> None:
        if self._closed or (closing and self._closing):
            raise RuntimeError(
                f"ModelRunner.{what}: the runner was closed (close(), or the end of its "
                "with block), and its device given back. Create a new ModelRunner("
                f"{self.model.path!r}) to run the package again.")
        if not self._device.isAttached():
            raise RuntimeError(
                f"ModelRunner.{what}: the runner's {self._device} was detached (given back) "
                "by its owner. Create a new ModelRunner, with device= an attached device "
                "(DeviceManager().getDevice(model)) or none.")

    def __enter__(self) -> ModelRunner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _checked(anchor: Anchor, value: Any, shape: tuple[int, ...], role: str) -> np.ndarray:
    """``value`` as an array of ``anchor``'s dtype and ``shape``, converted by
    ``ipuxl.host_values.cast`` (which refuses any conversion that changes a value)."""
    dtype = anchor.tensorInfo().numpyDType()
    what = f"ModelRunner {role} {anchor.name()!r} ({dtype.name}{list(shape)})"
    if isinstance(value, np.ndarray):
        array = value
    else:
        try:
            array = np.asarray(value)
        except (TypeError, ValueError) as error:  # ragged lists, for example
            raise TypeError(
                f"{what}: host data must be an array of numbers; got a "
                f"{type(value).__name__} that is not one ({error}). Pass a NumPy array of "
                f"shape {list(shape)}.") from None
    float8 = dtype.kind == "V" and dtype.itemsize == 1
    if float8 and array.dtype.names is not None and array.dtype.itemsize == 1:
        array = array.view(np.uint8).view(dtype)  # PopXL's host float8: the same bytes
    check_numbers(array, what)
    if array.shape != shape:
        raise ValueError(f"{what}: takes an array of shape {list(shape)}; got shape "
                         f"{list(array.shape)}.")
    if array.dtype == dtype:
        return array
    if float8:
        raise TypeError(
            f"{what}: takes float8 data; got {array.dtype.name}. Convert it first, with "
            "ipuxl.fp8_utils.host_pow2scale_cast_to_fp8 (PopXL's host float8) or "
            f"array.astype(ml_dtypes.{dtype.name}).")
    return cast(array, dtype, what, f"Pass {dtype.name} data.")
