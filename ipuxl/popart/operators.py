"""What the ONNX importer supports, in PopART's terms: ``getSupportedOperations``,
``getSupportedOperationsDefinition`` (an :class:`OpDefinition` per operator version),
``getUnsupportedOperations`` and the default opsets of ``popart.Builder``.

PopART's "internal" operators are the ops of its IR that no ONNX model may contain; ipuxl's
are the PopART ops its own IR ops stand for (:func:`internal_operations`)."""

from __future__ import annotations

from typing import Any

__all__ = ["getSupportedOperations", "getUnsupportedOperations",
           "getSupportedOperationsDefinition",
           "defaultAiOnnxOpset", "defaultAiOnnxMlOpset", "defaultAiGraphcoreOpset",
           "OperatorIdentifier", "OpDefinition", "internal_operations"]

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


class OpDefinition:
    """What one supported operator version takes (PopART's ``OpDefinition``).

    Attributes:
        inputs: ``[OpDefinition.Input]``, each with ``name``, ``supportedTensors`` (the
            ``popart.DataType``\\ s it takes) and ``constant`` (whether its value must be
            known when the model is built);
        outputs: ``[OpDefinition.Output]``, each with ``name`` and ``supportedTensors``;
        attributes: ``{name: OpDefinition.Attribute}``, each with ``supportedValuesRegex``
            (``"*"``: ipuxl checks the values when it builds the op).

    ``ai.onnx`` operators list ONNX's inputs, outputs and types; the other domains, whose
    operators ipuxl declares by their rule alone, list their attributes and no tensors.
    """

    class Input:
        def __init__(self, name: str, supported: list[Any], constant: bool = False):
            self.name, self.supportedTensors, self.constant = name, supported, constant

    class Output:
        def __init__(self, name: str, supported: list[Any]):
            self.name, self.supportedTensors = name, supported

    class Attribute:
        def __init__(self, regex: str = "*"):
            self.supportedValuesRegex = regex

    def __init__(self, inputs: list[Input], outputs: list[Output],
                 attributes: dict[str, Attribute]):
        self.inputs, self.outputs, self.attributes = inputs, outputs, attributes

    def __repr__(self) -> str:
        return (f"OpDefinition(inputs={[i.name for i in self.inputs]}, outputs="
                f"{[o.name for o in self.outputs]}, attributes={sorted(self.attributes)})")


def getSupportedOperations(includeInternal: bool = False) -> list[OperatorIdentifier]:  # noqa: N802, N803
    """Every operator version an ONNX model may use (those the importer has a rule for);
    with ``includeInternal``, also the ops ipuxl's IR builds that no model may contain
    (:func:`internal_operations`), as PopART lists its internal ops."""
    return list(getSupportedOperationsDefinition(includeInternal))


def getSupportedOperationsDefinition(includeInternal: bool = False  # noqa: N802, N803
                                     ) -> dict[OperatorIdentifier, OpDefinition]:
    """``{operator: OpDefinition}`` for every operator version
    :func:`getSupportedOperations` lists."""
    from ipuxl.onnx.registry import rules

    found = {OperatorIdentifier(domain, op_type, rule.since): _definition(rule)
             for (domain, op_type), versions in sorted(rules().items())
             for rule in versions}
    if includeInternal:
        found.update({op: OpDefinition([], [], {}) for op in internal_operations()})
    return found


def internal_operations() -> list[OperatorIdentifier]:
    """The ``ai.graphcore`` identifiers (version 1) of the PopART ops that ipuxl's own IR
    ops are (``HostLoad``, ``IpuCopy``, ``Accumulate``...: the table of
    :mod:`ipuxl.popart._internal.ir.op`) and that no importer rule shares a type with."""
    from ipuxl.onnx.registry import rules
    from ipuxl.popart._internal.ir.op._table import CLASS_OF, OP_TYPE_OF

    public = {op_type for _, op_type in rules()}
    types = set()
    for path in CLASS_OF.values():
        name = path.rsplit(".", 1)[-1]
        types.add(OP_TYPE_OF.get(name, name[:-2] if name.endswith("Op") else name))
    return [OperatorIdentifier("ai.graphcore", op_type, 1) for op_type in sorted(types - public)]


def _definition(rule: Any) -> OpDefinition:
    attributes = {name: OpDefinition.Attribute() for name in sorted(rule.attributes)}
    schema = _onnx_schema(rule)
    if schema is None:
        return OpDefinition([], [], attributes)
    allowed = {c.type_param_str: _data_types(c.allowed_type_strs)
               for c in schema.type_constraints}
    inputs = [OpDefinition.Input(p.name, allowed.get(p.type_str, _data_types([p.type_str])))
              for p in schema.inputs]
    outputs = [OpDefinition.Output(p.name, allowed.get(p.type_str, _data_types([p.type_str])))
               for p in schema.outputs]
    return OpDefinition(inputs, outputs, attributes)


def _onnx_schema(rule: Any) -> Any:
    import onnx.defs

    from ipuxl.onnx.registry import ONNX_DOMAIN

    if rule.domain != ONNX_DOMAIN:
        return None
    try:
        return onnx.defs.get_schema(rule.op_type, rule.since, "")
    except onnx.defs.SchemaError:
        return None


def _data_types(type_strings: Any) -> list[Any]:
    """``popart.DataType``\\ s of ONNX type strings (``"tensor(float)"`` -> FLOAT); types
    PopART has no name for are left out."""
    from ipuxl.popart.tensor_info import DataType

    onnx_names = {"float": "FLOAT", "float16": "FLOAT16", "double": "DOUBLE",
                  "bfloat16": "BFLOAT16", "bool": "BOOL", "string": "STRING"}
    found = []
    for text in type_strings:
        if not (text.startswith("tensor(") and text.endswith(")")):
            continue
        inner = text[len("tensor("):-1]
        name = onnx_names.get(inner, inner.upper())
        if name in DataType.__members__:
            found.append(DataType[name])
    return found


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
