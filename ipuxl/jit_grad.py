"""``ipuxl.grad`` and ``ipuxl.value_and_grad``: jitted gradients of a model function.

::

    def loss(w, x, y):
        return ops.mean((x @ w - y) ** 2)

    step = ipuxl.value_and_grad(loss)      # differentiates argument 0
    value, dw = step(w, x, y)              # JAX arrays, like jax.value_and_grad

The returned function is an :class:`~ipuxl.jit.JitFunction` whose Ir does what a PopXL
user would write: the model function becomes a subgraph, ``transforms.autodiff`` builds
its gradient graph, the main graph calls the forward graph, then the gradient graph with
a gradient of 1 for the loss, and returns the loss and the gradients of the differentiated
arguments (in their pytree structure). The model function must be pure (its parameters are
arguments, as in JAX): variables cannot live in a subgraph.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from jax import tree_util

from ipuxl import ops
from ipuxl.context import get_current_context
from ipuxl.jit import DEFAULT_CACHE_SIZE, JitFunction, positional_names
from ipuxl.tensor import Tensor
from ipuxl.tensor_factories import constant
from ipuxl.transforms.autodiff import autodiff

__all__ = ["grad", "value_and_grad"]


def value_and_grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, *,
                   static_argnums: int | Sequence[int] = (),
                   static_argnames: str | Sequence[str] = (),
                   donate_argnums: int | Sequence[int] = (), device: str = "cpu",
                   cache_size: int = DEFAULT_CACHE_SIZE) -> JitFunction:
    """A jitted ``(*args) -> (fn(*args), gradients)``.

    Args:
        fn: returns a scalar floating-point Tensor (the loss).
        argnums: the positional arguments to differentiate; an int gives their gradient
            (a pytree like the argument), a tuple a tuple of them.
        static_argnums, static_argnames, donate_argnums, device, cache_size: as
            :func:`ipuxl.jit`.

    Raises (when called):
        TypeError: ``fn`` does not return a scalar floating-point Tensor, or a
            differentiated argument holds a non-float array.
    """
    numbers = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    def differentiated(*args: Any, **kwargs: Any) -> tuple[Tensor, Any]:
        return _value_and_grad(fn, numbers, isinstance(argnums, int), args, kwargs)

    differentiated.__name__ = f"value_and_grad({getattr(fn, '__name__', 'fn')})"
    differentiated.__qualname__ = differentiated.__name__
    jitted = JitFunction(differentiated, static_argnums=static_argnums,
                         static_argnames=static_argnames, donate_argnums=donate_argnums,
                         device=device, cache_size=cache_size)
    jitted._positional = positional_names(fn)
    return jitted


def grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, **kwargs: Any
         ) -> JitFunction:
    """A jitted ``(*args) -> gradients`` (see :func:`value_and_grad`)."""
    inner = value_and_grad(fn, argnums, **kwargs)._fn

    def gradients(*args: Any, **call_kwargs: Any) -> Any:
        return inner(*args, **call_kwargs)[1]

    gradients.__name__ = f"grad({getattr(fn, '__name__', 'fn')})"
    gradients.__qualname__ = gradients.__name__
    jitted = JitFunction(gradients, **kwargs)
    jitted._positional = positional_names(fn)
    return jitted


def _value_and_grad(fn: Callable[..., Any], argnums: tuple[int, ...], single: bool,
                    args: tuple, kwargs: dict) -> tuple[Tensor, Any]:
    """Build, in the current (main) graph: the forward subgraph, its gradient graph, and
    the two calls; return the loss and the gradients."""
    for number in argnums:
        if not 0 <= number < len(args):
            raise ValueError(
                f"argnums {number} is out of range: the function was called with "
                f"{len(args)} positional arguments."
            )
    flat, tree = tree_util.tree_flatten((args, kwargs))
    tensor_at = [i for i, leaf in enumerate(flat) if isinstance(leaf, Tensor)]
    leaves = [flat[i] for i in tensor_at]
    # Which leaves belong to the differentiated arguments, in order.
    wanted: list[list[int]] = []
    for number in argnums:
        arg_leaves = tree_util.tree_leaves(args[number])
        wanted.append([leaves.index(leaf) for leaf in arg_leaves if isinstance(leaf, Tensor)])
    for indices in wanted:
        for i in indices:
            if not leaves[i].dtype.is_floating_point:
                raise TypeError(
                    f"Only floating-point arguments can be differentiated; the argument "
                    f"`{leaves[i].name}` is {leaves[i].dtype.name}. Differentiate other "
                    "arguments (argnums=...) or make it a float."
                )

    def forward(*inner: Tensor) -> Tensor:
        values = list(flat)
        for position, tensor in zip(tensor_at, inner):
            values[position] = tensor
        call_args, call_kwargs = tree_util.tree_unflatten(tree, values)
        loss = fn(*call_args, **call_kwargs)
        if (not isinstance(loss, Tensor) or loss.shape != ()
                or not loss.dtype.is_floating_point):
            raise TypeError(
                f"{getattr(fn, '__name__', 'fn')} must return a scalar floating-point Tensor "
                f"to be differentiated; it returned {loss!r}. Reduce it first, e.g. "
                "ops.mean(...) or ops.sum(...)."
            )
        return loss

    forward.__name__ = forward.__qualname__ = getattr(fn, "__name__", "forward")
    ir = get_current_context().graph.ir
    graph = ir.create_graph(forward, *(leaf.spec for leaf in leaves))
    required = [graph.inputs[i] for indices in wanted for i in indices]
    grad_info = autodiff(graph, grads_provided=graph.outputs[:1], grads_required=required)
    forward_call = ops.call_with_info(graph, *leaves)
    loss = forward_call.outputs[0]
    seed = constant(np.ones((), loss.dtype.jax_dtype), loss.dtype, "loss_grad_seed")
    backward_call = ops.call_with_info(grad_info.graph, seed,
                                       inputs_dict=grad_info.inputs_dict(forward_call))
    grads = grad_info.fwd_parent_ins_to_grad_parent_outs(forward_call, backward_call)
    per_argument = []
    for number, indices in zip(argnums, wanted):
        arg_tree = tree_util.tree_structure(args[number])
        per_argument.append(tree_util.tree_unflatten(
            arg_tree, [grads[leaves[i]] for i in indices]))
    return loss, (per_argument[0] if single else tuple(per_argument))


