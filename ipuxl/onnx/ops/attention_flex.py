"""ONNX operator FlexAttention (domain ``ai.onnx.preview``; see ipuxl.onnx.ops.attention).

FlexAttention is scaled dot-product attention whose scores and probabilities may be
rewritten by ONNX subgraphs (the ``score_mod`` and ``prob_mod`` attributes). It is a
converter: the importer builds three ops (scores, softmax, weighted sum of the values)
and imports each modifier subgraph inline between them, so the modifiers become ordinary
ops of the graph.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ipuxl.onnx.registry import dtype_of, onnx_converter
from ipuxl.op import OpDef
from ipuxl.tensor import TensorSpec

PREVIEW_DOMAIN = "ai.onnx.preview"
_HIGHEST = jax.lax.Precision.HIGHEST
_SOFTMAX_TYPES = {1: jnp.float32, 10: jnp.float16, 11: jnp.float64, 16: jnp.bfloat16}


def _jax_op(name: str, fn: Callable[..., Any], kind: str) -> OpDef:
    """An op whose lowering is ``fn`` and whose type rule is ``jax.eval_shape`` of it."""

    def infer(*tensors: Any, **attrs: Any) -> list[TensorSpec]:
        specs = [jax.ShapeDtypeStruct(t.shape, t.dtype.jax_dtype) for t in tensors]
        with jax.enable_x64(True):
            out = jax.eval_shape(lambda *a: fn(*a, **attrs), *specs)
        return [TensorSpec(tuple(out.shape), dtype_of(out.dtype))]

    return OpDef(name, infer=infer, lower=fn, cost_kind=kind)


def compute_dtype(input_dtype: Any, softmax_precision: int | None) -> Any:
    """The type of the scores and probabilities: ``softmax_precision`` when given, else
    float32 (float64 for float64 inputs)."""
    if softmax_precision is not None:
        if softmax_precision not in _SOFTMAX_TYPES:
            raise ValueError(f"FlexAttention: softmax_precision={softmax_precision} is not "
                             "one of 1 (float), 10 (float16), 11 (double), 16 (bfloat16).")
        return _SOFTMAX_TYPES[softmax_precision]
    return jnp.float64 if jnp.dtype(input_dtype) == jnp.float64 else jnp.float32


def _repeat_heads(x: Any, q_heads: int) -> Any:
    heads = x.shape[1]
    if heads == q_heads:
        return x
    if heads <= 0 or q_heads % heads:
        raise ValueError(f"FlexAttention: {q_heads} query heads cannot share {heads} "
                         "key/value heads (the query heads must be a multiple).")
    return jnp.repeat(x, q_heads // heads, axis=1)


def flex_scores(Q: Any, K: Any, *, scale: float | None, softmax_precision: int | None
                ) -> Any:
    """``(Q * sqrt(scale)) @ (K * sqrt(scale))^T`` in the compute type."""
    if Q.ndim != 4 or K.ndim != 4:
        raise ValueError(f"FlexAttention needs rank-4 Q and K, got shapes {list(Q.shape)} "
                         f"and {list(K.shape)}.")
    if scale is None:
        scale = 1.0 / math.sqrt(Q.shape[3])
    root = jnp.asarray(np.sqrt(np.float32(scale)), Q.dtype)
    k = _repeat_heads(K, Q.shape[1])
    scores = jnp.matmul(Q * root, jnp.swapaxes(k * root.astype(k.dtype), -1, -2),
                        precision=_HIGHEST).astype(Q.dtype)
    return scores.astype(compute_dtype(Q.dtype, softmax_precision))


def flex_softmax(scores: Any) -> Any:
    x_max = jax.lax.stop_gradient(jnp.max(scores, axis=-1, keepdims=True))
    e = jnp.exp(scores - x_max)
    return e / jnp.sum(e, axis=-1, keepdims=True)


def flex_output(probs: Any, V: Any) -> Any:
    """``probs @ V`` in the compute type, cast to V's type."""
    if V.ndim != 4:
        raise ValueError(f"FlexAttention needs a rank-4 V, got shape {list(V.shape)}.")
    v = _repeat_heads(V, probs.shape[1]).astype(probs.dtype)
    return jnp.matmul(probs, v, precision=_HIGHEST).astype(V.dtype)


