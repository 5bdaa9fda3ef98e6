"""A PopART session's ``fnModel``: loading it as PopART does (:func:`load_fn_model`) and
the tensor ids its nodes read (:func:`read_ids`: model inputs nothing reads get no stream,
as PopART's Ir drops them)."""

from __future__ import annotations

import os
from typing import Any

from ipuxl.onnx.importer import load_model
from ipuxl.popart.errors import popart_exception
from ipuxl.popart.initializers import unpacked_float16

__all__ = ["load_fn_model", "read_ids"]


def read_ids(graph: Any) -> set[str]:
    """The tensor ids the nodes of ``graph`` and of its subgraphs read. A model input
    outside this set (and no anchor, loss input or model output) gets no stream, as
    PopART's Ir drops a stream tensor with no consumer: the session needs no data for it,
    and a PyStepIO array for it is ignored with PopART's warning."""
    read: set[str] = set()
    for node in graph.node:
        read.update(node.input)
        for attribute in node.attribute:
            for subgraph in [*attribute.graphs, *([attribute.g] if attribute.HasField("g")
                                                 else [])]:
                read |= read_ids(subgraph) | {out.name for out in subgraph.output}
    return read


def load_fn_model(fn_model: Any) -> Any:
    """The session's ``fnModel`` as an ``onnx.ModelProto``: its type and emptiness are
    checked here; bytes (or a string naming no file) that are no serialized ModelProto
    raise PopART's ``popart_exception`` (:func:`ipuxl.popart.builder.load_model`); what
    a model holds is checked by :func:`ipuxl.onnx.importer.load_model` (whose message
    this prefixes with ``fnModel:``)."""
    import onnx

    from ipuxl.onnx.importer import OnnxImportError

    forms = ("Pass builder.getModelProto() (the serialized model), the path of an .onnx "
             "file, or an onnx.ModelProto.")
    if not isinstance(fn_model, (bytes, bytearray, str, os.PathLike, onnx.ModelProto)):
        raise TypeError(f"fnModel must be the bytes of an ONNX model, a path or an "
                        f"onnx.ModelProto, got {type(fn_model).__name__}. {forms}")
    if isinstance(fn_model, (bytes, bytearray, str)) and not fn_model:
        raise popart_exception(f"fnModel is empty ({fn_model!r}), so there is no model to "
                               f"run. {forms}")
    if isinstance(fn_model, (bytes, bytearray)) or \
            (isinstance(fn_model, str) and not os.path.isfile(fn_model)):
        # PopART reads a string that names no file as a serialized ModelProto, and refuses
        # one that is not with popart_exception ("Failed to load a ModelProto from ...").
        from ipuxl.popart.builder import load_model as load_model_string

        fn_model = load_model_string(fn_model, "fnModel")
    try:
        return unpacked_float16(load_model(fn_model))  # PopART's FLOAT16 storage
    except OnnxImportError as error:
        raise OnnxImportError(f"fnModel: {error}") from None
