"""Tensor data stored outside an ONNX model ("external data").

A ``TensorProto`` whose ``data_location`` is ``EXTERNAL`` keeps no values in the model:
its ``external_data`` entries name a file (``location``), where in it the bytes start
(``offset``, default 0) and how many there are (``length``, default: to the end of the
file). The bytes are those ``raw_data`` would hold (little-endian values).

Where the file is:

* an absolute ``location`` is used as it is (PopART's ``saveInitializersExternally``
  writes the path it is given, often absolute);
* a relative one is relative to the current directory, as PopART reads it, except in
  a model :func:`ipuxl.onnx.importer.load_model` read from a file, whose relative
  locations it makes relative to that file's folder first (ONNX's rule, see
  :func:`resolve_locations`).

``onnx.numpy_helper.to_array`` and ``onnx.load`` refuse absolute locations (ONNX's
checker), so ipuxl reads and writes the bytes itself: :func:`stored_length` checks that
they are there (without reading them), :func:`read_bytes` reads them once,
:func:`write_bytes` overwrites them in place (``modelToHost``), :func:`append` adds
tensors at the end of a file and :func:`move` copies tensors to a new file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ipuxl.onnx.errors import OnnxImportError

__all__ = ["ExternalData", "location_of", "external_data", "is_external", "stored_length",
           "read_bytes", "write_bytes", "append", "move", "resolve_locations",
           "external_tensors"]

_FIX = ("Save the model again with its data (`onnx.save(model, path, "
        "save_as_external_data=True)`, or PopART's `builder.saveInitializersExternally`), "
        "or run from the folder its relative locations are relative to.")


@dataclass(frozen=True)
class ExternalData:
    """Where a tensor's bytes are: ``length`` is None when the entry leaves it out (the
    bytes run to the end of the file)."""

    location: str
    offset: int
    length: int | None


def is_external(tensor: Any) -> bool:
    """Whether ``tensor`` keeps its data in a file (``data_location`` EXTERNAL)."""
    from onnx import TensorProto

    return tensor.data_location == TensorProto.EXTERNAL


def location_of(tensor: Any) -> str:
    """The file ``tensor``'s ``external_data`` names ("" when it names none)."""
    return next((entry.value for entry in tensor.external_data if entry.key == "location"),
                "")


def external_data(tensor: Any, what: str) -> ExternalData:
    """The ``external_data`` entries of ``tensor``, checked.

    Raises:
        OnnxImportError: there is no ``location``, or ``offset``/``length`` is no
            whole number, or is negative.
    """
    entries = {entry.key: entry.value for entry in tensor.external_data}
    where = location_of(tensor)
    if not where:
        raise OnnxImportError(
            f"The {what} is stored externally but names no file: its external_data has "
            f"no 'location' entry (entries: {sorted(entries)}). {_FIX}")
    numbers = {}
    for key in ("offset", "length"):
        if key not in entries:
            continue
        try:
            numbers[key] = int(entries[key])
        except ValueError:
            numbers[key] = -1
        if numbers[key] < 0:
            raise OnnxImportError(
                f"The {what} is stored externally with {key} {entries[key]!r}; the {key} "
                f"must be a whole number of bytes, 0 or more. {_FIX}")
    return ExternalData(where, numbers.get("offset", 0), numbers.get("length"))


def stored_length(tensor: Any, what: str) -> int:
    """How many bytes ``tensor`` has in its file (its ``length``, or the bytes from its
    ``offset`` to the end of the file), after checking that they are there.

    Raises:
        OnnxImportError: see :func:`external_data`; or the file does not exist, is not a
            readable file, or is too short for the ``offset`` and ``length``.
    """
    info = external_data(tensor, what)
    if not os.path.isfile(info.location) or not os.access(info.location, os.R_OK):
        where = os.path.abspath(info.location)
        raise OnnxImportError(
            f"The {what} is stored externally in {info.location!r}, but there is no "
            f"readable file at {where!r}. {_FIX}")
    size = os.path.getsize(info.location)
    length = size - info.offset if info.length is None else info.length
    if length < 0 or info.offset + length > size:
        raise OnnxImportError(
            f"The {what} is stored externally in {info.location!r} at offset {info.offset} "
            f"with length {info.length}, but the file has {size} bytes: the data does not "
            f"fit in it. {_FIX}")
    return length


def read_bytes(tensor: Any, what: str) -> bytes:
    """The bytes of an externally stored ``tensor`` (read once from its file).

    Raises:
        OnnxImportError: see :func:`stored_length`.
    """
    length = stored_length(tensor, what)
    info = external_data(tensor, what)
    with open(info.location, "rb") as file:
        file.seek(info.offset)
        return file.read(length)


def write_bytes(tensor: Any, data: bytes) -> None:
    """Overwrite an externally stored ``tensor``'s bytes in its file with ``data`` (of
    the same length), leaving the rest of the file as it is. The caller has checked the
    tensor with :func:`stored_length`."""
    info = external_data(tensor, f"tensor {tensor.name!r}")
    with open(info.location, "r+b") as file:
        file.seek(info.offset)
        file.write(data)


def _point(tensor: Any, location: str, offset: int, length: int) -> None:
    """Make ``tensor`` keep its data at ``location`` (its values cleared)."""
    from onnx import TensorProto

    for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
                  "uint64_data", "string_data"):
        tensor.ClearField(field)
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", location), ("length", str(length)),
                       ("offset", str(offset))):
        tensor.external_data.add(key=key, value=value)


def append(location: str, tensors: list[tuple[Any, bytes]]) -> None:
    """Add each ``(tensor, data)`` at the end of the existing file ``location``, in
    order, and point the tensor at its bytes."""
    offset = os.path.getsize(location)
    with open(location, "ab") as file:
        for tensor, data in tensors:
            file.write(data)
            _point(tensor, location, offset, len(data))
            offset += len(data)


def move(tensors: list[Any], location: str) -> None:
    """Copy the bytes of externally stored ``tensors`` (checked with
    :func:`stored_length`) to the new file ``location``, one after the other, and point
    each tensor at its copy."""
    data = [read_bytes(tensor, f"tensor {tensor.name!r}") for tensor in tensors]
    with open(location, "wb"):
        pass
    append(location, list(zip(tensors, data)))


def resolve_locations(model: Any, folder: str) -> None:
    """Make the relative external-data locations of ``model``'s tensors (initializers,
    sparse initializers, ``Constant`` and other tensor attributes, in every subgraph)
    relative to ``folder``, the folder of the model's file (ONNX's rule)."""
    for tensor in external_tensors(model):
        for entry in tensor.external_data:
            if entry.key == "location" and entry.value and not os.path.isabs(entry.value):
                entry.value = os.path.join(folder, entry.value)


def external_tensors(model: Any) -> list[Any]:
    """The externally stored ``TensorProto``s of ``model`` (and of its subgraphs)."""
    return [tensor for tensor in _tensors(model.graph) if is_external(tensor)]


def _tensors(graph: Any) -> list[Any]:
    """The ``TensorProto``s of ``graph`` and of its subgraphs."""
    found = [*graph.initializer]
    for sparse in graph.sparse_initializer:
        found += [sparse.values, sparse.indices]
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("t"):
                found.append(attribute.t)
            found.extend(attribute.tensors)
            if attribute.HasField("sparse_tensor"):
                found += [attribute.sparse_tensor.values, attribute.sparse_tensor.indices]
            for subgraph in [*attribute.graphs,
                             *([attribute.g] if attribute.HasField("g") else [])]:
                found.extend(_tensors(subgraph))
    return found
