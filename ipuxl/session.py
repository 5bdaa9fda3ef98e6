"""Session: compile an Ir once, keep its variables on the device, run it.

A Session holds one device copy of each variable (donated to every run, so XLA updates it
in place) and one host copy, which is a cache of the device values: ``get_tensor_data``
transfers from the device only when a run may have changed them. The transfer rules and
error messages are PopXL's; see ``docs/session.md``.

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

import contextlib
import logging
import math
import os
import sys
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ipuxl import host_buffers
from ipuxl.fp8_utils import float8_from_device
from ipuxl.ir import Ir
from ipuxl.lowering import fingerprint, host_to_device_array, lower_ir
from ipuxl.popart import poplar_application_runtime_error
from ipuxl.tensor import Constant, Tensor, Variable
from ipuxl.verify import verify_ir

__all__ = ["Session", "TransferCounts"]

_LOGGER = logging.getLogger(__name__)

# Compiled executables by (fingerprint of the Ir, device): Sessions built from identical
# programs share one compilation.
_EXECUTABLES: dict[tuple[str, str], tuple[Any, tuple]] = {}

_NOT_ATTACHED = (
    "Must be attached to device before calling a runtime function. Put the call inside a "
    "`Session` context, for example `with session: session.run()`."
)


@dataclass
class TransferCounts:
    """How many whole-weight transfers a Session made (tests pin PopXL's rules with it)."""

    weights_from_host: int = 0
    weights_to_host: int = 0


class Session:
    """Compile ``ir`` for ``device_desc`` and run it.

    Args:
        ir: the program. Later edits to it do not change this Session (a warning says so).
        device_desc: ``"cpu"`` (XLA on the CPU, one device), ``"ipu_model"`` (simulated
            IPU, on JAX's default device) or ``"ipu_hw"`` (not available in ipuxl).
        weights_to_host_on_exit: copy the weights to the host when the outermost
            ``with session:`` block exits normally.

    Raises:
        RuntimeError: the Ir has no ops, or ``"ipu_hw"`` was asked for.
        ValueError: an unknown device, or several devices needed on ``"cpu"``.
        popart_exception: the Ir is invalid (for example an inplacing ambiguity).
    """

    def __init__(self, ir: Ir, device_desc: str = "cpu", weights_to_host_on_exit: bool = True):
        device_desc = os.environ.get("POPXL_OFFLINE_DEVICE") or device_desc
        self._ir = ir
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
        verify_ir(ir)
        self._device = _select_device(device_desc, _devices_needed(ir))
        self._device_desc = device_desc
        ir._prepared = True
        self._version = ir._version
        self._slots = ir.num_host_transfers
        self._replicas = ir.instance_replication_factor
        self._program = lower_ir(ir)
        self._uses_64bit = self._program.uses_64bit
        program = self._program
        self._input_layouts = tuple(
            host_buffers.StreamLayout.of(s, "input", self._slots, self._replicas)
            for s in program.h2d_streams)
        if self._replicas > 1:
            # Replicated runs are refused at run time (see _execute); nothing to compile.
            self._call, self._static_written = None, (None,) * len(program.d2h_streams)
        else:
            self._call, self._static_written = self._compile()
        self._expected_inputs = frozenset(program.h2d_streams)
        self._expected_outputs = frozenset(program.d2h_streams)
        # Per output stream: its layout, and the slots the run writes when known statically
        # (None: the executable returns a mask of them).
        self._output_layouts = tuple(
            (host_buffers.StreamLayout.of(s, "output", self._slots, self._replicas), written)
            for s, written in zip(program.d2h_streams, self._static_written))
        self._host_weights: dict[Variable, np.ndarray] = {v: v._data for v in program.variables}
        self._device_state: tuple[jax.Array, ...] | None = None
        self._device_constants = self._to_device([c._data for c in program.arg_constants])
        self._host_in_sync = True
        self._attach_stack: list[bool] = []
        self._attached = False
        self._warned_edit = False
        self.transfers = TransferCounts()

    # ----------------------------------------------------------------- compile
    def _x64(self) -> contextlib.AbstractContextManager:
        return jax.enable_x64(True) if self._uses_64bit else contextlib.nullcontext()

    def _to_device(self, host_arrays: Iterable[np.ndarray]) -> tuple[jax.Array, ...]:
        """Copy host arrays to the device as the executable expects them (64-bit types
        stay 64-bit: the copy happens in the same x64 mode as the compilation)."""
        with self._x64():
            return tuple(jax.device_put(host_to_device_array(data), self._device)
                         for data in host_arrays)

    def _compile(self) -> tuple[Any, tuple]:
        """The program as one jitted function over flat arguments, compiled now.

        ``flat(*state, *constants, *inputs) -> (*state, *outputs, *masks)``: inputs are in
        the host layout (the reshape to ``[slots, ...]`` happens inside XLA, for free) and
        the state is donated. Executables are shared between Sessions of identical Irs.
        """
        key = (fingerprint(self._ir, self._device_desc), str(self._device))
        if key in _EXECUTABLES:
            return _EXECUTABLES[key]
        program = self._program
        state_count = len(program.variables)
        constant_count = len(program.arg_constants)
        device_shapes = [layout.device_shape for layout in self._input_layouts]

        def flat_step(*args: jax.Array) -> tuple[jax.Array, ...]:
            state = args[:state_count]
            constants = args[state_count:state_count + constant_count]
            inputs = tuple(x.reshape(shape) for x, shape in
                           zip(args[state_count + constant_count:], device_shapes))
            new_state, outputs, masks = program.step(state, constants, inputs)
            return (*new_state, *outputs, *masks)

        sharding = jax.sharding.SingleDeviceSharding(self._device)
        state_specs, constant_specs, _ = program.abstract_arguments()
        input_specs = [jax.ShapeDtypeStruct(layout.host_shape, layout.device_dtype)
                       for layout in self._input_layouts]
        specs = [jax.ShapeDtypeStruct(spec.shape, spec.dtype, sharding=sharding)
                 for spec in (*state_specs, *constant_specs, *input_specs)]
        jitted = jax.jit(flat_step, donate_argnums=tuple(range(state_count)), keep_unused=True)
        with self._x64():
            compiled = jitted.lower(*specs).compile()
        _EXECUTABLES[key] = (compiled, program.static_written)
        return _EXECUTABLES[key]

    # ----------------------------------------------------------------- properties
    @property
    def ir(self) -> Ir:
        return self._ir

    @property
    def is_attached(self) -> bool:
        return self._attached

    @property
    def device(self) -> jax.Device:
        """The JAX device the program runs on."""
        return self._device

    def expected_inputs(self) -> list[Any]:
        """The host-to-device streams ``run`` needs arrays for."""
        return set(self._expected_inputs)  # type: ignore[return-value]

    # ----------------------------------------------------------------- attach
    def __enter__(self) -> Session:
        attaching = not self._attached
        self._attach_stack.append(attaching)
        if attaching:
            try:
                self._attached = True
                self.weights_from_host()
            except BaseException:
                self.__exit__(*sys.exc_info())
                raise
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        attached_here = self._attach_stack.pop()
        if not attached_here:
            return
        try:
            if exc_type is None and self.weights_to_host_on_exit:
                self.weights_to_host()
        finally:
            self._attached = False

    def _check_attached(self) -> None:
        if not self._attached:
            raise ValueError(_NOT_ATTACHED)

    # ----------------------------------------------------------------- weights
    def weights_from_host(self) -> None:
        """Copy every host weight to the device."""
        self._check_attached()
        self._device_state = self._to_device(
            [self._host_weights[v] for v in self._program.variables])
        self.transfers.weights_from_host += 1

    def weights_to_host(self) -> None:
        """Copy every device weight to the host (and flush memory-mapped variables)."""
        if self._ir._read_only_memmap:
            raise Exception(
                "Writing data from device to host is not possible as the `ir` contains a "
                "read-only memmap."
            )
        self._check_attached()
        assert self._device_state is not None
        for var, value in zip(self._program.variables, self._device_state):
            host = np.asarray(value)
            if var.dtype.is_float8:
                host = float8_from_device(host, var.dtype)
            current = self._host_weights[var]
            if isinstance(current, np.memmap):
                np.copyto(current, host.reshape(current.shape))
                current.flush()
            else:
                self._host_weights[var] = np.array(host).reshape(var.shape_on_host)
        self._host_in_sync = True
        self.transfers.weights_to_host += 1

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
            ValueError: not attached, or the inputs do not match the streams.
            poplar_application_runtime_error: the program failed while running.
        """
        self._check_attached()
        self._warn_if_edited()
        results = self._execute(inputs, None, downcast_inputs)
        outputs = {}
        for (layout, written), (result, mask) in zip(self._output_layouts, results):
            if written is not None and len(written) == layout.slots:
                outputs[layout.stream] = host_buffers.output_array(layout, result)
            else:
                outputs[layout.stream] = out = np.zeros(layout.host_shape, layout.host_dtype)
                host_buffers.write_slots(layout, result, out, written if mask is None else mask)
        return outputs

    def run_with_outputs(self, inputs: Mapping[Any, Any] | None = None,
                         outputs: Mapping[Any, np.ndarray] | None = None,
                         downcast_inputs: bool = True) -> None:
        """Run the main graph once, writing the output streams into ``outputs`` in place.

        Every check happens before anything runs; a run that fails leaves the variables
        as they were. Slots the run does not write keep the values ``outputs`` had.

        Raises:
            ValueError: not attached, or the inputs or outputs do not match the streams.
            poplar_application_runtime_error: the program failed while running.
        """
        self._check_attached()
        self._warn_if_edited()
        outputs = {} if outputs is None else outputs
        results = self._execute(inputs, outputs, downcast_inputs)
        for (layout, written), (result, mask) in zip(self._output_layouts, results):
            host_buffers.write_slots(layout, result, outputs[layout.stream],
                                     written if mask is None else mask)

    def _execute(self, inputs: Mapping[Any, Any] | None,
                 outputs: Mapping[Any, np.ndarray] | None,
                 downcast_inputs: bool) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """Check the arrays, run the executable once and return, per output stream, its
        ``[slots, ...]`` host result and the run-time mask of slots written (or None).

        Args:
            outputs: the caller's output arrays, checked before the run; None when ``run``
                makes its own.
        """
        inputs = {} if inputs is None else inputs
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
        if outputs is not None:
            host_buffers.check_stream_set("output", self._expected_outputs, outputs)
            for layout, _ in self._output_layouts:
                host_buffers.check_array_shape(layout, outputs[layout.stream])
        if self._replicas > 1:
            raise NotImplementedError(
                f"Running a replicated program (replication_factor={self._replicas}) is not "
                "supported yet: ipuxl builds, prints and validates it, but replicas on a "
                "device mesh come with the replication work. Run with replication_factor=1."
            )
        state = self._device_state
        try:
            if self._uses_64bit:
                with jax.enable_x64(True):
                    results = self._call(*state, *self._device_constants, *device_inputs)
            else:
                results = self._call(*state, *self._device_constants, *device_inputs)
        except Exception as error:
            self._recover_from_failed_run(state, error)
            raise
        state_count = len(state)
        self._device_state = results[:state_count]
        self._host_in_sync = False
        outputs = results[state_count:state_count + len(self._output_layouts)]
        masks = iter(results[state_count + len(self._output_layouts):])
        return [
            (np.asarray(result), None if written is not None else np.asarray(next(masks)))
            for (_, written), result in zip(self._output_layouts, outputs)
        ]

    def _recover_from_failed_run(self, state: tuple[jax.Array, ...] | None,
                                 error: Exception) -> None:
        """After the executable raised: if it had consumed the donated device weights, put
        the host copy back on the device and raise ``poplar_application_runtime_error``.

        Returns only if the executable failed before it consumed them (the caller then
        re-raises ``error``).
        """
        if state is None or not any(a.is_deleted() for a in state):
            return
        stale = not self._host_in_sync
        self.weights_from_host()
        self._host_in_sync = True
        if stale:
            kept = (
                "The host copy of the weights was older than the last run, so the variables "
                "are back at their values of the last `weights_to_host` (or "
                "`get_tensor_data`, or write): the updates of the runs since then are lost. "
                "Call `session.weights_to_host()` before a run that may fail to keep them."
            )
        else:
            kept = "The variables keep their values from before the run."
        # XLA puts the failing callback's traceback in the message: its last line says why.
        lines = str(error).strip().splitlines()
        reason = lines[-1] if lines else type(error).__name__
        raise poplar_application_runtime_error(
            f"The program failed while running on the device: {reason}\n{kept}"
        ) from error

    def _warn_if_edited(self) -> None:
        if self._ir._version != self._version and not self._warned_edit:
            self._warned_edit = True
            warnings.warn(
                f"{self._ir!r} was edited after this Session was built. The Session keeps "
                "running the program as it was built; create a new Session to run the edits.",
                stacklevel=3,
            )

    # ----------------------------------------------------------------- tensor data
    def get_tensor_data(self, tensor: Variable | Constant) -> np.ndarray:
        """The host value of a variable or constant (read-only).

        Transfers the weights from the device first only if a run may have changed them
        since the last transfer, and only while attached.
        """
        return self.get_tensors_data([tensor])[tensor]

    def get_tensors_data(self, tensors: Iterable[Variable | Constant]
                         ) -> dict[Variable | Constant, np.ndarray]:
        """``get_tensor_data`` for several tensors with at most one transfer."""
        tensors = list(tensors)
        for t in tensors:
            if not isinstance(t, (Variable, Constant)):
                raise TypeError(
                    f"{t} is not of type Constant or Variable. get_tensor_data is "
                    "notsupported for this type. Read other tensors by storing them to a "
                    "d2h stream with `ops.host_store`."
                )
            self._check_known(t)
        if (any(isinstance(t, Variable) for t in tensors) and self._attached
                and not self._host_in_sync):
            self.weights_to_host()
        return {t: self._host_value(t) for t in tensors}

    def _check_known(self, tensor: Tensor) -> None:
        if isinstance(tensor, Variable) and tensor not in self._host_weights:
            raise ValueError(
                f"Variable `{tensor.id}` is not part of this Session's program: it belongs to "
                "another Ir or was created after the Session was built. Build a new Session."
            )

    def _host_value(self, tensor: Variable | Constant) -> np.ndarray:
        if isinstance(tensor, Constant):
            data = tensor._data
        else:
            data = self._host_weights[tensor]
            if tensor.retrieval_mode == "all_replicas" and self._replicas > 1:
                grouping = tensor.replica_grouping
                if grouping.num_groups == 1:
                    data = np.broadcast_to(data, (self._replicas, *data.shape))
                else:
                    data = data[np.asarray(grouping.assignment)]
        view = data.view()
        view.flags.writeable = False
        return view

    def write_variable_data(self, tensor: Variable, data: Any) -> None:
        """Write a variable's host value (and its device value if attached)."""
        self.write_variables_data({tensor: data})

    def write_variables_data(self, tensors: Mapping[Variable, Any]) -> None:
        """Write several variables, with one device transfer if attached.

        Raises:
            TypeError: not a Variable, or the data's dtype is not the variable's.
            ValueError: the data's shape is not the variable's host shape.
        """
        checked = {}
        for tensor, data in tensors.items():
            if not isinstance(tensor, Variable):
                raise TypeError(
                    f"Tensor {tensor.id} is not of type Variable. write_variable_data is not "
                    "supported for this type."
                )
            self._check_known(tensor)
            expected = tensor.dtype.as_numpy()
            if isinstance(data, (int, float, bool, np.number, np.bool_)):
                if tensor.dtype.is_float8:
                    raise TypeError(
                        f"Cannot write a Python number to float8 variable {tensor.id}: convert "
                        "it first with `popxl.fp8_utils.host_pow2scale_cast_to_fp8`."
                    )
                data = np.asarray(data, expected)
            data = np.asarray(data)
            if data.dtype != expected:
                raise TypeError(
                    f"The dtype of the input array ({data.dtype}) must match the equivalent type "
                    f"of the tensor {tensor.id} ({expected}). Convert it with "
                    f"`data.astype({expected})`."
                )
            if data.shape != tensor.shape_on_host:
                raise ValueError(
                    f"The shape of the input array {data.shape} must match the shape of the "
                    f"tensor {tensor.id} on the host {tensor.shape_on_host}."
                )
            if tensor.retrieval_mode == "all_replicas" and tensor.replica_grouping.group_size > 1:
                raise NotImplementedError(
                    f'Copying to tensor {tensor.id} with "all_replicas" retreval mode is not yet '
                    "supported."
                )
            checked[tensor] = data
        for tensor, data in checked.items():
            current = self._host_weights[tensor]
            if isinstance(current, np.memmap):
                np.copyto(current, data)
            else:
                self._host_weights[tensor] = np.array(data)
        if self._attached and checked:
            self._upload(checked)

    def _upload(self, written: Mapping[Variable, np.ndarray]) -> None:
        """Send only the written variables to the device (PopXL re-sends all weights and
        thereby reverts the others to stale host values)."""
        assert self._device_state is not None
        state = list(self._device_state)
        indices = [i for i, var in enumerate(self._program.variables) if var in written]
        uploaded = self._to_device([self._host_weights[self._program.variables[i]]
                                    for i in indices])
        for i, array in zip(indices, uploaded):
            state[i] = array
        self._device_state = tuple(state)
        self.transfers.weights_from_host += 1


def _devices_needed(ir: Ir) -> int:
    max_ipu = max((op.ipu for graph in ir.graphs for op in graph.ops), default=0)
    return 2 ** math.ceil(math.log2((max_ipu + 1) * ir.instance_replication_factor))


def _select_device(device_desc: str, needed: int) -> jax.Device:
    if device_desc == "cpu":
        if needed > 1:
            raise ValueError(
                f"For a cpu device, multiple devices (provided: {needed}) are not supported. "
                "Use device_desc='ipu_model' for programs on several IPUs or replicas."
            )
        return jax.devices("cpu")[0]
    if device_desc == "ipu_model":
        return jax.devices()[0]
    if device_desc == "ipu_hw":
        raise RuntimeError(
            f"Failed to acquire device with {needed} IPUs: ipuxl has no IPU hardware backend. "
            "Use device_desc='ipu_model' (the simulated IPU, on JAX's default device) or "
            "'cpu'."
        )
    raise ValueError(
        f"Incorrect device type provided: {device_desc}, must be one of: `ipu_hw`, "
        "`ipu_model`, `cpu`"
    )
