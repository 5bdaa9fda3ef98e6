"""Tensors: typed values in one graph (``Tensor``), and the main graph's ``Variable`` and
``Constant`` tensors. A tensor is identified by its graph and its id; its abstract value is
its :class:`TensorSpec` (shape, dtype, meta shape).

Tensor operators build ops: ``a + b`` is ``ops.add``, ``a @ b`` is ``ops.matmul``,
``a += b`` is ``ops.add_`` (and returns ``a`` itself). Host values on either side of an
operator become constants of the tensor's dtype.

Example:
    >>> import ipuxl as popxl
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     a = popxl.variable([1, 2], popxl.int32, name="a")
    ...     b = a + 1
    >>> b
    Tensor[add_out popxl.dtypes.int32 (2,)]
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, Union

import numpy as np

from ipuxl import dtypes
from ipuxl.errors import UndefinedValue
from ipuxl.typing_ import NewAliasAnnotation

if TYPE_CHECKING:
    from ipuxl.graph import Graph
    from ipuxl.ir import Ir
    from ipuxl.op import Op
    from ipuxl.replica_grouping import ReplicaGrouping
    from ipuxl.replica_sharding import remote_replica_sharded_variable, replica_sharded_variable
    from ipuxl.tensor_factories import (
        constant,
        graph_input,
        graph_output,
        remote_variable,
        variable,
    )

__all__ = [
    "Tensor",
    "Variable",
    "Constant",
    "TensorSpec",
    "checked_shape",
    "TensorByRef",
    "HostTensor",
    "HostScalarTensor",
    "host_tensor_types",
    "ScalarType",
    "TensorLike",
    # The factories live in ipuxl.tensor_factories, which imports this module; PopXL code
    # imports them from popxl.tensor, so the module __getattr__ below forwards them.
    "variable",
    "constant",
    "graph_input",
    "graph_output",
    "remote_variable",
    "remote_replica_sharded_variable",
    "replica_sharded_variable",
]

_FACTORIES = ("variable", "constant", "graph_input", "graph_output", "remote_variable")
# replica_sharded_buffer is importable from popxl.tensor, but not in its __all__ (as in
# the top-level module).
_SHARDED_FACTORIES = ("remote_replica_sharded_variable", "replica_sharded_variable",
                      "replica_sharded_buffer")


def __getattr__(name: str) -> Any:
    if name in _FACTORIES:
        from ipuxl import tensor_factories

        return getattr(tensor_factories, name)
    if name in _SHARDED_FACTORIES:
        from ipuxl import replica_sharding

        return getattr(replica_sharding, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


ScalarType = Union[int, float, bool]
HostTensor = Union[np.ndarray, Iterable[ScalarType]]
HostScalarTensor = Union[ScalarType, HostTensor]
# The classes of host containers (``isinstance(value, host_tensor_types)``); a torch tensor
# is an Iterable, so it is one without importing torch.
host_tensor_types: tuple[type, ...] = (np.ndarray, Iterable)


class TensorSpec(Mapping):
    """A tensor's abstract value: ``TensorSpec(shape, dtype, meta_shape=())``.

    It is a Mapping with keys ``shape``, ``dtype`` and ``meta_shape``, so
    ``popxl.graph_input(**spec)`` works; two specs are equal when their items are.

    Args:
        shape: the dimensions.
        dtype: the element type.
        meta_shape: the full shape before replica sharding; ``()`` when not sharded.
    """

    __slots__ = ("shape", "dtype", "meta_shape")

    def __init__(self, shape: Iterable[int], dtype: dtypes.dtype, meta_shape: Iterable[int] = ()):
        self.shape = checked_shape(shape, dtype)
        self.dtype = dtype
        self.meta_shape = checked_shape(meta_shape, dtype, "meta_shape") if meta_shape else ()

    def to_dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "dtype": self.dtype, "meta_shape": self.meta_shape}

    def to_tuple(self) -> tuple[tuple[int, ...], dtypes.dtype, tuple[int, ...]]:
        return (self.shape, self.dtype, self.meta_shape)

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(("shape", "dtype", "meta_shape"))

    def __len__(self) -> int:
        return 3

    def __hash__(self) -> int:
        return hash(self.to_tuple())

    def __repr__(self) -> str:
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype}, meta_shape={self.meta_shape})"


# The largest byte size a tensor may have: sizes are int64 in XLA and on the host.
MAX_TENSOR_BYTES = 2**63 - 1


def checked_shape(shape: Any, dtype: Any = None, what: str = "shape") -> tuple[int, ...]:
    """``shape`` as a tuple of ints, after checking it can describe a real tensor.

    Every dimension must be a non-negative integer (a Python or NumPy int, not a float or
    bool), and the element count and byte size must fit in int64.

    Raises:
        TypeError: ``shape`` is not a sequence of integers.
        ValueError: a dimension is negative, or the size overflows int64.
    """
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise TypeError(
            f"A tensor {what} must be a sequence of integers; got {type(shape).__name__}: "
            f"{shape!r}. Pass a tuple such as (2, 3), or () for a scalar."
        )
    dims = tuple(shape)
    result = []
    for axis, dim in enumerate(dims):
        if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)):
            raise TypeError(
                f"Every dimension of a tensor {what} must be an integer; dimension {axis} of "
                f"{dims!r} is {type(dim).__name__} {dim!r}. Pass whole numbers, for example "
                f"`int({dim!r})` if that is what you meant."
            )
        if dim < 0:
            raise ValueError(
                f"Tensor dimensions cannot be negative: dimension {axis} of {what} {dims!r} "
                f"is {dim}. Use a size of 0 or more."
            )
        result.append(int(dim))
    nelms = 1
    for dim in result:
        nelms *= dim
    itemsize = getattr(dtype, "itemsize", 1) or 1
    if nelms * itemsize > MAX_TENSOR_BYTES:
        raise ValueError(
            f"The tensor {what} {tuple(result)} has {nelms} elements ({nelms * itemsize} "
            f"bytes), more than a tensor can hold (at most {MAX_TENSOR_BYTES} bytes, "
            "the int64 limit). Check the dimensions for a typo or a wrong unit."
        )
    return tuple(result)


TensorByRef = NewAliasAnnotation("TensorByRef", "Tensor")


class Tensor:
    """A value in one graph. Create tensors with ops and factories, never directly."""

    __array_ufunc__ = None  # numpy defers to the reflected operators
    __iter__ = None  # type: ignore[assignment]
    __contains__ = None  # type: ignore[assignment]

    def __init__(self) -> None:
        raise RuntimeError("popxl.Tensor cannot be constructed directly.")

    @classmethod
    def _create(cls, graph: Graph, tensor_id: str, spec: TensorSpec, producer: Op | None) -> Any:
        self = object.__new__(cls)
        self._graph = graph
        self._id = tensor_id
        self._spec = spec
        self._producer = producer
        self._ipu = producer.ipu if producer is not None else None
        self._tile_set = producer.tile_set if producer is not None else None
        # Tensors key many dicts on the run path (streams, variables): hash once.
        self._hash = hash((tensor_id, graph.ir))
        return self

    # ----------------------------------------------------------------- identity
    @property
    def id(self) -> str:
        return self._id

    @property
    def name(self) -> str:
        """The id without the graph scope."""
        prefix = self._graph.id + "/" if self._graph.id else ""
        return self._id[len(prefix) :] if prefix and self._id.startswith(prefix) else self._id

    @property
    def scope(self) -> str:
        return self._graph.id

    @property
    def _pb_tensor(self) -> Any:
        """PopART's Tensor object: the :mod:`ipuxl.popart._internal.ir` view of this
        tensor (the same object on every access)."""
        from ipuxl.popart._internal.ir._tensor import tensor_view

        return tensor_view(self)

    @classmethod
    def _from_pb_tensor(cls, pb_tensor: Any) -> Tensor:
        """The tensor that ``pb_tensor`` (a ``tensor._pb_tensor``) views."""
        from ipuxl.ir import _viewed
        from ipuxl.popart._internal.ir import Tensor as PbTensor

        return _viewed(pb_tensor, PbTensor, "Tensor._from_pb_tensor", "tensor._pb_tensor")

    @property
    def graph(self) -> Graph:
        return self._graph

    @property
    def ir(self) -> Ir:
        return self._graph.ir

    # ----------------------------------------------------------------- type
    @property
    def dtype(self) -> dtypes.dtype:
        return self._spec.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._spec.shape

    @property
    def meta_shape(self) -> tuple[int, ...]:
        return self._spec.meta_shape

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.shape, self.dtype, self.meta_shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def nelms(self) -> int:
        return math.prod(self.shape)

    @property
    def in_sync_with_ipu(self) -> bool:
        return True

    @property
    def location_info(self) -> Any:
        return None

    # ----------------------------------------------------------------- placement
    @property
    def ipu(self) -> int:
        """The virtual IPU: its producer's, else its first consumer's.

        Raises:
            UndefinedValue: the tensor has neither a producer nor a consumer (a fresh
                variable, constant or graph input).
        """
        if self._ipu is not None:
            return self._ipu
        for op in self._graph._consumers(self):
            return op.ipu
        raise UndefinedValue(
            f"Tensor's IPU is undefined: `{self.id}` has no producer and no consumer yet. It "
            "takes the IPU of the first op that uses it."
        )

    @property
    def tile_set(self) -> str:
        """``"compute"`` or ``"io"`` (ops created under ``popxl.io_tiles()``): its
        producer's, else its first consumer's.

        Raises:
            UndefinedValue: the tensor has neither a producer nor a consumer.
        """
        if self._tile_set is not None:
            return self._tile_set
        for op in self._graph._consumers(self):
            return op.tile_set
        raise UndefinedValue(
            f"Tensor's tile set is undefined: `{self.id}` has no producer and no consumer "
            "yet. It takes the tile set of the first op that uses it."
        )

    # ----------------------------------------------------------------- methods
    def _ensure_tensor(
        self, value: Any, dtype: dtypes.dtype | None = None, raise_on_empty: bool = True
    ) -> Tensor:
        """``value`` itself if it is a Tensor, else a constant of ``dtype or self.dtype``.

        Raises:
            ValueError: ``value`` has no elements and ``raise_on_empty`` is set.
        """
        if isinstance(value, Tensor):
            return value
        from ipuxl.tensor_factories import constant

        if raise_on_empty and np.size(value) == 0 and not isinstance(value, (int, float)):
            raise ValueError(
                "The value has 0 elements - this is most likely a mistake. If not, initialise "
                "the tensor with `popxl.constant(value)` explicitly."
            )
        return constant(value, dtype or self.dtype)

    def transpose(self, permutation: Iterable[int] | None = None) -> Tensor:
        from ipuxl import ops

        return ops.transpose(self, permutation)

    def transpose_(self, permutation: Iterable[int] | None = None) -> Tensor:
        from ipuxl import ops

        return ops.transpose_(self, permutation)

    @property
    def T(self) -> Tensor:  # noqa: N802 - numpy's name
        return self.transpose()

    @property
    def T_(self) -> Tensor:  # noqa: N802
        return self.transpose_()

    def reshape(self, shape: Iterable[int]) -> Tensor:
        from ipuxl import ops

        return ops.reshape(self, shape)

    def reshape_(self, shape: Iterable[int]) -> Tensor:
        from ipuxl import ops

        return ops.reshape_(self, shape)

    def flatten(self) -> Tensor:
        from ipuxl import ops

        return ops.flatten(self)

    def flatten_(self) -> Tensor:
        from ipuxl import ops

        return ops.flatten_(self)

    def detach(self) -> Tensor:
        from ipuxl import ops

        return ops.detach(self)

    def detach_(self) -> Tensor:
        from ipuxl import ops

        return ops.detach_(self)

    def diag(self) -> Tensor:
        """The main diagonal of a rank-2 tensor: ``flatten()[::cols + 1]``.

        Raises:
            ValueError: the tensor is not rank 2.
        """
        if self.rank != 2:
            raise ValueError(
                f"Diag expected a 2d tensor. Got `{self.id}` of rank {self.rank}, shape "
                f"{self.shape}; reshape it to 2 dimensions first."
            )
        return self.flatten()[:: self.shape[1] + 1]

    def strides(self, shape: Iterable[int] | None = None) -> tuple[int, ...]:
        """The byte strides of a C-contiguous NumPy array of ``shape`` (default: the
        tensor's shape) and the tensor's dtype: ``np.empty(shape, dtype).strides``.

        Example: an int32 tensor of shape (2, 3) has strides ``(12, 4)``.
        """
        shape = checked_shape(self.shape if shape is None else shape, self.dtype)
        item = self.dtype.itemsize
        if 0 in shape:  # NumPy's strides of empty arrays differ between NumPy versions
            return np.empty(shape, f"V{item}").strides
        strides, step = [], item
        for dim in reversed(shape):
            strides.append(step)
            step *= dim
        return tuple(reversed(strides))

    def copy_to_ipu(self, destination: int, source: int | None = None) -> Tensor:
        """``ops.ipu_copy(self, destination, source)``: a copy on IPU ``destination``;
        ``source`` (the IPU it is on) defaults to the tensor's own."""
        from ipuxl import ops

        return ops.ipu_copy(self, destination, source)

    # ----------------------------------------------------------------- dunder
    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self.id} {self.dtype!r} {self.shape}]"

    def _repr_html_(self) -> str:
        """The notebook view (see :mod:`ipuxl.notebook`)."""
        from ipuxl.notebook import tensor_html

        return tensor_html(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's text view: ``repr(tensor)``."""
        from ipuxl.notebook import pretty

        pretty(self, printer, cycle)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Tensor) and self._id == other._id and self.ir is other.ir
        )

    def __len__(self) -> int:
        if not self.shape:
            raise ValueError(
                f"Tensor is a scalar and doesn't have a length: `{self.id}` has shape (). "
                "Use `t.nelms` for the element count."
            )
        return self.shape[0]

    def __bool__(self) -> bool:
        return True

    # A Tensor has no data: conversions to host values explain how to get some.
    def __array__(self, dtype: Any = None, copy: Any = None) -> NoReturn:
        self._raise_no_data("convert it to a NumPy array (`np.asarray`, `np.array`)")

    def __float__(self) -> NoReturn:
        self._raise_no_data("convert it to a Python float")

    def __int__(self) -> NoReturn:
        self._raise_no_data("convert it to a Python int")

    def __index__(self) -> NoReturn:
        self._raise_no_data("use it as a Python integer (an index, a size, `range`)")

    def _raise_no_data(self, what: str) -> NoReturn:
        raise TypeError(
            f"Tensor `{self.id}` has no data, so ipuxl cannot {what}. A popxl Tensor is "
            "symbolic: a value in a graph being built, computed only when a Session runs "
            "the graph. To read its value, store it to a device-to-host stream and run a "
            "Session:\n"
            "    d2h = popxl.d2h_stream(t.shape, t.dtype)\n"
            "    ops.host_store(d2h, t)  # while building, e.g. in `with ir.main_graph:`\n"
            "    with popxl.Session(ir, 'cpu') as session:\n"
            "        value = session.run()[d2h]\n"
            "For a Variable, read it with `session.get_tensor_data(variable)`. To compute "
            "with it, use ops and Tensor operators (`t + 1`, `ops.cast(t, popxl.float32)`)."
        )

    def __add__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.add(self, self._ensure_tensor(other))

    def __radd__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.add(self._ensure_tensor(other), self)

    def __iadd__(self, other: Any) -> Tensor:
        from ipuxl import ops

        ops.add_(self, self._ensure_tensor(other))
        return self

    def __sub__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.sub(self, self._ensure_tensor(other))

    def __rsub__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.sub(self._ensure_tensor(other), self)

    def __mul__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.mul(self, self._ensure_tensor(other))

    def __rmul__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.mul(self._ensure_tensor(other), self)

    def __truediv__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.div(self, self._ensure_tensor(other))

    def __rtruediv__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.div(self._ensure_tensor(other), self)

    def __mod__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.fmod(self, self._ensure_tensor(other))

    def __rmod__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.fmod(self._ensure_tensor(other), self)

    def __pow__(self, other: Any) -> Tensor:
        from ipuxl import ops

        # A Python-scalar exponent takes the tensor's dtype (PopXL's `t ** 2` fails).
        if isinstance(other, (int, float, np.number)) and not isinstance(other, (bool, np.bool_)):
            other = self._ensure_tensor(other)
        return ops.pow(self, other)

    def __rpow__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.pow(self._ensure_tensor(other), self)

    def __neg__(self) -> Tensor:
        from ipuxl import ops

        return ops.negate(self)

    def __matmul__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.matmul(self, self._ensure_tensor(other))

    def __rmatmul__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.matmul(self._ensure_tensor(other), self)

    def __and__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.logical_and(self, self._ensure_tensor(other, dtypes.bool))

    def __rand__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.logical_and(self._ensure_tensor(other, dtypes.bool), self)

    def __or__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.logical_or(self, self._ensure_tensor(other, dtypes.bool))

    def __ror__(self, other: Any) -> Tensor:
        from ipuxl import ops

        return ops.logical_or(self._ensure_tensor(other, dtypes.bool), self)

    def __invert__(self) -> Tensor:
        from ipuxl import ops

        return ops.logical_not(self)

    def __getitem__(self, key: Any) -> Tensor:
        from ipuxl.indexing import getitem

        return getitem(self, key)


