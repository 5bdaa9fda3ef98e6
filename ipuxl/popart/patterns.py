"""``popart.Patterns``: PopART's graph-rewrite switches, accepted and recorded.

PopART rewrites its IR with patterns before lowering (``PreUniRepl``, ``OpToIdentity``,
the in-placing patterns...). ipuxl needs none of them: XLA does the equivalent
rewrites. A session takes a ``Patterns`` object so programs that set them run unchanged;
the switches are kept and readable. They change no numbers, but PopART lowers some ops
only after a pattern rewrote them (``CosGrad`` needs ``CosGradOp``...): a session checks
that the patterns those ops need are on (:mod:`ipuxl.popart.pattern_requirements`).

Each level turns on PopART's set: ``NoPatterns`` none, ``Minimal`` the mandatory ones
(:data:`MANDATORY_PATTERNS`), ``Default`` all but :data:`OFF_BY_DEFAULT`, ``All`` every
one; a list of names turns on those names only.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from ipuxl.popart.arguments import enum_argument

__all__ = ["Patterns", "PatternsLevel", "PATTERN_NAMES", "MANDATORY_PATTERNS", "OFF_BY_DEFAULT",
           "check_excluded_patterns"]

# Every pattern PopART registers (its PatternNames), for the names a model may exclude.
PATTERN_NAMES = frozenset({
    "AbsGradOp", "AdamDecompose", "AdaptiveDecompose", "AllReduceToIdentity",
    "Atan2Arg0GradOp", "Atan2Arg1GradOp", "ContiguateIpuCopyIndicesPattern", "ConvDataGrad",
    "ConvFlipWeightsDoubleFlip", "ConvFlipWeightsGradOp", "ConvTranspose", "CosGradOp",
    "CoshOp", "DecomposeBinaryConstScalar", "DivArg0GradOp", "DivArg1GradOp", "ExpGradOp",
    "ExpandCast", "Expm1GradOp", "FmodArg0GradOp", "InPlace", "InitAccumulate", "LSTMOp",
    "LambSerialisedWeight", "Log1pGradOp", "LogGradOp", "LoopScanOut", "MatMulLhsGradOp",
    "MatMulOp", "MatMulRhsGradOp", "MulArgGradOp", "NegativeOneScale",
    "NlllWithSoftmaxGradDirect", "OpToIdentity", "PackedDataBlock", "PadSum", "PostNRepl",
    "PowArg0GradOp", "PowArg1GradOp", "PreUniRepl", "RandomNormalLikeOpPattern",
    "RandomUniformLikeOpPattern", "ReciprocalGradOp", "RemoveUnnecessaryLossGradCast",
    "SGD0Decompose", "SGD1Decompose", "SGD2Decompose", "ScanToLoop", "SinGradOp",
    "Slice2SliceSubsample", "SoftmaxGradDirect", "SplitGather", "SplitGradOpToConcat",
    "SplitOp", "SqrtGradOp", "SubtractArg1GradOp", "SumToAdd", "TiedGather",
    "TiedGatherAccumulate", "TransposeToIdentityOrReshapePattern",
    "UpdateInplacePrioritiesForIpu", "UpsampleToResize", "ViewSimplifyPattern",
    "ZerosLikeOpPattern"})

# The patterns PopART registers as mandatory: ``PatternsLevel.Minimal`` turns on these.
MANDATORY_PATTERNS = frozenset({
    "AbsGradOp", "AllReduceToIdentity", "Atan2Arg0GradOp", "Atan2Arg1GradOp", "ConvDataGrad",
    "ConvFlipWeightsGradOp", "ConvTranspose", "CosGradOp", "CoshOp", "DivArg0GradOp",
    "DivArg1GradOp", "ExpGradOp", "Expm1GradOp", "FmodArg0GradOp", "Log1pGradOp", "LogGradOp",
    "LoopScanOut", "MatMulLhsGradOp", "MatMulOp", "MatMulRhsGradOp", "MulArgGradOp",
    "PowArg0GradOp", "PowArg1GradOp", "RandomNormalLikeOpPattern", "RandomUniformLikeOpPattern",
    "ReciprocalGradOp", "ScanToLoop", "SinGradOp", "SqrtGradOp", "SubtractArg1GradOp",
    "ZerosLikeOpPattern"})
# The patterns ``PatternsLevel.Default`` leaves off (PopART registers them disabled).
OFF_BY_DEFAULT = frozenset({"LSTMOp", "Slice2SliceSubsample", "SplitGather", "TiedGather",
                            "TiedGatherAccumulate"})


def check_excluded_patterns(model: Any) -> None:
    """PopART's check of ``builder.excludePatterns`` names, made when a session is built."""
    import onnx

    from ipuxl.popart.errors import popart_exception

    for node in model.graph.node:
        for attribute in node.attribute:
            if attribute.name == "__exclude_patterns":
                for name in onnx.helper.get_attribute_value(attribute):
                    name = name.decode() if isinstance(name, bytes) else name
                    if name not in PATTERN_NAMES:
                        raise popart_exception(
                            f"Invalid pattern name '{name}' in Op::excludePatterns. Known "
                            f"patterns: {', '.join(sorted(PATTERN_NAMES))}.")


