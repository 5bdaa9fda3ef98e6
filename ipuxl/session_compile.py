"""The Session's executable: the Ir as one flat JAX function, compiled once.

``_flat_step`` turns the lowered program into ``flat(*state, *constants, *inputs) ->
(*updated state, *outputs, *masks)`` with its abstract arguments (placed on the device or
the replica mesh; with ``portable``, placed nowhere and replicas mapped with ``vmap``,
for a saved package). ``_compile`` jits and compiles it, sharing executables between
Sessions of identical Irs (``ipuxl.executable_cache``), or, with PopART's engine caching
on, loads it from or writes it to the engine cache directory. The helpers put host data
where the executable expects it.

:class:`ipuxl.session.Session` inherits it; the attributes it uses are set up by
``Session.__init__``.
"""

from __future__ import annotations

import contextlib
import logging
import platform
import time
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import numpy as np

from ipuxl import (
    cache_folder,
    devices,
    host_buffers,
    replication,
    session_options,
    storage_layout,
    xla_options,
)
from ipuxl.executable_cache import (
    EXECUTABLES,
    engine_entry,
    fresh_compilations,
    has_host_callbacks,
    ipuxl_build,
    load_engine,
    save_engine,
)
from ipuxl.lowering import fingerprint, host_to_device_array, with_nesting_room
from ipuxl.sim import device as sim_device

__all__ = ["SessionCompile", "device_kind", "DEVICE_KINDS"]

# The Session's phases, as PopART's session logs them (see ipuxl.logs).
_LOG = logging.getLogger("popart.session")
# PopART's device layer, which logs "Starting compilation".
_DEVICEX_LOG = logging.getLogger("popart.devicex")
# PopXL's device kinds: an executable built for one does not run on another.
DEVICE_KINDS = ("cpu", "ipu_model", "ipu_hw")


