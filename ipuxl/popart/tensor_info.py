"""PopART's tensor types: ``DataType``, ``TensorInfo`` and ``InputShapeInfo``.

``popart.TensorInfo("FLOAT", [1, 2, 32, 32])`` (or ``popart.TensorInfo(array)``, the
dtype and shape of a NumPy array) describes a graph input for ``Builder.addInputTensor``;
``popart.InputShapeInfo`` gives sessions the shapes of inputs
whose dimensions an ONNX model leaves symbolic::

    info = popart.TensorInfo("INT32", [4])
    info.data_type_lcase()   # "int32" (NumPy's name)
    shapes = popart.InputShapeInfo()
    shapes.add("labels", info)

``DataType``'s values are ONNX's ``TensorProto`` element types, so a ``DataType`` converts
to and from ONNX without a table. PopART's two float8 formats map to ONNX's ``FNUZ``
float8 types, which have the same bias.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum
from typing import Any

import numpy as np

from ipuxl.host_values import index_arguments
from ipuxl.popart.errors import popart_exception

__all__ = ["DataType", "TensorInfo", "InputShapeInfo", "data_type_of", "shape_argument",
           "input_tensor_arguments", "input_settings_metadata"]


class DataType(IntEnum):
    """PopART's element types (values: ONNX ``TensorProto.DataType``)."""

    UNDEFINED = 0
    FLOAT = 1
    UINT8 = 2
    INT8 = 3
    UINT16 = 4
    INT16 = 5
    INT32 = 6
    INT64 = 7
    STRING = 8
    BOOL = 9
    FLOAT16 = 10
    DOUBLE = 11
    UINT32 = 12
    UINT64 = 13
    COMPLEX64 = 14
    COMPLEX128 = 15
    BFLOAT16 = 16
    FLOAT8_143 = 18  # ONNX FLOAT8E4M3FNUZ
    FLOAT8_152 = 20  # ONNX FLOAT8E5M2FNUZ
    UINT4 = 21
    INT4 = 22


# DataType -> NumPy's name (PopART's ``data_type_lcase``).
_LCASE = {
    DataType.FLOAT: "float32", DataType.UINT8: "uint8", DataType.INT8: "int8",
    DataType.UINT16: "uint16", DataType.INT16: "int16", DataType.INT32: "int32",
    DataType.INT64: "int64", DataType.STRING: "string", DataType.BOOL: "bool",
    DataType.FLOAT16: "float16", DataType.DOUBLE: "float64", DataType.UINT32: "uint32",
    DataType.UINT64: "uint64", DataType.COMPLEX64: "complex64",
    DataType.COMPLEX128: "complex128", DataType.BFLOAT16: "bfloat16",
    DataType.FLOAT8_143: "float8_143", DataType.FLOAT8_152: "float8_152",
    DataType.UINT4: "uint4", DataType.INT4: "int4", DataType.UNDEFINED: "undefined",
}
_BYTES = {
    DataType.FLOAT: 4, DataType.UINT8: 1, DataType.INT8: 1, DataType.UINT16: 2,
    DataType.INT16: 2, DataType.INT32: 4, DataType.INT64: 8, DataType.BOOL: 1,
    DataType.FLOAT16: 2, DataType.DOUBLE: 8, DataType.UINT32: 4, DataType.UINT64: 8,
    DataType.COMPLEX64: 8, DataType.COMPLEX128: 16, DataType.BFLOAT16: 2,
    DataType.FLOAT8_143: 1, DataType.FLOAT8_152: 1,
}
# Other spellings users write: NumPy names, ONNX's "FLOAT32"-style names.
_ALIASES = {"FLOAT32": DataType.FLOAT, "HALF": DataType.FLOAT16, "FLOAT64": DataType.DOUBLE}
_MISSING: Any = object()  # an argument left out (None is a value users pass by mistake)


def data_type_of(value: Any) -> DataType:
    """A ``DataType`` from PopART's name (``"FLOAT"``), NumPy's (``"float32"``, a NumPy
    dtype), a ``DataType`` or an ONNX element-type number.

    Raises:
        ValueError: the name is not a PopART data type.
    """
    if isinstance(value, DataType):
        return value
    known = ", ".join(repr(n) for n in DataType.__members__ if n != "UNDEFINED")
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        if int(value) not in {t.value for t in DataType}:
            raise ValueError(f"{int(value)} is not a PopART data type number (ONNX "
                             f"TensorProto element type); use one of {known} or its number.")
        return DataType(int(value))
    if isinstance(value, str):
        upper = value.upper()
        if upper in DataType.__members__:
            return DataType[upper]
        if upper in _ALIASES:
            return _ALIASES[upper]
        for data_type, lcase in _LCASE.items():
            if lcase == value.lower():
                return data_type
        raise ValueError(f"{value!r} is not a PopART data type: use one of {known}.")
    if value is None or isinstance(value, (bool, np.bool_)):  # np.dtype(None) is float64
        raise TypeError(f"Expected a data type name such as 'FLOAT', got {value!r}.")
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise TypeError(f"Expected a data type name such as 'FLOAT', got "
                        f"{type(value).__name__} {value!r}.") from None
    return data_type_of(dtype.name)