class PatternsLevel(Enum):
    NoPatterns = 0  # noqa: N815 - PopART's names
    Minimal = 1  # noqa: N815
    Default = 2  # noqa: N815
    All = 3  # noqa: N815


class Patterns:
    """``Patterns(level=PatternsLevel.Default)`` (or the level's name, ``"Default"``) or
    ``Patterns(["PreUniRepl", ...])``."""

    def __init__(self, level_or_names: Any = PatternsLevel.Default):
        self._enabled: dict[str, bool] = {}
        if isinstance(level_or_names, (PatternsLevel, str)):
            self.level = enum_argument(PatternsLevel, level_or_names, "Patterns level")
        elif isinstance(level_or_names, (list, tuple, set, frozenset)) and all(
                isinstance(name, str) for name in level_or_names):
            self.level = PatternsLevel.NoPatterns
            for name in level_or_names:
                if name not in PATTERN_NAMES:
                    from ipuxl.popart.errors import popart_exception

                    hint = ", did you mean InPlace?" if name == "Inplace" else ""
                    raise popart_exception(f"Unknown pattern {name}{hint}")
                self._enabled[name] = True
        else:
            raise TypeError(f"Patterns takes a popart.PatternsLevel or a list of pattern "
                            f"names, got {type(level_or_names).__name__} {level_or_names!r}.")
        # In-placing is a switch of its own: on at the Default and All levels, and where
        # a list names "InPlace" (PopART's rule).
        named_inplace = self._enabled.pop("InPlace", False)
        self.inplaceEnabled = named_inplace or self.level in (  # noqa: N815
            PatternsLevel.Default, PatternsLevel.All)
        self.updateInplacePrioritiesForIpu = True  # noqa: N815

    def enablePattern(self, name: str, enabled: bool) -> Patterns:  # noqa: N802
        if name == "InPlace":
            self.inplaceEnabled = bool(enabled)
        else:
            self._enabled[name] = bool(enabled)
        return self

    def isPatternEnabled(self, name: str) -> bool:  # noqa: N802
        """Whether pattern ``name`` is on: as set by name, else as the level says."""
        if name == "InPlace":
            return self.inplaceEnabled
        if name in self._enabled:
            return self._enabled[name]
        if self.level == PatternsLevel.Minimal:
            return name in MANDATORY_PATTERNS
        if self.level == PatternsLevel.Default:
            return name not in OFF_BY_DEFAULT
        return self.level == PatternsLevel.All

    def enableRuntimeAsserts(self, enabled: bool) -> Patterns:  # noqa: N802
        return self

    def __getattr__(self, name: str) -> Any:
        # PopART exposes each pattern as a property (patterns.PreUniRepl = False ...).
        if name.startswith("_"):
            raise AttributeError(name)
        return self.isPatternEnabled(name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "InPlace":
            object.__setattr__(self, "inplaceEnabled", bool(value))
        elif name[0].isupper():
            self._enabled[name] = bool(value)
        else:
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return f"Patterns({self.level.name}, {self._enabled})"
