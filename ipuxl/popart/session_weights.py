"""The host's copy of a PopART session's weights: ``weightsFromHost``, ``weightsToHost``,
``readWeights``, ``writeWeights``, ``modelToHost``, ``updateExternallySavedTensorLocations``
and ``resetHostWeights``.

PopART keeps one host copy of the weights (and of the optimizer state) beside the
device's: ``weightsToHost()`` copies the device's into it, ``readWeights``/``writeWeights``
read and write it, ``weightsFromHost()`` copies it to the device, and ``modelToHost(path)``
saves the model with the device's weights. :class:`SessionWeights` is that part of
:class:`ipuxl.popart.session._Session` (a mixin: the session holds ``_host_weights``,
``_host_state``, ``_host_replicas``, ``_program``, ``_session`` and ``_lock``).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ipuxl import replication
from ipuxl.host_values import cast
from ipuxl.popart.arguments import output_array
from ipuxl.popart.errors import popart_exception
from ipuxl.popart.stepio import PyWeightsIO
from ipuxl.popart.variable_groups import replica_values, returns_replicas

__all__ = ["SessionWeights"]


class SessionWeights:
    """The host weights of a PopART session (see the module docstring)."""

    _host_weights: dict[str, np.ndarray]
    _host_state: dict[str, np.ndarray]
    _host_replicas: dict[str, np.ndarray]
    _device_has_host_weights: bool
    _model_to_save: Any = None  # made by _saved_model

    def weightsFromHost(self) -> None:  # noqa: N802
        """Copy the host's weights and optimizer state to the device (the state as it
        started, as ``weightsToHost`` last read it, or as ``resetHostWeights`` set it).
        Nothing is sent while the device holds them already: right after
        ``prepareDevice`` (which uploads the weights the host copy started from) or a
        ``weightsFromHost``, with no run, write or reset since."""
        with self._lock:
            session = self._require_device("weightsFromHost")
            if not self._device_has_host_weights:
                values = {self._program.weights[n]: a for n, a in self._host_weights.items()}
                values.update({self._program.state[n]: a
                               for n, a in self._host_state.items()})
                session._write_group_values(values)  # AllReplicas weights too
                self._device_has_host_weights = not self._from_ir
            self._weights_written = True

    def weightsToHost(self) -> None:  # noqa: N802
        """Copy the device's weights and optimizer state into the host's copy."""
        with self._lock:
            session = self._require_device("weightsToHost")
            variables = {**self._program.weights, **self._program.state}
            data = session.get_tensors_data(list(variables.values()))
            for name, variable in self._program.weights.items():
                self._set_host_weight(name, np.array(data[variable]))
            for name, variable in self._program.state.items():
                self._host_state[name] = np.array(data[variable])

    def readWeights(self, weightsIo: PyWeightsIO) -> None:  # noqa: N802, N803
        """Copy the host's weights (and optimizer state) into ``weightsIo``'s arrays."""
        if not isinstance(weightsIo, PyWeightsIO):
            raise TypeError(f"readWeights takes a popart.PyWeightsIO, got "
                            f"{type(weightsIo).__name__}.")
        with self._lock:
            values = {name: np.asarray(self._host_value(name)) for name in weightsIo.weights}
            targets = {name: output_array(
                weightsIo.weights[name], f"readWeights: the array of {name!r}", value.dtype,
                value.shape, f"Pass np.zeros({list(value.shape)}, np.{value.dtype}).")
                for name, value in values.items()}
            for name, target in targets.items():
                target[...] = values[name].reshape(target.shape)

    def _set_host_weight(self, name: str, value: np.ndarray) -> None:
        """Keep weight ``name``'s value as readWeights gives it (:func:`replica_values`)."""
        self._device_has_host_weights = False
        variable = self._program.weights[name]
        if returns_replicas(variable, self.replicationFactor):
            self._host_replicas[name] = value
            value = replication.from_replicas(value, variable.replica_grouping)
        self._host_weights[name] = value

    def _replica_values(self, name: str, groups: Any) -> Any:
        return replica_values(self._program.weights[name], groups, self.replicationFactor)

    def _host_value(self, name: str) -> np.ndarray:
        if name in self._host_replicas:
            return self._host_replicas[name]
        if name in self._host_weights:
            return self._replica_values(name, self._host_weights[name])
        if name in self._program.state and self._session is not None:
            return self._session.get_tensor_data(self._program.state[name])
        raise popart_exception(
            f"readWeights: {name!r} is not a weight of the model (weights: "
            f"{sorted(self._host_weights)}).")

    def writeWeights(self, weightsIo: PyWeightsIO) -> None:  # noqa: N802, N803
        """Set the host's weights from ``weightsIo`` (``weightsFromHost`` uploads them),
        each shaped as readWeights gives it (an AllReplicas weight ``[R, *shape]``).

        Raises:
            popart_exception: an inference session with ``constantWeights`` (the
                default), whose weights PopART compiles as constants (its message).
        """
        if not isinstance(weightsIo, PyWeightsIO):
            raise TypeError(f"writeWeights takes a popart.PyWeightsIO, got "
                            f"{type(weightsIo).__name__}.")
        if not self._training and not self._from_ir and \
                getattr(self.options, "constantWeights", True):
            raise popart_exception(
                "Cannot call writeWeights when constantWeights is set. Set `constantWeights` "
                "to False in the `SessionOption`s when initialising the session to enable "
                "this behaviour.")
        with self._lock:
            new = {}
            for name, value in weightsIo.weights.items():
                if name not in self._host_weights:
                    raise popart_exception(
                        f"writeWeights: {name!r} is not a weight of the model (weights: "
                        f"{sorted(self._host_weights)}).")
                current = self._host_value(name)
                array = cast(np.asarray(value), current.dtype, f"writeWeights {name!r}",
                             f"The weight is {current.dtype}: convert the data first.")
                if array.size != current.size:
                    raise popart_exception(
                        f"writeWeights: {name!r} has {current.size} elements "
                        f"{list(current.shape)}, got {array.size}.")
                new[name] = array.reshape(current.shape).copy()
            for name, array in new.items():
                self._set_host_weight(name, array)

    def modelToHost(self, fn: str) -> None:  # noqa: N802
        """Save the model with the device's current weights to ``fn``; a training
        session's optimizer state (``Accl___<weight>``...) is saved as more initializers,
        as PopART does. An externally stored weight (and its state) is written back into
        its file, at its offset, and the model saved keeps pointing there.

        Raises:
            popart_exception: a session running a popxl Ir; or an externally stored
                weight's file is not where its location says (PopART's message: a
                relative location is relative to the current directory).
        """
        import onnx

        from ipuxl.onnx import external_data
        from ipuxl.popart.initializers import initializer_like, little_endian_bytes

        if self._from_ir:
            raise popart_exception(
                "modelToHost: this session runs a popxl Ir (InferenceSession.fromIr), which "
                "has no ONNX model to save. Read the weights with readWeights instead.")
        with self._lock:
            if self._session is not None:
                self.weightsToHost()
            model = onnx.ModelProto()
            model.CopyFrom(self._saved_model())
            current = {**self._host_state, **self._host_weights}
            stored = [tensor for tensor in model.graph.initializer
                      if tensor.name in current and external_data.is_external(tensor)]
            for tensor in stored:  # all checked before any is written
                location = external_data.external_data(tensor, "weight").location
                if not os.path.isfile(location):
                    raise popart_exception(
                        f"Unrecognised file name '{location}' for externally stored tensor "
                        f"'{tensor.name}'. A relative location is relative to the current "
                        f"directory ({os.getcwd()}): call modelToHost from the folder it "
                        "was saved in, or give the data a new file with "
                        "session.updateExternallySavedTensorLocations(old, new).")
            for tensor in stored:
                external_data.write_bytes(tensor, little_endian_bytes(current[tensor.name]))
            for tensor in model.graph.initializer:  # each stored as it was
                if tensor.name in current and not external_data.is_external(tensor):
                    tensor.CopyFrom(initializer_like(tensor, current[tensor.name]))
            onnx.save(model, fn)

    def updateExternallySavedTensorLocations(self, fromLocation: str,  # noqa: N802, N803
                                             toLocation: str) -> None:  # noqa: N803
        """Copy the data of the weights (and optimizer state) stored externally in the
        file ``fromLocation`` to the new file ``toLocation``, where the next
        ``modelToHost`` writes them (checkpoints in new files). ``fromLocation`` is
        compared with the locations as the model stores them.

        Raises:
            popart_exception: ``toLocation`` exists, ``fromLocation`` does not, or no
                initializer is stored in ``fromLocation`` (PopART's messages).
        """
        from ipuxl.onnx import external_data

        moving = f"Updating externally saved tensor location from file '{fromLocation}' " \
                 f"to file '{toLocation}', but file"
        if os.path.exists(toLocation):
            raise popart_exception(f"{moving} '{toLocation}' already exists. Choose a new "
                                   "file: the existing one is not overwritten.")
        if not os.path.exists(fromLocation):
            raise popart_exception(f"{moving} '{fromLocation}' does not exist. Give the "
                                   "location the weights are stored in now.")
        with self._lock:
            model = self._saved_model()
            tensors = [tensor for tensor in model.graph.initializer
                       if external_data.is_external(tensor) and external_data.external_data(
                           tensor, f"initializer {tensor.name!r}").location == fromLocation]
            if not tensors:
                stored = sorted({external_data.external_data(t, "initializer").location
                                 for t in external_data.external_tensors(model)})
                raise popart_exception(
                    f"No ONNX model initializers have external location set to "
                    f"'{fromLocation}' (locations: {stored}). Give one of those, as the "
                    "model stores it.")
            external_data.move(tensors, toLocation)

    def _saved_model(self) -> Any:
        """The model ``modelToHost`` saves, made on first use: the session's model with
        its optimizer state as initializers, the state of an externally stored weight
        appended to the weight's file once (:func:`model_with_state`); it keeps where
        each external tensor is (``updateExternallySavedTensorLocations`` changes it)."""
        from ipuxl.popart.initializers import model_with_state

        if self._model_to_save is None:
            self._model_to_save = model_with_state(self._program.model, self._host_state)
        return self._model_to_save

    def resetHostWeights(self, modelProtoOrFilename: Any,  # noqa: N802, N803
                         ignoreWeightsInModelWithoutCorrespondingHostWeight: bool = False  # noqa: N803
                         ) -> None:
        """Replace the host's weights (and optimizer state) with the initializers of
        another model, such as one ``modelToHost`` saved; ``weightsFromHost`` uploads
        them. Initializers that are constants of this session's model are left as they
        are.

        Raises:
            popart_exception: an inference session with ``constantWeights`` (the
                default), or an initializer that is no tensor of this session, unless
                ``ignoreWeightsInModelWithoutCorrespondingHostWeight`` (PopART's
                messages).
        """
        from ipuxl.onnx.importer import load_model
        from ipuxl.onnx.model_ir import initializer_arrays

        if not self._training and getattr(self.options, "constantWeights", True):
            raise popart_exception(
                "Cannot call resetHostWeights when constantWeights is set: set "
                "SessionOptions.constantWeights = False for an InferenceSession whose "
                "weights change.")
        from ipuxl.popart.initializers import unpacked_float16

        arrays = initializer_arrays(unpacked_float16(load_model(modelProtoOrFilename)).graph)
        with self._lock:
            weights, state = {}, {}
            for name, array in arrays.items():
                if name in self._host_weights:  # the model's: one value per group
                    weights[name] = self._replica_values(name, array)
                elif name in self._program.state:
                    current = self._program.state[name]
                    state[name] = cast(np.asarray(array).reshape(current.shape),
                                       current.dtype.as_numpy(), f"resetHostWeights {name!r}",
                                       "Save the model with this session's modelToHost.")
                elif name not in self._program.infos \
                        and not ignoreWeightsInModelWithoutCorrespondingHostWeight:
                    raise popart_exception(f"resetWeights, no tensor '{name}' in tensors")
            self.writeWeights(PyWeightsIO(weights))
            self._host_state.update(state)
            self._device_has_host_weights = False
