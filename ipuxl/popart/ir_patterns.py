"""PopART's graph rewrites as its IR JSON shows them: ``OpToIdentity``, ``PostNRepl`` and
in-placing (the ``InPlace`` pattern).

ipuxl runs no rewrites (XLA makes its own choices: a value it can update in place it
does), but ``session._serializeIr`` shows the ops PopART's main graph would hold, and
programs count them (``ExpandInplace``, ``IdentityLoss``...). This module turns the list of
imported ops into that view. The values a session computes never depend on it.

* ``OpToIdentity`` (on by default): an op that returns its input unchanged becomes
  ``Identity`` (its gradient op ``IdentityGrad``): an ``IdentityLoss`` of a scalar or
  without reduction, a ``Sum`` or ``Concat`` of one input.
* ``PostNRepl`` (on by default): an ``Identity`` (or ``IdentityGrad``) is removed and its
  readers read its input, unless its output is anchored or the loss, or the op excludes the
  pattern (``builder.excludePatterns``).
* ``InPlace`` (on by default, and with ``Patterns(["InPlace"])``): each op with in-place
  variants (``inplacePriorityDefault``: ``Relu`` -> ``ReluInplace``, ``Add`` ->
  ``AddLhsInplace``/``AddRhsInplace``, the view changes ``Expand``, ``Reshape``,
  ``Transpose``...) is tried in decreasing priority (``builder.setInplacePreferences``
  overrides; 0 or less never), later ops first among equals. A variant is taken when it is
  safe, as PopART's alias model decides: an op that writes its input must not write a
  weight, a constant, an anchor or the loss (nor an alias of one), nor an input that
  another of its inputs aliases; and every op that reads the old value of a written tensor
  (or of an alias of it) must be able to run before the writer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Step", "rewrite", "pattern_enabled"]

# Unary ops whose ``<type>Inplace`` variant overwrites their input (priority 10).
_WRITES_INPUT = frozenset({
    "Relu", "Sigmoid", "Exp", "Expm1", "Log1p", "Asin", "Atan", "Ceil", "Floor", "Round",
    "NearbyInt", "Clip", "Elu", "Gelu", "GeluErf", "HardSigmoid", "LeakyRelu", "LogSoftmax",
    "Softmax", "Selu", "Shrink", "Sinh", "SoftPlus", "Softplus", "SoftSign", "Softsign",
    "Swish", "ThresholdedRelu", "Scale"})
# View changes: ``<type>Inplace`` makes the output an alias of the input (priority).
_VIEWS = {"Expand": 10.0, "Reshape": 10.0, "Transpose": 100.0, "Slice": 10.0,
          "Detach": 10.0, "Reverse": 10.0, "Subsample": 10.0, "Pad": 1.0}
# Binary ops with in-place variants: which sides (when that side is the output's size).
_BINARY = {"Add": ("Lhs", "Rhs"), "Mul": ("Lhs", "Rhs"), "Pow": ("Lhs",),
           "Atan2": ("Lhs",)}
_REDUCTION_NONE = "None"


@dataclass
class Step:
    """One op of the main graph, in schedule order.

    ``entry`` is its IR JSON entry (None for an op the JSON leaves out, a host transfer
    say, which still reads and writes tensors); ``sizes`` the element counts of its inputs
    and outputs; ``excluded`` the patterns ``builder.excludePatterns`` names for it;
    ``preferences`` its ``builder.setInplacePreferences`` priorities; ``forward`` (a
    gradient op's) the index of the step it differentiates, which comes before it;
    ``backward`` whether the op is in the backward pass, which runs after every forward
    op (the gradient of the loss joins them in PopART's graph, not by a tensor here)."""

    entry: dict[str, Any] | None
    inputs: list[str]
    outputs: list[str]
    input_sizes: list[int] = field(default_factory=list)
    output_sizes: list[int] = field(default_factory=list)
    excluded: frozenset[str] = frozenset()
    preferences: dict[str, float] = field(default_factory=dict)
    forward: int | None = None
    backward: bool = False

    @property
    def type(self) -> str | None:
        return None if self.entry is None else self.entry["type"]


def pattern_enabled(patterns: Any, name: str) -> bool:
    """Whether ``patterns`` (a ``popart.Patterns``; None: PopART's default level) has
    ``name`` on (``InPlace`` is its ``inplaceEnabled`` switch)."""
    if patterns is None:
        from ipuxl.popart.patterns import OFF_BY_DEFAULT

        return name not in OFF_BY_DEFAULT
    return bool(patterns.isPatternEnabled(name))


def rewrite(steps: list[Step], patterns: Any, kept: Iterable[str],
            unmodifiable: Iterable[str]) -> list[dict[str, Any]]:
    """The JSON entries of ``steps`` after the patterns ``patterns`` enables. ``kept``:
    the tensors no rewrite may remove (anchors, the loss); ``unmodifiable``: those no op
    may write (``kept``, the weights, the constants)."""
    kept = set(kept)
    if pattern_enabled(patterns, "OpToIdentity"):
        _op_to_identity(steps)
    if pattern_enabled(patterns, "PostNRepl"):
        steps = _post_n_repl(steps, kept)
    if pattern_enabled(patterns, "InPlace"):
        _InPlace(steps, kept | set(unmodifiable)).run()
    return [step.entry for step in steps if step.entry is not None]


# ------------------------------------------------------------------ OpToIdentity, PostNRepl
def _is_identity(step: Step) -> bool:
    """PopART's ``canBeReplacedByIdentity`` for the ops modelled here."""
    kind = step.type
    if kind == "IdentityLoss":
        return (step.entry["attributes"].get("reduction") == _REDUCTION_NONE
                or step.entry["inputs"][0]["shape"] == "[]")
    return kind in ("Sum", "Concat") and len(step.inputs) == 1


def _op_to_identity(steps: list[Step]) -> None:
    replaced = set()
    for index, step in enumerate(steps):
        if step.entry is not None and "OpToIdentity" not in step.excluded \
                and step.forward is None and _is_identity(step):
            step.entry["type"] = "Identity"
            replaced.add(index)
        elif step.forward in replaced:  # PopART differentiates the Identity
            step.entry["type"] = "IdentityGrad"


def _post_n_repl(steps: list[Step], kept: set[str]) -> list[Step]:
    remaining = []
    renamed: dict[str, str] = {}
    for step in steps:
        step.inputs = [renamed.get(name, name) for name in step.inputs]
        if step.entry is not None:
            for slot in step.entry["inputs"]:
                slot["name"] = renamed.get(slot["name"], slot["name"])
        if step.type in ("Identity", "IdentityGrad") and "PostNRepl" not in step.excluded \
                and not kept & set(step.outputs) and len(step.inputs) == 1:
            renamed[step.outputs[0]] = step.inputs[0]
            continue
        remaining.append(step)
    return remaining


# ------------------------------------------------------------------------------- InPlace
@dataclass
class _Variant:
    name: str
    priority: float
    aliased: tuple[int, ...]   # inputs the output aliases
    written: tuple[int, ...]   # inputs the variant overwrites


def _variants(step: Step) -> list[_Variant]:
    """The op's in-place variants with PopART's default priorities."""
    kind = step.type
    if kind is None or not step.inputs or not step.outputs:
        return []
    if kind in _WRITES_INPUT:
        return [_Variant(kind + "Inplace", 10.0, (0,), (0,))]
    if kind in ("Identity", "IdentityGrad"):
        return [_Variant("IdentityInplace", 10.0, (0,), ())]
    if kind in _VIEWS:
        return [_Variant(kind + "Inplace", _VIEWS[kind], (0,), ())]
    if kind == "Concat":
        every = tuple(range(len(step.inputs)))
        return [_Variant("ConcatInplace", 10.0, every, ())]
    if kind in ("DynamicUpdate", "DynamicAdd", "DynamicZero"):
        return [_Variant(kind + "Inplace", 10.0, (0,), (0,))]
    if kind in _BINARY and len(step.inputs) == 2 and step.output_sizes:
        return [_Variant(f"{kind}{side}Inplace", 10.0, (index,), (index,))
                for index, side in enumerate(("Lhs", "Rhs"))
                if side in _BINARY[kind] and step.input_sizes[index] == step.output_sizes[0]]
    return []


class _InPlace:
    """PopART's in-placing pass over ``steps``, on a model of which tensors share memory
    (``groups``), which ops write which tensor (``writers``) and the order constraints
    in-placing adds (``after``)."""

    def __init__(self, steps: list[Step], unmodifiable: set[str]):
        self.steps = steps
        self.unmodifiable = unmodifiable
        self.groups: dict[str, set[str]] = {}
        self.writers: list[tuple[int, str]] = []
        self.after: dict[int, set[int]] = {}   # op -> ops ordered after it
        self.producer = {name: i for i, step in enumerate(steps) for name in step.outputs}
        self.backward = [i for i, step in enumerate(steps) if step.backward]
        self.readers: dict[str, list[int]] = {}
        for i, step in enumerate(steps):
            for name in step.inputs:
                self.readers.setdefault(name, []).append(i)

    def run(self) -> None:
        candidates = []
        for index, step in enumerate(self.steps):
            if "InPlace" in step.excluded:
                continue
            for variant in _variants(step):
                variant.priority = step.preferences.get(variant.name, variant.priority)
                if variant.priority > 0:
                    candidates.append((index, variant))
        candidates.sort(key=lambda c: (-c[1].priority, -c[0]))
        done = set()
        for index, variant in candidates:
            if index not in done and self._try(index, variant):
                done.add(index)
                self.steps[index].entry["type"] = variant.name

    def _group(self, name: str) -> set[str]:
        return self.groups.get(name, {name})

    def _try(self, index: int, variant: _Variant) -> bool:
        step = self.steps[index]
        for i in variant.written:  # an input written while another input aliases it
            group = self._group(step.inputs[i])
            if any(step.inputs[j] in group for j in range(len(step.inputs)) if j != i):
                return False
        merged = set(self._group(step.outputs[0]))
        for i in variant.aliased:
            merged |= self._group(step.inputs[i])
        writers = [(w, t) for w, t in self.writers if t in merged]
        writers += [(index, step.inputs[i]) for i in variant.written]
        if writers and merged & self.unmodifiable:
            return False
        edges = []
        for writer, _ in writers:
            downstream = self._reachable(writer, constraints=False)
            for name in merged:
                if self.producer.get(name) in downstream or name in self.steps[writer].outputs:
                    continue  # the written value, not the old one
                for reader in self.readers.get(name, ()):
                    if reader == writer:
                        continue
                    if reader in self._reachable(writer, constraints=True, extra=edges):
                        return False
                    edges.append((reader, writer))
        for name in merged:
            self.groups[name] = merged
        self.writers += [(index, step.inputs[i]) for i in variant.written]
        for before, writer in edges:
            self.after.setdefault(before, set()).add(writer)
        return True

    def _reachable(self, start: int, constraints: bool,
                   extra: list[tuple[int, int]] = ()) -> set[int]:
        """The ops that must run after op ``start`` (data edges, and the order
        constraints when ``constraints``)."""
        seen, todo, joined = set(), [start], False
        while todo:
            op = todo.pop()
            following = [r for name in self.steps[op].outputs
                         for r in self.readers.get(name, ())]
            if not joined and not self.steps[op].backward:
                following += self.backward
                joined = True
            if constraints:
                following += list(self.after.get(op, ()))
                following += [after for before, after in extra if before == op]
            for nxt in following:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen
