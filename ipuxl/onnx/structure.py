"""The structural rules of an ONNX model, checked in one pass before anything is imported.

An ONNX graph is a list of nodes in single static assignment (SSA) form: every value name
is written once, by a graph input, an initializer or one node output, and read only after
it is written. The importer runs the nodes in order over a dictionary of values, so a
model that breaks these rules would not fail on its own: a second writer of a name would
silently replace the first ("last writer wins"), a second initializer of the same name
would replace the first. :func:`check_structure` refuses such models, naming the node (its
index, name and operator) or the tensor, with the rules ``onnx.checker`` applies to graphs
(see ONNX's ``docs/IR.md``, "Graphs" and "Names Within a Graph"):

* every graph input, initializer and node output has a name, and graph inputs are unique,
  initializers (dense and sparse) are unique; an initializer may share its name with a
  graph input (the input's default value, IR version 4 and later);
* a node has an operator type, some input or output, and no attribute twice;
* a node reads only names written before it: in its graph (graph inputs, initializers,
  earlier nodes' outputs) or, inside a subgraph (``If``'s branches, ``Loop``'s and
  ``Scan``'s bodies), in an enclosing graph before the node that owns the subgraph;
* a node output is a new name: not written before in its graph or in any enclosing graph;
* every graph output is written in its own graph;
* every tensor stored in the model (initializers, tensor attributes such as
  ``Constant``'s value) holds exactly the data its type and dimensions call for
  (:func:`ipuxl.onnx.tensors.check_tensor_data`).

Two rules of ``onnx.checker`` are left out because breaking them cannot change a result:
graphs need no name, and initializers of an IR version 3 model need not be listed as graph
inputs (the importer treats them as weights either way).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import MutableMapping
from typing import Any

from ipuxl.onnx.errors import OnnxImportError
from ipuxl.onnx.tensors import check_tensor_data

__all__ = ["check_structure", "node_label"]


def node_label(node: Any, index: int) -> str:
    """``node 3 'relu1' (Relu)``: a node's place in its graph, name and operator."""
    name = f" {node.name!r}" if node.name else ""
    return f"node {index}{name} ({node.op_type or 'no op_type'})"


def _sentence(text: str) -> str:
    """``text`` with a capital first letter (``str.capitalize`` would lower the rest)."""
    return text[:1].upper() + text[1:]


def check_structure(model: Any, initializer_data: bool = True) -> None:
    """Refuse a model that breaks ONNX's structural rules (see the module docstring).
    ``initializer_data=False`` leaves the data of the main graph's initializers to the
    caller, which reads (and so checks) every one of them: each read of a tensor's
    ``raw_data`` copies it.

    Raises:
        OnnxImportError: the first rule broken, naming the node or tensor and the fix.
    """
    if not model.HasField("graph"):
        raise OnnxImportError(
            "The ONNX model has no graph: every ModelProto holds one GraphProto (its "
            "nodes, inputs and outputs). The model given is empty or is not an ONNX model; "
            "pass the bytes or path of a model saved with `onnx.save` or "
            "`builder.getModelProto()`.")
    _check_graph(model.graph, ChainMap(), f"the main graph {model.graph.name!r}",
                 initializer_data)


def _check_graph(graph: Any, outer: ChainMap, where: str, initializer_data: bool = True
                 ) -> None:
    """Check ``graph``; ``outer`` maps each name of the enclosing graphs written so far to
    what wrote it."""
    written: dict[str, str] = {}
    for position, info in enumerate(graph.input):
        if not info.name:
            raise OnnxImportError(f"Graph input {position} of {where} has no name. Every "
                                  "graph input needs a unique name.")
        if info.name in written:
            raise OnnxImportError(
                f"{_sentence(where)} lists the graph input {info.name!r} twice (inputs "
                f"{_first_input(graph, info.name)} and {position}). Graph inputs must have "
                "unique names: rename or remove one.")
        written[info.name] = "a graph input"
    initializers: set[str] = set()
    for position, tensor in enumerate(graph.initializer):
        _check_initializer(tensor.name, position, initializers, where)
        if initializer_data:
            check_tensor_data(tensor, f"initializer {tensor.name!r} of {where}")
        written.setdefault(tensor.name, "an initializer")
    for position, sparse in enumerate(graph.sparse_initializer):
        name = sparse.values.name
        _check_initializer(name, position, initializers, where, "sparse ")
        check_tensor_data(sparse.values, f"values of the sparse initializer {name!r} of {where}")
        check_tensor_data(sparse.indices,
                          f"indices of the sparse initializer {name!r} of {where}")
        written.setdefault(name, "an initializer")
    scope = outer.new_child(written)
    for index, node in enumerate(graph.node):
        _check_node(node, index, scope, written, where)
    for position, info in enumerate(graph.output):
        if not info.name:
            raise OnnxImportError(f"Graph output {position} of {where} has no name. Every "
                                  "graph output names a value of its graph.")
        if info.name not in written:
            found = (f"it is written only in an enclosing graph ({outer[info.name]}); add "
                     "an Identity node that copies it" if info.name in outer else
                     "no node, graph input or initializer writes it")
            raise OnnxImportError(
                f"Graph output {info.name!r} of {where} is not a value of that graph: "
                f"{found}. A graph output must be written in its own graph: check the "
                "name's spelling, or add the node that computes it.")


