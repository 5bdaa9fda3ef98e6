"""``@ipuxl.jit``: run a PopXL-style model function like a ``jax.jit`` function.

::

    @ipuxl.jit
    def layer(x, w, b):              # x, w, b arrive as ipuxl Tensors
        return ops.gelu(x @ w + b)

    y = layer(x, w, b)               # NumPy or JAX arrays in, JAX arrays out
    print(layer.lower(x, w, b).ir)   # the Ir built for these shapes and dtypes

How it works. A :class:`JitFunction` wraps ``jax.jit`` of a function that, when JAX traces
it, builds an ipuxl Ir for the abstract signature of the call and runs the Ir's lowered
step on JAX's tracers:

* every array leaf of the arguments (any pytree) becomes an h2d stream and a
  ``host_load`` in the Ir's main graph, named after its path (``x``, ``params['w']``);
  the function is called with those Tensors (static arguments as they are), and every
  Tensor of its output pytree is stored to a d2h stream;
* :func:`ipuxl.lowering.lower_ir` lowers the Ir to ``step(state, constants, inputs)``, the
  same function a Session compiles;
* JAX caches the compiled executable per signature and calls it through its C++
  dispatch, so a steady call costs what a ``jax.jit`` call costs. The Irs are kept in a
  bounded cache (``cache_size``); :attr:`JitFunction.trace_count` counts Ir builds.
* XLA's compile options come from :mod:`ipuxl.xla_options`, chosen once per function
  from the program of its first call (a convolution on the CPU: XLA's own convolutions,
  1.6x faster than YNNPACK's for a 3x3, 64-channel layer; ``benchmarks/jit.py``) and
  kept for every later signature. The first call traces the program with ``jax.jit``'s
  ``trace``, remakes the ``jax.jit`` with ``compiler_options`` when they differ from
  XLA's defaults, and calls it; JAX reuses the trace, so choosing costs no second trace.

Arguments cross the host boundary under ``Session.run``'s rule: a value never changes on
the way in. While JAX's 64-bit mode is off, an int64 or uint64 array, NumPy integer or
Python int that does not fit 32 bits raises ``ValueError`` (JAX would wrap it:
``2**40 + 1`` becomes ``1``); see :mod:`ipuxl.jit_dispatch`.

State. Variables the function creates (``popxl.variable``, in the main graph as in
PopXL) are the function's state: made on the first call from their initial values, kept
on the device between calls (donated, updated in place by PopXL's in-place ops and
``var_updates``), shared by every signature that creates a variable of the same name, and
read back with :attr:`JitFunction.variables`. A stateless function has no state argument
at all. Calls of a stateful function take turns (a lock, as ``Session.run`` has): each
call donates the state the previous one made, so two at once would consume the same
buffers. Stateless calls never wait.

``device="ipu_model"`` also runs the IPU model (:mod:`ipuxl.sim`) once per signature:
``fn.report(*args)`` returns its estimate, and a signature that does not fit raises
``popart.OutOfMemoryException`` on its first call.
"""

from __future__ import annotations

import collections
import functools
import inspect
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import api_util, tree_util

from ipuxl import dtypes, host_values, profiling, xla_options
from ipuxl.context import BUILDING_HOOKS, get_current_context
from ipuxl.ir import Ir
from ipuxl.jit_dispatch import NeedsState as _NeedsState
from ipuxl.jit_dispatch import check_arguments, fast_call
from ipuxl.lowering import Function, host_to_device_array, lower_function
from ipuxl.module import Module
from ipuxl.ops.host_io import host_load, host_store
from ipuxl.streams import d2h_stream, h2d_stream
from ipuxl.tensor import Tensor
from ipuxl.verify import verify_ir

__all__ = ["jit", "JitFunction", "Lowered"]

DEFAULT_CACHE_SIZE = 64


@dataclass
class _Built:
    """One signature's Ir, its lowered function and the structure of its outputs."""

    ir: Ir
    program: Function
    output_tree: Any
    report: Any = None

    @property
    def variable_names(self) -> tuple[str, ...]:
        return tuple(v.id for v in self.program.variables)


