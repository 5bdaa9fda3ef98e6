"""The Builder's IPU annotations: node attributes that PopART reads and ONNX ignores.

Each annotation is a node attribute whose name starts with ``__``, as PopART writes it:

=================================  =====================================  ==============
Builder call                       attribute                              type
=================================  =====================================  ==============
``virtualGraph``                   ``__ipu_number``                       int
``pipelineStage``                  ``__pipeline_stage``                   int
``executionPhase``                 ``__execution_phase``                  int
``recomputeOutputInBackwardPass``  ``__recompute_output_in_backward_pass`` int (RecomputeType)
``setAvailableMemoryProportion``   ``__available_memory``                 float
``setPartialsType``                ``__partials_type``                    string
``setSerializeMatMul``             ``__serialize_matmul_mode/_factor/_precision``
``setInplacePreferences``          ``__inplace_op_names/_priorities``
``outputTensorLocation``           ``__output_tensor_location``           ints
``schedulePriority``               ``__schedule_priority``                float
=================================  =====================================  ==============

The first four have two forms: ``builder.virtualGraph(ids, 1)`` annotates the nodes that
produce ``ids``; ``with builder.virtualGraph(1):`` annotates every node made inside.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from enum import IntEnum
from typing import Any

import numpy as np

from ipuxl.host_values import index_argument
from ipuxl.popart.arguments import enum_argument, number_argument
from ipuxl.popart.errors import popart_exception

__all__ = ["AnnotationsMixin", "RecomputeType", "VIRTUAL_GRAPH", "PIPELINE_STAGE",
           "EXECUTION_PHASE", "RECOMPUTE", "AVAILABLE_MEMORY", "PARTIALS_TYPE"]

VIRTUAL_GRAPH = "__ipu_number"
EXCLUDE_PATTERNS = "__exclude_patterns"
PIPELINE_STAGE = "__pipeline_stage"
EXECUTION_PHASE = "__execution_phase"
RECOMPUTE = "__recompute_output_in_backward_pass"
AVAILABLE_MEMORY = "__available_memory"  # PopART's sAvailMemAttribute
PARTIALS_TYPE = "__partials_type"
SERIALIZE_MODE = "__serialize_matmul_mode"
SERIALIZE_FACTOR = "__serialize_matmul_factor"
SERIALIZE_PRECISION = "__serialize_matmul_precision"
INPLACE_NAMES = "__inplace_op_names"
INPLACE_PRIORITIES = "__inplace_op_priorities"
OUTPUT_LOCATION = "__output_tensor_location"
SCHEDULE_PRIORITY = "__schedule_priority"
CONV_DITHERING = "__enable_conv_dithering"

_SERIALIZE_MODES = ("none", "input_channels", "output_channels", "reducing_dim")
_PARTIALS_TYPES = ("FLOAT", "HALF")


class RecomputeType(IntEnum):
    """Whether an op's output is stored for the backward pass or recomputed."""

    Undefined = 0  # noqa: N815 - PopART's names
    Checkpoint = 1  # noqa: N815
    Recompute = 2  # noqa: N815
    Recomputed = 3  # noqa: N815


def _recompute(value: Any) -> int:
    return int(enum_argument(RecomputeType, value, "recomputeOutputInBackwardPass: value"))


def _ids(node_output_names: Any) -> list[str]:
    if isinstance(node_output_names, str):
        return [node_output_names]
    return list(node_output_names)


class AnnotationsMixin:
    """The annotation methods of :class:`ipuxl.popart.Builder` (see the module docstring).

    The Builder provides ``_model``, ``_context`` (the attributes of the enclosing
    context managers), ``_check_tensor`` and ``_changed``.
    """

    _model: Any
    _context: dict[str, Any]

    # ------------------------------------------------------------------ both forms
    def virtualGraph(self, nodeOutputNames: Any, value: int = 0  # noqa: N802,N803
                     ) -> Any:
        """Place nodes on virtual IPU ``value``: ``virtualGraph(ids, ipu)``, or
        ``with builder.virtualGraph(ipu):``."""
        return self._annotate(VIRTUAL_GRAPH, nodeOutputNames, value, "virtualGraph")

    def pipelineStage(self, nodeOutputNames: Any, value: int = 0) -> Any:  # noqa: N802,N803
        """Put nodes in pipeline stage ``value`` (same two forms as ``virtualGraph``)."""
        return self._annotate(PIPELINE_STAGE, nodeOutputNames, value, "pipelineStage")

    def executionPhase(self, nodeOutputNames: Any, value: int = 0) -> Any:  # noqa: N802,N803
        """Put nodes in execution phase ``value`` (same two forms as ``virtualGraph``)."""
        return self._annotate(EXECUTION_PHASE, nodeOutputNames, value, "executionPhase")

    def schedulePriority(self, nodeOutputNames: Any, value: float = 0.0  # noqa: N802,N803
                         ) -> Any:
        return self._annotate(SCHEDULE_PRIORITY, nodeOutputNames, value, "schedulePriority")

    def recomputeOutputInBackwardPass(self, nodeOutputNames: Any,  # noqa: N802,N803
                                      value: RecomputeType = RecomputeType.Recompute) -> None:
        """Recompute (or checkpoint) the outputs of the nodes producing ``nodeOutputNames``
        in the backward pass."""
        self._set(_ids(nodeOutputNames), RECOMPUTE, _recompute(value))

    def checkpointOutput(self, nodeOutputNames: Any) -> list[str]:  # noqa: N802,N803
        """Checkpoint each tensor: an ``Identity`` named ``Checkpoint`` whose output is kept
        for the backward pass (``RecomputeType.Checkpoint``, and PopART's patterns that
        would remove an identity excluded). Returns the checkpoints' ids."""
        made = []
        for tensor_id in _ids(nodeOutputNames):
            out = self.aiOnnx.identity([tensor_id], "Checkpoint")
            self._set([out], RECOMPUTE, int(RecomputeType.Checkpoint))
            self._set([out], EXCLUDE_PATTERNS, ["PreUniRepl", "PostNRepl"])
            made.append(out)
        return made

    def excludePatterns(self, nodeOutputName: str, patternNames: list[str]) -> None:  # noqa: N802,N803
        """Keep PopART's patterns ``patternNames`` off the node making ``nodeOutputName``
        (``__exclude_patterns``; the names are checked when a session is built)."""
        if not isinstance(patternNames, (list, tuple)) or not all(
                isinstance(n, str) for n in patternNames):
            raise TypeError(f"excludePatterns: patternNames must be a list of pattern names, "
                            f"got {patternNames!r}.")
        self._set(_ids(nodeOutputName), EXCLUDE_PATTERNS, list(patternNames))

    @contextmanager
    def recomputeOutput(self, value: RecomputeType) -> Iterator[None]:  # noqa: N802
        """``with builder.recomputeOutput(popart.RecomputeType.Recompute):``."""
        with self._scope(RECOMPUTE, _recompute(value)):
            yield

    def _annotate(self, name: str, ids: Any, value: Any, method: str) -> Any:
        """``method(ids, value)`` sets the attribute; ``method(value)`` is a context
        manager. The value is an integer (a float for ``schedulePriority``)."""
        def checked(number: Any) -> Any:
            if name == SCHEDULE_PRIORITY:
                return number_argument(number, f"{method}: value")
            return index_argument("value", number, method)

        if isinstance(ids, (str, list, tuple, set, frozenset)):
            self._set(_ids(ids), name, checked(value))
            return None
        if isinstance(ids, bool) or not isinstance(ids, (int, float, np.integer, np.floating)):
            raise TypeError(f"{method}: expected tensor ids or a number, got "
                            f"{type(ids).__name__} {ids!r}.")
        return self._scope(name, checked(ids))

    @contextmanager
    def _scope(self, name: str, value: Any) -> Iterator[None]:
        missing = object()
        previous = self._context.get(name, missing)
        self._context[name] = value
        try:
            yield
        finally:
            if previous is missing:
                del self._context[name]
            else:
                self._context[name] = previous

    # ------------------------------------------------------------------ getters
    def getVirtualGraph(self, nodeOutputNames: Any = None) -> int:  # noqa: N802,N803
        """The virtual IPU of the node producing ``nodeOutputNames`` (of the enclosing
        ``with builder.virtualGraph(...)`` when none is given)."""
        return int(self._get(VIRTUAL_GRAPH, nodeOutputNames, "virtual graph"))

    def hasVirtualGraph(self, nodeOutputNames: Any = None) -> bool:  # noqa: N802,N803
        return self._has(VIRTUAL_GRAPH, nodeOutputNames)

    def getPipelineStage(self, nodeOutputNames: Any = None) -> int:  # noqa: N802,N803
        return int(self._get(PIPELINE_STAGE, nodeOutputNames, "pipeline stage"))

    def hasPipelineStage(self, nodeOutputNames: Any = None) -> bool:  # noqa: N802,N803
        return self._has(PIPELINE_STAGE, nodeOutputNames)

    def getExecutionPhase(self, nodeOutputNames: Any = None) -> int:  # noqa: N802,N803
        return int(self._get(EXECUTION_PHASE, nodeOutputNames, "execution phase"))

    def hasExecutionPhase(self, nodeOutputNames: Any = None) -> bool:  # noqa: N802,N803
        return self._has(EXECUTION_PHASE, nodeOutputNames)

    def getRecomputeOutputInBackwardPass(self, nodeOutputNames: Any  # noqa: N802,N803
                                         ) -> bool:
        return self._has(RECOMPUTE, nodeOutputNames) and \
            self._get(RECOMPUTE, nodeOutputNames, "recompute") == RecomputeType.Recompute

    def getPartialsType(self, nodeOutputName: str) -> str:  # noqa: N802,N803
        return self._get(PARTIALS_TYPE, nodeOutputName, "partials type") \
            if self._has(PARTIALS_TYPE, nodeOutputName) else "FLOAT"

    def getAvailableMemoryProportion(self, nodeOutputName: str) -> float:  # noqa: N802,N803
        return float(self._get(AVAILABLE_MEMORY, nodeOutputName, "available memory"))

    def _get(self, name: str, ids: Any, what: str) -> Any:
        if ids is None:
            if name not in self._context:
                raise popart_exception(f"{what.capitalize()} not set in current scope: no "
                                       f"enclosing context manager sets a {what}.")
            return self._context[name]
        if not self.nodeHasAttribute(name, ids):
            raise popart_exception(f"Node does not have an attribute {name} (no {what} is "
                                   "set on the node that makes it).")
        return self.getNodeAttribute(name, ids)

    def _has(self, name: str, ids: Any) -> bool:
        if ids is None:
            return name in self._context
        return self.nodeHasAttribute(name, ids)

    # ------------------------------------------------------------------ single-form ones
    def setAvailableMemoryProportion(self, nodeOutputName: Any,  # noqa: N802,N803
                                     availableMemoryProportion: float) -> None:  # noqa: N803
        """The share of tile memory a matmul/conv may use for temporaries, in (0, 1]."""
        proportion = number_argument(availableMemoryProportion,
                                     "setAvailableMemoryProportion: availableMemoryProportion")
        if not 0.0 < proportion <= 1.0:
            raise popart_exception(f"availableMemoryProportion must be in (0,1], got "
                                   f"{proportion}.")
        self._set(_ids(nodeOutputName), AVAILABLE_MEMORY, proportion)

    def setPartialsType(self, nodeOutputName: Any, partialsType: str  # noqa: N802,N803
                        ) -> None:
        """The type of a matmul/conv's partial sums: ``"FLOAT"`` or ``"HALF"``."""
        kind = str(partialsType).upper()
        if kind not in _PARTIALS_TYPES:
            raise popart_exception(f"setPartialsType: partials type {partialsType!r} is not "
                                   f"one of {', '.join(_PARTIALS_TYPES)}.")
        self._set(_ids(nodeOutputName), PARTIALS_TYPE, kind)

    def setSerializeMatMul(self, nodeOutputNames: Any, mode: str,  # noqa: N802,N803
                           factor: int = 0, keep_precision: bool = False) -> None:
        """Split a matmul into ``factor`` serial pieces along ``mode``'s dimension."""
        if mode not in _SERIALIZE_MODES:
            raise popart_exception(f"setSerializeMatMul: mode {mode!r} is not one of "
                                   f"{', '.join(_SERIALIZE_MODES)}.")
        ids = _ids(nodeOutputNames)
        self._set(ids, SERIALIZE_MODE, mode)
        if mode != "none":
            self._set(ids, SERIALIZE_FACTOR, index_argument("factor", factor,
                                                            "setSerializeMatMul"))
            self._set(ids, SERIALIZE_PRECISION, int(bool(keep_precision)))

    def setInplacePreferences(self, nodeOutputName: Any,  # noqa: N802,N803
                              prefs: dict[str, float]) -> None:
        """Priorities of the in-place variants of an op (``{"ReluInplace": 100.0}``)."""
        ids = _ids(nodeOutputName)
        self._set(ids, INPLACE_NAMES, [str(k) for k in prefs])
        self._set(ids, INPLACE_PRIORITIES, [number_argument(v, f"setInplacePreferences: {k!r}")
                                            for k, v in prefs.items()])

    def outputTensorLocation(self, nodeOutputNames: Any, value: Any  # noqa: N802,N803
                             ) -> None:
        """Where the outputs live (a ``TensorLocation``), stored as four ints."""
        self._set(_ids(nodeOutputNames), OUTPUT_LOCATION, _location_ints(value))

    def setEnableConvDithering(self, nodeOutputName: Any, value: int  # noqa: N802,N803
                               ) -> None:
        """Turn Poplibs' convolution dithering on (1) or off (0) for a ``Conv`` node.

        Raises:
            popart_exception: ``value`` is not 0 or 1, or the node is not a ``Conv``
                (PopART's messages).
        """
        from ipuxl.popart.errors import popart_exception

        if value not in (0, 1):
            raise popart_exception("enableConvDithering must be a bool value")
        ids = _ids(nodeOutputName)
        for node in self._nodes_of(ids):
            if node.op_type != "Conv":
                raise popart_exception("Builder::setEnableConvDithering should only be "
                                       f"called on convolutions but was given: {node.op_type}")
        self._set(ids, CONV_DITHERING, int(value))

    # ------------------------------------------------------------------ node attributes
    def addNodeAttribute(self, attributeName: str, attributeValue: Any,  # noqa: N802,N803
                         nodeOutputNames: Any) -> None:
        """Add attribute ``attributeName`` to the node producing ``nodeOutputNames``.

        Raises:
            popart_exception: the node already has that attribute (PopART's message,
                which tests match exactly: remove it first with ``removeNodeAttribute``).
        """
        for tensor_id in _ids(nodeOutputNames):
            if self.nodeHasAttribute(attributeName, tensor_id):
                raise popart_exception(f"Node already has attribute {attributeName}.")
        self._set(_ids(nodeOutputNames), attributeName, attributeValue)

    def nodeHasAttribute(self, attributeName: str, nodeOutputNames: Any  # noqa: N802,N803
                         ) -> bool:
        node = self._node_of(_ids(nodeOutputNames))
        return any(a.name == attributeName for a in node.attribute)

    def getNodeAttribute(self, attributeName: str, nodeOutputNames: Any,  # noqa: N802,N803
                         ) -> Any:
        """The value of attribute ``attributeName`` of the node producing
        ``nodeOutputNames``, whatever its type (lists for repeated values)."""
        return _attribute_python_value(self._attribute(attributeName, nodeOutputNames))

    def _attribute(self, name: str, node_output_names: Any) -> Any:
        node = self._node_of(_ids(node_output_names))
        for attribute in node.attribute:
            if attribute.name == name:
                return attribute
        raise popart_exception(f"Node does not have an attribute {name}.")

    def getBoolNodeAttributeOtherwiseFalse(self, attributeName: str,  # noqa: N802,N803
                                           nodeOutputNames: Any) -> bool:  # noqa: N803
        if not self.nodeHasAttribute(attributeName, nodeOutputNames):
            return False
        return bool(self.getNodeAttribute(attributeName, nodeOutputNames))

    def removeNodeAttribute(self, attributeName: str, nodeOutputNames: Any  # noqa: N802,N803
                            ) -> None:
        for node in self._nodes_of(_ids(nodeOutputNames)):
            kept = [a for a in node.attribute if a.name != attributeName]
            if len(kept) == len(node.attribute):
                raise popart_exception(f"Cannot remove attribute {attributeName} as it does "
                                       "not exist.")
            del node.attribute[:]
            node.attribute.extend(kept)
        self._changed()

    def getAllNodeAttributeNames(self, nodeOutputNames: Any) -> list[str]:  # noqa: N802,N803
        return [a.name for a in self._node_of(_ids(nodeOutputNames)).attribute]

    # ------------------------------------------------------------------ internals
    def _set(self, ids: list[str], name: str, value: Any) -> None:
        from ipuxl.popart.builder import make_attribute

        for node in self._nodes_of(ids):
            kept = [a for a in node.attribute if a.name != name]
            del node.attribute[:]
            node.attribute.extend(kept)
            node.attribute.append(make_attribute(name, value))
        self._changed()

    def _nodes_of(self, ids: Iterable[str]) -> list[Any]:
        nodes: list[Any] = []
        for tensor_id in ids:
            node = self._node_of([tensor_id])
            if all(node is not n for n in nodes):
                nodes.append(node)
        return nodes

    def _node_of(self, ids: list[str]) -> Any:
        if not ids:
            raise popart_exception("Expected at least one tensor id.")
        found = None
        for tensor_id in ids:
            self._check_tensor(tensor_id, "Builder")
            node = next((n for n in self._model.graph.node if tensor_id in n.output), None)
            if node is None:
                raise popart_exception(f"{tensor_id!r} is not the output of a node (it is a "
                                       "graph input or weight): annotations belong to nodes.")
            if found is not None and node is not found:
                raise popart_exception(f"The tensors {ids} are outputs of different nodes; "
                                       "name the outputs of one node.")
            found = node
        return found


def _location_ints(location: Any) -> list[int]:
    def index(value: Any) -> int:
        members = list(type(value))
        return members.index(value)

    if isinstance(location, (list, tuple)):
        return [int(v) for v in location]
    return [index(location.storage), index(location.load_tile_set),
            index(location.storage_tile_set), index(location.replicated_tensor_sharding)]


def _attribute_python_value(attribute: Any) -> Any:
    from ipuxl.onnx.importer import attribute_value

    value = attribute_value(attribute)
    return list(value) if isinstance(value, tuple) else value


def _typed_getter(kind: str, noun: str) -> Any:
    """``getInt64NodeAttribute`` and its kin: the value of an attribute of ONNX type
    ``kind``; another type is PopART's error ``"Attribute x is not an integer."``."""

    def getter(self: Any, attributeName: str, nodeOutputNames: Any) -> Any:  # noqa: N803
        from onnx import AttributeProto

        attribute = self._attribute(attributeName, nodeOutputNames)
        if attribute.type != getattr(AttributeProto, kind):
            found = AttributeProto.AttributeType.Name(attribute.type)
            raise popart_exception(f"Attribute {attributeName} is not {noun}. It is of ONNX "
                                   f"type {found}: read it with the getter of that type, or "
                                   "getNodeAttribute.")
        return _attribute_python_value(attribute)

    getter.__doc__ = f"The value of an attribute that is {noun} (ONNX type {kind})."
    return getter


for _method, _kind, _noun in (
        ("getInt64NodeAttribute", "INT", "an integer"),
        ("getInt64VectorNodeAttribute", "INTS", "an integer vector"),
        ("getFloatNodeAttribute", "FLOAT", "a float"),
        ("getFloatVectorNodeAttribute", "FLOATS", "a float vector"),
        ("getStringNodeAttribute", "STRING", "a string"),
        ("getStringVectorNodeAttribute", "STRINGS", "a string vector")):
    setattr(AnnotationsMixin, _method, _typed_getter(_kind, _noun))
del _method, _kind, _noun