def _first_input(graph: Any, name: str) -> int:
    return next(i for i, info in enumerate(graph.input) if info.name == name)


def _check_initializer(name: str, position: int, seen: set[str], where: str,
                       kind: str = "") -> None:
    if not name:
        raise OnnxImportError(f"The {kind}initializer {position} of {where} has no name. "
                              "Every initializer needs a unique name.")
    if name in seen:
        raise OnnxImportError(
            f"{_sentence(where)} has two initializers named {name!r}. Initializer names "
            "must be unique (the importer would otherwise keep one and drop the other "
            "silently): rename or remove one.")
    seen.add(name)


def _acts_alone(node: Any) -> bool:
    """A node that does something with no inputs and outputs: PopART's unconditional
    ``ai.graphcore.Abort`` (it stops the program)."""
    return node.op_type == "Abort" and node.domain == "ai.graphcore"


def _check_node(node: Any, index: int, scope: ChainMap, written: MutableMapping[str, str],
                where: str) -> None:
    label = node_label(node, index)
    if not node.op_type:
        raise OnnxImportError(f"{_sentence(label)} of {where} has no op_type. Every node "
                              "names its operator.")
    if not node.input and not node.output and not _acts_alone(node):
        raise OnnxImportError(f"{_sentence(label)} of {where} has no inputs and no "
                              "outputs. Remove the node.")
    for name in node.input:
        if name and name not in scope:
            raise OnnxImportError(
                f"{_sentence(label)} of {where} reads {name!r}, which no earlier node, "
                "graph input or initializer produces. ONNX graphs list their nodes in "
                "topological order and every value a node reads must be written before it "
                "(subgraphs may also read values of the enclosing graphs): sort the nodes "
                "(`onnx.utils`, or your exporter), or fix the name's spelling.")
    names: set[str] = set()
    for attribute in node.attribute:
        if attribute.name in names:
            raise OnnxImportError(
                f"{_sentence(label)} of {where} has the attribute {attribute.name!r} "
                "twice. A node gives each attribute once: remove one of them.")
        names.add(attribute.name)
        _check_attribute(attribute, label, scope, where)
    for name in node.output:
        if not name:
            continue  # an optional output left out
        if name in scope:
            writer = written.get(name) or f"{scope[name]} of an enclosing graph"
            raise OnnxImportError(
                f"{_sentence(label)} of {where} writes {name!r}, which {writer} "
                "already wrote. ONNX graphs are in single static assignment form: each "
                "value is written once (a subgraph may not reuse a name of an enclosing "
                "graph either). Rename one of the two values and its readers.")
        written[name] = label


def _check_attribute(attribute: Any, label: str, scope: ChainMap, where: str) -> None:
    from onnx import AttributeProto

    kind = attribute.type
    owner = f"attribute {attribute.name!r} of {label} in {where}"
    if kind == AttributeProto.TENSOR:
        check_tensor_data(attribute.t, f"tensor of {owner}")
    elif kind == AttributeProto.TENSORS:
        for position, tensor in enumerate(attribute.tensors):
            check_tensor_data(tensor, f"tensor {position} of {owner}")
    elif kind == AttributeProto.GRAPH:
        _check_graph(attribute.g, scope, f"the subgraph in {owner}")
    elif kind == AttributeProto.GRAPHS:
        for position, graph in enumerate(attribute.graphs):
            _check_graph(graph, scope, f"subgraph {position} in {owner}")
