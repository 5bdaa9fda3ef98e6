"""Session: compile an Ir once, keep its variables on the device, run it.

A Session holds one device copy of each variable and one host copy, which is a cache of the
device values: ``get_tensor_data`` transfers from the device only when a run may have
changed them. The transfer rules and error messages are PopXL's; see ``docs/session.md``.

A run is all or nothing: the device state is replaced only when the whole run succeeded,
so a run that fails (or is interrupted with Ctrl-C) leaves every variable at the value of
the last finished run. That is why the state is not donated to the executable: the old
buffers must stay alive until the new ones exist. Every public method takes the Session's
lock, so one Session can be shared by threads (their calls are serialised).

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable(np.float32(1), name="x")
    ...     x_updated = ops.var_updates.accumulate_(x, popxl.constant(np.float32(2)))
    ...     out = popxl.d2h_stream((), popxl.float32, "out")
    ...     ops.host_store(out, x_updated)
    >>> with popxl.Session(ir, "cpu") as session:
    ...     outputs = session.run()
    >>> float(outputs[out]), float(session.get_tensor_data(x))
    (3.0, 3.0)
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ipuxl import (
    devices,
    host_buffers,
    profiling,
    replication,
    session_options,
    sim,
    storage_layout,
)
from ipuxl.dot import write_checkpoint
from ipuxl.host_callbacks import has_callbacks, interrupts_noted
from ipuxl.ir import Ir
from ipuxl.lowering import lower_ir
from ipuxl.progress import Progress
from ipuxl.remote_buffer import remote_slot
from ipuxl.replica_sharding import shards_of
from ipuxl.runtime.engine import direct_call
from ipuxl.session_compile import DEVICE_KINDS, SessionCompile, device_kind
from ipuxl.session_data import SessionData
from ipuxl.session_export import export
from ipuxl.session_failure import SessionFailure
from ipuxl.sim import device as sim_device
from ipuxl.sim import oom as sim_oom
from ipuxl.streams import DeviceToHostStream, HostToDeviceStream
from ipuxl.tensor import HostScalarTensor, Variable
from ipuxl.verify import verify_ir

__all__ = ["Session", "TransferCounts", "export", "h2dStreamBufferMaps", "d2hStreamBufferMaps"]

# PopXL's names for what run takes and returns: host data per input stream, host arrays
# per output stream.
h2dStreamBufferMaps = Mapping[HostToDeviceStream, HostScalarTensor]  # noqa: N816
d2hStreamBufferMaps = Mapping[DeviceToHostStream, np.ndarray]  # noqa: N816

_LOGGER = logging.getLogger(__name__)
# The Session's phases, as PopART's session logs them (see ipuxl.logs).
_LOG = logging.getLogger("popart.session")

_NOT_ATTACHED = (
    "Must be attached to device before calling a runtime function. Put the call inside a "
    "`Session` context, for example `with session: session.run()`."
)


@dataclass
class TransferCounts:
    """How many whole-weight transfers a Session made (tests pin PopXL's rules with it)."""

    weights_from_host: int = 0
    weights_to_host: int = 0


class Session(SessionCompile, SessionData, SessionFailure):
    """Compile ``ir`` for ``device_desc`` and run it.

    Args:
        ir: the program. Later edits to it do not change this Session (a warning says so).
        device_desc: ``"cpu"`` (XLA on the CPU, one device), ``"ipu_model"`` (the IPU
            machine model: the program runs on JAX's default device and
            :attr:`report` estimates its IPU memory and cycles), a device from
            ``popart.DeviceManager().createIpuModelDevice({...})``, ``"ipu_hw"`` (not
            available in ipuxl), or (ipuxl only) a ``jax.Device``, such as
            ``jax.devices("gpu")[0]``: the program runs on that device, with no IPU model.
        weights_to_host_on_exit: copy the weights to the host when the outermost
            ``with session:`` block exits normally.
        donate_variables: (ipuxl only) let XLA update the variables in place, which saves
            a copy of the state per run (a few percent of a large optimiser step) but
            gives up the all-or-nothing guarantee: a run that fails after starting puts the
            variables back to their last host copy (the error says which updates were
            lost). Off by default.
        replication_mode: (ipuxl only) how replicas run when ``ir`` is replicated:
            ``"vmap"`` (batched on one device), ``"shard_map"`` (one device per replica),
            or None: ``IPUXL_REPLICATION_MODE`` if set, else ``shard_map`` when JAX sees
            enough devices. See :mod:`ipuxl.replication`.
        allow_out_of_memory: on the IPU model, what a program that does not fit does:
            False raises ``popart.OutOfMemoryException`` here; True builds the Session
            (with its :attr:`report`) but ``run`` raises; ``"run"`` runs anyway. None:
            ``debug.allowOutOfMemory`` of the Ir's session options' ``engineOptions``
            (``ir._pb_ir.getSessionOptions()``), else of ``POPLAR_ENGINE_OPTIONS``, else
            False.

    Building logs its phases at DEBUG on the ``"popart.session"`` logger (see
    :mod:`ipuxl.logs`) and, when it takes over 2 s, shows them on a progress line on
    stderr (see :mod:`ipuxl.progress`). It writes PopART's ``Final`` dot checkpoint when
    enabled (:mod:`ipuxl.dot`), and, with engine caching on, loads the executable from or
    writes it to ``cachePath`` (:mod:`ipuxl.executable_cache`).

    Raises:
        TypeError: ``ir`` is not an Ir.
        RuntimeError: the Ir has no ops, or ``"ipu_hw"`` was asked for.
        ValueError: an unknown device, or several devices needed on ``"cpu"``.
        MemoryError: the variables and outputs cannot fit in this machine's memory.
        popart.OutOfMemoryException: on the IPU model, the program does not fit in tile
            memory (the message begins with Poplar's "Out of memory on tile" line).
        popart_exception: the Ir is invalid (for example an inplacing ambiguity).

    A build that fails leaves ``ir`` as it was: it can still be edited and built again.
    """

    def __init__(self, ir: Ir, device_desc: Any = "cpu", weights_to_host_on_exit: bool = True,
                 *, donate_variables: bool = False, replication_mode: str | None = None,
                 allow_out_of_memory: bool | str | None = None, _compile: bool = True):
        if not isinstance(ir, Ir):
            hint = ("Pass the Ir the graph belongs to: `Session(graph.ir, ...)`."
                    if hasattr(ir, "ir") and isinstance(getattr(ir, "ir", None), Ir)
                    else "Build the program in a `popxl.Ir()` and pass that.")
            raise TypeError(
                f"Session takes an Ir as its first argument; got {type(ir).__name__}: {ir!r}. "
                + hint
            )
        # The kind _set_device must match: the one asked for, even where
        # POPXL_OFFLINE_DEVICE stands in for it, else the stand-in's.
        requested = device_kind(device_desc)
        device_desc = os.environ.get("POPXL_OFFLINE_DEVICE") or device_desc
        self._device_kind = requested if requested in DEVICE_KINDS else device_kind(device_desc)
        self._lock = threading.Lock()
        self._ir = ir
        self._donate = bool(donate_variables)
        self.weights_to_host_on_exit = weights_to_host_on_exit and not ir._read_only_memmap
        if weights_to_host_on_exit and ir._read_only_memmap:
            _LOGGER.info(
                "The Ir %s has a read-only memory-mapped variable: weights_to_host_on_exit is "
                "set to False, so leaving `with session:` does not copy weights to the host.",
                ir.id,
            )
        if not any(graph.ops for graph in ir.graphs):
            raise RuntimeError(
                f"The Ir {ir.id} has no graphs. The graphs may have all been optimised to "
                "nothing: add ops (for example a `host_store` of a result) before building "
                "a Session."
            )
        options = session_options.options_of(ir)
        allow_out_of_memory = session_options.apply_to_session(options, allow_out_of_memory)
        with Progress("Session") as progress:
            _phase(progress, "verify", "checking Ir %d", ir.id)
            verify_ir(ir)
            write_checkpoint(ir, "Final")  # PopART's last checkpoint of a prepared Ir
            # The IPU model: estimate memory and cycles first (the out-of-memory verdict comes
            # before any compile, as Poplar's does).
            self._report, self._refuse_run = None, False
            if sim_device.is_ipu_model(device_desc):
                _phase(progress, "IPU model", "estimating memory and cycles")
                mode = sim_oom.allow_oom_mode(allow_out_of_memory)
                sim.check_stream_buffers(ir, ir.num_host_transfers)
                self._report = sim.estimate(
                    ir, session_options.model_device(options, device_desc, ir))
                self._refuse_run = sim_oom.check_fits(self._report, mode)
                device_desc = "ipu_model"
            self._device = devices.select_device(device_desc, devices.devices_needed(ir))
            self._device_desc = device_desc
            self._version = ir._version
            self._slots = ir.num_host_transfers
            # Host arrays hold this process's replicas; the device holds all of them (they
            # differ only when several processes run the program: see ipuxl.popdist).
            self._replicas = ir.instance_replication_factor
            self._global_replicas = ir.replication_factor
            self._processes = ir._topology.num_instances if ir._topology is not None else 1
            self._mode, self._mesh = None, None
            if self._global_replicas > 1:
                available = jax.devices(self._device.platform)
                if self._processes > 1 and replication_mode not in (None, "shard_map"):
                    raise ValueError(
                        f"A program run by {self._processes} processes needs replication mode "
                        f"'shard_map' (one device per replica across the processes); got "
                        f"{replication_mode!r}."
                    )
                self._mode = replication.choose_mode(
                    "shard_map" if self._processes > 1 else replication_mode,
                    self._global_replicas, available)
                if self._mode == "shard_map":
                    self._mesh = replication.replica_mesh(available, self._global_replicas)
            _phase(progress, "lower", "Ir %d to one JAX function", ir.id)
            self._program = lower_ir(ir)
            self._uses_64bit = self._program.uses_64bit
            self._has_callbacks = has_callbacks(ir)
            program = self._program
            self._input_layouts = tuple(
                host_buffers.StreamLayout.of(s, "input", self._slots, self._replicas)
                for s in program.h2d_streams)
            devices.check_host_memory(program, self._slots, self._global_replicas, self._device)
            _phase(progress, "XLA compile", "for %s", self._device)
            if _compile:
                self._call, self._static_written, self._updated = self._compile()
            else:  # ipuxl.export: the package's own trace finds what the run writes
                self._call, self._updated = None, ()
                self._static_written = (None,) * len(program.d2h_streams)
            self._plain = None  # set once the output layouts are known, below
            # Only now, with nothing left to fail, is the Ir marked as built.
            ir._prepared = True
            self._expected_inputs = frozenset(program.h2d_streams)
            self._expected_outputs = frozenset(program.d2h_streams)
            # Per output stream: its layout, and the slots the run writes when known statically
            # (None: the executable returns a mask of them).
            self._output_layouts = tuple(
                (host_buffers.StreamLayout.of(s, "output", self._slots, self._replicas), written)
                for s, written in zip(program.d2h_streams, self._static_written))
            self._plain = self._plain_plan() if _compile else None
            self._host_weights: dict[Variable, np.ndarray] = {v: v._data for v in program.variables}
            # Remote buffers: host copies [entries, *shape] ([R, entries, *shape] replicated),
            # their slots filled from the remote variables that live in them.
            self._remote_variables = {v: remote_slot(v) for v in ir.main_graph.variables
                                      if remote_slot(v) is not None}
            # Replica-sharded variable handles, and the shard variables that hold them.
            self._sharded = {v: shards_of(v) for v in ir.main_graph.variables
                             if shards_of(v) is not None}
            self._host_buffers = {b: self._initial_buffer(b) for b in program.remote_buffers}
            # "all_replicas" variables as last read back: [R, *shape], each replica's value.
            self._host_all_replicas: dict[Variable, np.ndarray] = {}
            self._device_state: tuple[jax.Array, ...] | None = None
            _phase(progress, "upload", "%d constants to the device", len(program.arg_constants))
            self._device_constants = self._to_device([
                storage_layout.to_device(c._data, program.layouts.get(c))
                for c in program.arg_constants])
            _phase(progress, None)
            if self._report is not None and profiling.ACTIVE:
                profiling.record_report(f"Session of Ir {ir.id}", self._report)
        _LOG.debug("Session built: Ir %d on %s in %.2f s", ir.id, self._device, progress.elapsed)
        self._host_in_sync = True
        self._attach_stack: list[bool] = []
        self._attached = False
        self._engine_loaded = False
        self._next_device: Any = None
        self._warned_edit = False
        self._lost_updates = False
        self.transfers = TransferCounts()

    # ----------------------------------------------------------------- properties
    @property
    def ir(self) -> Ir:
        return self._ir

    @property
    def ir_(self) -> Ir:
        """The Ir (PopXL's attribute name; the same object as :attr:`ir`)."""
        return self._ir

    @property
    def is_attached(self) -> bool:
        return self._attached

    @property
    def report(self) -> sim.Report:
        """The IPU model's estimate (memory, out-of-memory, cycles) for an ``"ipu_model"``
        Session.

        Raises:
            RuntimeError: the Session runs on ``"cpu"``.
        """
        if self._report is None:
            raise RuntimeError(
                f"This Session runs on {self._device_desc!r}, which has no IPU model report. "
                "Build it with Session(ir, 'ipu_model'), or estimate without a Session: "
                "ipuxl.sim.estimate(ir)."
            )
        return self._report

    def save(self, path: str | os.PathLike, *, weights: bool = True) -> None:
        """Save the program as one package file that :mod:`ipuxl.runtime` loads and runs
        without this Ir or the code that built it (see ``docs/runtime.md``).

        The package holds the program as serialized StableHLO (``jax.export``), the
        variables' current values (read from the device when attached), and the metadata
        (anchors, program flow, replication factor, ``num_host_transfers``, versions);
        its format is ``docs/package_format.md``. The file is written whole or not at all.

        Args:
            path: the file to write (by convention ``*.ipuxl``).
            weights: store the variables' values; False leaves them out, so the runtime
                takes them from user callbacks.

        Raises:
            ValueError: the program cannot be saved (host callbacks such as
                ``print_tensor``, several processes, anchor names that collide).
        """
        from ipuxl.runtime.exporter import save_session

        with self._lock:
            save_session(self, path, weights=weights)

    def _repr_html_(self) -> str:
        from ipuxl.notebook import session_html

        return session_html(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        from ipuxl.notebook import session_text

        printer.text("Session(...)" if cycle else session_text(self))

    @property
    def device(self) -> jax.Device:
        """The JAX device the program runs on."""
        return self._device

    def expected_inputs(self) -> list[Any]:
        """The host-to-device streams ``run`` needs arrays for."""
        return set(self._expected_inputs)  # type: ignore[return-value]

    # ----------------------------------------------------------------- attach
    # The lock is a plain (non-reentrant) Lock, the cheapest there is: public methods take
    # it once and call the unlocked ``_``-methods below.
    def __enter__(self) -> Session:
        with self._lock:
            attaching = not self._attached
            self._attach_stack.append(attaching)
            if attaching:
                try:
                    self._check_next_device()
                    self._attached = self._engine_loaded = True
                    self._weights_from_host()
                except BaseException:
                    self._exit(*sys.exc_info())
                    raise
            return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        with self._lock:
            self._exit(exc_type)

    def _exit(self, exc_type: Any, *_: Any) -> None:
        if not self._attach_stack:
            raise RuntimeError(
                "Session.__exit__ was called without a matching __enter__: the session is "
                "not inside a `with session:` block. Use `with session: ...` rather than "
                "calling __enter__/__exit__ by hand."
            )
        attached_here = self._attach_stack.pop()
        if not attached_here:
            return
        try:
            if exc_type is None and self.weights_to_host_on_exit:
                self._weights_to_host()
        finally:
            self._attached = False

    def _check_attached(self) -> None:
        if not self._attached:
            raise ValueError(_NOT_ATTACHED)

    # ----------------------------------------------------------------- run
    def create_host_outputs(self) -> dict[Any, np.ndarray]:
        """Zero-filled host arrays for every output stream, in the host layout (PopXL's
        ``np.empty`` leaves garbage in slots a run does not write)."""
        return {layout.stream: np.zeros(layout.host_shape, layout.host_dtype)
                for layout, _ in self._output_layouts}

    def run(self, inputs: Mapping[Any, Any] | None = None, downcast_inputs: bool = True
            ) -> dict[Any, np.ndarray]:
        """Run the main graph once and return the output streams' host arrays.

        Args:
            inputs: one host array (or list, scalar, torch tensor) per h2d stream that the
                program loads, in the host layout ``[nht,] [replicas,] *stream.shape``.
            downcast_inputs: convert 64-bit inputs to 32 bits first.

        Returns:
            A new array per d2h stream the program stores to; slots not written are zero.

        Raises:
            TypeError: ``inputs`` is not a mapping from streams to arrays.
            ValueError: not attached, or the inputs do not match the streams.
            poplar_application_runtime_error: the program failed while running (the
                variables keep the values of the last finished run).
            KeyboardInterrupt: Ctrl-C during the run (the variables likewise).
        """
        with self._lock:
            self._check_attached()
            self._warn_if_edited()
            self._check_fits()
            if self._plain is not None and type(inputs) is dict:
                outputs = self._run_plain(inputs)
                if outputs is not None:
                    return outputs
            return self._execute(inputs, None, downcast_inputs)

    def run_with_outputs(self, inputs: Mapping[Any, Any] | None = None,
                         outputs: Mapping[Any, np.ndarray] | None = None,
                         downcast_inputs: bool = True) -> None:
        """Run the main graph once, writing the output streams into ``outputs`` in place.

        Every check, of the inputs and of the output arrays (shape, dtype, writable),
        happens before anything runs; a run that fails leaves the variables as they were.
        Slots the run does not write keep the values ``outputs`` had.

        Raises:
            TypeError: ``inputs`` or ``outputs`` is not a mapping, or an output array has
                the wrong dtype.
            ValueError: not attached, the inputs or outputs do not match the streams, or an
                output array is read-only.
            poplar_application_runtime_error: the program failed while running.
            KeyboardInterrupt: Ctrl-C during the run.
        """
        outputs = {} if outputs is None else outputs
        with self._lock:
            self._check_attached()
            self._warn_if_edited()
            self._check_fits()
            self._execute(inputs, outputs, downcast_inputs)

    def _check_fits(self) -> None:
        if self._refuse_run:
            raise sim_oom.refuse_run(self._report)

    # The common run, kept short: a dict of exactly the arrays the executable takes, in,
    # and new host arrays for outputs every slot of which the run writes, out. The same
    # rules as _execute (all or nothing; errors as _raise_failed_run says); anything else
    # (conversions, checks that fail, masks, callbacks, 64-bit, several processes) goes
    # to _execute.
    def _plain_plan(self) -> tuple | None:
        if self._has_callbacks or self._uses_64bit or self._processes > 1 or any(
                written is None or len(written) != layout.slots or layout.is_float8
                for layout, written in self._output_layouts):
            return None
        inputs = tuple((layout.stream, layout.device_dtype, layout.host_shape)
                       for layout in self._input_layouts)
        outputs = tuple((layout.stream, layout.host_shape)
                        for layout, _ in self._output_layouts)
        return inputs, outputs, direct_call(self._call)

    def _run_plain(self, inputs: dict) -> dict[Any, np.ndarray] | None:
        expected, outputs, call = self._plain
        if len(inputs) != len(expected):
            return None
        arrays = []
        for stream, dtype, shape in expected:
            value = inputs.get(stream)
            if type(value) is not np.ndarray or value.dtype != dtype or value.shape != shape:
                return None
            arrays.append(value)
        state = self._device_state
        started = time.perf_counter() if profiling.ACTIVE else None
        try:
            results = call(*state, *self._device_constants, *arrays)
            if results:
                results[0].block_until_ready()
            host_outputs = {}
            index = len(self._updated)
            for stream, shape in outputs:
                host_outputs[stream] = np.array(results[index]).reshape(shape)
                index += 1
        except BaseException as error:
            self._failed_run(state, error)
        self._adopt(state, results, started)
        return host_outputs

    def _adopt(self, state: tuple[jax.Array, ...], results: Sequence[jax.Array],
               started: float | None) -> None:
        """The run finished and its outputs are on the host: adopt the new state."""
        if self._updated:
            new_state = list(state)
            for index, value in zip(self._updated, results):
                new_state[index] = value
            self._device_state = tuple(new_state)
        self._host_in_sync = False  # PopXL's rule: after any run, reads transfer once
        if started is not None:
            profiling.record("Session", "run", started, time.perf_counter(), ir=self._ir.id)

    def _execute(self, inputs: Mapping[Any, Any] | None,
                 outputs: Mapping[Any, np.ndarray] | None,
                 downcast_inputs: bool) -> dict[Any, np.ndarray]:
        """Check the arrays, run the executable once, and put its results in host arrays:
        new ones (returned) when ``outputs`` is None, else the caller's, checked before
        the run.

        All or nothing: the new device state is adopted last, once the results are on
        the host, so a run that fails at any point changes no variable.
        """
        inputs = {} if inputs is None else inputs
        if not isinstance(inputs, Mapping):
            raise TypeError(host_buffers.not_a_mapping("inputs", inputs))
        # PopXL's order: all input checks, then all output checks.
        if inputs.keys() != self._expected_inputs:
            host_buffers.check_stream_set("input", self._expected_inputs, inputs)
        device_inputs = []
        for layout in self._input_layouts:
            value = inputs[layout.stream]
            if (type(value) is np.ndarray and value.dtype == layout.device_dtype
                    and value.shape == layout.host_shape):
                device_inputs.append(value)  # already exactly what the executable takes
                continue
            array = host_buffers.convert_input(layout, value, downcast_inputs)
            host_buffers.check_array_shape(layout, array)
            device_inputs.append(host_buffers.to_executable_input(layout, array))
        if self._processes > 1:
            device_inputs = [self._global_input(layout, array) for layout, array
                             in zip(self._input_layouts, device_inputs)]
        if outputs is not None:
            if not isinstance(outputs, Mapping):
                raise TypeError(host_buffers.not_a_mapping("outputs", outputs))
            host_buffers.check_stream_set("output", self._expected_outputs, outputs)
            for layout, _ in self._output_layouts:
                host_buffers.check_output_array(layout, outputs[layout.stream])
        state = self._device_state
        _LOG.debug("run: the main graph of Ir %d", self._ir.id)
        started = time.perf_counter() if profiling.ACTIVE else None
        try:
            if self._has_callbacks:
                with interrupts_noted(), self._x64():
                    results = self._call(*state, *self._device_constants, *device_inputs)
            elif self._uses_64bit:
                with jax.enable_x64(True):
                    results = self._call(*state, *self._device_constants, *device_inputs)
            else:
                results = self._call(*state, *self._device_constants, *device_inputs)
            if results:
                # The results of one run are ready together: errors of the run surface
                # here, as an exception, not later as an abort inside a numpy conversion.
                results[0].block_until_ready()
            host_outputs = self._to_host_outputs(results, outputs)
        except BaseException as error:
            self._failed_run(state, error)
        self._adopt(state, results, started)
        return host_outputs

    def _to_host_outputs(self, results: Sequence[jax.Array],
                         outputs: Mapping[Any, np.ndarray] | None) -> dict[Any, np.ndarray]:
        """The output streams' results in host arrays: new ones, or the caller's."""
        updated_count = len(self._updated)
        output_count = len(self._output_layouts)
        masks = iter(results[updated_count + output_count:])
        host_outputs = {} if outputs is None else outputs
        to_host = replication.local_part if self._processes > 1 else np.asarray
        for (layout, written), result in zip(self._output_layouts,
                                             results[updated_count:]):
            result = to_host(result)
            if outputs is None and written is not None and len(written) == layout.slots:
                host_outputs[layout.stream] = host_buffers.output_array(layout, result)
                continue
            if written is None:  # only known at run time: the run returned a mask
                written = to_host(next(masks))
            if outputs is None:
                host_outputs[layout.stream] = np.zeros(layout.host_shape, layout.host_dtype)
            host_buffers.write_slots(layout, result, host_outputs[layout.stream], written)
        return host_outputs

    def _warn_if_edited(self) -> None:
        if self._ir._version != self._version and not self._warned_edit:
            self._warned_edit = True
            warnings.warn(
                f"{self._ir!r} was edited after this Session was built. The Session keeps "
                "running the program as it was built; create a new Session to run the edits.",
                stacklevel=3,
            )

def _phase(progress: Progress, name: str | None, message: str = "", *args: Any) -> None:
    """Start a phase of building a Session (None: the build is over): on the progress
    line, as a DEBUG line, and as a span of an open ``ipuxl.profile`` block."""
    now = time.perf_counter()
    if profiling.ACTIVE and progress.phases:
        profiling.record("Session", progress.phases[-1], progress.phase_started, now)
    progress.phase_started = now
    if name is not None:
        progress.phase(name)
        _LOG.debug(f"{name}: {message}", *args)
