"""The table of ONNX operators ipuxl imports: one rule per (domain, operator, version).

An ONNX operator is declared once, as a JAX function of its inputs with the ONNX
attributes as keyword arguments::

    @onnx_op("Gemm", kind="matmul")
    def gemm(a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
        ...

The declaration makes an :class:`ipuxl.op.OpDef` named ``onnx.Gemm-1`` (the version is
the rule's ``since``), whose type rule is ``jax.eval_shape`` of the function and whose
lowering is the function itself, so an imported node is an ordinary ipuxl op: it prints,
verifies, differentiates (``jax.vjp`` of the function) and lowers like any other.

* ``since``: the first opset version the rule implements; the importer picks the rule
  with the highest ``since`` not above the model's opset for the domain.
* ``static``: inputs that must be known when the model is imported (shapes, axes, pads,
  ``k`` of TopK...): the function receives them as NumPy arrays.
* ``value_dependent``: the output *shape* depends on input values (NonZero, Unique...):
  every input must be known at import time and the node is evaluated then.
* ``kind``: the IPU model's cost family (see :mod:`ipuxl.sim.op_costs`).
* ``check``: ``check(names, values, attrs)``, called with the node's input names and
  values (a NumPy array where the value is known at import, a tensor otherwise) before
  the node is built; it raises ``IndexError`` or ``ValueError`` for known values the
  operator would silently clamp or misread (constant indices out of range).
* Missing optional inputs arrive as ``None``; a function with a ``num_outputs`` keyword
  gets the node's output count.
* ``random``: the operator draws random numbers (RandomNormal, Dropout...). Imported on
  its own (plain ONNX) it draws with its ``seed`` attribute's key and, without tensor
  inputs, is folded at import like any node. An importer given a session's seed
  (:class:`ipuxl.onnx.importer.RandomDraws`) never folds it and passes the function a
  ``key`` keyword: a uint32 ``(2,)`` key, different for each node, micro-batch and
  replica (:func:`draw_key` makes the JAX key). A function with a ``training`` keyword
  gets whether the importer's PopART session trains (Dropout is the identity in
  inference), and nothing (ONNX's own rule) outside sessions. Keywords a PopART session
  gives (:mod:`ipuxl.onnx.session_keywords`) are not ONNX attributes.

Operators that need the importer itself (``If``, ``Loop``, ``Scan`` import subgraphs)
are declared with :func:`onnx_converter` instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np

from ipuxl import dtypes
from ipuxl.onnx import channels_last
from ipuxl.onnx.session_keywords import SESSION_KEYWORDS
from ipuxl.op import OpDef
from ipuxl.tensor import TensorSpec

__all__ = ["Rule", "onnx_op", "onnx_converter", "find_rule", "rules", "ONNX_DOMAIN",
           "canonical_domain", "draw_key"]

ONNX_DOMAIN = "ai.onnx"
_SHORT = {"ai.onnx": "onnx", "ai.graphcore": "graphcore", "ai.onnx.ml": "onnx_ml",
          "ai.onnx.preview.training": "onnx_training", "com.microsoft": "ms"}


def canonical_domain(domain: str) -> str:
    """ONNX writes the default domain as ``""`` or ``"ai.onnx"``."""
    return domain or ONNX_DOMAIN


@dataclass(eq=False)
class Rule:
    """How one version range of one operator is imported."""

    op_type: str
    domain: str
    since: int
    fn: Callable[..., Any] | None = None
    convert: Callable[..., Any] | None = None
    static: frozenset[int] = frozenset()
    value_dependent: bool = False
    kind: str = "elementwise"
    attributes: frozenset[str] = frozenset()
    takes_num_outputs: bool = False
    check: Callable[..., None] | None = None
    random: bool = False
    takes_training: bool = False
    operand_layouts: Callable[[Any], Any] | None = None
    types: Callable[..., list[TensorSpec] | None] | None = None
    grad: Callable[..., Any] | None = None
    opdef: OpDef | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"{_SHORT.get(self.domain, self.domain)}.{self.op_type}-{self.since}"


_RULES: dict[tuple[str, str], list[Rule]] = {}


# The IPU model's cost families (ipuxl.sim.op_costs), and the names the operator modules
# may also use for readability: normalizations cost like reductions, pools and resizes
# like PopXL's own pool and interpolate ops.
FAMILIES = frozenset({"view", "elementwise", "random", "copy", "matmul", "conv", "reduce",
                      "gather", "host", "remote", "collective"})
_ALIASES = {"norm": "reduce", "pool": "elementwise", "resize": "elementwise"}


def _family(kind: str) -> str:
    family = _ALIASES.get(kind, kind)
    if family not in FAMILIES:
        raise ValueError(f"ipuxl internal error: cost kind {kind!r} is not one of "
                         f"{sorted(FAMILIES | set(_ALIASES))}.")
    return family


def _register(rule: Rule) -> None:
    versions = _RULES.setdefault((rule.domain, rule.op_type), [])
    if any(r.since == rule.since for r in versions):
        raise ValueError(f"ipuxl internal error: {rule.name} is declared twice.")
    versions.append(rule)
    versions.sort(key=lambda r: r.since)


# The keywords a random rule gets from the importer, which are not ONNX attributes.
_RANDOM_KEYWORDS = frozenset({"key", "training"})


def _keyword_names(fn: Callable[..., Any], random: bool) -> tuple[frozenset[str], bool]:
    params = inspect.signature(fn).parameters.values()
    names = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
    if random:
        names -= _RANDOM_KEYWORDS
    names -= SESSION_KEYWORDS  # given by a PopART session, never a node attribute
    # Split-18 has an ONNX attribute named num_outputs too: accepted (ONNX's checker
    # requires it to equal the node's output count, which is what the function receives).
    return frozenset(names), "num_outputs" in names


def onnx_op(op_type: str, *, since: int | Sequence[int] = 1, domain: str = "",
            static: Sequence[int] = (), value_dependent: bool = False,
            kind: str = "elementwise", check: Callable[..., None] | None = None,
            random: bool = False, operand_layouts: Callable[[Any], Any] | None = None,
            types: Callable[..., list[TensorSpec] | None] | None = None,
            grad: Callable[..., Any] | None = None
            ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare ``fn(*inputs, **attributes)`` as the rule for ``op_type`` (see the module
    docstring). ``since`` may list several versions that share the function.
    ``operand_layouts`` is the op's :attr:`ipuxl.op.OpDef.operand_layouts`; ``types``
    states the output types without tracing (:mod:`ipuxl.onnx.type_rules`); ``grad`` is
    the op's :attr:`ipuxl.op.OpDef.grad` (default: ``jax.vjp`` of the function)."""

    def declare(fn: Callable[..., Any]) -> Callable[..., Any]:
        attributes, takes = _keyword_names(fn, random)
        takes_training = random and "training" in inspect.signature(fn).parameters
        for version in (since,) if isinstance(since, int) else since:
            rule = Rule(op_type, canonical_domain(domain), version, fn=fn,
                        static=frozenset(static), value_dependent=value_dependent,
                        kind=_family(kind), attributes=attributes, takes_num_outputs=takes,
                        check=check, random=random, takes_training=takes_training,
                        operand_layouts=operand_layouts, types=types, grad=grad)
            rule.opdef = _make_opdef(rule)
            _register(rule)
        return fn

    return declare


