"""Stand-ins for the pybind11 modules of C++ custom ops.

A PopXL program that uses a C++ custom op imports its binding module (compiled by
``cppimport`` from ``NAME.cpp``) and calls, in one of two styles::

    op = binding.MyOp.createOpInGraph(graph._pb_graph, {0: x.id}, {0: out_id}, attr, settings)
    op = impl.MyOp.create_op_in_graph(graph=..., inputs=..., outputs=..., params=impl.MyParams(...),
                                      settings=...)

then ``Tensor._from_pb_tensor(op.outTensor(0))``. :func:`op_binding` makes the class
those calls go to from a :class:`~ipuxl.custom_ops.declare.CustomOp`: it creates the
ipuxl op in the view's graph with the exact output ids and returns the op's view (an
instance of the class, so ``isinstance`` checks hold). :func:`params_struct` makes the
parameter structs of the second style. A :class:`BindingModule` lists what one module
holds; :mod:`.loader` serves it when the program imports the module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ipuxl.context import get_current_context
from ipuxl.custom_ops.declare import CustomOp, register_view_class
from ipuxl.popart import popart_exception

__all__ = ["BindingModule", "op_binding", "params_struct"]


@dataclass
class BindingModule:
    """What a C++ custom op's binding module holds, by attribute name.

    Attributes:
        name: the module's name without its package (``rotary_pos_embed_binding``).
        members: attribute name -> object (op classes from :func:`op_binding`, param
            structs from :func:`params_struct`, functions).
        description: one line for errors and the registry listing.
    """

    name: str
    members: dict[str, Any] = field(default_factory=dict)
    description: str = ""


def params_struct(class_name: str, fields: Sequence[str],
                  defaults: Mapping[str, Any] | None = None) -> type:
    """A parameter struct as C++ custom ops bind them: built from positional or keyword
    arguments, read as attributes, turned into the op's attributes by ``as_attrs``."""
    defaults = dict(defaults or {})

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(fields):
            raise TypeError(f"{class_name} takes {len(fields)} arguments ({', '.join(fields)}), "
                            f"got {len(args)}.")
        values = dict(zip(fields, args))
        for key, value in kwargs.items():
            if key not in fields:
                raise TypeError(f"{class_name} has no field {key!r}; its fields are "
                                f"{', '.join(fields)}.")
            if key in values:
                raise TypeError(f"{class_name}: {key!r} given twice.")
            values[key] = value
        missing = [f for f in fields if f not in values and f not in defaults]
        if missing:
            raise TypeError(f"{class_name} needs {', '.join(missing)}.")
        for name in fields:
            setattr(self, name, values.get(name, defaults.get(name)))

    def as_attrs(self: Any) -> dict[str, Any]:
        return {name: getattr(self, name) for name in fields}

    def __repr__(self: Any) -> str:
        return f"{class_name}({', '.join(f'{n}={getattr(self, n)!r}' for n in fields)})"

    return type(class_name, (), {"__init__": __init__, "as_attrs": as_attrs,
                                 "__repr__": __repr__, "fields": tuple(fields)})


def _ordered(mapping: Mapping[int, str], what: str, op: CustomOp) -> list[str]:
    indices = sorted(int(i) for i in mapping)
    if indices != list(range(len(indices))):
        raise popart_exception(
            f"Custom op {op.opid}: {what} indices must be 0..n-1 with no gaps, got "
            f"{indices}. Connect every {what[:-1]} by index."
        )
    return [mapping[i] for i in indices]


def _create(op: CustomOp, graph_view: Any, inputs: Mapping[int, str],
            outputs: Mapping[int, str], attrs: Mapping[str, Any]) -> Any:
    from ipuxl.popart._internal.ir._op import op_view

    graph = getattr(graph_view, "_object", graph_view)
    tensors = [graph.get_tensor(tensor_id) for tensor_id in _ordered(inputs, "inputs", op)]
    ids = _ordered(outputs, "outputs", op)
    context = get_current_context()
    pushed = context.graph is not graph
    if pushed:
        context.push_graph(graph)
    try:
        created = op.create(tensors, attrs, output_ids=ids)
    finally:
        if pushed:
            context.pop_graph()
    return op_view(created)


def op_binding(class_name: str, op: CustomOp, *, attrs: Sequence[str] = (),
               transform: Callable[..., Mapping[str, Any]] | None = None) -> type:
    """The binding class ``class_name`` of ``op``, a subclass of the view's ``Op``.

    Args:
        attrs: the names of ``createOpInGraph``'s arguments between ``outputs`` and
            ``settings`` (PopART's op constructor arguments), in order.
        transform: ``transform(**attrs) -> attrs`` turns the binding's arguments into
            the op's attributes (e.g. a replica grouping into its assignment).
    """
    def to_attrs(values: Mapping[str, Any]) -> Mapping[str, Any]:
        return transform(**values) if transform is not None else values

    def createOpInGraph(graph: Any, inputs: Mapping[int, str],  # noqa: N802
                        outputs: Mapping[int, str], *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("settings", None)
        if len(args) == len(attrs) + 1:
            args = args[:-1]  # the trailing Op::Settings
        if len(args) > len(attrs):
            raise TypeError(
                f"{class_name}.createOpInGraph takes (graph, inputs, outputs, "
                f"{', '.join([*attrs, 'settings'])}); got {len(args)} arguments after "
                "outputs."
            )
        values = {**dict(zip(attrs, args)), **kwargs}
        return _create(op, graph, inputs, outputs, to_attrs(values))

    def create_op_in_graph(graph: Any, inputs: Mapping[int, str],
                           outputs: Mapping[int, str], params: Any = None,
                           settings: Any = None, **kwargs: Any) -> Any:
        values = dict(params.as_attrs()) if params is not None else {}
        values.update(kwargs)
        return _create(op, graph, inputs, outputs, to_attrs(values))

    return register_view_class(op, class_name, {
        "createOpInGraph": staticmethod(createOpInGraph),
        "create_op_in_graph": staticmethod(create_op_in_graph),
        "__doc__": f"ipuxl's stand-in for the C++ custom op {op.opid}.",
    })