class TensorInfo:
    """A data type and a shape, made as PopART makes one:

    * ``TensorInfo("FLOAT", [1, 2])``, ``TensorInfo(DataType.FLOAT, [1, 2])`` or
      ``TensorInfo(np.float32, [1, 2])`` (a NumPy type or dtype);
    * ``TensorInfo(array)``: the dtype and shape of a NumPy array;
    * ``TensorInfo(dataType, shape, metaShape)``: with PopART's meta-shape (the full
      shape of a tensor sharded over replicas).

    The shape is true integers ``>= 0`` (``[2.5]`` and ``[2.0]`` are refused, not
    truncated; see :func:`shape_argument`); the type is a known name or number."""

    def __init__(self, dataType: Any = _MISSING, shape: Any = _MISSING,  # noqa: N803
                 metaShape: Iterable[int] = ()):  # noqa: N803 - PopART's names
        if shape is _MISSING:
            if not isinstance(dataType, np.ndarray):
                raise TypeError(_ARGUMENTS_MESSAGE.format(found=_found(dataType)))
            dataType, shape = dataType.dtype, dataType.shape
        self._data_type = data_type_of(dataType)
        self._shape = shape_argument(shape, "TensorInfo")
        self._meta_shape = shape_argument(metaShape, "TensorInfo metaShape")

    def set(self, dataType: Any, shape: Any = _MISSING,  # noqa: A003,N803 - PopART's names
            metaShape: Any = _MISSING) -> None:  # noqa: N803
        """Change the type, and the shape and meta-shape when given."""
        self._data_type = data_type_of(dataType)
        if shape is not _MISSING:
            self._shape = shape_argument(shape, "TensorInfo.set")
        if metaShape is not _MISSING:
            self._meta_shape = shape_argument(metaShape, "TensorInfo.set metaShape")

    def dataType(self) -> DataType:  # noqa: N802 - PopART's name
        return self._data_type

    def data_type(self) -> str:
        """PopART's name of the type, e.g. ``"FLOAT"``."""
        return self._data_type.name

    def data_type_lcase(self) -> str:
        """NumPy's name of the type, e.g. ``"float32"``."""
        return _LCASE[self._data_type]

    def shape(self) -> list[int]:
        return list(self._shape)

    def metaShape(self) -> list[int]:  # noqa: N802 - PopART's name
        """The full shape of a replica-sharded tensor (``[]`` when it is not sharded)."""
        return list(self._meta_shape)

    def dim(self, i: int) -> int:
        """The size of dimension ``i`` (``0 <= i < rank()``)."""
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) \
                or not 0 <= i < len(self._shape):
            raise popart_exception(
                f"Invalid input dimension {i}, tensor of rank {len(self._shape)}. Dimensions "
                f"are counted from 0: pass 0 to {len(self._shape) - 1}.")
        return self._shape[int(i)]

    def rank(self) -> int:
        return len(self._shape)

    def nelms(self) -> int:
        return int(np.prod(self._shape, dtype=np.int64))

    def nbytes(self) -> int:
        return self.nelms() * _BYTES.get(self._data_type, 0)

    def strides(self, shape: Iterable[int]) -> list[int]:
        """The bytes to step along each dimension of a row-major array of ``shape`` with
        this type (NumPy's ``ndarray.strides``)."""
        dims = shape_argument(shape, "TensorInfo.strides")
        item = _BYTES.get(self._data_type, 0)
        if not dims:
            return []
        if dims == [0]:
            return [item]
        strides = [item] * len(dims)
        for index in range(len(dims) - 2, -1, -1):
            strides[index] = strides[index + 1] * dims[index + 1]
        return strides

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TensorInfo) and other._data_type == self._data_type
                and other._shape == self._shape and other._meta_shape == self._meta_shape)

    def __hash__(self) -> int:
        return hash((self._data_type, tuple(self._shape), tuple(self._meta_shape)))

    def __repr__(self) -> str:
        return f"TensorInfo({self.data_type()!r}, {self._shape})"

    def __str__(self) -> str:
        return f"({self.data_type()},[{','.join(str(d) for d in self._shape)}])"


_ARGUMENTS_MESSAGE = (
    "Can not create TensorInfo with {found}: a TensorInfo is made from a data type and a "
    "shape, or from one NumPy array. Write popart.TensorInfo(\"FLOAT\", [2, 3]) or "
    "popart.TensorInfo(np.zeros((2, 3), np.float32)).")