def onnx_converter(op_type: str, *, since: int | Sequence[int] = 1, domain: str = "",
                   attributes: Sequence[str] = ()) -> Callable[..., Any]:
    """Declare ``convert(ctx) -> [output values]`` for an operator that needs the importer
    (``ctx`` is an :class:`ipuxl.onnx.importer.NodeContext`)."""

    def declare(convert: Callable[..., Any]) -> Callable[..., Any]:
        for version in (since,) if isinstance(since, int) else since:
            _register(Rule(op_type, canonical_domain(domain), version, convert=convert,
                           attributes=frozenset(attributes)))
        return convert

    return declare


def rules() -> dict[tuple[str, str], list[Rule]]:
    """Every declared rule, by (domain, operator), versions in order."""
    _load_all()
    return _RULES


def find_rule(domain: str, op_type: str, opset: int) -> Rule | None:
    """The rule for ``op_type`` at ``opset`` (the newest version not above it), else the
    rule of a custom op declared in Python with that domain and type
    (:mod:`ipuxl.custom_ops`; ``popart.Builder.customOp`` writes such nodes)."""
    _load_all()
    found = None
    for rule in _RULES.get((canonical_domain(domain), op_type), ()):
        if rule.since <= opset:
            found = rule
    if found is None:
        from ipuxl.custom_ops.onnx_rules import custom_op_rule

        found = custom_op_rule(canonical_domain(domain), op_type, opset)
    return found


def _load_all() -> None:
    import ipuxl.onnx.ops  # noqa: F401 - declares every rule


