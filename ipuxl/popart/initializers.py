"""How PopART stores initializers in the models it writes.

PopART's Builder stores an initializer's values in the typed field ONNX gives its type
(``float_data`` for FLOAT, ``int32_data`` for INT32, FLOAT16's bit patterns and the
small integer types, ``int64_data``...), not in ``raw_data``, and ``modelToHost`` writes
the device's values back into the field each initializer already uses. Programs read
those fields directly (``initializer.float_data``), so ipuxl stores them the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["typed_initializer", "initializer_like"]


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


def initializer_like(template: Any, array: np.ndarray) -> Any:
    """``array`` as an initializer stored as ``template`` is (raw bytes or typed field)."""
    from onnx import numpy_helper

    if template is not None and template.raw_data:
        return numpy_helper.from_array(array, template.name)
    return typed_initializer(array, template.name)
