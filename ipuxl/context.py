"""The build context: which graph ops go into, and the placement and ordering they get.

One process-global :class:`Context` holds the graph stack, the current IPU, the
``in_sequence`` mode and chain, the name scopes, the IO-tiles flag and the execution
context. Every context manager here restores its state in ``finally`` (PopXL leaks state
when an exception escapes; ipuxl does not).

Example:
    >>> import ipuxl as popxl
    >>> ir = popxl.Ir()
    >>> with ir.main_graph, popxl.name_scope("layer1"):
    ...     w = popxl.variable(1.0, name="w")
    >>> w.id
    'layer1/w'
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any, Literal

import jax
import numpy as np

if TYPE_CHECKING:
    from ipuxl.execution_context import ExecutionContext
    from ipuxl.graph import Graph
    from ipuxl.ir import Ir
    from ipuxl.op import Op

__all__ = [
    "Context",
    "get_current_context",
    "get_current_graph",
    "get_main_graph",
    "get_ir",
    "gcg",
    "gmg",
    "gir",
    "in_sequence",
    "name_scope",
    "ipu",
    "io_tiles",
    "op_debug_context",
    "debug_context_frame_offset",
    "user_location",
]

InSequenceMode = bool | Literal["pass"] | None


@dataclass
class _SequenceBlock:
    """One ``in_sequence`` block: the ops the next op must follow, per graph."""

    mode: InSequenceMode
    previous: dict[Any, tuple[Op, ...]] = field(default_factory=dict)
    # Ops created directly in an unordered (False) block nested in an ordered one.
    members: dict[Any, list[Op]] = field(default_factory=dict)


@dataclass(frozen=True)
class OpSettings:
    """Where an op made now would go (PopART's ``Op::Settings`` as a context gives it)."""

    name: str
    graph: Graph
    vgraphId: int  # noqa: N815 - PopART's names
    tileSet: str  # noqa: N815
    executionContext: str  # noqa: N815


@dataclass
class Context:
    """Global build state. Use the functions of this module rather than the fields."""

    graphs: list[Graph] = field(default_factory=list)
    ipu_id: int = 0
    name_scopes: list[str] = field(default_factory=list)
    io_tiles: bool = False
    execution_context: str = "normal"
    sequence: list[_SequenceBlock] = field(default_factory=list)
    debug_frame_offset: int = 0
    source: tuple[str, int] | None = None  # set by source_location (imported models)

    @property
    def io_tile_set(self) -> bool:
        """PopXL's name for :attr:`io_tiles`: whether new ops go on the IO tiles."""
        return self.io_tiles

    @property
    def in_sequence(self) -> InSequenceMode:
        return self.sequence[-1].mode if self.sequence else None

    @property
    def graph(self) -> Graph:
        if not self.graphs:
            raise RuntimeError(
                "Trying to access a graph, but no graph has been selected. Hint - try "
                "performing the operations in a context manager (e.g. `with graph_instance:`) "
                "or inside of a function that's called by `popxl.Ir().create_graph()`"
            )
        return self.graphs[-1]

    def push_graph(self, graph: Graph) -> None:
        if self.graphs and self.graphs[0].ir is not graph.ir:
            raise RuntimeError(
                "Trying to a create a context manager nested in another context, when the "
                "previous context's Ir is different. Leave the other Ir's graph context "
                f"before entering a graph of {graph.ir!r}."
            )
        if not self.graphs:
            for hook in BUILDING_HOOKS:
                hook(True)
        self.graphs.append(graph)

    def pop_graph(self) -> Graph:
        graph = self.graphs.pop()
        if not self.graphs:
            for hook in BUILDING_HOOKS:
                hook(False)
        return graph

    # ------------------------------------------------------------- in_sequence
    def sequence_predecessors(
        self, graph: Graph, execution_context: str | None = None
    ) -> tuple[Op, ...]:
        """The ops a new op in ``graph`` must be scheduled after (``in_sequence``); the
        chain is per execution context (the current one unless ``execution_context``)."""
        key = (graph, execution_context or self.execution_context)
        for block in reversed(self.sequence):
            if block.mode == "pass":
                return ()
            if block.mode is True or block.mode is False:
                return block.previous.get(key, ())
        return ()

    def record_sequenced_op(self, op: Op) -> None:
        """Advance the ``in_sequence`` chain after ``op`` was created."""
        if not self.sequence or self.sequence[-1].mode in ("pass", None):
            return
        key = (op.graph, op.execution_context)
        block = self.sequence[-1]
        if block.mode is True:
            block.previous[key] = (op,)
        else:
            block.members.setdefault(key, []).append(op)

    def _add_in_sequence_topocons(self, op: Any) -> None:
        """Order ``op``, an op that already exists, as if it had just been created here.

        Under ``in_sequence(True)`` (or ``False`` nested in it) ``op`` is made to follow
        the ops a new op would follow, and becomes the op the next one follows; under
        ``"pass"`` or outside ``in_sequence`` nothing changes. This is how graph surgery
        (popxl-addons' ``repeat_graph``, which builds its loop under ``"pass"`` and then
        moves ops into it) puts a replacement op into the user's sequence.

        Args:
            op: an ipuxl ``Op``, or its ``popart._internal.ir`` view.

        Raises:
            TypeError: ``op`` is neither.
        """
        from ipuxl.op import Op

        target = getattr(op, "_object", op)
        if not isinstance(target, Op):
            raise TypeError(
                "Context._add_in_sequence_topocons takes an op (an ipuxl Op or its "
                f"popart._internal.ir view), got {type(op).__name__} {op!r}. Pass the op "
                "a call site gives, for example `ops.repeat_with_info(...)._op`."
            )
        if self.in_sequence not in (True, False):
            return
        new = tuple(
            before
            for before in self.sequence_predecessors(target.graph, target.execution_context)
            if before is not target and before not in target.after
        )
        if new:
            target.after = (*target.after, *new)
            target.graph.ir._edited()
        self.record_sequenced_op(target)

    def _get_op_settings(self, name: str) -> OpSettings:
        """PopXL's ``Op::Settings`` for an op named ``name`` made here now (what a custom
        op binding's ``createOpInGraph`` takes last). ipuxl places an op from the context
        when it creates it, so bindings only pass these along."""
        return OpSettings(name=name, graph=self.graph, vgraphId=self.ipu_id,
                          tileSet="io" if self.io_tiles else "compute",
                          executionContext=self.execution_context)

    def _op_created(self, op: Any) -> None:
        """PopXL's announcement of an op a binding just made (``ctx._op_created(op)`` after
        ``SomeOp.createOpInGraph``). ipuxl announces every op as it creates it (the
        graph's op-created hooks fire and ``in_sequence`` orders it), so there is nothing
        left to do; only the argument is checked.

        Raises:
            TypeError: ``op`` is neither an ipuxl ``Op`` nor its view.
        """
        from ipuxl.op import Op

        if not isinstance(getattr(op, "_object", op), Op):
            raise TypeError(
                "Context._op_created takes the op a binding created (its "
                f"popart._internal.ir view), got {type(op).__name__} {op!r}."
            )


_CONTEXT = Context()


def get_current_context() -> Context:
    """The process-global build context."""
    return _CONTEXT


def get_current_graph() -> Graph:
    """The graph at the top of the context stack.

    Raises:
        RuntimeError: no graph is selected (use ``with graph:``).
    """
    return _CONTEXT.graph


def get_main_graph() -> Graph:
    """The main graph of the Ir whose graph is at the bottom of the context stack."""
    if not _CONTEXT.graphs:
        raise RuntimeError(
            "Trying to access the main_graph, but no graph has been selected. Hint - try "
            "performing the operations in a context manager (e.g. `with ir.main_graph:`)"
        )
    return _CONTEXT.graphs[0].ir.main_graph


def get_ir() -> Ir:
    """The Ir whose graph is at the bottom of the context stack."""
    if not _CONTEXT.graphs:
        raise RuntimeError(
            "Trying to access the ir, but no graph has been selected. Hint - try performing "
            "the operations in a context manager (e.g. `with ir.main_graph:`)"
        )
    return _CONTEXT.graphs[0].ir


gcg = get_current_graph
gmg = get_main_graph
gir = get_ir


@contextlib.contextmanager
def ipu(ipu: int) -> Iterator[int]:
    """New ops are placed on virtual IPU ``ipu``.

    Raises:
        TypeError: ``ipu`` is not an integer.
        ValueError: ``ipu`` is negative.
    """
    if isinstance(ipu, (bool, np.bool_)) or not isinstance(ipu, (int, np.integer)):
        raise TypeError(
            f"popxl.ipu takes the index of a virtual IPU, an integer; got "
            f"{type(ipu).__name__} {ipu!r}. Use for example `with popxl.ipu(1):`."
        )
    if ipu < 0:
        raise ValueError(f"popxl.ipu: the IPU index must be 0 or more, got {ipu}.")
    ipu = int(ipu)
    previous = _CONTEXT.ipu_id
    _CONTEXT.ipu_id = ipu
    try:
        yield ipu
    finally:
        _CONTEXT.ipu_id = previous


@contextlib.contextmanager
def io_tiles() -> Iterator[None]:
    """New ops are placed on the IO tile set; their outputs report ``tile_set == "io"``."""
    previous = _CONTEXT.io_tiles
    _CONTEXT.io_tiles = True
    try:
        yield
    finally:
        _CONTEXT.io_tiles = previous


@contextlib.contextmanager
def name_scope(name: str) -> Iterator[list[str]]:
    """Prefix the names of new tensors (and ops) with ``name/``. Scopes nest.

    Raises:
        TypeError: ``name`` is not a string.
    """
    if not isinstance(name, str):
        raise TypeError(
            f"name_scope takes a string, got {type(name).__name__} {name!r}. Use for "
            f"example `with popxl.name_scope('layer1'):`."
        )
    _CONTEXT.name_scopes.append(name)
    try:
        yield list(_CONTEXT.name_scopes)
    finally:
        _CONTEXT.name_scopes.pop()


@contextlib.contextmanager
def in_sequence(mode: bool | Literal["pass"] = True) -> Iterator[bool | Literal["pass"]]:
    """Constrain the order of the ops created inside.

    ``True``: each new op runs after the previous op created under ``in_sequence`` in
    the same graph. ``False`` nested in ``True``: the inner ops are unordered among
    themselves but, as a block, follow the op before it and precede the op after it.
    ``"pass"``: no constraints. Separate outermost blocks do not chain. Works as a
    decorator too (``@popxl.in_sequence()``).

    Yields:
        ``mode``.

    Raises:
        TypeError: ``mode`` is None.
        ValueError: ``mode`` is not True, False or ``"pass"``.

    Example:
        >>> import ipuxl as popxl
        >>> ir = popxl.Ir()
        >>> with ir.main_graph, popxl.in_sequence():
        ...     x = popxl.variable(1.0)
        ...     a = x + 1.0
        ...     b = x * 2.0
        >>> add, mul = ir.main_graph.ops
        >>> mul.after == (add,)
        True
    """
    if mode is None:
        raise TypeError("`None` cannot be passed to `in_sequence`. Try `False` instead.")
    if mode not in (True, False, "pass"):
        raise ValueError(
            f"in_sequence takes True, False or \"pass\", got {mode!r}. Use True to order "
            "the ops created inside, False to leave them unordered."
        )
    outer = _CONTEXT.sequence[-1] if _CONTEXT.sequence else None
    # A new block starts from where the enclosing ordered block stands. An outermost
    # block, or one inside "pass", starts empty: such blocks do not chain to other ops.
    ordered_outer = outer is not None and outer.mode in (True, False)
    start = dict(outer.previous) if ordered_outer else {}
    block = _SequenceBlock(mode, previous=dict(start))  # a copy: `start` is compared at exit
    _CONTEXT.sequence.append(block)
    try:
        yield mode
    finally:
        _CONTEXT.sequence.pop()
        if outer is not None:
            _merge_block_into(outer, block, start)


def _merge_block_into(
    outer: _SequenceBlock, block: _SequenceBlock, start: dict[Any, tuple[Op, ...]]
) -> None:
    """After ``block`` closes, make what it created visible to the enclosing block."""
    if block.mode is True:
        finished = {key: last for key, last in block.previous.items() if last != start.get(key)}
    elif block.mode is False:
        finished = {key: tuple(members) for key, members in block.members.items()}
    else:  # "pass": its ops are unconstrained and constrain nothing after them.
        return
    for key, ops in finished.items():
        if outer.mode is True:
            # An unordered block is a unit: the next op follows all of its members.
            outer.previous[key] = ops
        elif outer.mode is False:
            outer.members.setdefault(key, []).extend(ops)


@contextlib.contextmanager
def _execution_context(context: ExecutionContext) -> Iterator[None]:
    """Put the ops created inside into the program fragment ``context`` (for example the
    weights-from-host fragment a Session runs before the first run)."""
    previous = _CONTEXT.execution_context
    _CONTEXT.execution_context = context.value
    try:
        yield
    finally:
        _CONTEXT.execution_context = previous


def op_debug_context(name_or_fn: str | Callable) -> Callable:
    """Decorator marking a function as an op builder (affects debug info only)."""

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return wrapper

    if callable(name_or_fn):
        return decorate(name_or_fn)
    return decorate


@contextlib.contextmanager
def debug_context_frame_offset(offset: int) -> Iterator[None]:
    """Attribute new ops' source lines ``offset`` frames further out than the caller."""
    previous = _CONTEXT.debug_frame_offset
    _CONTEXT.debug_frame_offset = previous + offset
    try:
        yield
    finally:
        _CONTEXT.debug_frame_offset = previous


@contextlib.contextmanager
def source_location(file: str, line: int) -> Iterator[None]:
    """Attribute new ops to ``file:line`` instead of the caller's Python line (the ONNX
    importer gives each op its model and node number)."""
    previous = _CONTEXT.source
    _CONTEXT.source = (file, line)
    try:
        yield
    finally:
        _CONTEXT.source = previous


# Called with True when a first graph is entered (a program is being built) and with
# False when the last one is left: ipuxl.jit puts its functions in their Python call path
# while building, so that jitted functions called with Tensors trace into the graph.
BUILDING_HOOKS: list[Callable[[bool], None]] = []

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# JAX's own frames too: an @ipuxl.jit function is traced from inside jax.jit.
_SKIPPED_DIRS = (_PACKAGE_DIR + os.sep, os.path.dirname(contextlib.__file__) + os.sep,
                 os.path.dirname(jax.__file__) + os.sep)


def user_location() -> tuple[str, int]:
    """(file, line) of the innermost frame outside ipuxl, JAX and the standard library, or,
    under ``debug_context_frame_offset(n)``, of the n-th such frame further out (or the
    location a ``source_location`` block gives)."""
    if _CONTEXT.source is not None:
        return _CONTEXT.source
    frame = _outside_ipuxl(sys._getframe(1))
    for _ in range(_CONTEXT.debug_frame_offset):
        outer = _outside_ipuxl(frame.f_back) if frame is not None else None
        if outer is None:
            break
        frame = outer
    if frame is None:
        return ("<unknown>", 0)
    return (frame.f_code.co_filename, frame.f_lineno)


def _outside_ipuxl(frame: FrameType | None) -> FrameType | None:
    """``frame`` or the first frame out from it that is not ipuxl's or the stdlib's."""
    while frame is not None and frame.f_code.co_filename.startswith(_SKIPPED_DIRS):
        frame = frame.f_back
    return frame
