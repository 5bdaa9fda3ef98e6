"""Model Runtime's ``Session``: serve a saved package through anchors and callbacks.

A Session loads a package (no Ir, no building code), verifies it, binds to a device
(at once with ``LaunchPolicy.Immediate``, or by ``bindToDevice`` with the default
``Deferred``), and runs its three program groups:

* ``runLoadPrograms()``: each variable's Load anchor gets its data (the package's
  tensor data, a user callback, or nothing) and the state goes to the device;
* ``runMainPrograms()``: one step; each stream anchor's callback is called once per
  host transfer (``num_host_transfers`` times) with a view of that transfer's buffer,
  inputs before the step, outputs (of the slots the step wrote) after it;
* ``runSavePrograms()``: each variable's value comes back through its ``save/<name>``
  output anchor.

The verification rules are the seed's (``docs/runtime.md`` lists them): a package made
by another ipuxl/JAX raises unless ``check_package_hash=False``; a replicated package is
refused (``ModelRunner`` runs replicas); remote-buffer anchors need tensor data; nothing
runs before the session is bound, after ``stop()`` before ``reload()``, or while an
anchor a program needs has no callback.

Example:
    >>> from ipuxl.runtime import Session, SessionConfig, LaunchPolicy
    >>> session = Session("model.ipuxl", SessionConfig(LaunchPolicy.Immediate))  # doctest: +SKIP
    >>> session.setCallbackForAnchor("x", lambda buffer: buffer.fill(1.0))  # doctest: +SKIP
    >>> session.runLoadPrograms(); session.runMainPrograms()  # doctest: +SKIP
"""

from __future__ import annotations

import enum
import logging
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ipuxl.runtime.callbacks import (
    AnchorCallbackPolicy,
    CallbackInfo,
    PopefDataUsagePolicy,
    empty_callback,
)
from ipuxl.runtime.devices import Device, DeviceManager, DeviceWaitConfig
from ipuxl.runtime.engine import Engine
from ipuxl.runtime.model import LOAD, MAIN, PROGRAM_NAMES, Anchor
from ipuxl.runtime.queues import InputQueue, OutputQueue, QueueDisconnected, QueueManager
from ipuxl.runtime.verification import as_model, check_versions

__all__ = ["LaunchPolicy", "Session", "SessionConfig"]

_LOGGER = logging.getLogger(__name__)


class LaunchPolicy(enum.Enum):
    Immediate = 0  # acquire a device and load the executable in the constructor
    Deferred = 1  # the user binds a device with bindToDevice (the default)


@dataclass
class SessionConfig:
    """How a Session starts (Model Runtime's ``SessionConfig``).

    Args:
        policy: ``LaunchPolicy.Deferred`` (default) or ``LaunchPolicy.Immediate``.
        wait_config: how an Immediate session waits for a device held elsewhere.
        check_package_hash: refuse a package saved by another ipuxl/JAX (default True).
        pred_tensor_data: ``predicate(anchor) -> PopefDataUsagePolicy`` for the anchors
            with tensor data in the package (default: use the data).
        cache_dir: (ipuxl) a folder for JAX's persistent compilation cache, so a package
            compiled once loads without compiling (default: ``POPXL_CACHE_DIR``).
        ipus_per_device: (ipuxl) how many virtual IPUs each JAX device offers to an
            Immediate session (default: ``IPUXL_RUNTIME_IPUS_PER_DEVICE``, else no
            limit; see :mod:`ipuxl.runtime.devices`).
    """

    policy: LaunchPolicy = LaunchPolicy.Deferred
    wait_config: DeviceWaitConfig = field(default_factory=DeviceWaitConfig)
    check_package_hash: bool = True
    pred_tensor_data: Callable[[Anchor], PopefDataUsagePolicy] | None = None
    cache_dir: str | None = None
    ipus_per_device: int | None = None


