"""How PopART stores initializers in the models it writes.

PopART's Builder stores an initializer's values in the typed field ONNX gives its type
(``float_data`` for FLOAT, ``int32_data`` for INT32, ``int64_data``...), not in
``raw_data``, and ``modelToHost`` writes the device's values back into the field each
initializer already uses. Programs read those fields directly
(``initializer.float_data``), so ipuxl stores them the same way.

FLOAT16 in the models ``modelToHost`` writes is PopART's own: it copies the halves'
bytes into ``int32_data``, two values to an entry (``(n + 1) // 2`` entries, the last
padded with zero), where ONNX keeps one bit pattern per entry. Programs read it back
with ``np.asarray(t.int32_data, np.int32).view(np.float16)``. ipuxl's Builder keeps
ONNX's form, which every ONNX tool reads; :func:`unpacked_float16` turns a saved model
back into it (a one-element tensor reads the same both ways).

A weight stored externally (``builder.saveInitializersExternally``) stays so:
``modelToHost`` overwrites its bytes in its file, and saves its optimizer state
(``Accl___<w>``...) in the same file, appended once after what the file holds
(:func:`model_with_state`), as PopART does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["typed_initializer", "initializer_like", "saved_initializer", "unpacked_float16",
           "model_with_state", "little_endian_bytes"]


def typed_initializer(array: np.ndarray, name: str) -> Any:
    """An ``onnx.TensorProto`` of ``array`` with its values in the typed field (raw bytes
    only for types ONNX has no typed field for)."""
    from onnx import helper, numpy_helper

    tensor = numpy_helper.from_array(array, name)
    try:
        return helper.make_tensor(name, tensor.data_type, array.shape,
                                  np.ascontiguousarray(array).reshape(-1), raw=False)
    except (TypeError, ValueError):
        return tensor


def saved_initializer(array: np.ndarray, name: str) -> Any:
    """``array`` as ``modelToHost`` saves it: :func:`typed_initializer`, but FLOAT16
    packed two values to an ``int32_data`` entry, as PopART packs it."""
    from onnx import TensorProto

    if array.dtype != np.float16:
        return typed_initializer(array, name)
    flat = np.ascontiguousarray(array).reshape(-1)
    padded = np.concatenate([flat, np.zeros(flat.size % 2, np.float16)])
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT16, dims=array.shape)
    tensor.int32_data.extend(padded.view(np.int32).tolist())
    return tensor


def initializer_like(template: Any, array: np.ndarray) -> Any:
    """``array`` as ``modelToHost`` saves an initializer stored as ``template`` is (raw
    bytes, or the typed field as :func:`saved_initializer` fills it)."""
    from onnx import numpy_helper

    if template is not None and template.raw_data:
        return numpy_helper.from_array(array, template.name)
    return saved_initializer(array, template.name)


def unpacked_float16(model: Any) -> Any:
    """``model`` with its PopART-packed FLOAT16 initializers in ONNX's form (a copy; the
    model itself when it has none)."""
    from onnx import ModelProto, TensorProto

    def packed(tensor: Any) -> bool:
        count = int(np.prod(tensor.dims, dtype=np.int64))
        return (tensor.data_type == TensorProto.FLOAT16 and count > 1
                and len(tensor.int32_data) == (count + 1) // 2)

    if not any(packed(t) for t in model.graph.initializer):
        return model
    copy = ModelProto()
    copy.CopyFrom(model)
    for tensor in copy.graph.initializer:
        if packed(tensor):
            count = int(np.prod(tensor.dims, dtype=np.int64))
            halves = np.asarray(tensor.int32_data, np.int32).view(np.float16)[:count]
            del tensor.int32_data[:]
            tensor.int32_data.extend(halves.view(np.uint16).astype(np.int32).tolist())
    return copy


def little_endian_bytes(array: np.ndarray) -> bytes:
    """``array``'s values as ONNX stores them in ``raw_data`` or an external file."""
    array = np.asarray(array)
    return np.ascontiguousarray(array, array.dtype.newbyteorder("<")).tobytes()


def model_with_state(model: Any, state: dict[str, np.ndarray]) -> Any:
    """A copy of ``model`` with an initializer for each optimizer state tensor in
    ``state`` that it lacks (:func:`saved_initializer`), ordered as PopART orders them:
    by prefix (in the order of ``reservedOptimizerStatePrefixes()``), then as their
    weights are. The state of an externally stored weight is appended to its file.

    Raises:
        popart_exception: an externally stored weight's file does not exist (PopART's
            message).
    """
    import os

    from onnx import ModelProto

    from ipuxl.onnx import external_data
    from ipuxl.popart.errors import popart_exception
    from ipuxl.popart.names import reservedOptimizerStatePrefixes
    from ipuxl.popart.optimizer_state_names import state_initializers

    copy = ModelProto()
    copy.CopyFrom(model)
    initializers = copy.graph.initializer
    weights = {tensor.name: tensor for tensor in initializers}
    added = [name for name in state if name not in weights]
    owners = state_initializers([*weights, *added])
    prefixes = reservedOptimizerStatePrefixes()
    order = {name: position for position, name in enumerate(weights)}

    def rank(name: str) -> tuple[int, int]:  # PopART's order: by prefix, then by weight
        prefix, weight = owners.get(name, ("", ""))
        return (prefixes.index(prefix) if prefix in prefixes else len(prefixes),
                order.get(weight, len(order)))

    added.sort(key=rank)
    initializers.extend(saved_initializer(state[name], name) for name in added)
    files: dict[str, list[tuple[Any, bytes]]] = {}
    for tensor in initializers[len(initializers) - len(added):]:
        weight = weights.get(owners.get(tensor.name, ("", ""))[1])
        if weight is None or not external_data.is_external(weight):
            continue
        location = external_data.external_data(weight, f"weight {weight.name!r}").location
        if not os.path.isfile(location):
            raise popart_exception(
                f"Unrecognised file name '{location}' for externally stored tensor "
                f"'{weight.name}': its optimizer state '{tensor.name}' is saved in the same "
                "file. Run from the folder a relative location is relative to, or move the "
                "data with session.updateExternallySavedTensorLocations.")
        files.setdefault(location, []).append((tensor, little_endian_bytes(state[tensor.name])))
    for location, tensors in files.items():
        external_data.append(location, tensors)
    return copy
