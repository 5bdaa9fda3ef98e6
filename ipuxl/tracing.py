"""Tracing Python functions and ``Module.build`` methods into subgraphs
(``Ir.create_graph``).

The function is called once with graph inputs standing in for its tensor arguments (only
their abstract values, shape and dtype, are used: the parent tensors are not captured).
The ops it creates go into the new graph; the tensors it returns become the graph's
outputs. Tracing the same function again (for example at other shapes) makes a new graph.

Example:
    >>> import ipuxl as popxl
    >>> def scale(x: popxl.Tensor, factor: float) -> popxl.Tensor:
    ...     return x * factor
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x = popxl.variable([1.0, 2.0], name="x")
    ...     graph = ir.create_graph(scale, x, 3.0)
    >>> [t.name for t in graph.inputs], graph.id
    (['x'], 'scale_subgraph(0)')
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ipuxl.context import get_current_context
from ipuxl.module import Module
from ipuxl.tensor import Tensor, TensorByRef, TensorSpec
from ipuxl.tensor_factories import graph_input, graph_output

if TYPE_CHECKING:
    from ipuxl.graph import Graph
    from ipuxl.ir import Ir

__all__ = ["create_graph"]


def _is_tensor_like(value: Any) -> bool:
    return isinstance(value, (Tensor, TensorSpec))


def _annotations(fn: Callable) -> dict[str, Any]:
    """``fn``'s annotations with string annotations resolved (PopXL ignores them, so a
    ``TensorByRef`` under ``from __future__ import annotations`` is lost there).

    Each string is evaluated on its own in ``fn``'s module, so one name that cannot be
    resolved (an import under ``TYPE_CHECKING``, say) does not hide a ``TensorByRef`` in
    another parameter; such a name stays a string.
    """
    raw = dict(getattr(fn, "__annotations__", {}))
    try:
        return typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - any failure to resolve: resolve one by one below
        pass
    namespace = getattr(inspect.unwrap(fn), "__globals__", {})
    resolved = {}
    for name, annotation in raw.items():
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # noqa: S307 - as get_type_hints
            except Exception:  # noqa: BLE001 - leave an unresolvable annotation as text
                pass
        resolved[name] = annotation
    return resolved


def _by_ref(annotation: Any, element: bool = False) -> bool:
    """Whether a parameter annotated ``annotation`` gives by-reference inputs: a tensor
    parameter (or ``*args`` / ``**kwargs``) annotated ``TensorByRef``, or a list or tuple
    parameter annotated ``List[TensorByRef]`` or ``Tuple[TensorByRef]`` (``element``)."""
    if not element:
        return annotation is TensorByRef
    args = typing.get_args(annotation)
    return typing.get_origin(annotation) in (list, tuple) and bool(args) and (
        args[0] is TensorByRef)


def _input(name: str, value: Any, by_ref: bool) -> Tensor:
    meta_shape = value.meta_shape if value.meta_shape else None
    return graph_input(value.shape, value.dtype, name, by_ref=by_ref, meta_shape=meta_shape)


def _graph_argument(name: str, value: Any, annotation: Any, kind: Any) -> Any:
    """The value ``fn`` receives for one bound parameter, creating graph inputs."""
    if kind is inspect.Parameter.VAR_KEYWORD:
        by_ref = _by_ref(annotation)
        return {
            key: _input(key, item, by_ref) if _is_tensor_like(item) else item
            for key, item in value.items()
        }
    if kind is inspect.Parameter.VAR_POSITIONAL:
        by_ref = _by_ref(annotation)
        return tuple(
            _input(f"{name}_{i}", item, by_ref) if _is_tensor_like(item) else item
            for i, item in enumerate(value)
        )
    if _is_tensor_like(value):
        return _input(name, value, _by_ref(annotation))
    if isinstance(value, (list, tuple)) and any(_is_tensor_like(v) for v in value):
        by_ref = _by_ref(annotation, element=True)
        return [_input(f"{name}_{i}", item, by_ref) for i, item in enumerate(value)]
    return value


def _check_not_mixed(name: str, value: Any, kind: Any) -> None:
    """Raise ``TypeError`` if a list, tuple or ``*args`` parameter holds both tensors (or
    specs) and other values: each must be all graph inputs or all passed through."""
    if kind is inspect.Parameter.VAR_POSITIONAL:
        what, parameter = "*args", f"*{name}"
        fix = ("pass the other values through named parameters of the function (before "
               "`*args`, or keyword-only after it)")
    elif isinstance(value, (list, tuple)) and kind is not inspect.Parameter.VAR_KEYWORD:
        what, parameter = type(value).__name__, name
        fix = "pass the tensors and the other values as separate arguments"
    else:
        return
    tensors = [_is_tensor_like(v) for v in value]
    if any(tensors) and not all(tensors):
        raise TypeError(
            f"A {what} argument can't contain a mixture of Tensors and other types. "
            f"Parameter `{parameter}` got {[type(v).__name__ for v in value]}; {fix}."
        )


def _graph_name(fn: Any) -> str:
    qualname = type(fn).__qualname__ if isinstance(fn, Module) else fn.__qualname__
    return qualname.replace(".<locals>", "")


def create_graph(ir: Ir, fn: Any, *args: Any, **kwargs: Any) -> Graph:
    """Trace ``fn`` into a new subgraph of ``ir``. See ``Ir.create_graph``.

    Raises:
        TypeError: ``fn`` is neither a function nor a Module; a list, tuple or ``*args``
            argument mixes tensors and other values.
        ValueError: the arguments do not match ``fn``'s signature; the output is not
            None, a Tensor or an iterable of Tensors.
    """
    if isinstance(fn, Module):
        target = fn.build
    elif callable(fn) and hasattr(fn, "__qualname__"):
        target = fn
    else:
        raise TypeError(
            "Callable `fn` must be either a function or a class that extends popxl.Module. "
            f"Got {type(fn).__name__}."
        )
    signature = inspect.signature(target)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as error:
        raise ValueError(
            "The arguments, `args` and `kwargs`, do not match the signature of the function "
            f"`fn`. {_graph_name(fn)}{signature}: {error}."
        ) from None
    bound.apply_defaults()
    for name, value in bound.arguments.items():  # before the graph exists
        _check_not_mixed(name, value, signature.parameters[name].kind)
    annotations = _annotations(target)
    graph = ir._new_subgraph(_graph_name(fn))
    context = get_current_context()
    context.push_graph(graph)
    try:
        call_args, call_kwargs = [], {}
        for name, value in bound.arguments.items():
            parameter = signature.parameters[name]
            argument = _graph_argument(name, value, annotations.get(name), parameter.kind)
            if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                call_args.extend(argument)
            elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
                call_kwargs.update(argument)
            elif parameter.kind is inspect.Parameter.KEYWORD_ONLY:
                call_kwargs[name] = argument
            else:
                call_args.append(argument)
        result = target(*call_args, **call_kwargs)
        for output in _outputs(result):
            graph_output(output)
    finally:
        context.pop_graph()
    return graph


def _outputs(result: Any) -> list[Tensor]:
    if result is None:
        return []
    if isinstance(result, Tensor):
        return [result]
    if isinstance(result, Iterable) and not isinstance(result, (str, bytes)):
        items = list(result)
        if all(isinstance(item, Tensor) for item in items):
            return items
    raise ValueError(
        "Output of subgraph must be None, a Tensor or an iterable of Tensors. Got "
        f"{type(result).__name__}: return the tensors the graph should output."
    )