class Session:
    """Serve a package (see the module docstring).

    Args:
        model_or_paths: an ``ipuxl.runtime.Model``, a package path, or a list of one.
        config: a ``SessionConfig``.

    Raises:
        PackageError: the file is not a readable package.
        PackageVersionMismatch: saved by another ipuxl/JAX (``check_package_hash``).
        RuntimeError: the package is replicated, or a remote-buffer anchor has no
            tensor data.
        NoDeviceAvailable: ``Immediate`` and no device could be acquired.
    """

    def __init__(self, model_or_paths: Any, config: SessionConfig | None = None):
        self.model = as_model(model_or_paths)
        self.config = config if config is not None else SessionConfig()
        if not isinstance(self.config, SessionConfig):
            raise TypeError(f"config must be a SessionConfig; got "
                            f"{type(self.config).__name__}.")
        meta = self.model.metadata
        if self.config.check_package_hash:
            check_versions(self.model)
        if meta.replicationFactor() != 1:
            raise RuntimeError(
                f"Session does not run replicated models: the package {self.model.path} has "
                f"replication factor {meta.replicationFactor()}, and a Session serves one "
                "replica. Use ipuxl.runtime.ModelRunner, which runs the replicas."
            )
        self._anchors = {a.name(): a for a in meta.anchors()}
        missing = [a.name() for a in meta.anchors()
                   if a.isInput() and a.useRemoteBuffers() and not a.hasTensorData()]
        if missing:
            raise RuntimeError(
                f"The package {self.model.path} has remote-buffer anchors without tensor "
                f"data: {', '.join(missing)}. Remote buffers are filled from the package; "
                "save it with its data (session.save(path, weights=True))."
            )
        # Input anchors served by the package's data; the others need user callbacks.
        self._popef: set[str] = set()
        for anchor in meta.anchors():
            if anchor.isInput() and anchor.hasTensorData():
                policy = PopefDataUsagePolicy.USE_POPEF_DATA_IF_ANY
                if self.config.pred_tensor_data is not None:
                    policy = self.config.pred_tensor_data(anchor)
                    if not isinstance(policy, PopefDataUsagePolicy):
                        raise TypeError(
                            "SessionConfig.pred_tensor_data must return a "
                            f"PopefDataUsagePolicy; for anchor {anchor.name()!r} it "
                            f"returned {policy!r}.")
                if policy is PopefDataUsagePolicy.USE_POPEF_DATA_IF_ANY:
                    self._popef.add(anchor.name())
        self._callbacks: dict[str, Callable[[np.ndarray], None]] = {}
        self._lock = threading.Lock()  # anchors and callbacks
        self._run_lock = threading.RLock()  # programs, binding
        self._device: Device | None = None
        self._owned_device: Device | None = None
        self._engine: Engine | None = None
        self._engines: dict[Any, Engine] = {}
        self._stopped = False
        self._closed = False
        self._interrupted = "stopped"  # why the queues were last disconnected
        self._needs_save = False
        self._queues: QueueManager | None = None
        self._finalizer: Any = None
        if self.config.policy is LaunchPolicy.Immediate:
            device = DeviceManager(self.config.ipus_per_device).getDevice(
                self.model, self.config.wait_config)
            self._owned_device = device
            self._finalizer = weakref.finalize(self, device.detach)
            try:
                self._bind(device)
            except BaseException:
                device.detach()  # no Session was made: give the device back now
                raise

    # ----------------------------------------------------------------- devices
    def bindToDevice(self, device: Device) -> None:
        """Bind to ``device`` and load the executable onto it (compiling it for that
        device once). A session that ran Main programs since its last Load or Save runs
        its Save programs first (when every Save anchor has a callback). The state must
        then be loaded again (``runLoadPrograms``).

        Raises:
            TypeError: ``device`` is not an ``ipuxl.runtime.Device``.
            RuntimeError: the device was detached, or the package has no executable for
                its platform.
        """
        if not isinstance(device, Device):
            raise TypeError(
                f"bindToDevice takes a Device from ipuxl.runtime.DeviceManager()."
                f"getDevice(model); got {type(device).__name__}.")
        if not device.isAttached():
            raise RuntimeError(f"{device} was detached; get a device from "
                               "DeviceManager().getDevice(model).")
        with self._run_lock:
            self._save_before_unbinding()
            self._bind(device)

    def _bind(self, device: Device) -> None:
        engine = self._engines.get(device.jax_device)
        if engine is None:
            engine = Engine(self.model, device.jax_device, self.config.cache_dir)
            self._engines[device.jax_device] = engine
        engine.unload()
        self._device, self._engine = device, engine
        self._stopped, self._closed, self._needs_save = False, False, False

    def unloadFromDevice(self) -> None:
        """Unload from the bound device (running the Save programs first, as
        ``bindToDevice`` does). ``reload()`` binds to it again. Like ``stop()``, it
        disconnects the queues first, so a program waiting on a queue in another
        thread raises instead of holding the session for ever.

        Raises:
            RuntimeError: the session is not bound to a device.
        """
        if self._engine is None:
            raise RuntimeError("unloadFromDevice: the session is not bound to a device "
                               "(bindToDevice first).")
        self._disconnect_queues("unloaded")
        with self._run_lock:
            if self._engine is None:  # another thread unloaded it meanwhile
                raise RuntimeError("unloadFromDevice: the session is not bound to a "
                                   "device (bindToDevice first).")
            self._save_before_unbinding()
            self._engine.unload()
            self._engine = None

    def reload(self) -> None:
        """Bind again to the device the session was last bound to and reload the
        executable (after ``unloadFromDevice`` or ``stop``). The state must be loaded
        again.

        Raises:
            RuntimeError: the session was never bound to a device.
        """
        with self._run_lock:
            if self._device is None:
                raise RuntimeError("reload: the session was never bound to a device; call "
                                   "bindToDevice(device) first.")
            if not self._device.isAttached():
                raise RuntimeError(f"reload: {self._device} was detached; bind to another "
                                   "device with bindToDevice.")
            self._bind(self._device)

    def stop(self) -> None:
        """Stop the running program: the device is left in an undefined state (its
        state is dropped) and every queue is disconnected, so a program waiting on a
        queue raises. ``reload()`` makes the session usable again. Does nothing when
        the session is not bound."""
        self._stop("stopped")

    def _stop(self, why: str) -> None:
        engine = self._engine
        if engine is None:
            _LOGGER.debug("stop: the session is not bound to a device; nothing to stop")
            return
        self._stopped = True
        self._disconnect_queues(why)
        engine.unload()

    def _disconnect_queues(self, why: str) -> None:
        """Disconnect the QueueManager's queues (a program waiting on one raises) and
        unbind their anchors, which have no callback until new queues exist."""
        with self._lock:
            queues, self._queues = self._queues, None
            if queues is not None:
                self._interrupted = why
                for queue in (*queues.inputs.values(), *queues.outputs.values()):
                    if self._callbacks.get(queue.anchor.name()) == queue.transfer:
                        del self._callbacks[queue.anchor.name()]
        if queues is not None:
            queues.disconnect()

    def close(self) -> None:
        """Unload, and give back a device the session acquired itself (Immediate).
        Programs then refuse to run until ``bindToDevice`` binds the session again."""
        self._stop("closed")
        with self._run_lock:
            self._engine = None
            self._closed = True
            if self._owned_device is not None:
                self._owned_device.detach()
                self._owned_device = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def device(self) -> Device | None:
        """The device the session is bound to (None before binding)."""
        return self._device if self._engine is not None else None

    # ----------------------------------------------------------------- anchors
    def getInputAnchors(self) -> list[Anchor]:
        """Every input anchor, including those the package's data serves."""
        return [a for a in self._anchors.values() if a.isInput()]

    def getOutputAnchors(self) -> list[Anchor]:
        return [a for a in self._anchors.values() if a.isOutput()]

    def getUserInputAnchors(self) -> list[Anchor]:
        """The input anchors that need a user callback (no package data serves them)."""
        with self._lock:
            return [a for a in self.getInputAnchors() if a.name() not in self._popef]

    def getUserOutputAnchors(self) -> list[Anchor]:
        """The output anchors (each needs a callback, empty or not, to be run)."""
        return self.getOutputAnchors()

    def anchorsNotConnectedToCallbacks(self) -> list[Anchor]:
        """The user anchors that have no callback yet."""
        with self._lock:
            return [a for a in self._anchors.values()
                    if a.name() not in self._popef and a.name() not in self._callbacks]

    def errorIfAnchorsAreNotConnectedToCallbacks(self) -> None:
        """Raise if any user anchor has no callback.

        Raises:
            RuntimeError: naming every anchor without a callback.
        """
        missing = self.anchorsNotConnectedToCallbacks()
        if missing:
            raise RuntimeError(_unconnected_message(missing))

    def setCallbackForAnchor(self, name: str, callback: Callable[[np.ndarray], None]
                             ) -> None:
        """Serve anchor ``name`` with ``callback(buffer)``, called once per transfer with
        a writable view of the transfer's buffer (an input callback fills it). A
        callback replaces the package's data for that anchor.

        Raises:
            KeyError: no anchor has that name.
            TypeError: ``callback`` is not callable.
        """
        anchor = self._anchor(name)
        if not callable(callback):
            raise TypeError(f"The callback for anchor {name!r} must be callable; got "
                            f"{type(callback).__name__}.")
        with self._lock:
            self._callbacks[anchor.name()] = callback
            self._popef.discard(anchor.name())

    def setUserInputHandler(self, factory: Callable[[CallbackInfo], Any],
                            predicate: Callable[[Anchor], AnchorCallbackPolicy] | None = None,
                            skip_connected: bool = True) -> None:
        """Bind callbacks made by ``factory(CallbackInfo)`` to the input anchors the
        ``predicate`` chooses (default: ``BIND_USER_CB`` for anchors without package
        data, ``SKIP_CB`` for those with it). With ``skip_connected``, anchors that
        already have a callback are left alone.

        As in Model Runtime, the executable is loaded if needed: a session that was
        unloaded (``unloadFromDevice``) or stopped is bound again to its device, as
        ``reload()`` does. A session that was never bound keeps the handler's callbacks
        for its first ``bindToDevice``.

        Raises:
            TypeError: the predicate returned something other than an
                ``AnchorCallbackPolicy``, or the factory a non-callable.
        """
        self._set_handler(self.getInputAnchors(), factory, predicate, skip_connected)

    def setUserOutputHandler(self, factory: Callable[[CallbackInfo], Any],
                             predicate: Callable[[Anchor], AnchorCallbackPolicy] | None = None,
                             skip_connected: bool = True) -> None:
        """``setUserInputHandler`` for the output anchors."""
        self._set_handler(self.getOutputAnchors(), factory, predicate, skip_connected)

    def _set_handler(self, anchors: list[Anchor], factory: Any, predicate: Any,
                     skip_connected: bool) -> None:
        with self._run_lock:  # Model Runtime: load the executable if needed
            if (self._device is not None and self._device.isAttached()
                    and (self._engine is None or self._stopped)):
                self.reload()
        bindings = {}
        for anchor in anchors:
            name = anchor.name()
            if skip_connected and name in self._callbacks:
                continue
            if predicate is None:
                policy = (AnchorCallbackPolicy.SKIP_CB if name in self._popef
                          else AnchorCallbackPolicy.BIND_USER_CB)
            else:
                policy = predicate(anchor)
            if not isinstance(policy, AnchorCallbackPolicy):
                raise TypeError(f"A handler's predicate must return an AnchorCallbackPolicy; "
                                f"for anchor {name!r} it returned {policy!r}.")
            if policy is AnchorCallbackPolicy.BIND_USER_CB:
                callback = factory(CallbackInfo(anchor))
                if not callable(callback):
                    raise TypeError(f"The callback factory returned {callback!r} for anchor "
                                    f"{name!r}; it must return a callable.")
                bindings[name] = callback
            elif policy is AnchorCallbackPolicy.BIND_EMPTY_CB:
                bindings[name] = empty_callback
        with self._lock:
            self._callbacks.update(bindings)
            self._popef.difference_update(bindings)

    def _anchor(self, name: str) -> Anchor:
        anchor = self._anchors.get(name)
        if anchor is None:
            raise KeyError(f"The package has no anchor {name!r}; its anchors are "
                           f"{sorted(self._anchors)}.")
        return anchor

    # ----------------------------------------------------------------- queues
    def createQueueManager(self) -> QueueManager:
        """The session's QueueManager (made on first call, and again after ``stop()``):
        one queue per user anchor of the Main programs, each anchor's callback bound to
        its queue. A callback set later on one of those anchors replaces its queue."""
        with self._lock:
            if self._queues is None:
                main = set(self.model.metadata.programFlow().main())
                inputs = [a for a in self._anchors.values() if a.isInput()
                          and main & set(a.programs()) and a.name() not in self._popef]
                outputs = [a for a in self._anchors.values() if a.isOutput()
                           and main & set(a.programs())]
                self._queues = QueueManager(inputs, outputs)
                for queue in (*self._queues.inputs.values(), *self._queues.outputs.values()):
                    self._callbacks[queue.anchor.name()] = queue.transfer
            return self._queues

    # ----------------------------------------------------------------- programs
    def runLoadPrograms(self) -> None:
        """Run the Load programs: the state anchors' data to the device."""
        self.runPrograms(self.model.metadata.programFlow().load())

    def runMainPrograms(self) -> None:
        """Run the Main programs: one step, its streams served by their callbacks."""
        self.runPrograms(self.model.metadata.programFlow().main())

    def runSavePrograms(self) -> None:
        """Run the Save programs: the state back through the ``save/<name>`` anchors."""
        self.runPrograms(self.model.metadata.programFlow().save())

    def runPrograms(self, numbers: Iterable[int]) -> None:
        """Run the programs ``numbers`` in order.

        Raises:
            ValueError: a number that is not a program of the package.
            RuntimeError: not bound, stopped, Main before Load, or an anchor the program
                moves has no callback; or a callback raised (the message says whether
                the program ran).
        """
        numbers = list(numbers)
        bad = [n for n in numbers if isinstance(n, bool)
               or not isinstance(n, (int, np.integer)) or n not in PROGRAM_NAMES]
        if bad:
            raise ValueError(f"The package has programs {sorted(PROGRAM_NAMES)} "
                             f"({'; '.join(f'{k}: {v}' for k, v in PROGRAM_NAMES.items())}); "
                             f"got {bad}.")
        with self._run_lock:
            for number in numbers:
                engine = self._check_bound(f"run program {number}")
                self._check_connected(number)
                if number == LOAD:
                    self._run_load(engine)
                elif number == MAIN:
                    self._run_main(engine)
                else:
                    self._run_save(engine)

    def _check_bound(self, what: str) -> Engine:
        if self._closed:
            raise RuntimeError(
                f"Cannot {what}: the session was closed, and its device given back if it "
                "owned one. Create a new Session, or bind this one again with "
                "session.bindToDevice(DeviceManager().getDevice(session.model)).")
        if self._device is not None and not self._device.isAttached():
            raise RuntimeError(
                f"Cannot {what}: the session's {self._device} was detached (given back). "
                "Bind it to an attached device with session.bindToDevice("
                "DeviceManager().getDevice(session.model)).")
        if self._stopped:
            raise RuntimeError(f"Cannot {what}: the session was stopped, which leaves the "
                               "device in an undefined state. Call reload() first.")
        if self._engine is None:
            raise RuntimeError(
                f"Cannot {what}: the session is not bound to a device. Bind it with "
                "session.bindToDevice(DeviceManager().getDevice(session.model)), or create "
                "it with SessionConfig(LaunchPolicy.Immediate).")
        return self._engine

    def _check_connected(self, number: int) -> None:
        with self._lock:
            missing = [a for a in self._anchors.values() if number in a.programs()
                       and a.name() not in self._popef and a.name() not in self._callbacks]
        if missing:
            raise RuntimeError(_unconnected_message(missing, number))

    def _call(self, name: str, callback: Any, buffer: np.ndarray, when: str) -> None:
        try:
            callback(buffer)
        except QueueDisconnected as error:
            raise RuntimeError(f"The session was {self._interrupted} while the program "
                               f"waited for anchor {name!r}: {error}") from error
        except Exception as error:
            raise RuntimeError(f"The callback of anchor {name!r} raised {error!r}; "
                               f"{when}.") from error

    def _run_load(self, engine: Engine) -> None:
        arrays = []
        for name in engine.state_names:
            anchor = self._anchors[name]
            if name in self._popef:
                arrays.append(self.model.tensor_data(anchor))
                continue
            info = anchor.tensorInfo()
            buffer = np.zeros(info.shape(), info.numpyDType())
            self._call(name, self._callbacks[name], buffer,
                       "the Load program did not run (the device state is unchanged)")
            arrays.append(buffer)
        engine.load(arrays)
        self._needs_save = False

    def _run_main(self, engine: Engine) -> None:
        if not engine.loaded:
            raise RuntimeError(
                "Cannot run the Main programs: the state (weights) is not on the device. Run "
                "the Load programs first (session.runLoadPrograms()).")
        slots = self.model.metadata.numHostTransfers()
        inputs = []
        for name in engine.input_names:
            anchor = self._anchors[name]
            info = anchor.tensorInfo()
            callback = self._callbacks[name]
            # A queue fills every transfer; other callbacks may leave zeros in place.
            fill = np.empty if isinstance(getattr(callback, "__self__", None),
                                          InputQueue) else np.zeros
            buffer = fill((slots, *info.shape()), info.numpyDType())
            for slot in range(slots):
                self._call(name, callback, buffer[slot],
                           "the Main program did not run (the device state is unchanged)")
            inputs.append(buffer.reshape(anchor.hostShape()))
        outputs, masks = engine.run(inputs)
        self._needs_save = True
        for name, result in zip(engine.output_names, outputs):
            anchor = self._anchors[name]
            written = anchor.writtenSlots()
            if written is None:
                written = np.flatnonzero(masks[name]).tolist()
            callback = self._callbacks[name]
            # A queue only copies out of the buffer; user callbacks get writable views.
            buffer = (result if isinstance(getattr(callback, "__self__", None), OutputQueue)
                      else np.array(result))
            for slot in written:
                self._call(name, callback, buffer[slot],
                           "the Main program had run (the device state is updated)")

    def _run_save(self, engine: Engine) -> None:
        values = engine.save()
        self._needs_save = False
        for name, value in zip(engine.state_names, values):
            self._call(f"save/{name}", self._callbacks[f"save/{name}"], np.array(value),
                       "the Save program had run")

    def _save_before_unbinding(self) -> None:
        """The seed's rule: leaving a device after Main programs ran runs the Save
        programs, when every Save anchor has a callback to take the data."""
        if self._engine is None or not self._needs_save or self._stopped:
            return
        save = self.model.metadata.programFlow().save()
        with self._lock:
            ready = all(a.name() in self._callbacks for a in self._anchors.values()
                        if set(save) & set(a.programs()))
        if ready:
            self.runPrograms(save)
        else:
            _LOGGER.info("Leaving the device without running the Save programs: not every "
                         "Save anchor has a callback.")


def _unconnected_message(missing: list[Anchor], program: int | None = None) -> str:
    names = ", ".join(repr(a.name()) for a in missing)
    where = "" if program is None else f" of program {program} ({PROGRAM_NAMES[program]})"
    return (
        f"These anchors{where} have no callback: {names}. Give each one with "
        "session.setCallbackForAnchor(name, callback), a handler "
        "(setUserInputHandler/setUserOutputHandler), or session.createQueueManager()."
    )