def _found(value: Any) -> str:
    if value is _MISSING:
        return "no arguments"
    return f"the single argument {type(value).__name__} {value!r}"


def shape_argument(shape: Any, where: str) -> list[int]:
    """A tensor shape: a sequence of true integers (``2.0`` is refused), each ``>= 0``.

    Raises:
        TypeError: the shape is not a sequence of integers.
        popart_exception: a dimension is negative.
    """
    dims = list(index_arguments("shape", shape, where))
    negative = [d for d in dims if d < 0]
    if negative:
        raise popart_exception(
            f"{where}: shape {dims} has the negative dimension {negative[0]}; dimensions "
            "are sizes (>= 0). Give every dimension's size (a symbolic ONNX dimension is "
            "set with popart.InputShapeInfo).")
    return dims


class InputShapeInfo:
    """``TensorInfo`` by tensor id, for inputs whose shapes the model leaves open."""

    def __init__(self) -> None:
        self._infos: dict[str, TensorInfo] = {}

    def add(self, id: str, info: TensorInfo) -> None:  # noqa: A002 - PopART's name
        if not isinstance(id, str):
            raise TypeError(f"InputShapeInfo.add: tensor ids are strings, got "
                            f"{type(id).__name__} {id!r}.")
        if not isinstance(info, TensorInfo):
            raise TypeError(f"InputShapeInfo.add takes a popart.TensorInfo, got "
                            f"{type(info).__name__}.")
        self._infos[id] = info

    def get(self, id: str) -> TensorInfo:  # noqa: A002
        if id not in self._infos:
            raise KeyError(f"InputShapeInfo has no entry for {id!r} (it has "
                           f"{sorted(self._infos)}).")
        return self._infos[id]

    def has(self, id: str) -> bool:  # noqa: A002
        return id in self._infos

    def getAllTensorInfo(self) -> dict[str, TensorInfo]:  # noqa: N802 - PopART's name
        return dict(self._infos)

    def shapes(self) -> dict[str, list[int]]:
        """``{id: shape}``, the form :func:`ipuxl.onnx.model_to_ir` takes."""
        return {name: info.shape() for name, info in self._infos.items()}


_INPUT_FORMS = ("addInputTensor(tensorInfo, debugContext='') or addInputTensor(dataType, "
                "shape, debugContext=''), each with an optional InputSettings before the "
                "debugContext")


def input_tensor_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
    """``(TensorInfo, settings or None, debugContext)`` from ``addInputTensor``'s
    arguments, in any of PopART's four forms."""
    rest = list(args)
    keywords = dict(kwargs)
    for keyword in ("shape", "dataType", "tensorInfo"):
        if keyword in keywords:
            rest.insert(0, keywords.pop(keyword))
    if not rest:
        raise TypeError(f"addInputTensor: the input's type is missing. Write {_INPUT_FORMS}.")
    if isinstance(rest[0], TensorInfo):
        info = rest.pop(0)
    else:
        if len(rest) < 2:
            raise TypeError(f"addInputTensor({rest[0]!r}): the shape is missing. Write "
                            f"{_INPUT_FORMS}.")
        info = TensorInfo(rest.pop(0), rest.pop(0))
    settings = keywords.pop("settings", None)
    debug = keywords.pop("debugContext", keywords.pop("debugPrefix", ""))
    if keywords:
        raise TypeError(f"addInputTensor got unexpected keyword arguments {sorted(keywords)}; "
                        f"write {_INPUT_FORMS}.")
    from ipuxl.popart.debug_context import DebugContext

    if rest and not isinstance(rest[0], (str, DebugContext)):  # a debug name is last
        settings = rest.pop(0)
    if rest:
        debug = rest.pop(0)
    if rest:
        raise TypeError(f"addInputTensor got {len(args)} positional arguments; write "
                        f"{_INPUT_FORMS}.")
    return info, settings, debug


def input_settings_metadata(settings: Any) -> dict[str, int]:
    """The model metadata PopART writes for an input's ``InputSettings``: the numbers of
    its tile set, exchange strategy and replicated stream mode."""
    methods = {"__tile_set": "tileSet", "__exchange_strategy": "exchangeStrategy",
               "__replicated_stream_mode": "replicatedStreamMode"}
    if not all(callable(getattr(settings, m, None)) for m in methods.values()):
        raise TypeError(f"addInputTensor: settings must be a popart.InputSettings, got "
                        f"{type(settings).__name__} {settings!r}. Write popart.InputSettings("
                        "popart.ReplicatedStreamMode.Broadcast) or leave it out.")
    return {key: int(getattr(getattr(settings, method)(), "value",
                             getattr(settings, method)()))
            for key, method in methods.items()}
