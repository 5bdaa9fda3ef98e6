"""How the calls of an ``@ipuxl.jit`` function reach JAX: the rule its arguments cross the
host boundary under, and the ``__call__`` of its fast path.

The rule is ``Session.run``'s: a value never changes on the way in. While JAX's 64-bit mode
is off, JAX turns 64-bit integers into 32-bit ones by wrapping (``2**40 + 1`` becomes
``1``), so :func:`check_arguments` refuses an int64 or uint64 array, NumPy integer or Python
int that does not fit 32 bits (with :func:`ipuxl.host_values.cast`'s message), and lets
values that fit through as they are.

The fast path (a stateless function after its first call) cannot leave the check to JAX's
C++ dispatch, which converts NumPy arrays itself, so :func:`fast_call` looks at the type of
each argument first: a set lookup, after which JAX arrays and floats go straight to JAX.

Example:
    >>> import numpy as np, ipuxl
    >>> double = ipuxl.jit(lambda x: x * 2)
    >>> double(np.array([2**40]))
    Traceback (most recent call last):
    ...
    ValueError: <lambda>: argument `x`: cannot convert int64 data to int32 without changing it: the value 1099511627776 at index 0 is outside the int32 range [-2147483648, 2147483647]. Pass values that fit, or choose a wider dtype (to wrap on purpose, convert with `.astype(np.int32)` yourself first). JAX runs in 32-bit mode, where 64-bit integers are wrapped to 32 bits: enable 64-bit types with jax.config.update('jax_enable_x64', True) to keep them, or pass values that fit.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax import tree_util

from ipuxl import host_values

if TYPE_CHECKING:
    from ipuxl.jit import JitFunction

__all__ = ["check_arguments", "fast_call", "NeedsState"]


class NeedsState(RuntimeError):
    """Raised out of a JAX trace when a signature creates variables the call did not
    pass in: the caller adds them to the state and calls again (the fast path hands such
    a call to the Python path, which does)."""

    def __init__(self, built: Any):
        names = ", ".join(f"`{n}`" for n in built.variable_names)
        super().__init__(
            f"This jitted function made no variables for the arguments it was called with "
            f"before, but makes {names} for these. It keeps them as its state from now on: "
            "call it again."
        )
        self.built = built

# Argument types JAX takes without changing a value: found on first sight (JAX arrays of
# every kind, floats, NumPy scalars that are not 64-bit integers). Python ints and NumPy
# arrays are looked at each time: their values or dtype decide.
_UNCHANGED: set[type] = {float, bool, complex, type(None)}
_NARROWED = {np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.uint64): np.dtype(np.uint32)}
_INT32 = (-2**31, 2**31)


def check_arguments(fn: JitFunction, args: tuple, kwargs: dict) -> None:
    """Refuse 64-bit integer arguments that JAX's 32-bit mode would wrap (see the module
    docstring), naming the argument; note argument types that need no check."""
    for arg in args:
        if type(arg) not in _UNCHANGED:
            break
    else:
        if not kwargs:
            return
    statics = fn._static_argnums
    dynamic = ([arg for i, arg in enumerate(args) if i not in statics],
               {k: v for k, v in kwargs.items() if k not in fn._static_argnames})
    if not any(_may_wrap(leaf) for leaf in tree_util.tree_leaves(dynamic)):
        return
    if jax.config.jax_enable_x64:
        return
    leaves, names, _ = fn._dynamic_leaves(args, kwargs)
    for leaf, name in zip(leaves, names):
        if _may_wrap(leaf):
            array = np.asarray(leaf)
            host_values.cast(
                array, _NARROWED.get(array.dtype, np.dtype(np.int32)),
                f"{fn.__name__}: argument `{name}`",
                "JAX runs in 32-bit mode, where 64-bit integers are wrapped to 32 bits: "
                "enable 64-bit types with jax.config.update('jax_enable_x64', True) to keep "
                "them, or pass values that fit.")


def fast_call(fn: JitFunction) -> Callable[..., Any]:
    """The ``__call__`` of a stateless ``fn`` on its fast path: check the type of each
    argument (a set lookup: nothing more for JAX arrays and floats), then call JAX's
    dispatch.

    A function of plain parameters (``def f(x, w, b)``, no defaults, no static arguments)
    gets a wrapper with exactly its parameters, written for it: packing and unpacking
    ``*args, **kwargs`` would cost three times what its type tests cost.
    """
    jitted = fn._stateless
    slow = fn._slow_call  # for new arguments that make variables (NeedsState)
    names = _plain_parameters(fn)
    if names is None:
        def call(*args: Any, **kwargs: Any) -> Any:
            for arg in args:
                if type(arg) not in _UNCHANGED:
                    check_arguments(fn, args, kwargs)
                    break
            else:
                if kwargs:
                    check_arguments(fn, args, kwargs)
            try:
                return jitted(*args, **kwargs)
            except NeedsState:
                return slow(*args, **kwargs)

        return call
    listed = ", ".join(names)
    lines = [f"def call({listed}):"]
    if names:
        test = " or ".join(f"_ipuxl_type({name}) not in _ipuxl_unchanged" for name in names)
        lines += [f"    if {test}:",
                  f"        _ipuxl_check(_ipuxl_fn, ({listed},), {{}})"]
    lines += ["    try:",
              f"        return _ipuxl_jitted({listed})",
              "    except _ipuxl_needs_state:",
              f"        return _ipuxl_slow({listed})"]
    namespace = {"_ipuxl_type": type, "_ipuxl_unchanged": _UNCHANGED,
                 "_ipuxl_check": check_arguments, "_ipuxl_fn": fn, "_ipuxl_jitted": jitted,
                 "_ipuxl_needs_state": NeedsState, "_ipuxl_slow": slow}
    exec("\n".join(lines), namespace)  # the source holds parameter names only
    call = namespace["call"]
    call.__name__, call.__qualname__ = fn.__name__, getattr(fn, "__qualname__", fn.__name__)
    return call


def _plain_parameters(fn: JitFunction) -> list[str] | None:
    """The parameter names of ``fn``'s function when all are plain (positional or keyword,
    no default) and none is static; None otherwise."""
    if fn._static_argnums or fn._static_argnames:
        return None
    try:
        parameters = list(inspect.signature(fn._fn).parameters.values())
    except (TypeError, ValueError):
        return None
    plain = all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and p.default is p.empty
                and p.name.isidentifier() and not p.name.startswith("_ipuxl_")
                for p in parameters)
    return [p.name for p in parameters] if plain and len(parameters) <= 16 else None


def _may_wrap(leaf: Any) -> bool:
    """Whether JAX's 32-bit mode could change ``leaf``'s value; remembers the types it
    never changes."""
    kind = type(leaf)
    if kind in _UNCHANGED:
        return False
    if kind is int:
        return not _INT32[0] <= leaf < _INT32[1]
    if isinstance(leaf, (np.ndarray, np.generic)):
        if leaf.dtype in _NARROWED:
            return True
        if kind is not np.ndarray:
            _UNCHANGED.add(kind)  # a NumPy scalar type has one dtype
        return False
    if isinstance(leaf, jax.Array):  # no JAX array holds 64 bits in 32-bit mode
        _UNCHANGED.add(kind)
    return False
