"""``popart.GraphTransformer``: rewrite a saved ONNX model before a session imports it.

::

    transformer = popart.GraphTransformer(builder.getModelProto())   # or a file name
    transformer.convertAllFixedPointInitializersToConstants()       # int weights -> Constants
    transformer.convertFloatsToHalfs()                               # FLOAT -> FLOAT16
    proto = transformer.getModelProto()                              # serialized bytes

Each method changes the held ``onnx.ModelProto`` in place, as PopART's does:

* the type conversions (``convertFloatsToHalfs``, ``convertDoublesToFloats``,
  ``convertINT64ToINT32``...) rewrite the tensors of a type held by the initializers and
  by the tensor attributes of the nodes (``Constant``'s ``value``...), and the element type
  of the graph's inputs, outputs and ``value_info`` entries. Other nodes are left as they
  are (a ``Cast`` keeps its ``to``), as in PopART;
* ``convertInitializersToConstants(ids)`` turns weights into ``Constant`` nodes (so the
  importer folds them: a reshape's shape, a gather's indices);
* ``removeUnusedInputs`` drops the graph inputs (and their initializers) no node reads;
* ``prepareNodesForTraining`` gives every ``BatchNormalization`` its five training
  outputs;
* ``saveInitializersExternally(ids, filename)`` moves weights' data into one binary file
  (ONNX external data), in the order given.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ipuxl.popart.errors import popart_exception

__all__ = ["GraphTransformer", "save_initializers_externally"]

_BATCH_NORM_TRAINING_OUTPUTS = 5
_names = itertools.count()  # PopART numbers the added BatchNormalization outputs per process


class GraphTransformer:
    """Rewrites an ONNX model (PopART's ``popart.GraphTransformer``).

    Args:
        modelProtoOrFilename: the model: serialized bytes (``builder.getModelProto()``),
            an ``onnx.ModelProto``, or the path of a ``.onnx`` file.

    Raises:
        popart_exception: the path names no file.
    """

    def __init__(self, modelProtoOrFilename: Any):  # noqa: N803 - PopART's name
        from ipuxl.popart.builder import load_model

        self._model = load_model(modelProtoOrFilename, "GraphTransformer")

    def getModelProto(self) -> bytes:  # noqa: N802 - PopART's name
        """The transformed model, serialized (``onnx.load_from_string`` reads it)."""
        return self._model.SerializeToString(deterministic=True)

    # ------------------------------------------------------------------ element types
    def convertFloatsToHalfs(self) -> None:  # noqa: N802 - PopART's name
        self._convert("FLOAT", "FLOAT16", np.float16)

    def convertDoublesToFloats(self) -> None:  # noqa: N802
        self._convert("DOUBLE", "FLOAT", np.float32)

    def convertDoublesToHalfs(self) -> None:  # noqa: N802
        self._convert("DOUBLE", "FLOAT16", np.float16)

    def convertBFloats16ToFloat32(self) -> None:  # noqa: N802
        self._convert("BFLOAT16", "FLOAT", np.float32)

    def convertUINT8ToINT32(self) -> None:  # noqa: N802
        self._convert("UINT8", "INT32", np.int32)

    def convertUINT16ToINT32(self) -> None:  # noqa: N802
        self._convert("UINT16", "INT32", np.int32)

    def convertINT8ToINT32(self) -> None:  # noqa: N802
        self._convert("INT8", "INT32", np.int32)

    def convertINT16ToINT32(self) -> None:  # noqa: N802
        self._convert("INT16", "INT32", np.int32)

    def convertINT64ToINT32(self, clip: bool = False) -> None:  # noqa: N802
        """INT64 to INT32. A value outside INT32's range is refused, or, with
        ``clip=True``, clipped to it.

        Raises:
            popart_exception: a value does not fit INT32 and ``clip`` is False.
        """
        limits = np.iinfo(np.int32)

        def narrow(values: np.ndarray) -> np.ndarray:
            if clip:
                return np.clip(values, limits.min, limits.max)
            if values.size and (values.min() < limits.min or values.max() > limits.max):
                raise popart_exception(
                    "In convertINT64TensorToINT32, cannot cast int64 to int32: number is too "
                    "large. If you are sure you want still want to convert your tensor data, "
                    "you can set 'clip' to 'true'.")
            return values

        self._convert("INT64", "INT32", np.int32, narrow)

    def _convert(self, source: str, target: str, dtype: Any,
                 prepare: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
        """Retype every ``source`` tensor and value info of the model to ``target``."""
        from onnx import TensorProto, numpy_helper

        from ipuxl.onnx.tensors import tensor_array

        old, new = getattr(TensorProto, source), getattr(TensorProto, target)

        def retype(tensor: Any) -> None:
            if tensor.data_type != old:
                return
            values = tensor_array(tensor, f"tensor {tensor.name!r}")  # external data too
            if prepare is not None:
                values = prepare(values)
            converted = numpy_helper.from_array(values.astype(dtype), tensor.name)
            tensor.CopyFrom(converted)

        for graph in _graphs(self._model.graph):
            for tensor in graph.initializer:
                retype(tensor)
            for node in graph.node:
                for attribute in node.attribute:
                    if attribute.HasField("t"):
                        retype(attribute.t)
                    for tensor in attribute.tensors:
                        retype(tensor)
            for info in [*graph.input, *graph.output, *graph.value_info]:
                tensor_type = info.type.tensor_type
                if info.type.HasField("tensor_type") and tensor_type.elem_type == old:
                    tensor_type.elem_type = new

    # ------------------------------------------------------------------ structure
    def convertInitializersToConstants(self, ids: Iterable[str]) -> None:  # noqa: N802
        """Make the initializers ``ids`` ``Constant`` nodes (placed first in the graph)
        and remove them from the graph's inputs.

        Raises:
            popart_exception: an id is not an initializer of the main graph (PopART's
                message: ``"TensorId x not in the model initalizers"``).
        """
        from onnx import helper

        ids = list(ids)
        graph = self._model.graph
        weights = {tensor.name: tensor for tensor in graph.initializer}
        for name in ids:
            if name not in weights:
                raise popart_exception(f"TensorId {name} not in the model initalizers")
        constants = [helper.make_node("Constant", [], [name], name=name, value=weights[name])
                     for name in ids]
        nodes = [*constants, *graph.node]
        del graph.node[:]
        graph.node.extend(nodes)
        chosen = set(ids)
        _keep(graph.initializer, lambda tensor: tensor.name not in chosen)
        _keep(graph.input, lambda info: info.name not in chosen)

    def convertAllFixedPointInitializersToConstants(self) -> None:  # noqa: N802
        """``convertInitializersToConstants`` of every integer or boolean initializer."""
        from onnx import helper

        fixed = [tensor.name for tensor in self._model.graph.initializer
                 if np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).kind
                 in "biu"]
        self.convertInitializersToConstants(fixed)

    def removeUnusedInputs(self) -> None:  # noqa: N802 - PopART's name
        """Remove the main graph's inputs (and their initializers) that no node reads."""
        graph = self._model.graph
        read = {name for node in graph.node for name in node.input}
        unused = {info.name for info in graph.input if info.name not in read}
        _keep(graph.input, lambda info: info.name not in unused)
        _keep(graph.initializer, lambda tensor: tensor.name not in unused)

    def prepareNodesForTraining(self) -> None:  # noqa: N802 - PopART's name
        """Give each ``BatchNormalization`` node of the main graph five outputs (the
        running mean and variance, and the saved mean and variance, that training
        updates), named ``BatchNormalization_<node>_oi<index>_<n>``."""
        for node in self._model.graph.node:
            if node.op_type != "BatchNormalization":
                continue
            for index in range(len(node.output), _BATCH_NORM_TRAINING_OUTPUTS):
                node.output.append(f"{node.op_type}_{node.name}_oi{index}_{next(_names)}")

    def saveInitializersExternally(self, ids: Iterable[str],  # noqa: N802 - PopART's name
                                   filename: str) -> None:
        """Write the data of initializers ``ids`` to ``filename`` (see
        :func:`save_initializers_externally`)."""
        save_initializers_externally(self._model, ids, filename)


def save_initializers_externally(model: Any, ids: Iterable[str], filename: str) -> None:
    """Move the data of ``model``'s initializers ``ids`` to the binary file ``filename``,
    one after the other in the order given (raw little-endian values), and point each
    initializer at its bytes (ONNX external data: ``location``, ``offset``, ``length``).
    An existing file is overwritten.

    Raises:
        popart_exception: the file's folder does not exist, an id is not an initializer,
            or an initializer's data is already external.
    """
    from onnx import TensorProto, numpy_helper

    folder = os.path.dirname(filename)
    if folder and not os.path.isdir(folder):
        raise popart_exception(f"Saving tensor data to file {filename}, but its parent "
                               "directory does not exist")
    weights = {tensor.name: tensor for tensor in model.graph.initializer}
    ids = list(ids)
    for name in ids:
        if name not in weights:
            raise popart_exception(
                f"Tensor {name} is not an initializer: only initializers (weights) can be "
                "saved externally.")
        if weights[name].data_location == TensorProto.EXTERNAL:
            raise popart_exception(
                f"Tensor {name} already has an external data_location ({filename}); its "
                "data is saved once.")
    offset = 0
    with open(filename, "wb") as file:
        for name in ids:
            tensor = weights[name]
            values = numpy_helper.to_array(tensor)
            data = values.astype(values.dtype.newbyteorder("<"), copy=False).tobytes()
            file.write(data)
            tensor.ClearField("raw_data")
            for field in ("float_data", "int32_data", "int64_data", "double_data",
                          "uint64_data", "string_data"):
                tensor.ClearField(field)
            tensor.data_location = TensorProto.EXTERNAL
            del tensor.external_data[:]
            for key, value in (("location", filename), ("offset", str(offset)),
                               ("length", str(len(data)))):
                tensor.external_data.add(key=key, value=value)
            offset += len(data)


def _graphs(graph: Any) -> list[Any]:
    """``graph`` and its subgraphs (the bodies of If, Loop, Scan, calls), depth first."""
    found = [graph]
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.HasField("g"):
                found.extend(_graphs(attribute.g))
            for subgraph in attribute.graphs:
                found.extend(_graphs(subgraph))
    return found


def _keep(field: Any, wanted: Callable[[Any], bool]) -> None:
    """Keep the items of a repeated protobuf ``field`` for which ``wanted`` holds."""
    kept = [item for item in field if wanted(item)]
    del field[:]
    field.extend(kept)
