"""``popart.InferenceSession`` and ``popart.TrainingSession`` on ipuxl.

A session imports the ONNX model into one ipuxl Ir (:mod:`ipuxl.popart.program`) and
runs it in a ``popxl.Session`` on the device given (``createCpuDevice()`` or
``createIpuModelDevice({...})``, whose IPU model reports memory and raises
``popart.OutOfMemoryException`` for a model that does not fit). The PopART workflow::

    session = popart.InferenceSession(fnModel=proto, dataFlow=popart.DataFlow(
        1, {o: popart.AnchorReturnType("ALL")}), deviceInfo=device)
    session.prepareDevice()            # compiles (one XLA executable)
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({a: data_a, b: data_b}, anchors))

The host keeps its own copy of the weights, as PopART does: ``weightsToHost()`` copies
the device's weights into it, ``readWeights``/``writeWeights`` read and write it,
``weightsFromHost()`` copies it to the device, and ``modelToHost(path)`` saves the model
with the device's weights (:mod:`ipuxl.popart.session_weights`).

Host values cross with PopXL's rules: input data and written weights are converted to the
tensor's dtype with :func:`ipuxl.host_values.cast` (a value that would change is
refused), and the arrays the session writes into (anchors, ``readWeights`` targets) must
have exactly the tensor's dtype and number of elements and be writeable; they are all
checked before the step runs.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import weakref
from typing import Any

import numpy as np

from ipuxl import cache_folder
from ipuxl.popart.arguments import output_array
from ipuxl.popart.dataflow import AnchorReturnTypeId, DataFlow
from ipuxl.popart.device_info import DeviceConnectionType, DeviceInfo
from ipuxl.popart.errors import popart_exception, popart_runtime_error
from ipuxl.popart.pattern_requirements import check_pattern_requirements
from ipuxl.popart.program import Program, build_program
from ipuxl.popart.session_checks import check_engine_options, check_step_inputs
from ipuxl.popart.session_cycles import SessionCycles
from ipuxl.popart.session_random import SessionRandomness
from ipuxl.popart.session_weights import SessionWeights
from ipuxl.popart.stepio import PyStepIO, PyStepIOCallback
from ipuxl.popart.stream_layout import input_stream, input_streams

_DEVICE_LOG = logging.getLogger("popart.devicex")

__all__ = ["InferenceSession", "TrainingSession"]


class _Session(SessionWeights, SessionRandomness, SessionCycles):
    """What inference and training sessions share."""

    def __init__(self, fnModel: Any, dataFlow: DataFlow, deviceInfo: Any,  # noqa: N803
                 inputShapeInfo: Any = None, patterns: Any = None,  # noqa: N803
                 userOptions: Any = None, name: str = "session", *,  # noqa: N803
                 loss: str | None = None, losses: Any = None, optimizer: Any = None):
        if not isinstance(dataFlow, DataFlow):
            raise TypeError(f"dataFlow must be a popart.DataFlow, got "
                            f"{type(dataFlow).__name__}.")
        _check_device(deviceInfo)
        program = build_program(
            fnModel, dataFlow, input_shape_info=inputShapeInfo, options=userOptions,
            loss=loss, losses=losses, optimizer=optimizer)
        # PopART's ONNX inputs: the graph's inputs, initialized ones included
        self._start(program, dataFlow, deviceInfo, userOptions, name,
                    [i.name for i in program.model.graph.input], optimizer)
        self.patterns = patterns

    def _start(self, program: Program, dataFlow: DataFlow, deviceInfo: Any,  # noqa: N803
               options: Any, name: str, model_inputs: list[str],
               optimizer: Any = None) -> None:
        """Take ``program`` as the session's, with the host's copy of its weights;
        ``model_inputs`` are the ids a PyStepIO may give data for."""
        self._model_inputs = model_inputs
        self._from_ir = False  # made by InferenceSession.fromIr: no ONNX model
        self.dataFlow = dataFlow  # noqa: N815 - PopART's attribute
        self.deviceInfo = deviceInfo  # noqa: N815
        self.options = options
        self.name = name
        self._optimizer = optimizer
        self._program = program
        self.replicationFactor = self._program.plan.replicas  # noqa: N815
        self.accumulationFactor = self._program.plan.accumulation  # noqa: N815
        self._streams = input_streams(self._program)
        # Synthetic data: each input's value is fixed now, as PopART's Ir fixes it.
        self._synthetic = None
        if self._synthetic_data():
            mode = self.options.syntheticDataMode.name
            self._synthetic = {self._program.inputs[n]: stream.synthetic(mode)
                               for n, stream in self._streams.items()}
        # A read-only value (the importer's view of the model's bytes) cannot change
        # under the host copy, which is replaced, never written in place: it is shared.
        self._host_weights = {name: _private(v._data) for name, v in
                              self._program.weights.items()}
        self._host_replicas: dict[str, np.ndarray] = {}  # returns_replicas weights
        # The host's copy of the optimizer state (Accl___<weight>...), as PopART keeps one.
        self._host_state = {name: np.array(v._data) for name, v in
                            self._program.state.items()}
        self._session: Any = None
        self._weights_written = False  # PopART's weightsFromHostCalled
        # The device holds exactly the host's weights and optimizer state (just attached,
        # or just written): weightsFromHost has nothing to send (SessionWeights).
        self._device_has_host_weights = False
        self._lock = threading.RLock()
        self._seed: int | None = None
        self._training = optimizer is not None
        # Where the device's shared state lives: the DeviceInfo, or this session for a
        # device given as a plain string.
        self._device_state: Any = deviceInfo if isinstance(deviceInfo, DeviceInfo) else self

    # ---------------------------------------------------------------- the device
    def prepareDevice(self, loadEngine: bool = True, err: Any = None) -> None:  # noqa: N802, N803
        """Compile the program (the IPU model checks that it fits; PopART's log line
        ``Graph compiled``), then, with ``loadEngine``, load it onto the device.

        Raises:
            poplar_exception: an engine option Poplar does not know
                (:func:`~ipuxl.popart.session_checks.check_engine_options`).
        """

        with self._lock:
            if self._session is None:
                device = self.deviceInfo
                check_engine_options(self.options)
                if not self._from_ir:
                    check_pattern_requirements(
                        self._program.model, self.patterns, weights=self._program.weights,
                        anchors=self.dataFlow.anchors(), training=self._training)
                _dump_ir(self._program.ir)
                self._session = _compile(self._program, device)
                self._session.__enter__()  # uploads the weights the host copy started from
                self._device_has_host_weights = not self._from_ir
                _write_tile_map(self._session)
                _DEVICE_LOG.info("Graph compiled")
            if loadEngine:
                self.loadEngineAndConnectStreams()

    def loadEngineAndConnectStreams(self) -> None:  # noqa: N802
        """Load the compiled program onto the device (PopART's log line ``Engine
        loaded``), attaching an ``OnDemand`` device first. ``run`` does this when another
        session's program was loaded onto the device since.

        Raises:
            popart_exception: no compiled program yet, or an ``OnDemand`` device whose
                IPUs another device holds (PopART's messages).
        """
        with self._lock:
            if self._session is None:
                raise popart_exception("Trying to load an engine but no compiled engine. Did "
                                       "you forget to call prepareDevice()?")
            device = self.deviceInfo
            if getattr(device, "connectionType", None) is DeviceConnectionType.OnDemand \
                    and not device.isAttached and not device.tryAttachUntilTimeout():
                raise popart_exception("Failed to attach to device: another device holds its "
                                       "IPUs. Detach that device first.")
            self._device_state.loaded_engine = weakref.ref(self)
            _DEVICE_LOG.info("Engine loaded")

    def _engine_loaded(self) -> bool:
        loaded = self._device_state.loaded_engine
        return loaded is not None and loaded() is self

    def compileAndExport(self, executablePath: str) -> None:  # noqa: N802, N803
        """Compile and write the program, with the current weights, as one package file
        that ``ipuxl.runtime`` serves (PopART writes a PopEF file here; see
        ``docs/runtime.md``). The package's stream anchors are the model's inputs and
        anchors, in the Ir's per-step layout."""
        from ipuxl.session_export import executable_path

        path = executable_path(executablePath, str(self.deviceInfo.type))
        self.prepareDevice()
        with self._lock:
            self._session.save(path)

    def _serializeIr(self, format: Any) -> str:  # noqa: N802, A002 - PopART's names
        """The program as PopART's IR JSON (see :mod:`ipuxl.popart.ir_json`); ``format``
        is ``popart.IrSerializationFormat.JSON``, the one format PopART has."""
        from ipuxl.popart.ir_json import serialize_ir
        from ipuxl.popart.session_option_types import IrSerializationFormat

        if format is not IrSerializationFormat.JSON:
            raise TypeError(f"_serializeIr: format must be popart.IrSerializationFormat.JSON, "
                            f"got {format!r}.")
        return serialize_ir(self._program, self.options, self.patterns)

    def getIr(self) -> Any:  # noqa: N802
        """The ipuxl Ir the session runs (prints with ``print``)."""
        return self._program.ir

    def _require_device(self, what: str) -> Any:
        if self._session is None:
            raise popart_exception(
                f"{what}: the device is not prepared. Call session.prepareDevice() first.")
        return self._session

    # ---------------------------------------------------------------- anchors
    def _anchor_shape(self, anchor: str) -> tuple[int, ...]:
        shape, _ = self._program.infos[anchor]
        plan, art = self._program.plan, self.dataFlow.art(anchor)
        lead = []
        if art.id() is AnchorReturnTypeId.All:
            lead = [plan.batches_per_step, plan.accumulation, plan.replicas]
        elif art.id() is AnchorReturnTypeId.EveryN:
            lead = [plan.batches_per_step // art.rp(), plan.accumulation, plan.replicas]
        else:
            lead = [plan.replicas]
        return tuple(d for d in lead if d > 1) + tuple(shape)

    def initAnchorArrays(self) -> dict[str, np.ndarray]:  # noqa: N802
        """A zero array of each anchor's returned shape (PopART's rule, see DataFlow)."""
        return {anchor: np.zeros(self._anchor_shape(anchor),
                                 self._program.infos[anchor][1].as_numpy())
                for anchor in self.dataFlow.anchors()}

    def getInfo(self, tensor_id: str) -> Any:  # noqa: N802
        """``TensorInfo`` (dtype and shape of one micro-batch) of a tensor of the model."""
        from ipuxl.popart.tensor_info import TensorInfo

        if tensor_id not in self._program.infos:
            raise popart_exception(f"getInfo: no tensor {tensor_id!r} in the model.")
        shape, dtype = self._program.infos[tensor_id]
        return TensorInfo(_popart_dtype(dtype), list(shape))

    # ---------------------------------------------------------------- running
    def run(self, stepio: Any, debugName: str = "") -> None:  # noqa: N803
        """One step: ``batchesPerStep`` batches, inputs from and anchors into ``stepio``."""
        with self._lock:
            session = self._require_device("run")
            self._device_has_host_weights = False  # a step may update them
            if self._training and self._program.weights and not self._weights_written:
                raise popart_runtime_error(
                    "Must call weightsFromHost before run as the model has initializers and "
                    "the session has been created in training mode")
            if not isinstance(stepio, (PyStepIO, PyStepIOCallback)):
                raise TypeError("run takes a popart.PyStepIO or popart.PyStepIOCallback, got "
                                f"{type(stepio).__name__}.")
            synthetic = self._synthetic is not None
            if synthetic:  # no host data in, no anchors out
                feed = self._synthetic
            elif isinstance(stepio, PyStepIOCallback):
                feed = {self._program.inputs[n]: stream.from_callback(stepio)
                        for n, stream in self._streams.items()}
            else:
                if stepio.runtime_asserts:
                    check_step_inputs(stepio.inputs, self._program, self._model_inputs,
                                      self._input_elements)
                for anchor in self._program.anchors:
                    self._anchor_array(stepio, anchor)
                feed = {self._program.inputs[n]: stream.from_stepio(stepio)
                        for n, stream in self._streams.items()}
            if not self._engine_loaded():
                self.loadEngineAndConnectStreams()
            outputs = session.run(feed)
            self._ran = True
            self._advance_rng_state()
            if synthetic:
                return
            for anchor, stream in self._program.anchors.items():
                value = self._anchor_value(anchor, np.asarray(outputs[stream]))
                if isinstance(stepio, PyStepIOCallback):
                    self._scatter_callback(stepio, anchor, value)
                else:
                    self._write_anchor(stepio, anchor, value)

    def _input_elements(self, name: str) -> tuple[int, str]:
        """How many elements a step's array for input ``name`` has, and how it is laid
        out (for messages): :mod:`ipuxl.popart.stream_layout`."""
        stream = self._streams.get(name) or input_stream(self._program, name)
        return stream.elements, stream.layout()

    def _anchor_value(self, anchor: str, data: np.ndarray) -> np.ndarray:
        plan = self._program.plan
        shape, _ = self._program.infos[anchor]
        data = data.reshape(plan.batches_per_step, plan.accumulation, plan.replicas, *shape)
        art = self.dataFlow.art(anchor)
        if art.id() is AnchorReturnTypeId.EveryN:  # every N-th micro-batch of the step
            data = data.reshape(-1, plan.replicas, *shape)[art.rp() - 1::art.rp()]
        elif art.id() is AnchorReturnTypeId.Final:
            data = data[-1, -1]
        elif art.id() is AnchorReturnTypeId.Sum:
            data = data.sum(axis=(0, 1), dtype=data.dtype)
        return data.reshape(self._anchor_shape(anchor))

    def _anchor_array(self, stepio: PyStepIO, anchor: str) -> np.ndarray:
        """The user's array for ``anchor``, checked before the run writes it."""
        if anchor not in stepio.outputs:
            raise popart_exception(
                f"No output array for anchor {anchor!r} in the PyStepIO: use "
                "session.initAnchorArrays() to make them.")
        return output_array(stepio.outputs[anchor], f"The array of anchor {anchor!r}",
                            self._program.infos[anchor][1].as_numpy(),
                            self._anchor_shape(anchor),
                            "Use session.initAnchorArrays() to make the anchor arrays.")

    def _write_anchor(self, stepio: PyStepIO, anchor: str, value: np.ndarray) -> None:
        target = self._anchor_array(stepio, anchor)
        target[...] = value.reshape(target.shape)  # any strides: the user's memory

    def _scatter_callback(self, stepio: PyStepIOCallback, anchor: str,
                          value: np.ndarray) -> None:
        art = self.dataFlow.art(anchor)
        shape = self._program.infos[anchor][0]
        pieces = [value] if art.id() in (AnchorReturnTypeId.Final, AnchorReturnTypeId.Sum) \
            else list(value.reshape(-1, *shape))
        for piece in pieces:
            target = output_array(stepio.output_callback(anchor),
                                  f"The array output_callback({anchor!r}) returned",
                                  value.dtype, piece.shape,
                                  "Return a writeable numpy array of the anchor's dtype and "
                                  "shape.")
            target[...] = np.asarray(piece).reshape(target.shape)
            stepio.output_complete_callback(anchor)

    # ---------------------------------------------------------------- reports
    def getSummaryReport(self, resetProfile: bool = True) -> str:  # noqa: N802, N803
        """The IPU model's summary on an IPU model device; else a note."""
        report = _report_of(self._require_device("getSummaryReport"))
        return report.summary() if report is not None else "Execution profiling not enabled"

    def getExecutionReport(self, useCbor: bool = False, resetProfile: bool = True) -> str:  # noqa: N802, N803
        return '{"profilerMode":"NONE"}'

    def getGraphReport(self, useCbor: bool = False) -> str:  # noqa: N802, N803
        report = _report_of(self._require_device("getGraphReport"))
        return json.dumps(report.to_json()) if report is not None else "{}"

    def detach(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.__exit__(None, None, None)
                self._session = None

    def __del__(self) -> None:
        try:
            self.detach()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class InferenceSession(_Session):
    """``InferenceSession(fnModel, dataFlow, deviceInfo, inputShapeInfo=None,
    patterns=None, userOptions=None, name="inference")``."""

    def __init__(self, fnModel: Any, dataFlow: DataFlow, deviceInfo: Any,  # noqa: N803
                 inputShapeInfo: Any = None, patterns: Any = None,  # noqa: N803
                 userOptions: Any = None, name: str = "inference"):  # noqa: N803
        super().__init__(fnModel, dataFlow, deviceInfo, inputShapeInfo, patterns, userOptions,
                         name)
        # Inference programs keep their executable in the user's cache folder by default.
        cache_folder.use_for_inference(self._program.ir, userOptions)

    @classmethod
    def fromIr(cls, ir: Any, deviceInfo: Any, name: str = "fromIr") -> InferenceSession:  # noqa: N802, N803
        """A session that runs a PopXL Ir, given as PopART's view ``popxl_ir._pb_ir``
        with its DataFlow set (``setDataFlow``): inputs and anchors are its streams'
        tensor ids, weights its variables (see :mod:`ipuxl.popart.session_from_ir`).

        Raises:
            TypeError: ``ir`` is not PopART's Ir view.
            popart_exception: no deviceInfo; the DataFlow names no anchor, or a tensor
                that is no d2h stream of the Ir.
        """
        from ipuxl.popart.session_from_ir import program_from_ir

        _check_device(deviceInfo)
        program = program_from_ir(ir)
        session = cls.__new__(cls)
        session._start(program, ir.getDataFlow(), deviceInfo, ir.getSessionOptions(), name,
                       list(program.inputs))
        session.patterns = None
        session._from_ir = True
        return session


class TrainingSession(_Session):
    """``TrainingSession(fnModel, dataFlow, loss, optimizer, deviceInfo,
    inputShapeInfo=None, patterns=None, userOptions=None, name="training")``; the seed's
    form ``losses=[popart.NllLoss(...)]`` works too."""

    def __init__(self, fnModel: Any, dataFlow: DataFlow = None, loss: Any = None,  # noqa: N803
                 optimizer: Any = None, deviceInfo: Any = None,  # noqa: N803
                 inputShapeInfo: Any = None, patterns: Any = None,  # noqa: N803
                 userOptions: Any = None, name: str = "training", *,  # noqa: N803
                 losses: Any = None):
        if isinstance(loss, (list, tuple)):
            loss, losses = None, loss
        if optimizer is None:
            raise popart_exception("A TrainingSession needs an optimizer: popart.SGD(...), "
                                   "ConstSGD, Adam or Adaptive.")
        super().__init__(fnModel, dataFlow, deviceInfo, inputShapeInfo, patterns, userOptions,
                         name, loss=loss, losses=losses, optimizer=optimizer)

    def updateOptimizerFromHost(self, optimizer: Any) -> None:  # noqa: N802
        """Write a new optimizer's non-constant values to the device (no recompile)."""
        with self._lock:
            self._optimizer.compatible_with(optimizer)
            values = {}
            for name, variable in self._program.hyper.items():
                key, _, weight = name.partition("___")
                weight = "" if weight == "default___" else weight
                if key == "lossScaling":
                    values[variable] = np.float32(optimizer.lossScaling.val)
                else:
                    values[variable] = np.float32(optimizer.hyper(weight, key)[1].val)
            self._optimizer = optimizer
            if values:
                self._require_device("updateOptimizerFromHost").write_variables_data(values)

    def optimizerFromHost(self) -> None:  # noqa: N802
        """PopART's second half of an optimizer update: done by updateOptimizerFromHost."""


def _check_device(device: Any) -> None:
    if device is None:
        raise popart_exception(
            "No deviceInfo: pass popart.DeviceManager().createCpuDevice() or "
            "createIpuModelDevice({...}).")


def _report_of(session: Any) -> Any:
    """The IPU model's report of a Session on an IPU model device; None on the CPU."""
    try:
        return session.report
    except RuntimeError:
        return None


def _compile(program: Any, device: Any) -> Any:
    """The ipuxl Session of ``program`` on ``device``. A CPU device also runs programs
    sharded over several virtual graphs or replicated (PopART's needs an IPU model):
    neither changes a value, so ipuxl runs them on the one CPU, with the IPU model's
    placement and replication rules and no memory verdict."""
    from ipuxl.devices import devices_needed
    from ipuxl.session import Session

    if str(device) == "cpu" and devices_needed(program.ir) > 1:
        from ipuxl.popart.devices import DeviceManager

        ipus = DeviceManager().createIpuModelDevice({"numIPUs": devices_needed(program.ir)})
        return Session(program.ir, ipus, allow_out_of_memory="run")
    return Session(program.ir, device)


def _dump_ir(ir: Any) -> None:
    """``POPART_IR_DUMP=file``: write the Ir's text form before it is compiled."""
    path = os.environ.get("POPART_IR_DUMP", "").strip()
    if path:
        with open(path, "w") as file:
            file.write(str(ir))


def _write_tile_map(session: Any) -> None:
    """``POPART_TENSOR_TILE_MAP=file``: the IPU model's tensor -> tile intervals, as JSON
    ``{tensor: [[tile, start, end], ...]}`` (``{}`` on a CPU device, which has no tiles)."""
    path = os.environ.get("POPART_TENSOR_TILE_MAP", "").strip()
    if not path:
        return
    report = _report_of(session)
    mapping = {}
    if report is not None:
        data = report.to_json()
        data = json.loads(data) if isinstance(data, str) else data
        mapping = {t["name"]: t["mapping"] for t in data["tensors"]}
    with open(path, "w") as file:
        json.dump(mapping, file)


def _private(data: np.ndarray) -> np.ndarray:
    """``data`` itself when nothing can write into it (a view of a ``bytes`` object, such
    as the importer's initializers: NumPy makes no writable view of one), else a copy."""
    root = data
    while isinstance(root, np.ndarray) and root.base is not None:
        root = root.base
    return data if isinstance(root, bytes) else np.array(data)


def _popart_dtype(dtype: Any) -> str:
    return {"float32": "FLOAT", "float16": "FLOAT16", "float64": "DOUBLE", "int32": "INT32",
            "int64": "INT64", "int16": "INT16", "int8": "INT8", "uint8": "UINT8",
            "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64", "bool": "BOOL",
            "bfloat16": "BFLOAT16"}.get(dtype.name, dtype.name.upper())
