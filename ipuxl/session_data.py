"""The Session's host copies: weights to and from the device, and tensor data.

A Session keeps one host copy of each variable (``_host_weights``) and of each remote
buffer (``_host_buffers``, where remote variables live in their slots; replica-sharded
variables are gathered from and scattered to their shard), next to the device state.
This mixin holds PopXL's rules for moving them: ``weights_from_host`` /
``weights_to_host``, ``get_tensor_data`` (reads transfer once after a run, then the host
copy is a cache) and ``write_variable_data`` (host and device updated together; while
attached, a remote variable's write touches only its slot on the device).

A variable made from an ``np.memmap`` (``Variable._memmap_arr``, plain, remote or replica
sharded) has that memmap as its host value: every host write (``weights_to_host``,
``write_variable_data``) copies the variable's whole new value into it once that value is
computed, ``weights_to_host`` then flushes it, and ``get_tensor_data`` returns it.

:class:`ipuxl.session.Session` inherits it; the attributes it uses are set up by
``Session.__init__``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import jax
import numpy as np

from ipuxl import host_values, replication, storage_layout
from ipuxl.fp8_utils import float8_from_device
from ipuxl.lowering import host_to_device_array
from ipuxl.remote_buffer import into_slot, out_of_slot
from ipuxl.tensor import Constant, Tensor, Variable

__all__ = ["SessionData"]

# The Session's phases, as PopART's session logs them (see ipuxl.logs).
_LOG = logging.getLogger("popart.session")


class SessionData:
    """Host copies of a Session's variables and remote buffers (see the module
    docstring)."""

    def _initial_buffer(self, buffer: Any) -> np.ndarray:
        """A remote buffer's starting contents: zeros, and each remote variable's data in
        its slot (per replica: each replica its group's value)."""
        replicas = (self._global_replicas,) if self._global_replicas > 1 else ()
        host = np.zeros((*replicas, buffer.entries, *buffer.tensor_shape),
                        buffer.tensor_dtype.as_numpy())
        for var, place in self._remote_variables.items():
            if place.buffer is buffer:
                self._set_slot(host, var, var._data)
        return host

    def _set_slot(self, host: np.ndarray, var: Variable, data: np.ndarray) -> None:
        """Put a remote variable's host value ``data`` in its slot of ``host``, the host
        copy of its buffer."""
        place = self._remote_variables[var]
        shape = place.buffer.tensor_shape
        if place.shard_over is not None:  # each replica's chunk of the value
            host[:, place.slot] = into_slot(replication.shard_chunks(
                data, var.replica_grouping, place.shard_over, self._global_replicas,
                var.shape), 1, shape)
        elif self._global_replicas > 1:
            host[:, place.slot] = into_slot(replication.to_replicas(
                data, var.replica_grouping, self._global_replicas), 1, shape)
        else:
            host[place.slot] = into_slot(np.asarray(data), 0, shape)

    def _variables_to_device(self, variables: Iterable[Any]) -> tuple[jax.Array, ...]:
        """The host copies of ``variables`` (and remote buffers) on the device:
        ``[R, *shape]`` per variable when replicated (each replica its group's value)."""
        placement = self._shardings()[0]
        arrays = []
        with self._x64():
            for var in variables:
                if var in self._host_buffers:  # already per replica
                    arrays.append(self._put(host_to_device_array(self._host_buffers[var]),
                                            placement))
                    continue
                data = host_to_device_array(self._host_weights[var])
                if self._global_replicas > 1:
                    data = replication.to_replicas(data, var.replica_grouping,
                                                   self._global_replicas)
                data = storage_layout.to_device(data, self._program.layouts.get(var))
                arrays.append(self._put(data, placement))
        return tuple(arrays)

    # ----------------------------------------------------------------- weights
    def weights_from_host(self) -> None:
        """Copy every host weight to the device."""
        with self._lock:
            self._weights_from_host()

    def _weights_from_host(self) -> None:
        self._check_attached()
        self._host_all_replicas.clear()  # every replica gets its group's host value
        self._device_state = self._variables_to_device(
            (*self._program.variables, *self._program.remote_buffers))
        self.transfers.weights_from_host += 1
        _LOG.debug("Writing weights from host complete.")

    def weights_to_host(self) -> None:
        """Copy every device weight to the host (and flush memory-mapped variables)."""
        with self._lock:
            self._weights_to_host()

    def _weights_to_host(self) -> None:
        """Read every device value first, then update the host copies and memmaps: a
        failure while reading changes no host data."""
        if self._ir._read_only_memmap:
            raise Exception(
                "Writing data from device to host is not possible as the `ir` contains a "
                "read-only memmap."
            )
        self._check_attached()
        assert self._device_state is not None
        weights: dict[Variable, np.ndarray] = {}
        all_replicas: dict[Variable, np.ndarray] = {}
        for var, value in zip(self._program.variables, self._device_state):
            host = storage_layout.to_host(self._device_to_host(value, var.dtype),
                                          self._program.layouts.get(var))
            if self._global_replicas > 1:
                if var.retrieval_mode == "all_replicas":
                    # Replicas may have drifted apart within a group: keep each one's value.
                    all_replicas[var] = host
                host = replication.from_replicas(host, var.replica_grouping)
            weights[var] = host.reshape(var.shape_on_host)
        variable_count = len(self._program.variables)
        buffers = {buffer: self._device_to_host(value, buffer.tensor_dtype)
                   for buffer, value in zip(self._program.remote_buffers,
                                            self._device_state[variable_count:])}
        self._host_all_replicas.update(all_replicas)
        self._host_buffers.update(buffers)
        for var, host in weights.items():
            current = self._host_weights[var]
            if isinstance(current, np.memmap):  # the memmap is the variable's host copy
                np.copyto(current, host)
            else:
                self._host_weights[var] = host
        self._host_in_sync = True
        for var in self._memmap_variables():
            self._sync_memmap(var)
            var._memmap_arr.flush()
        self.transfers.weights_to_host += 1
        _LOG.debug("Writing weights to host complete.")

    def _device_to_host(self, value: jax.Array, dtype: Any) -> np.ndarray:
        """A device value (a variable's or a remote buffer's) as a host array."""
        if self._processes > 1:
            host = replication.gather_global(value)
        else:
            # On the CPU np.asarray is a read-only view of the device buffer, not a copy (a
            # buffer that is not donated stays valid while the view lives).
            host = np.array(value) if self._donate else np.asarray(value)
        return float8_from_device(host, dtype) if dtype.is_float8 else host

    # ----------------------------------------------------------------- memmaps
    def _memmap_variables(self) -> list[Variable]:
        """The variables whose host data is a user's ``np.memmap`` (PopXL's
        ``_memmap_arr``): plain, remote and replica-sharded ones."""
        known = dict.fromkeys((*self._host_weights, *self._remote_variables, *self._sharded))
        return [var for var in known if var._memmap_arr is not None]

    def _sync_memmap(self, var: Variable) -> None:
        """Write ``var``'s host value (one per group) into its memmap, whole: the value
        is computed from the host copies before the memmap is touched."""
        memmap = var._memmap_arr
        value = self._group_value(var)
        if value is not memmap:
            np.copyto(memmap, value)

    def _group_value(self, var: Variable) -> np.ndarray:
        """A variable's host value from the host copies, one per group (its host shape)."""
        place = self._remote_variables.get(var)
        if var in self._sharded:
            shards = self._sharded[var]
            return replication.unshard(self._host_weights[shards.shard], shards.grouping,
                                       shards.shard_over, var.shape)
        if place is not None and place.shard_over is not None:
            chunks = out_of_slot(self._host_buffers[place.buffer][:, place.slot], 1,
                                 place.kept_shape(var))
            return replication.unshard(chunks, var.replica_grouping, place.shard_over,
                                       var.shape)
        if place is not None:
            host = self._host_buffers[place.buffer]
            if self._global_replicas > 1:
                return replication.from_replicas(out_of_slot(host[:, place.slot], 1, var.shape),
                                                 var.replica_grouping)
            return out_of_slot(host[place.slot], 0, var.shape)
        return self._host_weights[var]

    # ----------------------------------------------------------------- tensor data
    def get_tensor_data(self, tensor: Variable | Constant) -> np.ndarray:
        """The host value of a variable or constant (read-only; a memory-mapped variable
        gives its memmap itself, as in PopXL).

        Transfers the weights from the device first only if a run may have changed them
        since the last transfer, and only while attached.
        """
        return self.get_tensors_data([tensor])[tensor]

    def get_tensors_data(self, tensors: Iterable[Variable | Constant]
                         ) -> dict[Variable | Constant, np.ndarray]:
        """``get_tensor_data`` for several tensors with at most one transfer."""
        if isinstance(tensors, (Tensor, str)) or not isinstance(tensors, Iterable):
            raise TypeError(
                f"get_tensors_data takes an iterable of Variables and Constants, got "
                f"{type(tensors).__name__}. Use `get_tensor_data(t)` for one tensor, or "
                "`get_tensors_data([a, b])`."
            )
        tensors = list(tensors)
        for t in tensors:
            if not isinstance(t, (Variable, Constant)):
                raise TypeError(
                    f"{t} is not of type Constant or Variable. get_tensor_data is "
                    "notsupported for this type. Read other tensors by storing them to a "
                    "d2h stream with `ops.host_store`."
                )
            self._check_known(t)
        with self._lock:
            if (any(isinstance(t, Variable) for t in tensors) and self._attached
                    and not self._host_in_sync):
                self._weights_to_host()
            return {t: self._host_value(t) for t in tensors}

    def _check_known(self, tensor: Tensor) -> None:
        if (isinstance(tensor, Variable) and tensor not in self._host_weights
                and tensor not in self._remote_variables and tensor not in self._sharded):
            raise ValueError(
                f"Variable `{tensor.id}` is not part of this Session's program: it belongs to "
                "another Ir or was created after the Session was built. Build a new Session."
            )

    def _host_value(self, tensor: Variable | Constant) -> np.ndarray:
        if isinstance(tensor, Constant):
            data = tensor._data
        elif tensor.retrieval_mode == "all_replicas" and self._global_replicas > 1:
            data = self._replicas_value(tensor)
        else:
            data = self._group_value(tensor)
        memmap = None if isinstance(tensor, Constant) else tensor._memmap_arr
        if memmap is not None and np.shape(data) == memmap.shape:
            # PopXL's rule: a memory-mapped variable's host value is its memmap, which every
            # host write of this Session keeps up to date.
            return memmap
        # Always an ndarray (0-d for a scalar: indexing a slot of a buffer of scalars gives
        # a NumPy scalar), read-only: a view, so the Session's copy stays its own.
        view = np.asarray(data).view()
        view.flags.writeable = False
        return view

    def _replicas_value(self, tensor: Variable) -> np.ndarray:
        """A replicated ``"all_replicas"`` variable's host value: one row per replica."""
        place = self._remote_variables.get(tensor)
        if place is not None and place.shard_over is None:  # each replica's own slot
            return out_of_slot(self._host_buffers[place.buffer][:, place.slot], 1, tensor.shape)
        if tensor in self._sharded or place is not None:  # each replica its group's value
            return replication.to_replicas(self._group_value(tensor), tensor.replica_grouping,
                                           self._global_replicas)
        if tensor in self._host_all_replicas:  # as last read back
            return self._host_all_replicas[tensor]
        # Not read back since the replicas took their group's value.
        data = self._host_weights[tensor]
        grouping = tensor.replica_grouping
        if grouping.num_groups == 1:
            return np.broadcast_to(data, (self._global_replicas, *data.shape))
        return data[np.asarray(grouping.assignment)]

    def write_variable_data(self, tensor: Variable, data: Any) -> None:
        """Write a variable's host value (and its device value if attached)."""
        self.write_variables_data({tensor: data})

    def write_variables_data(self, tensors: Mapping[Variable, Any]) -> None:
        """Write several variables, with one device transfer if attached.

        Raises:
            TypeError: not a Variable, or the data's dtype is not the variable's.
            ValueError: the data's shape is not the variable's host shape, a number does
                not fit the variable's dtype, or the variable is backed by a read-only
                memmap.
        """
        self._write_checked(self._checked_writes(tensors))

    def _write_group_values(self, tensors: Mapping[Variable, Any]) -> None:
        """``write_variables_data`` of each variable's value per group (its host shape)
        for every retrieval mode: PopART's ``weightsFromHost`` sends each replica its
        group's value also for ``VariableRetrievalMode::AllReplicas``, which PopXL's
        ``write_variables_data`` refuses for groups of several replicas."""
        self._write_checked(self._checked_writes(tensors, all_replicas=True))

    def _write_checked(self, checked: Mapping[Variable, np.ndarray]) -> None:
        with self._lock:
            self._write_host(checked)
            if self._attached and checked:
                self._upload(checked)

    def _checked_writes(self, tensors: Mapping[Variable, Any], all_replicas: bool = False
                        ) -> dict[Variable, np.ndarray]:
        """``write_variables_data``'s checks: each variable (a sharded one as its shard
        variable) and its data as the host array to store (``all_replicas``: also for an
        ``"all_replicas"`` variable, as its group values)."""
        if not isinstance(tensors, Mapping):
            raise TypeError(
                f"write_variables_data takes a mapping from each Variable to its data, got "
                f"{type(tensors).__name__}. Use `write_variables_data({{v: data}})`, or "
                "`write_variable_data(v, data)` for one variable."
            )
        checked = {}
        for tensor, data in tensors.items():
            if not isinstance(tensor, Variable):
                raise TypeError(
                    f"Tensor {tensor.id} is not of type Variable. write_variable_data is not "
                    "supported for this type."
                )
            self._check_known(tensor)
            memmap = tensor._memmap_arr
            if memmap is not None and not memmap.flags.writeable:
                raise ValueError(
                    f"Variable `{tensor.id}` is backed by a read-only np.memmap (mode "
                    f"{memmap.mode!r}), and writing its data writes into that memmap. Open "
                    "the memmap with mode='r+' to write it, or build the variable from a "
                    "copy (`np.array(memmap)`)."
                )
            expected = tensor.dtype.as_numpy()
            if isinstance(data, (int, float, bool, np.number, np.bool_)):
                if tensor.dtype.is_float8:
                    raise TypeError(
                        f"Cannot write a Python number to float8 variable {tensor.id}: convert "
                        "it first with `popxl.fp8_utils.host_pow2scale_cast_to_fp8`."
                    )
                # A number takes the variable's dtype, but only if its value fits (and
                # only for a scalar variable: no conversion warning before a shape error).
                _check_host_shape(tensor, ())
                data = host_values.cast(np.asarray(data), expected,
                                        f"write_variable_data to `{tensor.id}`")
            data = np.asarray(data)
            if data.dtype != expected:
                raise TypeError(
                    f"The dtype of the input array ({data.dtype}) must match the equivalent type "
                    f"of the tensor {tensor.id} ({expected}). Convert it with "
                    f"`data.astype({expected})`."
                )
            _check_host_shape(tensor, data.shape)
            if tensor.retrieval_mode == "all_replicas" and not all_replicas \
                    and tensor.replica_grouping.group_size > 1:
                raise NotImplementedError(
                    f'Copying to tensor {tensor.id} with "all_replicas" retreval mode is not yet '
                    "supported."
                )
            if tensor in self._sharded:  # written as the chunks of its shard
                shards = self._sharded[tensor]
                tensor, data = shards.shard, replication.shard_chunks(
                    data, shards.grouping, shards.shard_over, self._global_replicas,
                    tensor.shape)
            checked[tensor] = data
        return checked

    def _write_host(self, checked: Mapping[Variable, np.ndarray]) -> None:
        """Store checked values in the host copies (the lock is held), and in the memmap of
        each memory-mapped variable written (for a sharded one, its handle's)."""
        handles = {shards.shard: handle for handle, shards in self._sharded.items()}
        for tensor, data in checked.items():
            self._host_all_replicas.pop(tensor, None)
            if tensor in self._remote_variables:
                buffer = self._remote_variables[tensor].buffer
                host = np.array(self._host_buffers[buffer])  # a writable copy
                self._set_slot(host, tensor, data)
                self._host_buffers[buffer] = host
            elif isinstance(self._host_weights[tensor], np.memmap):
                np.copyto(self._host_weights[tensor], data)
            else:
                self._host_weights[tensor] = np.array(data)
            owner = handles.get(tensor, tensor)
            if owner._memmap_arr is not None:
                self._sync_memmap(owner)

    @property
    def _pb_session(self) -> PopartSessionView:
        """PopART's session object as PopXL programs reach it (``session._pb_session``):
        a view that reads and writes this Session's weights."""
        return PopartSessionView(self)

    def _upload(self, written: Mapping[Variable, np.ndarray]) -> None:
        """Send only the written variables to the device (PopXL re-sends all weights and
        thereby reverts the others to stale host values). A remote variable is written
        into its slot on the device: the host copy of the rest of its buffer may be older
        than the last run."""
        assert self._device_state is not None
        state = list(self._device_state)
        keys = (*self._program.variables, *self._program.remote_buffers)
        index = {key: i for i, key in enumerate(keys)}
        plain = [v for v in written if v not in self._remote_variables]
        for var, array in zip(plain, self._variables_to_device(plain)):
            state[index[var]] = array
        placement = self._shardings()[0]
        replicated = self._global_replicas > 1
        with self._x64():
            for var in written:
                if var not in self._remote_variables:
                    continue
                place = self._remote_variables[var]
                host = self._host_buffers[place.buffer]
                value = host[:, place.slot] if replicated else host[place.slot]
                value = self._put(host_to_device_array(value), placement)
                position = index[place.buffer]
                updated = _write_slot(state[position], value, place.slot, replicated)
                state[position] = jax.device_put(updated, placement)
        self._device_state = tuple(state)
        self.transfers.weights_from_host += 1
        _LOG.debug("Writing weights from host complete (%d written variables).", len(written))


def _check_host_shape(tensor: Variable, shape: tuple[int, ...]) -> None:
    if shape != tensor.shape_on_host:
        raise ValueError(
            f"The shape of the input array {shape} must match the shape of the "
            f"tensor {tensor.id} on the host {tensor.shape_on_host}."
        )


@jax.jit(static_argnums=(2, 3))
def _write_slot(buffer: jax.Array, value: jax.Array, slot: int, replicated: bool
                ) -> jax.Array:
    """``buffer`` with slot ``slot`` replaced by ``value`` (per replica when replicated:
    ``buffer`` is ``[R, entries, ...]`` and ``value`` ``[R, ...]``)."""
    return buffer.at[:, slot].set(value) if replicated else buffer.at[slot].set(value)


class PopartSessionView:
    """``session._pb_session``: the PopART session calls PopXL programs make, acting on
    the ipuxl Session ``session`` (the same host weights, device state and attachment).

    * ``writeWeights(popart.PyWeightsIO({tensor id: array}))`` writes host values only,
      as PopART does: ``weightsFromHost()`` then sends every weight to the device;
    * ``weightsFromHost()`` / ``weightsToHost()``: ``session.weights_from_host()`` /
      ``session.weights_to_host()`` (attached only);
    * ``setEngineIsLoaded(loaded)`` / ``isEngineLoaded()``: whether the session holds the
      device (``with session:``); setting False ends nothing, as in PopART, where it only
      records that another engine was loaded.
    """

    def __init__(self, session: SessionData):
        self._session = session

    def writeWeights(self, weightsIo: Any) -> None:  # noqa: N802, N803 - PopART's names
        """Set the host values of the variables named in ``weightsIo``.

        Raises:
            TypeError: ``weightsIo`` is not a ``popart.PyWeightsIO`` (and
                ``write_variables_data``'s type errors).
            KeyError: an id is not a variable of this Session's program.
            ValueError: ``write_variables_data``'s shape and value errors.
        """
        from ipuxl.popart.stepio import PyWeightsIO

        if not isinstance(weightsIo, PyWeightsIO):
            raise TypeError(
                f"writeWeights takes a popart.PyWeightsIO, got {type(weightsIo).__name__}. "
                "Wrap the arrays: `popart.PyWeightsIO({tensor.id: array})`."
            )
        session = self._session
        by_id = {v.id: v for v in (*session._host_weights, *session._remote_variables,
                                   *session._sharded)}
        unknown = sorted(set(weightsIo.weights) - set(by_id))
        if unknown:
            raise KeyError(
                f"writeWeights: {unknown} are not variables of this Session's program "
                f"(variables: {sorted(by_id)}). Use the ids of the Ir's variables."
            )
        checked = session._checked_writes(
            {by_id[name]: data for name, data in weightsIo.weights.items()})
        with session._lock:
            if session._attached and not session._host_in_sync:
                session._weights_to_host()  # so weightsFromHost sends no stale values
            session._write_host(checked)

    def weightsFromHost(self) -> None:  # noqa: N802
        """Send every host weight to the device (attached only)."""
        self._session.weights_from_host()

    def weightsToHost(self) -> None:  # noqa: N802
        """Read every weight back from the device (attached only)."""
        self._session.weights_to_host()

    def setEngineIsLoaded(self, loaded: bool) -> None:  # noqa: N802
        """Record whether this session's engine is the one loaded on the device."""
        self._session._engine_loaded = bool(loaded)

    def isEngineLoaded(self) -> bool:  # noqa: N802
        """Whether the engine is loaded: attached and not marked otherwise."""
        return self._session._attached and self._session._engine_loaded
