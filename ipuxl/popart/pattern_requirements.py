"""The ops PopART lowers only after a pattern rewrote them, checked when a session compiles.

PopART has no device code (no ``Opx``) for some of its ops: a mandatory pattern replaces
each of them before lowering. ``Cosh`` becomes ``exp`` arithmetic (pattern ``CoshOp``),
``ConvTranspose`` a weight flip and a ``Conv`` (``ConvTranspose``), and most gradient
ops become forward ops (``CosGrad`` -> ``-sin(x) * dy``, pattern ``CosGradOp``). With the
pattern left out of the session's ``Patterns`` (a list of names, ``NoPatterns``, or
``enablePattern(name, False)``), ``prepareDevice`` fails on the op, in PopART's words::

    Could not create opx for 'ai.graphcore.CosGrad:1'. This op should have been removed
    by pattern CosGradOp

A few gradient ops have a device placeholder that refuses with its own words instead
(``DivArg0Grad should be optimised out, "DivArg0Grad" pattern is required``).

ipuxl differentiates with JAX and needs none of the patterns, so this is a check only:
it finds the ops PopART would make (the model's nodes; in training, a gradient op for
each input of a node that depends on a weight or on a tensor whose gradient is anchored)
and refuses the first whose pattern is off,
the forward ops before the gradient ops (PopART's lowering order).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ipuxl.popart.errors import popart_exception
from ipuxl.popart.names import reservedGradientPrefix

__all__ = ["Removal", "check_pattern_requirements"]


@dataclass(frozen=True)
class Removal:
    """An op PopART cannot lower: its identifier, the pattern that removes it, and the
    refusal of its placeholder where PopART registers one (None: no placeholder)."""

    op: str
    pattern: str
    refusal: str | None = None


def _gradient(name: str, pattern: str, placeholder: str | None = None) -> Removal:
    """A gradient op of PopART's ``ai.graphcore`` domain (all are version 1); with
    ``placeholder``, the pattern name its refusal quotes."""
    refusal = None if placeholder is None else (
        f'{name} should be optimised out, "{placeholder}" pattern is required')
    return Removal(f"ai.graphcore.{name}:1", pattern, refusal)


# Forward ops: (domain, op type) -> the pattern that removes them (identifier at lowering).
_FORWARD: dict[tuple[str, str], str] = {
    ("ai.onnx", "Cosh"): "CoshOp",
    ("ai.onnx", "ConvTranspose"): "ConvTranspose",
    ("ai.onnx", "Scan"): "ScanToLoop"}

# (domain, op type) -> {input index: the gradient op PopART makes for that input}.
_GRADIENTS: dict[tuple[str, str], dict[int, Removal]] = {
    ("ai.onnx", "Abs"): {0: _gradient("AbsGrad", "AbsGradOp")},
    ("ai.onnx", "Cos"): {0: _gradient("CosGrad", "CosGradOp")},
    ("ai.onnx", "Sin"): {0: Removal("ai.graphcore.SinGrad:1", "SinGradOp",
                                    'SinGradOp should be optimised out, "SinGradOp" pattern '
                                    "is required")},
    ("ai.onnx", "Exp"): {0: _gradient("ExpGrad", "ExpGradOp")},
    ("ai.onnx", "Log"): {0: Removal("ai.graphcore.LogGrad:1", "LogGradOp",
                                    'LogGradOp should be optimised out, "LogGradOp" pattern '
                                    "is required")},
    ("ai.onnx", "Sqrt"): {0: _gradient("SqrtGrad", "SqrtGradOp")},
    ("ai.onnx", "Reciprocal"): {0: _gradient("ReciprocalGrad", "ReciprocalGradOp")},
    ("ai.onnx", "Sub"): {1: _gradient("SubArg1Grad", "SubtractArg1GradOp")},
    ("ai.onnx", "Mul"): {0: Removal("ai.graphcore.MulArg0Grad:1", "MulArgGradOp",
                                    'MulArg0GradOp should be optimised out, "MulArgGradOp" '
                                    "pattern is required"),
                         1: Removal("ai.graphcore.MulArg1Grad:1", "MulArgGradOp",
                                    'MulArg1GradOp should be optimised out, "MulArgGradOp" '
                                    "pattern is required")},
    ("ai.onnx", "Div"): {0: _gradient("DivArg0Grad", "DivArg0GradOp", "DivArg0Grad"),
                         1: _gradient("DivArg1Grad", "DivArg1GradOp", "DivArg1GradOp")},
    ("ai.onnx", "Pow"): {0: _gradient("PowArg0Grad", "PowArg0GradOp", "PowArg0GradOp"),
                         1: _gradient("PowArg1Grad", "PowArg1GradOp", "PowArg1GradOp")},
    ("ai.onnx", "MatMul"): {0: _gradient("MatMulLhsGrad", "MatMulLhsGradOp"),
                            1: _gradient("MatMulRhsGrad", "MatMulRhsGradOp")},
    ("ai.onnx", "Conv"): {0: _gradient("ConvDataGrad", "ConvDataGrad")},
    # PopART's ConvTranspose pattern makes Conv(data, ConvFlipWeights(weights)).
    ("ai.onnx", "ConvTranspose"): {0: _gradient("ConvDataGrad", "ConvDataGrad"),
                                   1: _gradient("ConvFlipWeightsGrad",
                                                "ConvFlipWeightsGradOp")},
    ("ai.graphcore", "Atan2"): {0: _gradient("Atan2Arg0Grad", "Atan2Arg0GradOp"),
                                1: _gradient("Atan2Arg1Grad", "Atan2Arg1GradOp")},
    ("ai.graphcore", "Expm1"): {0: _gradient("Expm1Grad", "Expm1GradOp")},
    ("ai.graphcore", "Log1p"): {0: _gradient("Log1pGrad", "Log1pGradOp")},
    ("ai.graphcore", "Fmod"): {0: _gradient("FmodArg0Grad", "FmodArg0GradOp",
                                            "FmodArg0Grad")}}

# Ops whose outputs carry no gradient back to their inputs.
_NO_GRADIENT = {("ai.graphcore", "Detach"), ("ai.graphcore", "Nop"),
                ("ai.onnx", "Shape"), ("ai.onnx", "Size")}


def _forward_removal(node: Any, opsets: dict[str, int]) -> Removal | None:
    from ipuxl.onnx.registry import canonical_domain, find_rule

    domain = canonical_domain(node.domain)
    pattern = _FORWARD.get((domain, node.op_type))
    if pattern is None:
        return None
    rule = find_rule(domain, node.op_type, opsets.get(domain, 1))
    version = f":{rule.since}" if rule is not None else ""
    return Removal(f"{domain}.{node.op_type}{version}", pattern)


def _gradient_removals(nodes: Iterable[Any], sources: set[str]) -> list[Removal]:
    """The gradient ops with a pattern requirement that autodiff makes for ``nodes``
    (in order), for each input that depends on one of ``sources`` (PopART prunes the
    gradient ops of the other inputs: no one reads their results)."""
    from ipuxl.onnx.registry import canonical_domain

    depends = set(sources)
    removals = []
    for node in nodes:
        key = (canonical_domain(node.domain), node.op_type)
        needed = [index for index, name in enumerate(node.input) if name in depends]
        if not needed or key in _NO_GRADIENT:
            continue
        depends.update(node.output)
        table = _GRADIENTS.get(key, {})
        removals.extend(table[index] for index in needed if index in table)
    return removals


def check_pattern_requirements(model: Any, patterns: Any, *, weights: Iterable[str],
                               anchors: Iterable[str] = (), training: bool) -> None:
    """Refuse, as PopART's ``prepareDevice`` does, an op of ``model`` (an ONNX
    ``ModelProto``) whose removing pattern ``patterns`` leaves off.

    Args:
        model: the session's model.
        patterns: the session's ``popart.Patterns``; None is PopART's default set, which
            has every pattern this checks.
        weights: the ids of the model's weights (what training differentiates).
        anchors: the DataFlow's anchors: an anchored gradient (``Gradient___x``) makes
            training differentiate ``x`` too.
        training: whether the session trains (and so makes gradient ops).

    Raises:
        popart_exception: the first op, forward ops first, whose pattern is off.

    Example: ``Patterns([])`` and a model with ``Cosh`` fails with ``Could not create
    opx for 'ai.onnx.Cosh:9'. ... This op should have been removed by pattern CoshOp``.
    """
    if patterns is None:
        return
    from ipuxl.onnx.importer import opsets_of

    opsets = opsets_of(model)
    nodes = list(model.graph.node)
    removals = [r for r in (_forward_removal(n, opsets) for n in nodes) if r is not None]
    if training:  # PopART schedules the gradient ops in reverse
        prefix = reservedGradientPrefix()
        sources = {*weights, *(a[len(prefix):] for a in anchors if a.startswith(prefix))}
        removals += reversed(_gradient_removals(nodes, sources))
    for removal in removals:
        if not patterns.isPatternEnabled(removal.pattern):
            _refuse(removal)


def _refuse(removal: Removal) -> None:
    fix = (f"Enable it (patterns.enablePattern('{removal.pattern}', True)) or use "
           "popart.Patterns(popart.PatternsLevel.Minimal) or Default, which have it.")
    if removal.refusal is not None:
        raise popart_exception(f"{removal.refusal}. {fix}")
    raise popart_exception(
        f"Could not create opx for '{removal.op}': PopART has no device code for it, and "
        f"the session's Patterns leave out {removal.pattern}, the pattern that replaces it. "
        f"{fix} This op should have been removed by pattern {removal.pattern}")
