"""ONNX graph -> ipuxl ops in the current graph.

:class:`Importer` runs an ONNX graph's nodes in order (ONNX requires a topological order)
over an environment that maps each ONNX value name to

* a :class:`~ipuxl.tensor.Tensor` of the current ipuxl graph (graph inputs, weights,
  results of ops), or
* a NumPy array, a value known while importing (``Constant`` nodes, integer
  initializers, ``Shape`` of a static shape, and nodes whose inputs are all known, which
  are evaluated at import time: the "constant folding" that turns PyTorch's
  ``Shape -> Gather -> Concat -> Reshape`` chains into a static reshape). A PopART
  session's random operators are never folded: they draw anew each run
  (:class:`RandomDraws`).

Each node is imported by its rule (:mod:`ipuxl.onnx.registry`): an ordinary node
becomes one ipuxl op, ``onnx.<Op>-<version>``. Inputs that a rule needs as values
(``Reshape``'s shape, ``Pad``'s pads...) must be known; when one is a graph input,
:class:`NeedsValueError` names it (the ONNX backend then specialises on that input's
value).

:func:`check_model` first checks the model's structure (:mod:`ipuxl.onnx.structure`:
single assignment, unique names, topological order, stored tensors' sizes), then lists
every unsupported operator and attribute of a model, with the node names, in one error,
before anything is built. An operator's ``check`` (:mod:`ipuxl.onnx.registry`) refuses
input values known at import that it would misread, such as constant indices out of range.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from ipuxl.context import get_current_context
from ipuxl.onnx import folding
from ipuxl.onnx.errors import NeedsValueError, OnnxImportError, UnsupportedModelError
from ipuxl.onnx.ops.popart_checks import (
    PopartOpError,
    needed_value_message,
    session_check,
    session_output_types,
)
from ipuxl.onnx.registry import (
    Rule,
    call_rule,
    canonical_domain,
    dtype_of,
    find_rule,
    signature,
)
from ipuxl.onnx.session_keywords import keyword_arguments
from ipuxl.onnx.structure import check_structure
from ipuxl.onnx.tensors import dense_array, tensor_array
from ipuxl.tensor import Tensor
from ipuxl.tensor_factories import adopted_constant

__all__ = ["model_source", "Importer", "RandomDraws", "NodeContext", "OnnxImportError",
           "NeedsValueError",
           "UnsupportedModelError", "check_model", "load_model", "opsets_of",
           "attribute_value", "value_info_spec", "input_dtype", "Value"]

Value = Any  # Tensor | np.ndarray


# ------------------------------------------------------------------------- model loading
def load_model(model: Any) -> Any:
    """An ``onnx.ModelProto`` from a path, serialized bytes or a ModelProto.

    Tensors stored externally stay so: their bytes are read when the tensor is
    (:mod:`ipuxl.onnx.external_data`); a file's relative locations are made relative to
    its folder, a ModelProto's (or bytes') are relative to the current directory.

    Raises:
        OnnxImportError: the bytes or the file are empty, are not a serialized
            ModelProto, or hold a ModelProto without a graph; or there is no such file.
        TypeError: ``model`` is none of the three.
    """
    import onnx

    from ipuxl.onnx import external_data

    if isinstance(model, onnx.ModelProto):
        return _with_graph(model, "The model given (an onnx.ModelProto)")
    if isinstance(model, (bytes, bytearray, memoryview)):
        given = f"The model given ({len(model)} bytes)"
        if not len(model):
            raise OnnxImportError(f"{given} is empty, not an ONNX model. {_MODEL_FORMS}")
        try:
            loaded = onnx.load_from_string(bytes(model))
        except Exception as error:
            raise OnnxImportError(f"{given} is not a serialized ONNX ModelProto ({error}). "
                                  f"{_MODEL_FORMS}") from None
        return _with_graph(loaded, given)
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise OnnxImportError(f"No ONNX model file at {path!r}. {_MODEL_FORMS}")
        if os.path.getsize(path) == 0:
            raise OnnxImportError(f"The file {path!r} is empty, not an ONNX model. "
                                  f"{_MODEL_FORMS}")
        try:
            loaded = onnx.load(path, load_external_data=False)
        except Exception as error:
            raise OnnxImportError(f"{path!r} is not an ONNX model file ({error}). "
                                  f"{_MODEL_FORMS}") from None
        # External data stays in its files (read when a tensor is); its relative
        # locations are relative to the model's folder.
        external_data.resolve_locations(loaded, os.path.dirname(path))
        return _with_graph(loaded, f"The model file {path!r}")
    raise TypeError(
        f"An ONNX model must be a path, bytes or an onnx.ModelProto, got "
        f"{type(model).__name__}. {_MODEL_FORMS}"
    )


_MODEL_FORMS = ("Pass the path of an .onnx file, the bytes of a ModelProto "
                "(`proto = builder.getModelProto()`, `model.SerializeToString()`), or an "
                "onnx.ModelProto.")


def _with_graph(model: Any, given: str) -> Any:
    """``model``, if it has a graph: arbitrary bytes (a short text, another message) may
    parse as a ModelProto whose every field is unset."""
    graph = model.graph
    if not (graph.node or graph.input or graph.output or graph.initializer):
        raise OnnxImportError(
            f"{given} has no ONNX graph (no nodes, inputs, outputs or initializers): "
            f"it is empty or not an ONNX model. {_MODEL_FORMS}")
    return model


def model_source(fn_model: Any, model: Any) -> str:
    """The name ops imported from a model are attributed to: the file's name, else
    ``<graph name>.onnx``."""
    if isinstance(fn_model, (str, os.PathLike)):
        return os.path.basename(os.fspath(fn_model))
    return f"{model.graph.name or 'model'}.onnx"


def opsets_of(model: Any) -> dict[str, int]:
    """``{domain: version}`` of the model's opset imports (the default domain as
    ``"ai.onnx"``)."""
    opsets = {canonical_domain(o.domain): int(o.version) for o in model.opset_import}
    opsets.setdefault("ai.onnx", 1)
    opsets.setdefault("ai.graphcore", 1)
    return opsets


def attribute_value(attribute: Any) -> Any:
    """An ONNX attribute as a Python value: tuples for lists, ``str`` for strings, NumPy
    arrays for tensors, GraphProto for graphs."""
    from onnx import AttributeProto, helper

    kind = attribute.type
    if kind == AttributeProto.TENSOR:
        return tensor_array(attribute.t, f"tensor of attribute {attribute.name!r}")
    if kind == AttributeProto.SPARSE_TENSOR:
        return dense_array(attribute.sparse_tensor,
                           f"sparse tensor of attribute {attribute.name!r}")
    if kind == AttributeProto.STRING:
        return attribute.s.decode("utf-8", errors="replace")
    if kind == AttributeProto.STRINGS:
        return tuple(s.decode("utf-8", errors="replace") for s in attribute.strings)
    value = helper.get_attribute_value(attribute)
    if isinstance(value, list):
        return tuple(value)
    return value


def value_info_spec(info: Any, shapes: Mapping[str, Sequence[int]] | None = None
                    ) -> tuple[tuple[int, ...], np.dtype]:
    """``(shape, numpy dtype)`` of a graph input, with ``shapes[name]`` for its symbolic
    dimensions."""

    tensor_type = info.type.tensor_type
    if not info.type.HasField("tensor_type"):
        raise OnnxImportError(
            f"Graph input {info.name!r} is not a tensor (sequence, map and optional inputs "
            "are not supported)."
        )
    dtype = input_dtype(info.name, tensor_type.elem_type)
    if shapes and info.name in shapes:
        return tuple(int(d) for d in shapes[info.name]), dtype
    dims = []
    for dim in tensor_type.shape.dim:
        if not dim.HasField("dim_value"):
            raise OnnxImportError(
                f"Graph input {info.name!r} has a dimension {dim.dim_param or '?'!r} without "
                "a size. ipuxl compiles for static shapes: give the shape, e.g. "
                f"`inputShapeInfo.add({info.name!r}, popart.TensorInfo(dtype, shape))`."
            )
        dims.append(int(dim.dim_value))
    return tuple(dims), dtype


def input_dtype(name: str, elem_type: int) -> np.dtype:
    """The NumPy dtype of graph input ``name``'s ONNX element type.

    Raises:
        OnnxImportError: ipuxl has no tensor type for it (STRING, UNDEFINED...).
    """
    from onnx import TensorProto, helper

    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
        dtype_of(dtype)
    except (KeyError, TypeError, ValueError):
        kind = (TensorProto.DataType.Name(elem_type) if elem_type in
                TensorProto.DataType.values() else f"number {elem_type}")
        raise OnnxImportError(
            f"Graph input {name!r} has the ONNX element type {kind}, which ipuxl cannot "
            "hold: device tensors are numbers or booleans (FLOAT, FLOAT16, INT32, BOOL...). "
            "Give the input a numeric type, or compute it on the host.") from None
    return dtype


# ------------------------------------------------------------------------------ checking
def check_model(model: Any, initializer_data: bool = True) -> None:
    """Check ``model`` before anything is built: its structure
    (:func:`ipuxl.onnx.structure.check_structure`; ``initializer_data=False`` for a caller
    that reads every initializer of the main graph next), then its operators.

    Raises:
        OnnxImportError: the model breaks an ONNX structural rule (the first is named).
        UnsupportedModelError: listing every node (in every subgraph) whose operator,
            version or attributes ipuxl does not implement.
    """
    check_structure(model, initializer_data)
    opsets = opsets_of(model)
    problems: list[tuple[str, str, str]] = []
    for node in _all_nodes(model.graph):
        domain = canonical_domain(node.domain)
        rule = find_rule(domain, node.op_type, opsets.get(domain, 1))
        label = node.name or (node.output[0] if node.output else "?")
        if rule is None:
            problems.append((label, node.op_type,
                             f"operator {domain}.{node.op_type} (opset {opsets.get(domain)}) "
                             "is not supported"))
            continue
        unknown = sorted(a.name for a in node.attribute
                         if a.name not in rule.attributes and not a.name.startswith("__"))
        if unknown:
            problems.append((label, node.op_type, f"attribute(s) {', '.join(unknown)} "
                             "not supported"))
    if problems:
        lines = "\n".join(f"  node {n!r} ({t}): {what}" for n, t, what in problems)
        raise UnsupportedModelError(
            f"The ONNX model has {len(problems)} node(s) ipuxl cannot import:\n{lines}\n"
            "`popart.getSupportedOperations(False)` lists what is supported.", problems)


def _all_nodes(graph: Any) -> Iterable[Any]:
    from onnx import AttributeProto

    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == AttributeProto.GRAPH:
                yield from _all_nodes(attribute.g)
            elif attribute.type == AttributeProto.GRAPHS:
                for g in attribute.graphs:
                    yield from _all_nodes(g)


# ----------------------------------------------------------------------------- importing
@dataclass
class NodeContext:
    """What a converter (:func:`ipuxl.onnx.registry.onnx_converter`) gets for one node."""

    importer: Importer
    node: Any
    inputs: list[Value | None]
    attrs: dict[str, Any]
    env: dict[str, Value]

    def tensor(self, index: int) -> Tensor:
        """Input ``index`` as a tensor of the current graph (copied to the current IPU if
        it lives on another, as every op's inputs are)."""
        return _on_current_ipu(self.importer.tensor(self.node.input[index], self.inputs[index]))

    def value(self, index: int) -> np.ndarray:
        """Input ``index``'s value, which must be known at import time."""
        return self.importer.known_value(self.node, index, self.inputs[index])


@dataclass(eq=False)
class RandomDraws:
    """Where a session's random operators get their keys (see ``random`` in
    :mod:`ipuxl.onnx.registry`).

    ``seed`` is a uint32 ``(2,)`` tensor of the graph the importer fills (the session
    derives a new one each micro-batch); node number ``n`` to draw gets
    ``create_random_seed(seed, n)``. Subgraph importers share this object, so a subgraph
    imported twice (two ``Call`` nodes, two iterations of an unrolled ``Loop``) draws
    differently each time.
    """

    seed: Tensor
    count: int = 0

    def key(self, node: Any) -> Tensor:
        """The next key, for ``node``.

        Raises:
            NeedsValueError: the current graph is an ipuxl subgraph (a ``Loop`` body run
                as a repeat, an ``If`` branch decided at run time), which cannot read the
                seed: a Loop is then unrolled, so each iteration draws its own numbers.
        """
        from ipuxl.ops.random_seed import create_random_seed

        if get_current_context().graph is not self.seed.graph:
            raise NeedsValueError(
                f"Node {_label(node)} ({node.op_type}) draws random numbers from the "
                "session's seed, which an ipuxl subgraph (a Loop body run as a repeat, an "
                "If branch chosen at run time) cannot read. ipuxl unrolls such a Loop; "
                "for an If, make its condition known when the model is imported.",
                node.input[0] if node.input else node.op_type)
        self.count += 1
        return create_random_seed(self.seed, self.count)


@dataclass
class Importer:
    """Imports ONNX nodes into the current ipuxl graph (see the module docstring).

    Attributes:
        opsets: ``{domain: version}`` of the model.
        known: values of weights (initializers) that are tensors in the graph but whose
            value a static input may read (``Resize`` scales stored as a weight...).
        on_node: called as ``on_node(node, outputs)`` after each node is imported (the
            Builder's IPU placement and the sessions' name mapping use it).
        source: see the attribute's comment.
        random: a session's seed for the random operators (None: each draws with its
            ``seed`` attribute, as plain ONNX import does).
        training: in a PopART session, whether it trains (its Dropout is the identity
            otherwise); None (plain ONNX import) keeps ONNX's own rules.
        popart: the import is a PopART session's: the limits of PopART's ops apply
            (:func:`~ipuxl.onnx.ops.popart_checks.session_check`, such as ``Clip``'s
            constant bounds) and a value needed at import is asked for in PopART's words
            (:func:`~ipuxl.onnx.ops.popart_checks.needed_value_message`). False (plain
            ONNX import) refuses nothing ONNX allows.
        session: the keywords a PopART session gives the rules that name them
            (:func:`~ipuxl.onnx.session_keywords.session_keywords`: Poplibs' strided
            GroupNormalization groups, PopART's ConvTranspose padding); empty (plain ONNX
            import) keeps ONNX's meaning.
    """

    opsets: dict[str, int]
    known: dict[str, np.ndarray] = field(default_factory=dict)
    on_node: Callable[[Any, list[Value]], None] | None = None
    #: the GraphProtos being imported, innermost last (``Gradient`` reads its own graph)
    graphs: list[Any] = field(default_factory=list)
    #: the model's name for op locations (``resnet50.onnx``: ops print ``# file:<node
    #: number>``); None keeps the caller's Python line
    source: str | None = None
    random: RandomDraws | None = None
    training: bool | None = None
    popart: bool = False
    session: dict[str, Any] = field(default_factory=dict)
    _constants: dict[tuple[int, str, int], tuple[Any, Tensor]] = field(default_factory=dict)
    # The arrays the importer folded itself (by id, kept alive): read-only and nobody
    # else's, so a constant may hold them without a copy.
    _folded: dict[int, np.ndarray] = field(default_factory=dict)

    def run(self, graph: Any, env: dict[str, Value]) -> dict[str, Value]:
        """Import ``graph``'s nodes; ``env`` has its inputs and initializers and gets
        every value the nodes make. Returns ``env``."""
        from ipuxl.context import source_location

        self.graphs.append(graph)
        try:
            for number, node in enumerate(graph.node, 1):
                if self.source is None:
                    self.run_node(node, env)
                else:
                    with source_location(self.source, number):
                        self.run_node(node, env)
        finally:
            self.graphs.pop()
        return env

    def run_node(self, node: Any, env: dict[str, Value]) -> list[Value]:
        domain = canonical_domain(node.domain)
        rule = find_rule(domain, node.op_type, self.opsets.get(domain, 1))
        if rule is None:
            raise UnsupportedModelError(
                f"Node {_label(node)}: operator {domain}.{node.op_type} is not supported.",
                [(_label(node), node.op_type, "not supported")])
        inputs: list[Value | None] = []
        for name in node.input:
            if not name:
                inputs.append(None)
            elif name in env:
                inputs.append(env[name])
            else:
                raise OnnxImportError(
                    f"Node {_label(node)} ({node.op_type}) reads {name!r}, which no earlier "
                    "node, graph input or initializer produces (the graph is not in "
                    "topological order, or the name is misspelt)."
                )
        attrs = {a.name: attribute_value(a) for a in node.attribute
                 if not a.name.startswith("__")}
        annotations = {a.name: attribute_value(a) for a in node.attribute
                       if a.name.startswith("__")}
        with _placement(annotations):
            if rule.convert is not None:
                outputs = list(rule.convert(NodeContext(self, node, inputs, attrs, env)))
            else:
                outputs = self._apply(rule, node, inputs, attrs, _hints(annotations))
        if len(outputs) < len([o for o in node.output if o]):
            raise OnnxImportError(
                f"Node {_label(node)} ({node.op_type}) names {len(node.output)} outputs; "
                f"ipuxl's {rule.name} makes {len(outputs)}."
            )
        for name, value in zip(node.output, outputs):
            if name:
                env[name] = value
        if self.on_node is not None:
            self.on_node(node, outputs)
        return outputs

    # -------------------------------------------------------------------- values
    def tensor(self, name: str, value: Value) -> Tensor:
        """``value`` as a tensor of the current graph (a known value becomes a constant,
        made once per graph and name)."""
        if isinstance(value, Tensor):
            return value
        from ipuxl.tensor_factories import constant as new_constant

        graph = get_current_context().graph
        # One constant per graph, name and value object (subgraphs may reuse a name for
        # another value); the value is kept alive with it so its id is not reused.
        key = (id(graph), name, id(value))
        found = self._constants.get(key)
        if found is None or found[1].graph is not graph:
            array = np.asarray(value)
            if self._folded.get(id(value)) is value:
                constant = adopted_constant(array, dtype_of(array.dtype), name)
            else:
                constant = new_constant(array, dtype=dtype_of(array.dtype), name=name,
                                        downcast=False)
            found = (value, constant)
            self._constants[key] = found
        return found[1]

    def known_value(self, node: Any, index: int, value: Value) -> np.ndarray:
        if value is None:
            raise OnnxImportError(f"Node {_label(node)} ({node.op_type}): input {index} is "
                                  "required.")
        if not isinstance(value, Tensor):
            return np.asarray(value)
        name = node.input[index]
        if name in self.known:
            return self.known[name]
        message = (f"Node {_label(node)} ({node.op_type}) needs the value of its input "
                   f"{index} ({name!r}) when the model is imported (it decides a shape), but "
                   "that value is only known when the model runs. Make it an initializer or "
                   "a Constant.")
        if self.popart:
            message = needed_value_message(node, self._version(node), index, message)
        raise NeedsValueError(message, name)

    def _version(self, node: Any) -> int:
        """The version of ``node``'s operator that the model's opset gives."""
        domain = canonical_domain(node.domain)
        rule = find_rule(domain, node.op_type, self.opsets.get(domain, 1))
        return rule.since if rule is not None else self.opsets.get(domain, 1)

    # -------------------------------------------------------------------- one node
    def _apply(self, rule: Rule, node: Any, inputs: list[Value | None],
               attrs: dict[str, Any], hints: dict[str, Any] | None = None) -> list[Value]:
        if rule.takes_num_outputs:
            attrs["num_outputs"] = len(node.output)
        if rule.check is not None:
            try:
                rule.check(list(node.input), inputs, attrs)
            except PopartOpError as error:  # PopART's message, naming the op as PopART does
                raise OnnxImportError(error.for_node(node, rule.since)) from None
            except (IndexError, ValueError) as error:
                raise OnnxImportError(f"Node {_label(node)} ({node.op_type}): {error}") from None
        if self.popart:
            session_check(node, rule.since, [
                np.asarray(self.known[name]) if isinstance(value, Tensor) and name in self.known
                else value
                for name, value in zip(node.input, inputs)])
        if rule.takes_training and self.training is not None:
            attrs = {**attrs, "training": self.training}
        if self.session:
            attrs = {**attrs, **keyword_arguments(rule.fn, self.session)}
        slots, statics, dynamic = [], [], []
        for index, value in enumerate(inputs):
            if value is None:
                slots.append("-")
            elif index in rule.static or rule.value_dependent:
                slots.append("s")
                statics.append(self.known_value(node, index, value))
            else:
                slots.append("t")
                dynamic.append((index, value))
        keyed = rule.random and self.random is not None
        if not keyed and all(not isinstance(v, Tensor) for _, v in dynamic) and \
                rule.kind != "host":
            # Every input is known: evaluate the node now (unless it acts on the host when
            # the program runs, as an abort does).
            folded = self._fold(rule, node, slots, statics, dynamic, attrs)
            return session_output_types(node, folded) if self.popart else folded
        tensors = {f"input{index}": _on_current_ipu(self.tensor(node.input[index], value))
                   for index, value in dynamic}
        names = [name or None for name in node.output]
        layout = "".join(slots)
        if layout.strip("t"):  # some input is static or absent
            attrs = {**attrs, "slots": layout}
        if keyed:
            tensors["key"] = _on_current_ipu(self.random.key(node))
            attrs = {**attrs, "keyed": True}
        if statics:
            attrs["static"] = tuple(statics)
        try:
            outputs = rule.opdef.apply(tensors, names=names, hints=hints, **attrs)
        except OnnxImportError:
            raise
        except Exception as error:
            raise OnnxImportError(
                f"Node {_label(node)} ({node.op_type}, {rule.name}) cannot be built for inputs "
                f"{_describe(tensors.values())}: {type(error).__name__}: {error}"
            ) from error
        return session_output_types(node, list(outputs)) if self.popart else list(outputs)

    def _fold(self, rule: Rule, node: Any, slots: list[str], statics: list[np.ndarray],
              dynamic: list[tuple[int, Any]], attrs: dict[str, Any]) -> list[np.ndarray]:
        try:
            # The platform's name, not ``jax.devices("cpu")``: folding NumPy values
            # needs no JAX backend, so importing does not start one.
            with jax.enable_x64(True), jax.default_device("cpu"):
                layout = "".join(slots)
                arrays = [np.asarray(v) for _, v in dynamic]
                # Static inputs are part of the key: only small ones (shapes, axes).
                small = sum(np.asarray(s).nbytes for s in statics) <= 4096
                known = signature(arrays, layout, tuple(statics), attrs) if small else None
                result = folding.evaluate(
                    lambda *given: call_rule(rule, given, layout, statics, attrs), arrays,
                    key=None if known is None else (id(rule), known), family=id(rule))
                results = result if isinstance(result, (list, tuple)) else (result,)
                arrays = [np.asarray(r) for r in results]
                for array in arrays:
                    array.flags.writeable = False
                    self._folded[id(array)] = array
                return arrays
        except OnnxImportError:
            raise
        except Exception as error:
            raise OnnxImportError(
                f"Node {_label(node)} ({node.op_type}, {rule.name}) failed on its known "
                f"inputs: {type(error).__name__}: {error}"
            ) from error


# PopART's IPU annotations (``popart.Builder`` writes them as node attributes).
_PARTIALS = {"HALF": "float16", "FLOAT": "float32", "half": "float16", "float": "float32"}


def _placement(annotations: dict[str, Any]) -> Any:
    """``with ipu(n)`` for a node annotated ``__ipu_number`` (``builder.virtualGraph``)."""
    import contextlib

    from ipuxl.context import ipu

    number = annotations.get("__ipu_number")
    return ipu(int(number)) if number is not None else contextlib.nullcontext()


def _hints(annotations: dict[str, Any]) -> dict[str, Any]:
    """The IPU model's planning hints from ``setAvailableMemoryProportion`` and
    ``setPartialsType``."""
    from ipuxl import dtypes

    hints: dict[str, Any] = {}
    # PopART's attribute is ``__available_memory``; earlier ipuxl models wrote the longer
    # name, which is still read.
    for name in ("__available_memory", "__available_memory_proportion"):
        value = annotations.get(name)
        if isinstance(value, (int, float)):
            hints["available_memory_proportion"] = float(value)
            break
    partials = annotations.get("__partials_type")
    if partials in _PARTIALS:
        hints["partials_type"] = getattr(dtypes, _PARTIALS[partials])
    return hints


def _on_current_ipu(tensor: Tensor) -> Tensor:
    """``tensor``, copied to the current IPU if it lives on another (PopART inserts these
    IpuCopy ops for a model split with ``virtualGraph``)."""
    from ipuxl import ops
    from ipuxl.errors import UndefinedValue

    current = get_current_context().ipu_id
    try:
        home = tensor.ipu
    except UndefinedValue:  # a graph input no op uses yet: it takes this op's IPU
        return tensor
    return tensor if home == current else ops.ipu_copy(tensor, current, source=home)


def _label(node: Any) -> str:
    return repr(node.name or (node.output[0] if node.output else node.op_type))


def _describe(tensors: Iterable[Tensor]) -> str:
    return ", ".join(f"{t.dtype.short_name}{list(t.shape)}" for t in tensors) or "(none)"
