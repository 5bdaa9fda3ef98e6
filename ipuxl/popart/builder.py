"""``popart.Builder``: build an ONNX model op by op, as PopART's Python API does.

::

    builder = popart.Builder()
    i1 = builder.addInputTensor(popart.TensorInfo("FLOAT", [1, 2, 32, 32]))
    i2 = builder.addInputTensor(popart.TensorInfo("FLOAT", [1, 2, 32, 32]))
    o = builder.aiOnnx.add([i1, i2])
    builder.addOutputTensor(o)
    proto = builder.getModelProto()          # serialized onnx.ModelProto (bytes)

The Builder holds an ``onnx.ModelProto`` and appends to its graph: tensor ids are strings
(``"input"``, ``"Add:0"``, ``"scope/Add:0/1"``), operators are written by the opset
objects (``builder.aiOnnx``, ``builder.aiOnnxOpset11``, ``builder.aiGraphcore``; see
:mod:`ipuxl.popart.builder_onnx` and :mod:`ipuxl.popart.builder_graphcore`), and the IPU
annotations (``virtualGraph``, ``pipelineStage``, ...; see
:mod:`ipuxl.popart.builder_annotations`) are node attributes named as PopART names them
(``__ipu_number``, ``__pipeline_stage``...), so a model saved here runs in PopART too.

Shapes and types of computed tensors (``getTensorShape``, the types of the graph outputs
in ``getModelProto``) come from ONNX shape inference, completed by ipuxl's own rules for
``ai.graphcore`` nodes (:mod:`ipuxl.popart.builder_shapes`).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Any, Union

import numpy as np

from ipuxl.host_values import check_numbers, index_argument, index_arguments
from ipuxl.popart.builder_annotations import AnnotationsMixin, RecomputeType
from ipuxl.popart.builder_graphcore import AiGraphcoreOpset1, InitType, tensor_ids
from ipuxl.popart.builder_onnx import LATEST_OPSET, AiOnnx, onnx_opset_class
from ipuxl.popart.debug_context import DebugContext, next_debug_id
from ipuxl.popart.errors import popart_exception
from ipuxl.popart.initializers import typed_initializer
from ipuxl.popart.tensor_info import (
    TensorInfo,
    data_type_of,
    input_settings_metadata,
    input_tensor_arguments,
)
from ipuxl.popart.variable_settings import VariableSettings

__all__ = ["Builder", "AiOnnx", "AiGraphcore", "AiGraphcoreOpset1", "RecomputeType",
           "InitType", "VariableSettings", "make_attribute", "load_model", "model_string_error"]

AiGraphcore = AiGraphcoreOpset1
_GRAPHCORE = "ai.graphcore"
_DEBUG_INFO_ID = "__debug_info_id"
_REPLICATION_FACTOR = "__replicationFactor"
_COMM_GROUP = "__collectiveCommGroup"


class _Ids:
    """Tensor ids of one model (a builder and its subgraph builders share them: ONNX names
    are unique across a graph and its subgraphs)."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.graphs = 0

    def fresh(self, base: str) -> str:
        name, count = base, 0
        while name in self.used:
            count += 1
            name = f"{base}/{count}"
        self.used.add(name)
        return name


def _default_opsets() -> dict[str, int]:
    from ipuxl.popart import operators

    return {"ai.onnx": int(operators.defaultAiOnnxOpset),
            _GRAPHCORE: int(operators.defaultAiGraphcoreOpset)}


