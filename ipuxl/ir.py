"""The Ir: one program, made of a main graph and the subgraphs it calls.

Example:
    >>> import ipuxl as popxl
    >>> ir = popxl.Ir()
    >>> ir.main_graph.id
    ''
    >>> ir.num_host_transfers
    1
"""

from __future__ import annotations

import itertools
import os
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

from ipuxl.graph import Graph

if TYPE_CHECKING:
    from ipuxl.remote_buffer import RemoteBuffer
    from ipuxl.replica_grouping import ReplicaGrouping
    from ipuxl.streams import DeviceToHostStream, HostToDeviceStream

__all__ = ["Ir"]

_ir_ids = itertools.count()


class Ir:
    """A program: ``Ir(replication=1)`` starts with an empty main graph.

    Args:
        replication: the replication factor R, or ``"popdist"`` (R and the replicas of this
            process from the launcher or jax.distributed: see :mod:`ipuxl.popdist`).

    Raises:
        ValueError: ``replication`` is below 1.
    """

    # PopXL's registry of the live Irs, by id (weak: an Ir unused elsewhere is freed).
    _ir_cache: weakref.WeakValueDictionary[int, Ir] = weakref.WeakValueDictionary()

    def __init__(self, replication: int | str = 1) -> None:
        self._topology = None
        if replication == "popdist":
            from ipuxl.popdist import topology

            # Several processes: R counts every instance's replicas (see ipuxl.popdist).
            self._topology = topology()
            replication_factor = self._topology.replication_factor
        else:
            replication_factor = _at_least_one("replication", replication)
        self._id = next(_ir_ids)
        Ir._ir_cache[self._id] = self
        self._counter = itertools.count()
        self._subgraph_counter = itertools.count()
        self._graphs: dict[str, Graph] = {}
        self._main_graph = Graph._create(self, "")
        self._graphs[""] = self._main_graph
        self._num_host_transfers = 1
        self._replication_factor = replication_factor
        self._streams: dict[str, Any] = {}
        self._remote_buffers: dict[int, RemoteBuffer] = {}
        self._version = 0
        self._prepared = False
        self._read_only_memmap = False
        _configure_persistent_cache()

    # ----------------------------------------------------------------- graphs
    @property
    def id(self) -> int:
        """A process-wide unique integer (also the key of ``Ir._ir_cache``)."""
        return self._id

    @property
    def main_graph(self) -> Graph:
        """The graph a Session runs; the same object on every access."""
        return self._main_graph

    @property
    def graphs(self) -> tuple[Graph, ...]:
        """The main graph, then the subgraphs in creation order."""
        return tuple(self._graphs.values())

    def create_graph(self, fn: Any, *args: Any, **kwargs: Any) -> Graph:
        """Trace ``fn`` (a function or a ``popxl.Module``) into a new subgraph.

        Args:
            fn: the function, or a Module whose ``build`` is traced.
            *args, **kwargs: ``fn``'s arguments; tensors and tensor specs become graph
                inputs named after their parameters (see ``ipuxl.tracing``).

        Returns:
            The new graph, ``"<fn qualname>_subgraph(<k>)"``.

        Raises:
            TypeError: ``fn`` is neither a function nor a Module, or a list, tuple or
                ``*args`` argument mixes tensors with other values.
            ValueError: the arguments do not match ``fn``'s signature, or ``fn`` returns
                something other than None, a Tensor or an iterable of Tensors.
        """
        from ipuxl.tracing import create_graph

        return create_graph(self, fn, *args, **kwargs)

    def create_empty_graph(self, name: str | None = None) -> Graph:
        """A new graph with no inputs, outputs or ops: ``<name or 'graph'>_subgraph(<k>)``."""
        return self._new_subgraph(name or "graph")

    def _new_subgraph(self, base: str) -> Graph:
        return self._new_graph(f"{base}_subgraph({next(self._subgraph_counter)})")

    def _new_graph(self, graph_id: str) -> Graph:
        """A new empty graph with exactly this id (the caller makes it unique)."""
        graph = Graph._create(self, graph_id)
        self._graphs[graph.id] = graph
        self._edited()
        return graph

    def get_graph(self, graph_id: str) -> Graph:
        """The graph with id ``graph_id`` (``""`` is the main graph).

        Raises:
            KeyError: no graph of this Ir has that id.
        """
        try:
            return self._graphs[graph_id]
        except KeyError:
            raise KeyError(
                f"{self!r} has no graph with id {graph_id!r}. Its graphs: "
                f"{sorted(self._graphs)}."
            ) from None

    # ----------------------------------------------------------------- configuration
    @property
    def num_host_transfers(self) -> int:
        """Data slots per stream per run (default 1); set it before building a Session."""
        return self._num_host_transfers

    @num_host_transfers.setter
    def num_host_transfers(self, value: int) -> None:
        self._num_host_transfers = _at_least_one("num_host_transfers", value)
        self._edited()

    @property
    def replication_factor(self) -> int:
        """The global replication factor R.

        Raises:
            RuntimeError: (setter) a Session was already built from this Ir.
            ValueError: (setter) the value is below 1.
        """
        return self._replication_factor

    @replication_factor.setter
    def replication_factor(self, value: int) -> None:
        if self._prepared:
            raise RuntimeError(
                f"The `Ir` {self._id} is already prepared, you probably have created a session "
                "associated with this ir and cannot change the replication_factor after this. "
                "Create a new Ir to change it."
            )
        self._replication_factor = _at_least_one("replication_factor", value)
        self._edited()

    @property
    def instance_replication_factor(self) -> int:
        """The replicas of this process; host buffers use it. It equals
        :attr:`replication_factor` except in a ``replication="popdist"`` Ir of several
        processes (see :mod:`ipuxl.popdist`)."""
        if self._topology is not None and self._topology.num_instances > 1:
            return self._topology.local_replicas
        return self._replication_factor

    def replica_grouping(self, stride: int = 1, group_size: int | None = None) -> ReplicaGrouping:
        """The grouping that puts replica r in group ``r % stride + stride * (r // (stride
        * group_size))`` (see ``ReplicaGrouping``)."""
        from ipuxl.replica_grouping import ReplicaGrouping

        return ReplicaGrouping._from_stride(self, stride, group_size)

    def replica_grouping_from_assignments(self, assignment: list[int]) -> ReplicaGrouping:
        """The grouping that puts replica r in group ``assignment[r]``."""
        from ipuxl.replica_grouping import ReplicaGrouping

        return ReplicaGrouping._from_assignments(self, assignment)

    # ----------------------------------------------------------------- streams
    def get_all_h2d_streams(self) -> set[HostToDeviceStream]:
        """The host-to-device streams used by at least one ``host_load`` in any graph."""
        from ipuxl.streams import used_streams

        return set(used_streams(self, "host_load"))

    def get_all_d2h_streams(self) -> set[DeviceToHostStream]:
        """The device-to-host streams used by at least one ``host_store`` in any graph."""
        from ipuxl.streams import used_streams

        return set(used_streams(self, "host_store"))

    def dot_checkpoint(self, check: str, save_dir: str | None = None) -> None:
        """Write the Ir as Graphviz source (``ipuxl.to_dot``) to
        ``<dir>/<NNNN>_<check>.dot``, and an SVG drawing when ``dot`` is on PATH, when
        ``POPART_DOT_CHECKS`` names ``check`` (or is ``ALL``); see
        :func:`ipuxl.dot.write_dot_checkpoint` for the directory and the numbering."""
        from ipuxl.dot import write_dot_checkpoint

        write_dot_checkpoint(self, check, save_dir)

    @property
    def _pb_ir(self) -> Any:
        """PopART's Ir object as PopXL programs use it: ``getSessionOptions()`` (the same
        options on every call), ``logIr()`` and the graph reads and edits of
        :mod:`ipuxl.popart._internal.ir`, a view of this Ir (the same object on every
        access)."""
        from ipuxl.popart._internal.ir._graph import ir_view

        return ir_view(self)

    @classmethod
    def _from_pb(cls, pb_ir: Any) -> Ir:
        """The Ir that ``pb_ir`` (an ``ir._pb_ir``) views."""
        from ipuxl.popart._internal.ir import Ir as PbIr

        return _viewed(pb_ir, PbIr, "Ir._from_pb", "ir._pb_ir")

    # ----------------------------------------------------------------- internals
    def _next_counter(self) -> int:
        """The IR-wide counter behind ``__t<n>`` suffixes (also for internal names)."""
        return next(self._counter)

    def _edited(self) -> None:
        """Record a change, so a Session built earlier can warn that it runs an old copy."""
        self._version += 1

    # ----------------------------------------------------------------- dunder
    def __repr__(self) -> str:
        return f"Ir[id={self._id}]"

    def __str__(self) -> str:
        from ipuxl.printing import format_ir

        return format_ir(self)

    def _repr_html_(self) -> str:
        """The notebook view (see :mod:`ipuxl.notebook`)."""
        from ipuxl.notebook import ir_html

        return ir_html(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's text view: ``str(ir)``."""
        from ipuxl.notebook import pretty

        pretty(self, printer, cycle)

    def __hash__(self) -> int:
        return hash(self._id)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ir):
            raise TypeError(
                f"An Ir can only be compared with another Ir, got {type(other).__name__}: "
                f"{other!r}."
            )
        return self._id == other._id


def _viewed(view: Any, view_class: type, where: str, handle: str) -> Any:
    """The ipuxl object behind a ``popart._internal.ir`` view.

    Raises:
        TypeError: ``view`` is not a ``view_class``.
    """
    if not isinstance(view, view_class):
        raise TypeError(
            f"{where} takes a popart._internal.ir.{view_class.__name__} (`{handle}`), got "
            f"{type(view).__name__}: {view!r}."
        )
    return view._object


def _at_least_one(name: str, value: Any) -> int:
    """``value`` as an int of at least 1.

    Raises:
        TypeError: ``value`` is not an integer (a float, a string, None...).
        ValueError: ``value`` is below 1.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(
            f"{name} must be an integer of at least 1, got {type(value).__name__} "
            f"{value!r}. Pass a whole number such as 1 or 4."
        )
    if value < 1:
        raise ValueError(f"{name} must be an integer of at least 1, got {value!r}.")
    return int(value)


def _configure_persistent_cache() -> None:
    """Map ``POPXL_CACHE_DIR`` onto JAX's persistent compilation cache."""
    directory = os.environ.get("POPXL_CACHE_DIR")
    if directory:
        from ipuxl.executable_cache import use_persistent_cache

        use_persistent_cache(directory)