_SCORES = _jax_op("onnx_preview.FlexAttention-1.scores", flex_scores, "matmul")
_SOFTMAX = _jax_op("onnx_preview.FlexAttention-1.softmax", flex_softmax, "reduce")
_OUTPUT = _jax_op("onnx_preview.FlexAttention-1.output", flex_output, "matmul")


def _scoped(graph: Any, prefix: str) -> Any:
    """A copy of ``graph`` whose own values (input, initializers, node outputs) are
    renamed ``prefix + name``, so that they cannot meet same-named values of the outer
    graph or of the other modifier (the importer makes one constant per value name)."""
    from onnx import AttributeProto

    scoped = type(graph)()
    scoped.CopyFrom(graph)
    own = {v.name for v in scoped.input} | {i.name for i in scoped.initializer}
    own |= {o for node in scoped.node for o in node.output if o}
    rename = {name: prefix + name for name in own}

    def rewrite(g: Any) -> None:
        for value in [*g.input, *g.output, *g.initializer]:
            value.name = rename.get(value.name, value.name)
        for node in g.node:
            node.input[:] = [rename.get(n, n) for n in node.input]
            node.output[:] = [rename.get(n, n) for n in node.output]
            for attribute in node.attribute:
                if attribute.type == AttributeProto.GRAPH:
                    rewrite(attribute.g)
                for sub in attribute.graphs:
                    rewrite(sub)

    rewrite(scoped)
    return scoped


def _run_modifier(ctx: Any, graph: Any, value: Any, what: str) -> Any:
    """Import the one-input, one-output subgraph ``graph`` on ``value``, inline."""
    from ipuxl.onnx.importer import OnnxImportError
    from ipuxl.onnx.model_ir import initializer_arrays

    inputs = [i.name for i in graph.input]
    if len(inputs) != 1 or len(graph.output) != 1:
        raise OnnxImportError(f"FlexAttention node {ctx.node.name!r}: the {what} subgraph "
                              f"must have one input and one output, it has {len(inputs)} "
                              f"and {len(graph.output)}.")
    graph = _scoped(graph, f"{ctx.node.name or ctx.node.output[0]}/{what}/")
    env = dict(ctx.env)  # the subgraph sees the outer scope
    env.update(initializer_arrays(graph))
    env[graph.input[0].name] = value
    ctx.importer.run(graph, env)
    result = ctx.importer.tensor(graph.output[0].name, env[graph.output[0].name])
    if result.shape != value.shape:
        raise OnnxImportError(f"FlexAttention node {ctx.node.name!r}: the {what} subgraph "
                              f"turns shape {list(value.shape)} into {list(result.shape)}; "
                              "it must keep the shape.")
    return result


@onnx_converter("FlexAttention", since=1, domain=PREVIEW_DOMAIN,
                attributes=("scale", "score_mod", "prob_mod", "softmax_precision"))
def flex_attention(ctx: Any) -> list[Any]:
    """Scores, ``score_mod``, softmax, ``prob_mod``, then the weighted sum of V."""
    attrs = ctx.attrs
    scale = attrs.get("scale")
    precision = attrs.get("softmax_precision")
    q, k, v = ctx.tensor(0), ctx.tensor(1), ctx.tensor(2)
    scores = _SCORES.apply({"Q": q, "K": k}, scale=None if scale is None else float(scale),
                           softmax_precision=precision)[0]
    if "score_mod" in attrs:
        scores = _run_modifier(ctx, attrs["score_mod"], scores, "score_mod")
    probs = _SOFTMAX.apply({"scores": scores})[0]
    if "prob_mod" in attrs:
        probs = _run_modifier(ctx, attrs["prob_mod"], probs, "prob_mod")
    name = ctx.node.output[0] or None
    return [_OUTPUT.apply({"probs": probs, "V": v}, names=[name])[0]]