def load_model(model_or_filename: Any, where: str) -> Any:
    """A copy of the ``onnx.ModelProto`` given as a ModelProto, its serialized bytes or
    the path of a file (``where`` names the caller in errors). As in PopART, a string that
    names no file is read as a serialized ModelProto, and externally stored tensors stay
    in their files (:mod:`ipuxl.onnx.external_data`).

    Raises:
        popart_exception: the bytes (or the string) are not a serialized ModelProto
            (PopART's message, :func:`model_string_error`), or an externally stored
            tensor's file does not exist.
        TypeError: ``model_or_filename`` is none of the three.
    """
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(model_or_filename, onnx.ModelProto):
        model = onnx.ModelProto()
        model.CopyFrom(model_or_filename)
    elif isinstance(model_or_filename, (str, os.PathLike)) and \
            os.path.isfile(os.fspath(model_or_filename)):
        model = onnx.load(os.fspath(model_or_filename), load_external_data=False)
    elif isinstance(model_or_filename, (bytes, bytearray, str)):
        data = model_or_filename.encode() if isinstance(model_or_filename, str) \
            else bytes(model_or_filename)
        try:
            model = onnx.load_from_string(data)
        except DecodeError:
            raise model_string_error(data) from None
    else:
        raise TypeError(f"{where}(modelProtoOrFilename=...) takes a path, bytes or an "
                        f"onnx.ModelProto, got {type(model_or_filename).__name__}.")
    _check_external_files(model)
    return model


def _check_external_files(model: Any) -> None:
    """Refuse a model whose externally stored tensors name files that are not there.
    As in PopART, a relative location is relative to the current directory (not to the
    model's folder), and the message is ONNX's checker's."""
    from ipuxl.onnx.external_data import external_tensors, location_of

    for tensor in external_tensors(model):
        location = location_of(tensor)
        if not os.path.isfile(location):
            raise popart_exception(
                f"Data of TensorProto ( tensor name: {tensor.name}) should be stored in "
                f"{location}, but it doesn't exist or is not accessible. A relative "
                f"location is relative to the current directory ({os.getcwd()}): run from "
                "the folder it was saved in, or save the data with an absolute path.")


def model_string_error(data: bytes) -> popart_exception:
    """PopART's error for ``data`` that is neither a model file's path nor a serialized
    ModelProto: it shows the first 100 characters, as Python prints bytes."""
    shown = repr(bytes(data))[2:-1]
    if len(shown) > 100:
        shown = shown[:100] + "..."
    return popart_exception(
        f"Failed to load a ModelProto from the string '{shown}'.\nCheck that it is either "
        "a valid path to an existing onnx model file, or is a valid onnx ModelProto string.")