class SessionCompile:
    """How a Session builds and feeds its executable (see the module docstring)."""

    # ----------------------------------------------------------------- PopXL's private hooks
    def _set_device(self, device: Any) -> None:
        """Attach to ``device`` at the next ``with session:`` (PopXL's private hook): a
        ``popart.DeviceInfo`` (``popxl.utils._to_device_info``) or a device from
        ``popart.DeviceManager``. It must be the kind (``"cpu"``, ``"ipu_model"``,
        ``"ipu_hw"``) the Session was asked for, even where ``POPXL_OFFLINE_DEVICE`` ran
        it on another, and, unless it is the CPU, have the IPU count it was built for;
        ``with session:`` raises otherwise."""
        self._next_device = device

    def _check_next_device(self) -> None:
        device, self._next_device = self._next_device, None
        if device is None:
            return
        kind = device_kind(device)
        ipus = getattr(device, "num_ipus", None) or getattr(device, "numIpus", 1)
        needed = devices.devices_needed(self._ir)
        built = self._device_kind
        if kind != built or (kind != "cpu" and ipus != needed):
            raise RuntimeError(
                f"The device set with _set_device ({kind}, {ipus} IPUs) cannot run this "
                f"Session, which was compiled for {built} with {needed} IPUs. Set a device of "
                "the same kind and IPU count, or build a new Session for that device."
            )

    def _full_input_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The host array shape for a stream of ``shape``: ``[num_host_transfers,]
        [replicas of this process,] *shape`` (each leading axis only when above 1)."""
        return host_buffers.extra_dims(self._slots, self._replicas) + tuple(shape)

    def _validate_run_inputs(self, inputs: Mapping[Any, Any]) -> None:
        """``run``'s checks of ``inputs`` without running: exactly the expected streams,
        each array of its full input shape.

        Raises:
            ValueError: ``Unexpected/Missing input.``, or an array of the wrong shape.
        """
        self._validate_streams("input", self._expected_inputs, self._input_layouts, inputs)

    def _validate_run_outputs(self, outputs: Mapping[Any, Any]) -> None:
        """``run_with_outputs``'s checks of the output streams and array shapes."""
        layouts = tuple(layout for layout, _ in self._output_layouts)
        self._validate_streams("output", self._expected_outputs, layouts, outputs)

    @staticmethod
    def _validate_streams(kind: str, expected: Any, layouts: Iterable[Any],
                          arrays: Mapping[Any, Any]) -> None:
        if not isinstance(arrays, Mapping):
            raise TypeError(host_buffers.not_a_mapping(f"{kind}s", arrays))
        host_buffers.check_stream_set(kind, expected, arrays)
        for layout in layouts:
            host_buffers.check_array_shape(layout, np.asarray(arrays[layout.stream]))

    def _x64(self) -> contextlib.AbstractContextManager:
        return jax.enable_x64(True) if self._uses_64bit else contextlib.nullcontext()

    def _to_device(self, host_arrays: Iterable[np.ndarray]) -> tuple[jax.Array, ...]:
        """Copy host arrays (constants) to the device as the executable expects them
        (64-bit types stay 64-bit: the copy happens in the same x64 mode as the
        compilation); with a replica mesh, every device gets a copy."""
        placement = self._shardings()[1]
        with self._x64():
            return tuple(self._put(host_to_device_array(data), placement)
                         for data in host_arrays)

    def _put(self, data: np.ndarray, placement: Any) -> jax.Array:
        """``data`` (the whole array) on ``placement``; with several processes each takes
        its own shards."""
        if self._processes > 1:
            return replication.global_array(np.ascontiguousarray(data), placement)
        return jax.device_put(data, placement)

    def _global_shape(self, layout: host_buffers.StreamLayout, device: bool = False
                      ) -> tuple[int, ...]:
        """The shape of a stream's array over every replica of every process: the host
        layout (or, with ``device``, ``[slots, R, *shape]``)."""
        if self._processes == 1:
            return layout.device_shape if device else layout.host_shape
        shape = tuple(layout.stream.shape)
        slots = (self._slots,) if device or self._slots > 1 else ()
        return (*slots, self._global_replicas, *shape)

    def _global_input(self, layout: host_buffers.StreamLayout, array: np.ndarray
                      ) -> jax.Array:
        """This process's input array (its replicas) as part of the global input."""
        slots = (self._slots,) if self._slots > 1 else ()
        local = np.ascontiguousarray(array).reshape(*slots, self._replicas,
                                                    *layout.stream.shape)
        stream_sharding = self._shardings()[2 if slots else 0]
        return replication.global_array(local, stream_sharding, self._global_shape(layout),
                                        local=True)

    def _shardings(self) -> tuple[Any, Any, Any]:
        """Where (state, constants, stream arrays) live: the device, or the replica mesh."""
        if self._mesh is None:
            single = jax.sharding.SingleDeviceSharding(self._device)
            return single, single, single
        return replication.shardings(self._mesh)

    def _compile(self) -> tuple[Any, tuple, tuple[int, ...]]:
        """The program as one jitted function over flat arguments, compiled now.

        ``flat(*state, *constants, *inputs) -> (*updated, *outputs, *masks)``: inputs are in
        the host layout (the reshape to ``[slots, ...]`` happens inside XLA, for free), and
        only the variables the program may change come back (their indices are the third
        item returned), so a program that only reads its weights copies nothing. The state
        is not donated: a failed run must leave it intact. Executables are shared between
        Sessions of identical Irs, or, with engine caching on
        (``session_options.engine_cache_directory``, or the default folder that
        :mod:`ipuxl.cache_folder` chose for the Ir), kept in its directory.
        """
        directory = cache_folder.engine_directory(self._ir)
        if directory and self._processes == 1:
            return self._compile_with_engine_cache(directory)
        key = (fingerprint(self._ir, self._device_desc), str(self._device), self._donate,
               self._mode, self._program.checks)
        start, missed = time.perf_counter(), []

        def build() -> tuple[Any, tuple, tuple[int, ...]]:
            missed.append(True)
            _LOG.debug("XLA compile: executable cache miss, compiling")
            return self._build_executable()[:3]

        executable = EXECUTABLES.get_or_build(key, build)
        _LOG.debug("XLA compile: done in %.2f s (executable cache %s)",
                   time.perf_counter() - start, "miss" if missed else "hit")
        return executable

    def _compile_with_engine_cache(self, directory: str) -> tuple[Any, tuple, tuple[int, ...]]:
        """PopART's engine cache: load the executable from ``directory``, or compile it
        and write it there (see :mod:`ipuxl.executable_cache`)."""
        path = engine_entry(directory, self._engine_key())
        loaded = load_engine(path, self._execution_devices())
        if loaded is not None:
            compiled, metadata = loaded
            written = tuple(None if slots is None else frozenset(slots)
                            for slots in metadata["static_written"])
            return compiled, written, tuple(metadata["updated"])
        with fresh_compilations():  # what JAX's cache holds cannot be serialized again
            compiled, written, updated, calls_back = self._build_executable()
        if calls_back:
            _LOG.debug("Engine cache: not written, the program calls back into Python")
        elif save_engine(path, compiled, {
                "static_written": [None if slots is None else sorted(slots)
                                   for slots in written],
                "updated": list(updated)}):
            root = cache_folder.is_bounded(directory)
            if root is not None:
                cache_folder.enforce_bound(root)
        return compiled, written, updated

    def _engine_key(self) -> list[str]:
        """What the engine cache key hashes: the program, the device, the options that may
        shape the executable, and the versions of everything that compiles it (ipuxl's
        own code included: :func:`~ipuxl.executable_cache.ipuxl_build`)."""
        import jaxlib

        from ipuxl.runtime.compile import _host_cpu

        device = self._device
        return [fingerprint(self._ir, self._device_desc), str(self._device_desc),
                device.platform, str(getattr(device, "device_kind", "")),
                str(len(self._execution_devices())), str(self._donate), str(self._mode),
                repr(self._program.checks), session_options.executable_options(self._ir),
                str(self._uses_64bit), ipuxl_build(), jax.__version__, jaxlib.__version__,
                _host_cpu() if device.platform == "cpu" else platform.machine()]

    def _execution_devices(self) -> list[jax.Device]:
        """The devices the executable runs on: the Session's device, or the replica mesh's."""
        return [self._device] if self._mesh is None else list(self._mesh.devices.flat)

    def _build_executable(self) -> tuple[Any, tuple, tuple[int, ...], bool]:
        """Trace and compile the program: the executable, the slots each output stream
        writes, the indices of the state it updates, and whether it calls back into
        Python."""
        flat_step, specs, updated = self._flat_step()

        def trace_and_compile() -> tuple[Any, bool]:
            with self._x64():
                donated: tuple[int, ...] = ()
                if self._donate:
                    # Only the variables the program writes can be donated: find them first.
                    jax.eval_shape(flat_step, *specs)
                    donated = tuple(updated)
                jitted = jax.jit(flat_step, donate_argnums=donated, keep_unused=True)
                traced = jitted.trace(*specs)
                options = xla_options.for_jaxpr(traced.jaxpr, self._device.platform)
                lowered = traced.lower()
                return xla_options.compile(lowered, options), has_host_callbacks(lowered)

        _DEVICEX_LOG.info("Starting compilation")
        compiled, calls_back = with_nesting_room(self._ir, trace_and_compile)
        return compiled, self._program.static_written, tuple(updated), calls_back

    def _flat_step(self, portable: bool = False) -> tuple[Any, list, list[int]]:
        """The program as one function over flat arguments, the abstract arguments it
        takes, and the list that tracing fills with the indices of the state it updates.

        ``flat(*state, *constants, *inputs) -> (*updated, *outputs, *masks)``. With
        ``portable`` (a saved package, see :mod:`ipuxl.runtime.exporter`) the signature
        names no device and replicas are mapped with ``vmap``, so one device runs them.
        """
        program = self._program
        mode, mesh = ("vmap", None) if portable else (self._mode, self._mesh)
        state_count = len(program.variables) + len(program.remote_buffers)
        constant_count = len(program.arg_constants)
        device_shapes = [self._global_shape(layout, device=True)
                         for layout in self._input_layouts]

        updated: list[int] = []

        perms = [program.layouts.get(v) for v in program.variables]
        perms += [None] * len(program.remote_buffers)

        constant_perms = [program.layouts.get(c) for c in program.arg_constants]

        def one_replica(stored: tuple, constants: tuple, inputs: tuple) -> tuple:
            storage_layout.begin_trace()
            state = tuple(storage_layout.in_program(value, perm)
                          for value, perm in zip(stored, perms))
            constants = tuple(storage_layout.in_program(value, perm)
                              for value, perm in zip(constants, constant_perms))
            new_state, outputs, masks = program.step(state, constants, inputs)
            # A variable the program never writes comes back as the very input it was.
            updated[:] = [i for i, (new, old) in enumerate(zip(new_state, state))
                          if new is not old]
            return (tuple(storage_layout.to_storage(new_state[i], perms[i]) for i in updated),
                    outputs, masks)

        step = one_replica
        if self._global_replicas > 1:
            step = replication.map_over_replicas(one_replica, mode, mesh)

        def flat_step(*args: jax.Array) -> tuple[jax.Array, ...]:
            state = args[:state_count]
            constants = args[state_count:state_count + constant_count]
            inputs = tuple(x.reshape(shape) for x, shape in
                           zip(args[state_count + constant_count:], device_shapes))
            new_state, outputs, masks = step(state, constants, inputs)
            return (*new_state, *outputs, *masks)

        state_specs, constant_specs, _ = program.abstract_arguments(stored=True)
        replicas = (self._global_replicas,) if self._global_replicas > 1 else ()
        if portable:
            state_sharding = constant_sharding = stream_sharding = None
        else:
            state_sharding, constant_sharding, stream_sharding = self._shardings()
        specs = [jax.ShapeDtypeStruct((*replicas, *spec.shape), spec.dtype,
                                      sharding=state_sharding) for spec in state_specs]
        specs += [jax.ShapeDtypeStruct(spec.shape, spec.dtype, sharding=constant_sharding)
                  for spec in constant_specs]
        for layout in self._input_layouts:
            sharding = stream_sharding
            if mesh is not None and self._slots == 1:
                sharding = replication.shardings(mesh)[0]  # (R, ...): no slot axis
            specs.append(jax.ShapeDtypeStruct(self._global_shape(layout), layout.device_dtype,
                                              sharding=sharding))
        return flat_step, specs, updated


def device_kind(device_desc: Any) -> str:
    """The kind of device ``device_desc`` is: a device string as it is (``"cpu"``,
    ``"ipu_model"``, ``"ipu_hw"``), the ``device_type`` of a
    ``popxl.utils._to_device_info`` device, ``"ipu_model"`` for an IPU model device from
    ``popart.DeviceManager``; anything else is named by its type."""
    if isinstance(device_desc, str):
        return str(device_desc)
    kind = getattr(device_desc, "device_type", None)
    if kind is not None:
        return str(kind)
    return "ipu_model" if sim_device.is_ipu_model(device_desc) else type(device_desc).__name__