class Variable(Tensor):
    """A main-graph tensor whose value persists across runs (weights, optimiser state).

    A variable made from an ``np.memmap`` keeps it as ``_memmap_arr`` (PopXL's name): its
    host value *is* the file, and ``Session.get_tensor_data`` returns that memmap.
    """

    _memmap_arr: np.memmap | None = None

    def __init__(self) -> None:
        raise RuntimeError("popxl.Tensor cannot be constructed directly.")

    @property
    def replica_grouping(self) -> ReplicaGrouping:
        return self._replica_grouping

    @property
    def retrieval_mode(self) -> str:
        return self._retrieval_mode

    @property
    def shape_on_host(self) -> tuple[int, ...]:
        groups = self._replica_grouping.num_groups
        return self.shape if groups == 1 else (groups, *self.shape)

    @property
    def shape_on_replica(self) -> tuple[int, ...]:
        return self.shape

    def copy_to_ipu(self, dst: int, src: int) -> Tensor:  # type: ignore[override]
        from ipuxl import ops

        return ops.ipu_copy(self, dst, src)


class Constant(Tensor):
    """A tensor whose data is fixed when the graph is built. Any graph may hold constants."""

    def __init__(self) -> None:
        raise RuntimeError("popxl.Tensor cannot be constructed directly.")

    def copy_to_ipu(self, dst: int, src: int) -> Tensor:  # type: ignore[override]
        from ipuxl import ops

        return ops.ipu_copy(self, dst, src)


TensorLike = Union[Tensor, HostScalarTensor]