class Builder(AnnotationsMixin):
    """Builds an ONNX model (PopART's ``popart.Builder``).

    Args:
        modelProtoOrFilename: start from this model (a path, serialized bytes or an
            ``onnx.ModelProto``) instead of an empty one.
        opsets: ``{"ai.onnx": N, "ai.graphcore": 1}``: the opset versions of
            ``builder.aiOnnx`` and ``builder.aiGraphcore`` (default
            ``popart.defaultAiOnnxOpset``, 10, as in PopART).
    """

    def __init__(self, modelProtoOrFilename: Any = None,  # noqa: N803 - PopART's names
                 opsets: dict[str, int] | None = None, *, _parent: Builder | None = None):
        import onnx

        self._parent = _parent
        self._ids: _Ids = _parent._ids if _parent is not None else _Ids()
        self._opsets = {**_default_opsets(), **(opsets or {})}
        if modelProtoOrFilename is not None:
            self._model = load_model(modelProtoOrFilename, "Builder")
            self._used_opsets = {(o.domain or "ai.onnx"): int(o.version)
                                 for o in self._model.opset_import}
        else:
            self._model = onnx.ModelProto()
            self._used_opsets = {}
        graph = self._model.graph
        if not graph.name:
            graph.name = "BuilderGraph" if self._ids.graphs == 0 else \
                f"BuilderGraph_{self._ids.graphs}"
        self._ids.graphs += 1
        for name in self._all_names():
            self._ids.used.add(name)
        self._scopes: list[str] = []
        self._context: dict[str, Any] = {}
        self._version = 0  # bumped on every change (shape-inference cache key)
        self._shape_cache: tuple[int, dict[str, tuple[list[int], int]]] | None = None
        onnx_version = int(self._opsets["ai.onnx"])
        if not 6 <= onnx_version <= LATEST_OPSET:
            raise popart_exception(f"Builder: ai.onnx opset {onnx_version} is not available "
                                   f"(6 to {LATEST_OPSET} are).")
        # The ai.onnx opset this builder writes: chosen by the parent of a subgraph
        # builder, by ``opsets``, by a loaded model, or else by the first use of aiOnnx /
        # aiOnnxOpsetN.
        self._chosen_onnx: int | None = (
            _parent._chosen_onnx if _parent is not None
            else onnx_version if opsets and "ai.onnx" in opsets
            else self._used_opsets.get("ai.onnx"))
        self.aiGraphcore = AiGraphcoreOpset1(self)

    # ------------------------------------------------------------------ opset objects
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        candidates = [n for n in dir(self) if not n.startswith("_")]
        close = difflib.get_close_matches(name, candidates, n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise AttributeError(f"'Builder' object has no attribute {name!r}.{hint}")

    @property
    def aiGraphcoreOpset1(self) -> AiGraphcoreOpset1:  # noqa: N802 - PopART's name
        return AiGraphcoreOpset1(self)

    @property
    def aiOnnx(self) -> AiOnnx:  # noqa: N802 - PopART's name
        """The operators of the chosen ai.onnx opset (``popart.defaultAiOnnxOpset``, 10,
        when nothing chose one; using it chooses that)."""
        version = self._chosen_onnx or int(self._opsets["ai.onnx"])
        return self._onnx_opset("aiOnnx", version)

    def aiOnnxOpsetVersion(self, version: int) -> None:  # noqa: N802 - PopART's name
        """Make ``builder.aiOnnx`` opset ``version``'s operators."""
        self._chosen_onnx = None
        self._onnx_opset(f"aiOnnxOpset{version}", index_argument("version", version,
                                                                 "aiOnnxOpsetVersion"))

    def _onnx_opset(self, name: str, version: int) -> AiOnnx:
        """Opset ``version``'s operators, which a model uses alone: the first choice
        stays, as in PopART."""
        opset = onnx_opset_class(version)(self)
        if self._chosen_onnx is None:
            self._chosen_onnx = version
        elif self._chosen_onnx != version:
            raise RuntimeError(
                f"Invalid opset {name!r} selected. Opset for domain ai.onnx already defined "
                f"as {self._chosen_onnx}: an ONNX model has one ai.onnx opset. Use "
                f"builder.aiOnnx (opset {self._chosen_onnx}), or a Builder(opsets="
                f"{{'ai.onnx': {version}, 'ai.graphcore': 1}}) for opset {version}.")
        return opset

    # ------------------------------------------------------------------ tensors in
    def addInputTensor(self, *args: Any, **kwargs: Any) -> str:  # noqa: N802 - PopART's
        """Add a graph input and return its id. PopART's four forms::

            addInputTensor(tensorInfo, debugContext="")
            addInputTensor(tensorInfo, settings, debugContext="")
            addInputTensor(dataType, shape, debugContext="")
            addInputTensor(dataType, shape, settings, debugContext="")

        ``tensorInfo`` is a ``popart.TensorInfo``; ``dataType`` a type name (``"FLOAT"``),
        a ``DataType`` or a NumPy type. ``settings`` (a ``popart.InputSettings``) is written
        to the model's metadata as PopART writes it (``__replicated_stream_mode/<id>``...).
        """
        info, settings, debug = input_tensor_arguments(args, kwargs)
        name = self._ids.fresh(self._scoped(str(debug) or "input"))
        self._model.graph.input.append(_value_info(name, info.dataType().value, info.shape()))
        if settings is not None:
            for key, value in input_settings_metadata(settings).items():
                self._model.metadata_props.add(key=f"{key}/{name}", value=str(value))
        self._changed()
        return name

    def addUntypedInputTensor(self, debugContext: str = "") -> str:  # noqa: N802,N803
        """Add an input without a type (for subgraphs whose inputs the caller types)."""
        import onnx

        if self._parent is None:
            raise popart_exception(
                "Can not add untyped tensors to the top-level graph. Use "
                "addInputTensor(popart.TensorInfo(dataType, shape)) instead: the main graph's "
                "inputs are fed from the host, so their types are needed.")

        name = self._ids.fresh(self._scoped(str(debugContext) or "input"))
        self._model.graph.input.append(onnx.ValueInfoProto(name=name))
        self._changed()
        return name

    def addInputTensorFromParentGraph(self, tensorId: str) -> None:  # noqa: N802,N803
        """Make the parent graph's ``tensorId`` an input of this subgraph, under the same
        id (as PopART: a call then passes it, or any other tensor, in that position)."""
        import onnx

        if self._parent is None:
            raise popart_exception("addInputTensorFromParentGraph: this Builder is not a "
                                   "subgraph builder (see createSubgraphBuilder).")
        self._parent._check_tensor(tensorId, "addInputTensorFromParentGraph")
        self._model.graph.input.append(onnx.ValueInfoProto(name=tensorId))
        self._changed()

    def addInitializedInputTensor(self, initVal: Any, *args: Any,  # noqa: N802,N803
                                  debugContext: str = "") -> str:
        """Add a weight with value ``initVal`` (an initializer, also listed as an input,
        as PopART writes it). ``addInitializedInputTensor(array, variableSettings,
        debugContext)`` records how replicas share it in the model's metadata (see
        :mod:`ipuxl.popart.variable_groups`). Returns its id."""
        from ipuxl.popart.variable_groups import input_shape, settings_metadata

        settings = VariableSettings()
        for arg in args:
            if isinstance(arg, (str, DebugContext)):
                debugContext = arg
            else:
                settings = arg
        if initVal is None:
            raise TypeError("addInitializedInputTensor: initVal is None; pass the weight's "
                            "initial value as a numpy array.")
        array = np.asarray(initVal)
        check_numbers(array, f"addInitializedInputTensor({str(debugContext) or 'init_input'!r})")
        requested = self._scoped(str(debugContext) or "init_input")
        metadata = settings_metadata(settings, repr(requested))
        name = self._ids.fresh(requested)
        tensor = typed_initializer(array, name)  # as PopART stores it (float_data...)
        self._model.graph.initializer.append(tensor)
        shape = input_shape(self._model, settings, array.shape)
        self._model.graph.input.append(_value_info(name, tensor.data_type, shape))
        for key_prefix, value in metadata:
            self._model.metadata_props.add(key=key_prefix + name, value=value)
        self._changed()
        return name

    def addOutputTensor(self, outputName: str) -> None:  # noqa: N802,N803 - PopART's names
        """Make ``outputName`` a graph output. A subgraph may list one tensor twice, as
        PopART appends on every call (a ``Loop`` body's carried value that is also a scan
        output); the main graph lists each output once."""
        import onnx

        self._check_tensor(outputName, "addOutputTensor")
        if self._parent is None and outputName in [o.name for o in self._model.graph.output]:
            return
        self._model.graph.output.append(onnx.ValueInfoProto(name=outputName))
        self._changed()

    # ------------------------------------------------------------------ the model
    def getModelProto(self, humanReadable: bool = False) -> bytes:  # noqa: N802,N803
        """The model, serialized (``onnx.load_from_string`` reads it); its text form with
        ``humanReadable=True``."""
        model = self._assembled()
        if humanReadable:
            return str(model).encode()
        return model.SerializeToString(deterministic=True)

    def saveModelProto(self, filename: str) -> None:  # noqa: N802 - PopART's name
        with open(filename, "wb") as file:
            file.write(self.getModelProto())

    def saveInitializersExternally(self, ids: list[str],  # noqa: N802 - PopART's name
                                   filename: str) -> None:
        """Keep the data of the weights ``ids`` in the binary file ``filename`` instead of
        the model (ONNX external data; see
        :func:`ipuxl.popart.graph_transformer.save_initializers_externally`)."""
        from ipuxl.popart.graph_transformer import save_initializers_externally

        save_initializers_externally(self._model, ids, filename)
        self._changed()

    def embedReplicationFactor(self, replicationFactor: int) -> None:  # noqa: N802,N803
        """Record the replication factor the model is written for (the model's
        ``__replicationFactor`` metadata, as PopART writes it), which grouped weights
        (``VariableSettings``) are laid out for."""
        factor = index_argument("replicationFactor", replicationFactor,
                                "embedReplicationFactor")
        self._model.metadata_props.add(key=_REPLICATION_FACTOR, value=str(factor))
        self._changed()

    @contextmanager
    def commGroup(self, type: Any = 0, groupSize: int = 0) -> Iterator[None]:  # noqa: N802,N803,A002
        """``with builder.commGroup(popart.CommGroupType.Consecutive, 4):``: the collectives
        made inside, without a ``commGroup`` of their own, reduce within these groups of
        replicas (each node gets ``__collectiveCommGroup = [type, groupSize]``)."""
        kind = index_argument("type", type.value if isinstance(type, Enum) else type,
                              "commGroup")
        size = index_argument("groupSize", groupSize, "commGroup")
        with self._scope(_COMM_GROUP, [kind, size]):
            yield

    def setGraphName(self, name: str) -> None:  # noqa: N802 - PopART's name
        self._model.graph.name = name
        self._changed()

    def createSubgraphBuilder(self) -> Builder:  # noqa: N802 - PopART's name
        """A Builder for a subgraph (``If``/``Loop`` bodies, ``aiGraphcore.call``): pass it
        as the graph attribute; it may read this builder's tensors."""
        return Builder(opsets=self._opsets, _parent=self)

    def graph_proto(self) -> Any:
        """This builder's graph as an ``onnx.GraphProto`` (a subgraph attribute)."""
        return self._assembled().graph

    def reshape_const(self, aiOnnx: Any, args: list[str], shape: Iterable[int],  # noqa: N803
                      debugContext: str = "") -> str:
        """Reshape ``args[0]`` to ``shape`` through a Constant shape tensor."""
        context = str(debugContext)
        dims = index_arguments("shape", shape, "reshape_const")
        new_shape = aiOnnx.constant(np.asarray(dims, np.int64).reshape(len(dims)),
                                    debugContext=f"{context}_const" if context else "")
        return aiOnnx.reshape([args[0], new_shape], debugContext=context)

    def customOp(self, opName: str, opVersion: int, domain: str,  # noqa: N802,N803
                 inputs: list[str], attributes: dict[str, Any] | None = None,
                 numOutputs: int = 1, name: str = "") -> list[str]:  # noqa: N803
        """Add an operator of any domain; returns its output ids."""
        where = f"customOp {opName!r}"
        ids = tensor_ids(inputs, where, f"customOp({opName!r}, version, domain, [x, ...])")
        return self.add_node(opName, ids, dict(attributes or {}),
                             index_argument("numOutputs", numOutputs, where), domain=domain,
                             version=index_argument("opVersion", opVersion, where),
                             debug_context=name)

    # ------------------------------------------------------------------ queries
    def getInputTensorIds(self) -> list[str]:  # noqa: N802 - PopART's name
        """The graph's inputs, initialized ones (weights) included, as PopART lists them."""
        return [i.name for i in self._model.graph.input]

    def getOutputTensorIds(self) -> list[str]:  # noqa: N802
        return [o.name for o in self._model.graph.output]

    def getValueTensorIds(self) -> list[str]:  # noqa: N802
        """The ids the graph's nodes compute."""
        return [o for node in self._model.graph.node for o in node.output if o]

    def getTrainableTensorIds(self) -> list[str]:  # noqa: N802
        """The initializers (weights)."""
        return [t.name for t in self._model.graph.initializer]

    def isInitializer(self, id: str) -> bool:  # noqa: N802,A002 - PopART's names
        return id in {t.name for t in self._model.graph.initializer}

    def getTensorShape(self, id: str) -> list[int]:  # noqa: N802,A002
        """The shape of tensor ``id`` (from ONNX shape inference for computed tensors)."""
        return list(self._type_of(id, "getTensorShape")[0])

    def getTensorDataType(self, id: str) -> Any:  # noqa: N802,A002
        return data_type_of(self._type_of(id, "getTensorDataType")[1])

    def getTensorDtypeString(self, id: str) -> str:  # noqa: N802,A002
        """NumPy's name of tensor ``id``'s type, e.g. ``"float32"``."""
        return TensorInfo(self.getTensorDataType(id), []).data_type_lcase()

    def hasValueInfo(self, id: str) -> bool:  # noqa: N802,A002
        return id in self._inferred_types()

    def getNameScope(self, name: str = "") -> str:  # noqa: N802 - PopART's name
        """The current name scope (``"a/b/"``) followed by ``name``."""
        return self._scoped(name)

    @contextmanager
    def nameScope(self, name: str) -> Iterator[None]:  # noqa: N802 - PopART's name
        """Prefix the ids of tensors made inside with ``name/``."""
        self._scopes.append(str(name))
        try:
            yield
        finally:
            self._scopes.pop()

    # ------------------------------------------------------------------ the node writer
    def add_node(self, op_type: str, inputs: list[str], attributes: dict[str, Any],
                 num_outputs: int, *, domain: str = "", version: int | None = None,
                 debug_context: Any = "") -> list[str]:
        """Append one node (the opset objects call this) and return its output ids.

        ``attributes`` maps names to ``onnx.AttributeProto`` or plain values; the
        annotations of the enclosing context managers (``virtualGraph``...) are added, and
        ``__debug_info_id``, the number PopART gives each node it builds.
        """
        import onnx

        where = f"{domain or 'ai.onnx'}.{op_type}"
        for tensor_id in inputs:
            if tensor_id:
                self._check_tensor(tensor_id, where)
        if version is not None:
            self._require_opset(domain, version, where)
        debug = str(debug_context or "")
        # PopART names outputs after the op type, `<scope>/<Type>:<i>` (made unique with
        # `/1`, `/2`...), whatever debug name is given; the debug name (or the op type,
        # inside a name scope) names the node, and only then.
        outputs = [self._ids.fresh(f"{self._scoped(op_type)}:{i}") for i in range(num_outputs)]
        node = onnx.NodeProto(op_type=op_type, domain=domain,
                              name=self._scoped(debug or op_type) if debug or self._scopes
                              else "")
        node.input.extend(inputs)
        node.output.extend(outputs)
        debug_id = {_DEBUG_INFO_ID: next_debug_id()}
        for name, value in {**self._context, **attributes, **debug_id}.items():
            node.attribute.append(make_attribute(name, value))
        self._model.graph.node.append(node)
        self._changed()
        return outputs

    # ------------------------------------------------------------------ internals
    def _scoped(self, name: str) -> str:
        return "".join(f"{s}/" for s in self._scopes) + name

    def _changed(self) -> None:
        self._version += 1

    def _all_names(self) -> list[str]:
        graph = self._model.graph
        names = [i.name for i in graph.input] + [t.name for t in graph.initializer]
        return names + [o for node in graph.node for o in node.output if o]

    def _visible(self, tensor_id: str) -> bool:
        builder: Builder | None = self
        while builder is not None:
            if tensor_id in builder._all_names():
                return True
            builder = builder._parent
        return False

    def _check_tensor(self, tensor_id: str, where: str) -> None:
        if not isinstance(tensor_id, str):
            raise TypeError(f"{where}: tensor ids are strings, got {type(tensor_id).__name__} "
                            f"{tensor_id!r}.")
        if self._visible(tensor_id):
            return
        known = self._all_names()
        close = difflib.get_close_matches(tensor_id, known, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise popart_exception(
            f"{where}: no tensor {tensor_id!r} in this Builder's graph.{hint} Tensor ids are "
            "the strings addInputTensor, addInitializedInputTensor and the op methods return.")

    def _require_opset(self, domain: str, version: int, where: str) -> None:
        key = domain or "ai.onnx"
        used = self._used_opsets.get(key)
        if used is None:
            self._used_opsets[key] = version
        elif used != version and key in ("ai.onnx", _GRAPHCORE):
            raise popart_exception(
                f"{where}: the model already uses {key} opset {used}; an ONNX model has one "
                f"version per domain, so an opset {version} operator cannot join it. Use "
                f"builder.aiOnnxOpset{used} (or Builder(opsets={{'ai.onnx': {version}}})).")
        else:
            self._used_opsets[key] = max(used, version)

    def _opset_imports(self) -> list[Any]:
        from onnx import helper

        opsets = dict(self._used_opsets)
        opsets.setdefault("ai.onnx", int(self._opsets["ai.onnx"]))
        return [helper.make_opsetid("" if domain == "ai.onnx" else domain, version)
                for domain, version in sorted(opsets.items())]

    def _assembled(self, *, typed_outputs: bool = True) -> Any:
        """A copy of the model with its opset imports, IR version and output types."""
        import onnx
        from onnx import helper

        model = onnx.ModelProto()
        model.CopyFrom(self._model)
        del model.opset_import[:]
        model.opset_import.extend(self._opset_imports())
        if not model.ir_version:
            onnx_imports = [o for o in model.opset_import if o.domain == ""]
            model.ir_version = max(7, helper.find_min_ir_version_for(onnx_imports))
        if typed_outputs:
            types = self._inferred_types()
            for output in model.graph.output:
                if not output.type.HasField("tensor_type") and output.name in types:
                    shape, elem_type = types[output.name]
                    output.CopyFrom(_value_info(output.name, elem_type, shape))
        return model

    def _inferred_types(self) -> dict[str, tuple[list[int], int]]:
        if self._shape_cache is None or self._shape_cache[0] != self._version:
            from ipuxl.popart.builder_shapes import infer_types

            self._shape_cache = (self._version, infer_types(self._assembled(typed_outputs=False)))
        return self._shape_cache[1]

    def _type_of(self, tensor_id: str, where: str) -> tuple[list[int], int]:
        self._check_tensor(tensor_id, where)
        types = self._inferred_types()
        if tensor_id not in types:
            raise popart_exception(f"{where}: the shape of {tensor_id!r} is not known (ONNX "
                                   "shape inference could not find it).")
        return types[tensor_id]


def _value_info(name: str, elem_type: int, shape: Iterable[int]) -> Any:
    from onnx import helper

    return helper.make_tensor_value_info(name, int(elem_type), [int(d) for d in shape])


def make_attribute(name: str, value: Any) -> Any:
    """An ``onnx.AttributeProto`` from a Python value (ints, floats, strings, lists of them,
    NumPy arrays, Builders for graphs)."""
    import onnx
    from onnx import helper, numpy_helper

    if isinstance(value, onnx.AttributeProto):
        if value.name != name:
            copy = onnx.AttributeProto()
            copy.CopyFrom(value)
            copy.name = name
            return copy
        return value
    if isinstance(value, Builder):
        return helper.make_attribute(name, value.graph_proto())
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, numpy_helper.from_array(value))
    if isinstance(value, (bool, np.bool_)):
        return helper.make_attribute(name, int(value))
    if isinstance(value, np.integer):
        return helper.make_attribute(name, int(value))
    if isinstance(value, np.floating):
        return helper.make_attribute(name, float(value))
    if isinstance(value, (list, tuple)):
        items = [v.item() if isinstance(v, np.generic) else v for v in value]
        if any(isinstance(v, Builder) for v in items):
            items = [v.graph_proto() for v in items]
        if not items:
            return helper.make_attribute(name, [], attr_type=onnx.AttributeProto.INTS)
        if all(isinstance(v, (int, bool)) for v in items):
            items = [int(v) for v in items]
        elif all(isinstance(v, (int, float)) for v in items):
            items = [float(v) for v in items]
        return helper.make_attribute(name, items)
    return helper.make_attribute(name, value)


for _version in range(6, LATEST_OPSET + 1):
    setattr(Builder, f"aiOnnxOpset{_version}",
            property(lambda self, v=_version: self._onnx_opset(f"aiOnnxOpset{v}", v)))
del _version
# PopART's stubs annotate Builder.__getattr__ with every opset class it may stand for.
Builder.__getattr__.__annotations__["return"] = Union[  # noqa: UP007 - read as __args__
    tuple(onnx_opset_class(v) for v in range(6, LATEST_OPSET + 1)) + (AiGraphcoreOpset1,)]