# ---------------------------------------------------------------------------- the OpDef
def call_rule(rule: Rule, arrays: Sequence[Any], slots: str | None, static: Sequence[Any],
              attrs: dict[str, Any]) -> Any:
    """Call the rule's function with the node's inputs in ONNX order: ``slots`` has one
    letter per input, ``t`` (next of ``arrays``), ``s`` (next of ``static``) or ``-``
    (absent: None); None means every input is a tensor. With ``keyed`` among ``attrs``
    (a random rule imported with a session's seed), the last array is the ``key``."""
    if attrs.get("keyed"):
        *arrays, key = arrays
        attrs = {**{k: v for k, v in attrs.items() if k != "keyed"}, "key": key}
    if slots is None:
        return rule.fn(*arrays, **attrs)
    values: list[Any] = []
    tensors, statics = iter(arrays), iter(static)
    for slot in slots:
        values.append(next(tensors) if slot == "t" else next(statics) if slot == "s" else None)
    while values and values[-1] is None:
        values.pop()
    return rule.fn(*values, **attrs)


_KNOWN_TYPES_LIMIT = 4096  # signatures remembered per rule


def signature(tensors: Sequence[Any], slots: str | None, static: tuple,
               attrs: dict[str, Any]) -> Any:
    """A hashable key of everything a rule's output types depend on, or None when an
    attribute is not plain data (a subgraph, a function): then the types are traced."""
    def frozen(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return ("array", value.dtype.str, value.shape, value.tobytes())
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, *(frozen(v) for v in value))
        if isinstance(value, (str, int, float, bool, bytes, type(None), np.generic)):
            return (type(value).__name__, value)
        raise TypeError(type(value).__name__)

    try:
        return (tuple((tuple(t.shape), t.dtype.name) for t in tensors), slots,
                frozen(static), tuple(sorted((k, frozen(v)) for k, v in attrs.items())))
    except TypeError:
        return None


def _make_opdef(rule: Rule) -> OpDef:
    def lower(*arrays: Any, slots: str | None = None, static: tuple = (), **attrs: Any) -> Any:
        if rule.domain == "ai.onnx":  # a convolution network's path, traced channels-last
            result = channels_last.lower(
                rule.op_type, lambda given: call_rule(rule, given, slots, static, attrs),
                arrays, slots, attrs)
            if result is not None:
                return result
        result = call_rule(rule, arrays, slots, static, attrs)
        return tuple(result) if isinstance(result, (list, tuple)) else result

    # Output types by signature: a model repeats the same node signature many times (the
    # blocks of a ResNet), and tracing one costs about a millisecond.
    known_types: dict[Any, list[TensorSpec]] = {}

    def infer(*tensors: Any, slots: str | None = None, static: tuple = (), **attrs: Any
              ) -> list[TensorSpec]:
        if rule.types is not None:
            stated = rule.types(tensors, slots, attrs)
            if stated is not None:
                return stated
        key = signature(tensors, slots, static, attrs)
        if key is not None and key in known_types:
            return list(known_types[key])
        specs = [jax.ShapeDtypeStruct(t.shape, t.dtype.jax_dtype) for t in tensors]
        with jax.enable_x64(True):
            out = jax.eval_shape(lambda *a: lower(*a, slots=slots, static=static, **attrs),
                                 *specs)
        outs = out if isinstance(out, tuple) else (out,)
        types = [TensorSpec(tuple(o.shape), dtype_of(o.dtype)) for o in outs]
        if key is not None and len(known_types) < _KNOWN_TYPES_LIMIT:
            known_types[key] = types
        return list(types)

    return OpDef(rule.name, infer=infer, lower=lower, cost_kind=rule.kind,
                 operand_layouts=rule.operand_layouts, grad=rule.grad)


def draw_key(key: Any, seed: float | None = None) -> Any:
    """The JAX key a random rule draws with: the importer's ``key`` (uint32 ``(2,)``) with
    the replica's index folded in, so each replica draws its own numbers; without one,
    the key of the ONNX ``seed`` attribute (0 when absent)."""
    if key is None:
        return jax.random.PRNGKey(int(seed) if seed is not None else 0)
    from ipuxl.replica_axis import replica_index

    wrapped = jax.random.wrap_key_data(key.astype(np.uint32), impl="threefry2x32")
    return jax.random.fold_in(wrapped, replica_index())


def dtype_of(np_dtype: Any) -> dtypes.dtype:
    """The ipuxl dtype of a NumPy/JAX dtype, with a clear error for one ipuxl lacks."""
    try:
        return dtypes.dtype.as_dtype(np.dtype(np_dtype))
    except (ValueError, TypeError):
        raise TypeError(
            f"ipuxl has no tensor type for {np.dtype(np_dtype)}: the ONNX graph computes a "
            "value of a type ipuxl cannot hold."
        ) from None
