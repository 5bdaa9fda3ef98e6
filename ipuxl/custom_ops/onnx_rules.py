"""Custom ops in ONNX models: a node of a custom op's domain and type imports as the op.

PopART programs add custom ops to a model with ``builder.customOp(opName, opVersion,
domain, inputs, attributes)``; a model file may hold such nodes too. When the ONNX table
has no rule for a node, :func:`custom_op_rule` gives one for the :class:`CustomOp`
declared with that domain and type (the highest version not above the model's opset for
the domain), so the node becomes that op, with the node's attributes as the op's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ipuxl.custom_ops.declare import declared_ops

if TYPE_CHECKING:
    from ipuxl.onnx.registry import Rule

__all__ = ["custom_op_rule"]


def _hashable(value: Any) -> Any:
    """ONNX list attributes as tuples (op attributes are hashable)."""
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value


def custom_op_rule(domain: str, op_type: str, opset: int) -> Rule | None:
    """The import rule of the custom op ``domain.op_type`` for ``opset``, or None."""
    from ipuxl.onnx.registry import Rule

    matching = [op for op in declared_ops()
                if op.opid.domain == domain and op.opid.type == op_type
                and op.opid.version <= opset]
    if not matching:
        return None
    op = max(matching, key=lambda o: o.opid.version)

    def convert(ctx: Any) -> list[Any]:
        tensors = [ctx.tensor(i) for i, name in enumerate(ctx.node.input) if name]
        attrs = {name: _hashable(value) for name, value in ctx.attrs.items()}
        return list(op.create(tensors, attrs).outputs)

    return Rule(op_type, domain, op.opid.version, convert=convert,
                attributes=op.attribute_names)