@dataclass(frozen=True)
class Lowered:
    """What ``fn.lower(*args)`` returns: the Ir built for those arguments, its lowered
    program and JAX's lowering (``.jax``; ``.compile()`` compiles it)."""

    ir: Ir
    program: Function
    jax: Any
    report: Any = None

    def compile(self) -> Any:
        return self.jax.compile()


class JitFunction:
    """A jitted model function (see the module docstring and :func:`jit`)."""

    def __init__(self, fn: Callable[..., Any], *, static_argnums: int | Sequence[int] = (),
                 static_argnames: str | Sequence[str] = (),
                 donate_argnums: int | Sequence[int] = (), device: str = "cpu",
                 cache_size: int = DEFAULT_CACHE_SIZE):
        if isinstance(fn, Module):
            fn = fn.build
        if not callable(fn):
            raise TypeError(f"ipuxl.jit takes a function or a popxl.Module; got "
                            f"{type(fn).__name__}: {fn!r}.")
        from ipuxl.sim.device import is_ipu_model

        if device != "cpu" and not is_ipu_model(device):
            raise ValueError(
                f"ipuxl.jit: device must be 'cpu', 'ipu_model' or an IPU model device "
                f"(popart.DeviceManager().createIpuModelDevice(...)); got {device!r}."
            )
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._positional = positional_names(fn)
        self._static_argnums = _as_tuple(
            host_values.axes_argument("static_argnums", static_argnums, _JIT))
        self._static_argnames = _str_tuple("static_argnames", static_argnames)
        self._donate_argnums = _as_tuple(
            host_values.axes_argument("donate_argnums", donate_argnums, _JIT))
        self._device = device
        self._cache_size = _checked_cache_size(cache_size)
        self._builds: collections.OrderedDict[Any, _Built] = collections.OrderedDict()
        self.trace_count = 0
        self._per_instance: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._state: dict[str, jax.Array] = {}
        # Held by stateful calls (they donate the state), by Ir builds (the cache) and by
        # reads of the state; stateless calls run without it.
        self._lock = threading.RLock()
        # XLA's compile options (ipuxl.xla_options), chosen from the first call's program.
        # The traced functions are bound once: JAX reuses a trace for the same function
        # object, so the jax.jit made with the options does not trace again.
        self._traced = (self._trace_stateless, self._trace_stateful)
        self._options: dict[str, str] = {}
        self._options_chosen = False
        self._make_jits()
        self._call: Callable[..., Any] = self._stateless
        self._fast_class: type | None = None

    def _make_jits(self) -> None:
        """The ``jax.jit`` of each path (stateless, stateful), compiling with the options."""
        options = self._options or None
        self._stateless = jax.jit(self._traced[0], static_argnums=self._static_argnums,
                                  static_argnames=self._static_argnames,
                                  donate_argnums=self._donate_argnums,
                                  compiler_options=options)
        shifted = tuple(i + 1 for i in self._static_argnums)
        self._stateful = jax.jit(self._traced[1], static_argnums=shifted,
                                 static_argnames=self._static_argnames,
                                 donate_argnums=(0, *(i + 1 for i in self._donate_argnums)),
                                 compiler_options=options)

    # ----------------------------------------------------------------- calling
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        check_arguments(self, args, kwargs)
        try:
            result = (self._call(*args, **kwargs) if self._options_chosen
                      else self._first_call(args, kwargs))
        except _NeedsState as need:
            with self._lock:
                self._add_state(need.built)
            return self._first_call(args, kwargs)  # chooses the options unless chosen
        except TypeError:
            # Called with Tensors, from inside another jitted function or a graph being
            # built: trace the function into that graph, as nested jax.jit calls inline.
            if any(isinstance(leaf, Tensor) for leaf in tree_util.tree_leaves((args, kwargs))):
                return self._fn(*args, **kwargs)
            raise
        if self._call is self._stateless and not get_current_context().graphs:
            self._go_fast()
        return result

    def _slow_call(self, *args: Any, **kwargs: Any) -> Any:
        """A call on the Python path (the fast path's way out)."""
        return JitFunction.__call__(self, *args, **kwargs)

    def _first_call(self, args: tuple, kwargs: dict) -> Any:
        """Choose the XLA options from this call's program (JAX keeps the trace, so the
        call does not trace again), then call; where the jaxlib refuses them, call with
        XLA's defaults."""
        self._choose_options(args, kwargs)
        try:
            return self._call(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - XLA's error type varies by version
            if not xla_options.refused(error, self._options):
                raise
            with self._lock:
                self._use_options({})
            return self._call(*args, **kwargs)

    def _choose_options(self, args: tuple, kwargs: dict) -> None:
        """Trace this call's program and compile the function, from now on, with the
        options :func:`ipuxl.xla_options.for_jaxpr` gives it (a program with a
        convolution, on the CPU: XLA's own convolutions rather than YNNPACK's)."""
        with self._lock:
            if self._options_chosen:
                return
            if self._call is self._stateless:
                traced = self._stateless.trace(*args, **kwargs)
            else:
                traced = self._stateful.trace(self._state, *args, **kwargs)
            self._use_options(xla_options.for_jaxpr(traced.jaxpr, jax.default_backend()))
            self._options_chosen = True

    def _use_options(self, options: dict[str, str]) -> None:
        if options == self._options:
            return
        stateless = self._call is self._stateless
        self._options = options
        self._make_jits()
        if stateless:
            self._call = self._stateless
        self._fast_class = None  # it calls the jax.jit it was made with

    # A stateless function, once called, takes the fast path: its class becomes one whose
    # __call__ looks at the argument types and hands the call to JAX's C++ dispatch (see
    # jit_dispatch.fast_call). While a program is being built, every such function goes back to the
    # Python path.
    def _go_fast(self) -> None:
        if self._fast_class is None:
            self._fast_class = type(type(self).__name__, (JitFunction,),
                                    {"__call__": staticmethod(fast_call(self))})
        self.__class__ = self._fast_class
        _FAST.add(self)

    def _go_slow(self) -> None:
        self.__class__ = JitFunction

    def _call_stateful(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            outputs, self._state = self._stateful(self._state, *args, **kwargs)
        return outputs

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        """``@ipuxl.jit`` on a method (of a ``popxl.Module``, say): one jitted function,
        with its own variables, per instance."""
        if instance is None:
            return self
        bound = self._per_instance.get(instance)
        if bound is None:
            bound = self._per_instance[instance] = JitFunction(
                functools.partial(self._fn, instance), static_argnums=self._static_argnums,
                static_argnames=self._static_argnames, donate_argnums=self._donate_argnums,
                device=self._device, cache_size=self._cache_size)
            bound.__name__ = self.__name__
        return bound

    def _add_state(self, built: _Built) -> None:
        """Add the variables ``built`` creates (their initial values) to the state."""
        _check_state_types(built, self._state)
        for variable in built.program.variables:
            if variable.id not in self._state:
                self._state[variable.id] = jnp.asarray(host_to_device_array(variable._data))
        self._call = self._call_stateful

    @property
    def variables(self) -> dict[str, np.ndarray]:
        """The function's variables (by name) as NumPy arrays, as of the last call that
        finished: a snapshot, read between calls (a call running in another thread is
        waited for), that later calls leave as it is."""
        with self._lock:
            return {name: np.array(value) for name, value in self._state.items()}

    # ----------------------------------------------------------------- tracing
    def _trace_stateless(self, *args: Any, **kwargs: Any) -> Any:
        built = self._built_for(args, kwargs)
        if built.program.variables:
            self._go_slow()
            _FAST.discard(self)
            raise _NeedsState(built)
        outputs, _ = self._run(built, {}, args, kwargs)
        return outputs

    def _trace_stateful(self, state: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        built = self._built_for(args, kwargs)
        if any(name not in state for name in built.variable_names):
            raise _NeedsState(built)
        _check_state_types(built, state)
        return self._run(built, state, args, kwargs)

    def _run(self, built: _Built, state: dict[str, Any], args: tuple, kwargs: dict
             ) -> tuple[Any, dict[str, Any]]:
        program = built.program
        if program.uses_64bit and not jax.config.jax_enable_x64:
            raise TypeError(
                f"{self.__name__}: the Ir uses 64-bit tensors, but JAX runs in 32-bit mode. "
                "Enable 64-bit types with jax.config.update('jax_enable_x64', True), as for "
                "jax.jit, or use 32-bit dtypes."
            )
        leaves = self._dynamic_leaves(args, kwargs)[0]
        constants = tuple(jnp.asarray(host_to_device_array(c._data))
                          for c in program.arg_constants)
        old = tuple(state[v.id] for v in program.variables)
        new_state, out_leaves = program.call(old, constants, tuple(leaves))
        updated = dict(state)
        updated.update(zip(built.variable_names, new_state))
        return tree_util.tree_unflatten(built.output_tree, out_leaves), updated

    def _dynamic_leaves(self, args: tuple, kwargs: dict) -> tuple[list[Any], list[str], Any]:
        """The array leaves of the non-static arguments, their names (``x``,
        ``params['w']``: the parameter and the path in it), and the structure to put
        Tensors back in."""
        positions = [i for i in range(len(args)) if i not in self._static_argnums]
        dynamic = ([args[i] for i in positions],
                   {k: v for k, v in kwargs.items() if k not in self._static_argnames})
        with_paths, tree = tree_util.tree_flatten_with_path(dynamic)
        names = []
        for path, _ in with_paths:
            if path[0].idx == 0:  # positional: name it after its parameter
                index = positions[path[1].idx]
                head = (self._positional[index] if index < len(self._positional)
                        else f"arg{index}")
            else:
                head = str(path[1].key)
            names.append(head + tree_util.keystr(path[2:]))
        return [leaf for _, leaf in with_paths], names, tree

    def _key(self, args: tuple, kwargs: dict) -> Any:
        leaves, _, tree = self._dynamic_leaves(args, kwargs)
        avals = tuple(_aval_key(leaf) for leaf in leaves)
        statics = (tuple(args[i] for i in self._static_argnums if i < len(args)),
                   tuple(sorted((k, v) for k, v in kwargs.items()
                                if k in self._static_argnames)))
        return tree, avals, statics

    def _built_for(self, args: tuple, kwargs: dict) -> _Built:
        key = self._key(args, kwargs)
        with self._lock:  # JAX may trace one function in several threads at once
            built = self._builds.get(key)
            if built is None:
                built = self._build(args, kwargs)
                self._builds[key] = built
                while len(self._builds) > self._cache_size:
                    self._builds.popitem(last=False)
            else:
                self._builds.move_to_end(key)
        return built

    def _build(self, args: tuple, kwargs: dict) -> _Built:
        """Trace the user's function into a new Ir for these arguments' types."""
        start = time.perf_counter()
        built = self._build_ir(args, kwargs)
        if profiling.ACTIVE:
            profiling.record("jit", f"build {self.__name__}", start, time.perf_counter(),
                             ops=sum(len(g.ops) for g in built.ir.graphs))
            if built.report is not None:
                profiling.record_report(self.__name__, built.report)
        return built

    def _build_ir(self, args: tuple, kwargs: dict) -> _Built:
        self.trace_count += 1
        leaves, names, tree = self._dynamic_leaves(args, kwargs)
        ir = Ir()
        tensors, results, made = [], [], []
        with ir.main_graph:
            for leaf, name in zip(leaves, names):
                aval = api_util.shaped_abstractify(leaf)
                stream = h2d_stream(aval.shape, dtypes.dtype.as_dtype(aval.dtype), name=name)
                tensors.append(host_load(stream, _short(name)))
                made.append(tensors[-1]._producer)
            dynamic_args, dynamic_kwargs = tree_util.tree_unflatten(tree, tensors)
            call_args = list(dynamic_args)
            for i in sorted(self._static_argnums):
                if i < len(args):
                    call_args.insert(i, args[i])
            call_kwargs = {**dynamic_kwargs,
                           **{k: v for k, v in kwargs.items() if k in self._static_argnames}}
            result = self._fn(*call_args, **call_kwargs)
            out_tree = tree_util.tree_structure(result)
            for path, leaf in tree_util.tree_flatten_with_path(result)[0]:
                if not isinstance(leaf, Tensor):
                    raise TypeError(
                        f"{self.__name__}: an @ipuxl.jit function returns Tensors (in any "
                        f"pytree); the output at {tree_util.keystr(path) or 'the top'} is "
                        f"{type(leaf).__name__}: {leaf!r}. Make it a tensor, e.g. "
                        "popxl.constant(value)."
                    )
                stream = d2h_stream(leaf.shape, leaf.dtype,
                                    name="out" + tree_util.keystr(path))
                host_store(stream, leaf)
                results.append(leaf)
                made.append(ir.main_graph.ops[-1])
        verify_ir(ir)
        # The loads and stores made here stand for the arguments and results (they show
        # in the printed Ir and cost host transfers on the IPU model); the executable
        # binds and returns the tensors directly.
        _check_no_other_transfers(ir, frozenset(made), self.__name__)
        built = _Built(ir, lower_function(ir, tensors, results, frozenset(made)), out_tree)
        if self._device != "cpu":
            from ipuxl import sim
            from ipuxl.sim import oom

            built.report = sim.estimate(ir, self._device)
            oom.check_fits(built.report, False)
        return built

    # ----------------------------------------------------------------- inspection
    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """The Ir built for these arguments (built now if it is not cached), its program
        and JAX's lowering."""
        built = self._built_for(args, kwargs)
        with self._lock:
            if built.program.variables and self._call is self._stateless:
                self._add_state(built)
            self._choose_options(args, kwargs)
            if self._call is self._stateless:
                lowered = self._stateless.lower(*args, **kwargs)
            else:
                lowered = self._stateful.lower(self._state, *args, **kwargs)
        return Lowered(built.ir, built.program, lowered, built.report)

    def report(self, *args: Any, **kwargs: Any) -> Any:
        """The IPU model's estimate for these arguments (``device="ipu_model"`` only)."""
        if self._device == "cpu":
            raise ValueError(
                f"{self.__name__} was jitted for device {self._device!r}; the IPU model "
                "report needs ipuxl.jit(..., device='ipu_model')."
            )
        return self._built_for(args, kwargs).report

    def __repr__(self) -> str:
        return f"<ipuxl.jit of {getattr(self._fn, '__qualname__', self._fn)!r}>"


def jit(fn: Callable[..., Any] | None = None, *, static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (), donate_argnums: int | Sequence[int] = (),
        device: str = "cpu", cache_size: int = DEFAULT_CACHE_SIZE) -> Any:
    """Jit a model function written with ipuxl ops (see the module docstring).

    Args:
        fn: called with ipuxl Tensors in place of the array leaves of its arguments;
            returns a Tensor or a pytree of Tensors.
        static_argnums, static_argnames: arguments passed as Python values (hashable); a
            new value builds a new Ir, as in ``jax.jit``.
        donate_argnums: arguments whose buffers the call may reuse (as ``jax.jit``).
        device: ``"cpu"``, or ``"ipu_model"`` or a device from
            ``popart.DeviceManager().createIpuModelDevice(...)``: also estimate each
            signature on the IPU model (``fn.report(*args)``).
        cache_size: Irs kept (least recently used dropped first), at least 1.

    Returns:
        A :class:`JitFunction` (or a decorator, when ``fn`` is not given).

    Raises:
        TypeError: ``fn`` is not callable; an argument number or ``cache_size`` is not an
            int; an argument name is not a string.
        ValueError: ``cache_size`` is below 1; ``device`` is not a known device.
    """
    if fn is None:
        return functools.partial(jit, static_argnums=static_argnums,
                                 static_argnames=static_argnames,
                                 donate_argnums=donate_argnums, device=device,
                                 cache_size=cache_size)
    if isinstance(fn, Module) and isinstance(fn.build, JitFunction):
        return fn.build  # its build method is jitted already (per instance)
    return JitFunction(fn, static_argnums=static_argnums, static_argnames=static_argnames,
                       donate_argnums=donate_argnums, device=device, cache_size=cache_size)


_FAST: weakref.WeakSet[JitFunction] = weakref.WeakSet()
_JIT = "ipuxl.jit"


def _while_building(building: bool) -> None:
    for fn in list(_FAST):
        if building:
            fn._go_slow()
        else:
            fn._go_fast()


BUILDING_HOOKS.append(_while_building)


def _check_state_types(built: _Built, state: dict[str, Any]) -> None:
    """The variables of every signature keep one type (they are one state)."""
    for variable in built.program.variables:
        known = state.get(variable.id)
        spec = (tuple(variable.shape), np.dtype(variable.dtype.jax_dtype))
        if known is not None and (tuple(known.shape), np.dtype(known.dtype)) != spec:
            raise ValueError(
                f"ipuxl.jit: the variable `{variable.id}` is {variable.dtype.name}"
                f"{list(variable.shape)} for these arguments but {np.dtype(known.dtype).name}"
                f"{list(known.shape)} for earlier ones. Variables of a jitted function keep "
                "one type: give them different names."
            )


_TRANSFERS = ("host_load", "host_store", "remote_load", "remote_load_", "remote_store")


def _check_no_other_transfers(ir: Ir, made: frozenset[Any], name: str) -> None:
    """A jitted function takes arrays and returns arrays: refuse streams and remote
    buffers of its own."""
    for graph in ir.graphs:
        for op in graph.ops:
            if op.name in _TRANSFERS and op not in made:
                file, line = op.location
                raise ValueError(
                    f"{name}: `{op.name}` at {file}:{line} moves data to or from the host, "
                    "but an @ipuxl.jit function takes its data as arguments and returns its "
                    "results. Pass the value as an argument (or return it), or build a "
                    "popxl.Session for programs with streams and remote buffers."
                )


def _aval_key(leaf: Any) -> Any:
    aval = api_util.shaped_abstractify(leaf)
    return aval.shape, str(aval.dtype), bool(getattr(aval, "weak_type", False))


def _short(name: str) -> str:
    """A tensor name from a leaf path: ``params['w']`` -> ``params_w``."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name).strip("_")
    while "__" in out:
        out = out.replace("__", "_")
    return out or "arg"


def positional_names(fn: Callable[..., Any]) -> list[str]:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in parameters if p.kind in kinds]


def _as_tuple(value: int | tuple[int, ...] | None) -> tuple[int, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, int) else value


def _str_tuple(name: str, value: str | Sequence[str]) -> tuple[str, ...]:
    names = (value,) if isinstance(value, (str, int)) else tuple(value)
    for entry in names:
        if not isinstance(entry, str):
            raise TypeError(
                f"{_JIT}: `{name}` must be a string or a sequence of strings (parameter "
                f"names), got {type(entry).__name__} {entry!r}. Pass the names as strings, "
                "or the positions as static_argnums."
            )
    return names


def _checked_cache_size(value: Any) -> int:
    size = host_values.index_argument("cache_size", value, _JIT)
    if size < 1:
        raise ValueError(
            f"{_JIT}: `cache_size` is the number of Irs kept (least recently used dropped "
            f"first) and must be at least 1; got {size}. Pass a positive int, such as the "
            f"default {DEFAULT_CACHE_SIZE}."
        )
    return size
