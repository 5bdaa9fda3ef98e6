"""What the ONNX importer supports, in PopART's terms: ``getSupportedOperations``,
``getUnsupportedOperations`` and the default opsets of ``popart.Builder``."""

from __future__ import annotations

from typing import Any

__all__ = ["getSupportedOperations", "getUnsupportedOperations",
           "getSupportedOperationsDefinition",
           "defaultAiOnnxOpset", "defaultAiOnnxMlOpset", "defaultAiGraphcoreOpset",
           "OperatorIdentifier"]

# PopART's defaults for a Builder made without explicit opsets.
defaultAiOnnxOpset = 10  # noqa: N816 - PopART's names
defaultAiOnnxMlOpset = 1  # noqa: N816
defaultAiGraphcoreOpset = 1  # noqa: N816


class OperatorIdentifier:
    """``domain``, ``type`` and ``version`` of one supported operator version."""

    def __init__(self, domain: str, op_type: str, version: int):
        self.domain, self.type, self.version = domain, op_type, version

    def __repr__(self) -> str:
        return f"{self.domain}.{self.type}:{self.version}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OperatorIdentifier) and (
            self.domain, self.type, self.version) == (other.domain, other.type, other.version)

    def __hash__(self) -> int:
        return hash((self.domain, self.type, self.version))


def getSupportedOperations(includeInternal: bool = False) -> list[OperatorIdentifier]:  # noqa: N802, N803
    """Every operator version the importer has a rule for (``includeInternal`` is
    PopART's switch for its internal ops; ipuxl has none)."""
    from ipuxl.onnx.registry import rules

    return [OperatorIdentifier(domain, op_type, rule.since)
            for (domain, op_type), versions in sorted(rules().items())
            for rule in versions]


def getSupportedOperationsDefinition(includeInternal: bool = False  # noqa: N802, N803
                                     ) -> dict[OperatorIdentifier, Any]:
    """``{operator: its attributes}`` for every supported operator version."""
    from ipuxl.onnx.registry import rules

    return {OperatorIdentifier(domain, op_type, rule.since): sorted(rule.attributes)
            for (domain, op_type), versions in sorted(rules().items())
            for rule in versions}


def getUnsupportedOperations(opsetVersion: int) -> list[OperatorIdentifier]:  # noqa: N802, N803
    """The ``ai.onnx`` operators of opset ``opsetVersion`` that the importer cannot
    import: each at the version that opset gives it (``Slice`` at 10 for opset 10), as
    PopART lists them. An operator whose newest version at that opset is deprecated in
    ONNX (``Upsample`` from opset 10) is not part of the opset.

    Raises:
        ValueError: ``opsetVersion`` is not a positive opset number.
    """
    import onnx.defs

    from ipuxl.onnx.registry import ONNX_DOMAIN, find_rule

    if int(opsetVersion) < 1:
        raise ValueError(f"getUnsupportedOperations: opsetVersion must be 1 or more (got "
                         f"{opsetVersion}); pass an ai.onnx opset such as 10.")
    newest: dict[str, Any] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain in ("", ONNX_DOMAIN) and schema.since_version <= opsetVersion:
            known = newest.get(schema.name)
            if known is None or known.since_version < schema.since_version:
                newest[schema.name] = schema
    return [OperatorIdentifier(ONNX_DOMAIN, name, schema.since_version)
            for name, schema in sorted(newest.items())
            if not schema.deprecated and find_rule(ONNX_DOMAIN, name, opsetVersion) is None]
