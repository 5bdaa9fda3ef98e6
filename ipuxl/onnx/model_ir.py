"""An ONNX model as a plain ipuxl Ir: streams in, streams out, weights as variables."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ipuxl.onnx.errors import OnnxImportError
from ipuxl.onnx.importer import (
    Importer,
    check_model,
    load_model,
    model_source,
    opsets_of,
    value_info_spec,
)
from ipuxl.onnx.registry import dtype_of
from ipuxl.onnx.structure import check_structure
from ipuxl.onnx.tensors import dense_array, tensor_array
from ipuxl.tensor_factories import adopted_variable

__all__ = ["ModelIr", "model_to_ir", "initializer_arrays"]


@dataclass
class ModelIr:
    """What :func:`model_to_ir` made: ``ir``, and the streams and variables by ONNX name."""

    ir: Any
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    weights: dict[str, Any]
    model: Any
    #: graph outputs that are sequences or optionals: their tree definitions (each of
    #: their tensors is streamed out as ``<name>.<i>``)
    structures: dict[str, Any] = field(default_factory=dict)


def initializer_arrays(graph: Any) -> dict[str, np.ndarray]:
    """``{name: array}`` of ``graph``'s initializers, dense and sparse.

    Raises:
        OnnxImportError: two initializers share a name, or one's data does not fit its
            type and dims (:func:`ipuxl.onnx.tensors.check_tensor_data`).
    """
    arrays: dict[str, np.ndarray] = {}
    where = f"graph {graph.name!r}"
    named = [(init.name, init, False) for init in graph.initializer]
    named += [(sparse.values.name, sparse, True) for sparse in graph.sparse_initializer]
    for name, tensor, sparse in named:
        if name in arrays:
            raise OnnxImportError(
                f"The {where} has two initializers named {name!r}. Initializer names must "
                "be unique (one would silently replace the other): rename or remove one.")
        what = f"initializer {name!r} of the {where}"
        arrays[name] = (dense_array(tensor, f"sparse {what}") if sparse
                        else tensor_array(tensor, what))
    return arrays


def is_weight(array: np.ndarray) -> bool:
    """Floating-point initializers are weights (variables); the rest (shapes, indices)
    are constants whose values the importer may read."""
    from ipuxl import dtypes

    try:
        return dtypes.dtype.as_dtype(array.dtype).is_floating_point
    except ValueError:
        return False


def model_to_ir(model: Any, *, input_shapes: Mapping[str, Sequence[int]] | None = None,
                known_inputs: Mapping[str, np.ndarray] | None = None,
                outputs: Sequence[str] | None = None, check: bool = True,
                input_structures: Mapping[str, Any] | None = None) -> ModelIr:
    """Import ``model`` into a new :class:`ipuxl.Ir` (one run = one batch).

    Args:
        model: a path, serialized bytes or an ``onnx.ModelProto``.
        input_shapes: shapes of graph inputs whose dimensions are symbolic.
        known_inputs: graph inputs to fix to these values (they become constants).
        outputs: the values to stream out (default: the graph outputs).
        check: list unsupported operators first (:func:`check_model`); the model's
            structure (:func:`ipuxl.onnx.structure.check_structure`) is checked either way.
        input_structures: for each sequence or optional graph input, a value of its
            structure (:func:`ipuxl.onnx.ops.sequence.from_host`); each of its arrays is
            streamed in as ``<name>.<i>``, with that array's shape and dtype.
    """
    from jax import tree_util

    from ipuxl import ops
    from ipuxl.ir import Ir
    from ipuxl.onnx.ops.sequence import is_structure
    from ipuxl.streams import d2h_stream, h2d_stream

    loaded = load_model(model)
    source, model = model_source(model, loaded), loaded
    # initializer_arrays reads (and checks) every initializer next.
    if check:
        check_model(model, initializer_data=False)
    else:
        check_structure(model, initializer_data=False)
    graph = model.graph
    known_inputs = dict(known_inputs or {})
    arrays = initializer_arrays(graph)
    ir = Ir()
    env: dict[str, Any] = {}
    streams_in, streams_out, weights = {}, {}, {}
    importer = Importer(opsets_of(model), source=source)
    with ir.main_graph:
        for name, array in arrays.items():
            if is_weight(array) and name not in known_inputs:
                # initializer_arrays made the array: the variable holds it, uncopied.
                weights[name] = env[name] = adopted_variable(array, dtype_of(array.dtype), name)
                importer.known[name] = array
            else:
                env[name] = array
        for info in graph.input:
            if info.name in arrays and info.name not in known_inputs:
                continue  # an initializer listed as an input (old ONNX): a weight
            if info.name in known_inputs:
                env[info.name] = np.asarray(known_inputs[info.name])
                continue
            if input_structures and info.name in input_structures:
                leaves, tree = tree_util.tree_flatten(input_structures[info.name])
                loaded = []
                for index, leaf in enumerate(leaves):
                    leaf_name = f"{info.name}.{index}"
                    array = np.asarray(leaf)
                    stream = h2d_stream(array.shape, dtype_of(array.dtype), name=leaf_name)
                    streams_in[leaf_name] = stream
                    loaded.append(ops.host_load(stream, leaf_name))
                env[info.name] = tree_util.tree_unflatten(tree, loaded)
                continue
            shape, dtype = value_info_spec(info, input_shapes)
            stream = h2d_stream(shape, dtype_of(dtype), name=info.name)
            streams_in[info.name] = stream
            env[info.name] = ops.host_load(stream, info.name)
        importer.run(graph, env)
        structures = {}
        for name in outputs or [o.name for o in graph.output]:
            if name not in env:
                raise OnnxImportError(
                    f"The output {name!r} asked for is not a value of the model. Name a "
                    "graph input, an initializer or a node output, e.g. one of "
                    f"{[o.name for o in graph.output]}.")
            if is_structure(env[name]):
                leaves, structures[name] = tree_util.tree_flatten(env[name])
                for index, leaf in enumerate(leaves):
                    tensor = importer.tensor(f"{name}.{index}", leaf)
                    stream = d2h_stream(tensor.shape, tensor.dtype, name=f"{name}.{index}")
                    ops.host_store(stream, tensor)
                    streams_out[f"{name}.{index}"] = stream
                continue
            tensor = importer.tensor(name, env[name])
            stream = d2h_stream(tensor.shape, tensor.dtype, name=name)
            ops.host_store(stream, tensor)
            streams_out[name] = stream
    return ModelIr(ir, streams_in, streams_out, weights, model, structures)
