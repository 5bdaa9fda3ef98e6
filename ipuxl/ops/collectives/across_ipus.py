"""All-reduce across the IPUs of one replica: ``all_reduce``,
``all_reduce_identical_inputs`` and ``all_reduce_identical_grad_inputs`` (spec §11.10).

Each takes one tensor per IPU and returns one tensor per input, on that input's IPU. ipuxl
runs all the virtual IPUs of a replica in one JAX program, so nothing is communicated:
output ``k`` is one op, placed on IPU ``ipus[k]``, that reads every input. The two
``identical`` variants are for tensors that already hold the same value on every IPU
(tensor-parallel layers): one all-reduces only the gradients, the other only the values.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     with popxl.ipu(0):
    ...         a = ops.init((2,), popxl.float32, "a")
    ...     with popxl.ipu(1):
    ...         b = ops.init((2,), popxl.float32, "b")
    ...     a_sum, b_sum = ops.collectives.all_reduce([a, b])
    >>> a_sum.ipu, b_sum.ipu
    (0, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from ipuxl.context import ipu
from ipuxl.errors import UndefinedValue
from ipuxl.host_values import index_argument
from ipuxl.op import OpDef, check_is_tensor
from ipuxl.ops.collectives.groups import check_reduce_dtype, reduce_op
from ipuxl.ops.collectives.named_axis import reduce_stacked
from ipuxl.tensor import Tensor, TensorSpec

__all__ = ["all_reduce", "all_reduce_identical_inputs", "all_reduce_identical_grad_inputs"]


def _rule(name: str) -> Callable[..., list[TensorSpec]]:
    def rule(*ts: Tensor, op: str = "add", index: int | None = None) -> list[TensorSpec]:
        check_reduce_dtype(name, ts[0], op)
        return [TensorSpec(ts[0].shape, ts[0].dtype)]

    return rule


def _lower_all_reduce(*xs: jax.Array, op: str) -> jax.Array:
    # Differentiated by JAX: the sum's gradient reaches every input.
    return reduce_stacked(jnp.stack(xs), op)


def _lower_identical_inputs(*xs: jax.Array, index: int, op: str = "add") -> jax.Array:
    # The value of input `index`; every input's gradient is this output's gradient, so the
    # gradients of all the outputs add up on every input (`mean`: each is divided by the
    # number of inputs first). The other reductions have no gradient, as in PopXL.
    def backward(_: Any, grad: jax.Array) -> tuple[jax.Array, ...]:
        if op not in ("add", "mean"):
            raise NotImplementedError(
                f"all_reduce_identical_inputs with op={op!r} has no gradient: PopXL "
                "differentiates op='add' (and ipuxl 'mean'). Use op='add' in graphs you "
                "differentiate.")
        share = grad / len(xs) if op == "mean" else grad
        return (share,) * len(xs)

    function = jax.custom_vjp(lambda *xs: xs[index])
    function.defvjp(lambda *xs: (xs[index], None), backward)
    return function(*xs)


def _lower_identical_grad_inputs(*xs: jax.Array, index: int, op: str = "add") -> jax.Array:
    # The reduction of the inputs; only input `index` gets this output's gradient.
    def backward(_: Any, grad: jax.Array) -> tuple[jax.Array, ...]:
        return tuple(grad if k == index else jnp.zeros_like(grad) for k in range(len(xs)))

    def total(*xs: jax.Array) -> jax.Array:
        return reduce_stacked(jnp.stack(xs), op)

    function = jax.custom_vjp(total)
    function.defvjp(lambda *xs: (total(*xs), None), backward)
    return function(*xs)


_ALL_REDUCE = OpDef("all_reduce", infer=_rule("all_reduce"), lower=_lower_all_reduce,
                    check_placement=False)
_IDENTICAL_INPUTS = OpDef("all_reduce_identical_inputs",
                          infer=_rule("all_reduce_identical_inputs"),
                          lower=_lower_identical_inputs, check_placement=False)
_IDENTICAL_GRAD_INPUTS = OpDef("all_reduce_identical_grad_inputs",
                               infer=_rule("all_reduce_identical_grad_inputs"),
                               lower=_lower_identical_grad_inputs, check_placement=False)


def all_reduce(ts: Sequence[Tensor], ipus: Sequence[int] | None = None, op: str = "add"
               ) -> list[Tensor]:
    """The reduction of ``ts``, one tensor per IPU of this replica, on every one of them.

    Args:
        ts: the tensors to reduce, one per IPU, all of one shape and dtype (bool for
            ``and``/``or``, floating point for ``mean``, else any number).
        ipus: the IPU of each tensor; None takes each tensor's ``ipu``.
        op: ``add``, ``mean``, ``mul``, ``min``, ``max``, ``and``, ``or`` or
            ``square_add`` (the sum of the squares).

    Returns:
        One tensor per input, the reduction, on that input's IPU. Gradients flow through
        every op (PopXL differentiates only ``add``).

    Raises:
        TypeError: ``ts`` is not a sequence of Tensors; an IPU is not an integer.
        ValueError: ``op`` is not a valid op; ``ts`` is empty, its tensors differ in shape
            or dtype, or ``ipus`` has another length.
        UndefinedValue: ``ipus`` is None and a tensor's IPU is undefined.
        popart_exception: ``op`` does not take the tensors' dtype.

    Example:
        >>> ir = popxl.Ir()
        >>> with ir.main_graph:
        ...     a = ops.init((2,), popxl.float32, "a")
        ...     b = ops.init((2,), popxl.float32, "b")
        ...     largest = ops.collectives.all_reduce([a, b], ipus=[0, 1], op="max")
        >>> [t.ipu for t in largest]
        [0, 1]
    """
    op = reduce_op(op)
    return _apply(_ALL_REDUCE, ts, ipus, lambda k: {"op": op})


def all_reduce_identical_inputs(ts: Sequence[Tensor], ipus: Sequence[int] | None = None,
                                op: str = "add") -> list[Tensor]:
    """The inputs unchanged, with an all-reduce of their gradients: for tensors that
    already hold the same value on every IPU, whose uses on each IPU all contribute to the
    gradient.

    Args, Raises: as for :func:`all_reduce`. ``op`` reduces the gradients: ``add`` or
    ``mean`` (the others are accepted, as PopXL accepts them, but have no gradient:
    differentiating them raises NotImplementedError).

    Returns:
        Output ``k``, on IPU ``ipus[k]``: ``ts[k]``; its gradient reaches every input.
    """
    op = reduce_op(op)
    return _apply(_IDENTICAL_INPUTS, ts, ipus, lambda k: {"index": k, "op": op})


def all_reduce_identical_grad_inputs(ts: Sequence[Tensor], ipus: Sequence[int] | None = None,
                                     op: str = "add") -> list[Tensor]:
    """The reduction of the inputs on every IPU, with the gradients passed back unchanged:
    for partial results whose gradients already hold the same value on every IPU.

    Args, Raises: as for :func:`all_reduce`.

    Returns:
        Output ``k``, on IPU ``ipus[k]``: the reduction (``op``) of ``ts``; its gradient
        reaches ``ts[k]`` only.
    """
    op = reduce_op(op)
    return _apply(_IDENTICAL_GRAD_INPUTS, ts, ipus, lambda k: {"index": k, "op": op})


def _apply(opdef: OpDef, ts: Sequence[Tensor], ipus: Sequence[int] | None,
           attrs: Callable[[int], dict[str, Any]]) -> list[Tensor]:
    name = opdef.name
    if isinstance(ts, Tensor) or not isinstance(ts, Sequence):
        raise TypeError(
            f"{name}: `ts` must be a list of Tensors, one per IPU, got "
            f"{type(ts).__name__}. Pass for example `[a, b]`."
        )
    if not ts:
        raise ValueError(f"{name}: `ts` is empty; pass one tensor per IPU.")
    for k, t in enumerate(ts):
        check_is_tensor(f"ts[{k}]", t)
        if (t.shape, t.dtype) != (ts[0].shape, ts[0].dtype):
            raise ValueError(
                f"{name}: every tensor must have the same shape and dtype, but `{ts[0].id}` "
                f"is {ts[0].dtype.name}{list(ts[0].shape)} and `{t.id}` is "
                f"{t.dtype.name}{list(t.shape)}. Reshape or cast them first."
            )
    places = _ipus(name, ts, ipus)
    inputs = {f"ts[{k}]": t for k, t in enumerate(ts)}
    outputs = []
    for k, place in enumerate(places):
        with ipu(place):
            outputs.append(opdef.apply(inputs, **attrs(k))[0])
    return outputs


def _ipus(name: str, ts: Sequence[Tensor], ipus: Sequence[int] | None) -> list[int]:
    if ipus is None:
        try:
            return [t.ipu for t in ts]
        except UndefinedValue as error:
            raise UndefinedValue(f"{name}: {error} Pass `ipus=[...]`, one per tensor.") from None
    if isinstance(ipus, (str, bytes)) or not isinstance(ipus, Sequence):
        raise TypeError(f"{name}: `ipus` must be a list of ints, got {type(ipus).__name__}.")
    if len(ipus) != len(ts):
        raise ValueError(
            f"{name}: `ipus` must give one IPU per tensor: {len(ts)} tensors, but ipus={ipus!r} "
            f"has {len(ipus)} entries."
        )
    return [index_argument(f"ipus[{k}]", place, name) for k, place in enumerate(ipus)]
