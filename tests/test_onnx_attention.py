"""ONNX import of the attention family (ipuxl.onnx.ops.attention*), checked against ONNX's
own reference implementation (``onnx.reference.ReferenceEvaluator``).

Cases are batched: every case of one table becomes one node of one model, so a whole
table compiles as a single Session. The tables cover Attention-23/24/25 (3-D and 4-D,
grouped-query, masks, caches, softcap, the qk output modes, windows), RotaryEmbedding,
the normalizations, SwiGLU, LinearAttention, CausalConvWithState, TensorScatter and
FlexAttention with modifier subgraphs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from ipuxl.onnx import backend  # noqa: E402
from ipuxl.onnx.importer import OnnxImportError  # noqa: E402
from ipuxl.onnx.ops import attention, attention_norms  # noqa: E402

PREVIEW = "ai.onnx.preview"
rng = np.random.default_rng(0)


def f32(*shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, shape).astype(np.float32)


def bools(*shape):
    mask = rng.integers(0, 2, shape).astype(bool)
    mask[..., 0] = True  # every row attends something
    return mask


Q4, K4, V4 = f32(2, 4, 3, 8), f32(2, 4, 5, 8), f32(2, 4, 5, 6)
KG, VG = f32(2, 2, 5, 8), f32(2, 2, 5, 6)  # two key/value heads for four query heads
Q3, K3, V3 = f32(2, 3, 32), f32(2, 5, 16), f32(2, 5, 8)  # 4 query heads, 2 kv heads
PK, PV = f32(2, 4, 2, 8), f32(2, 4, 2, 6)  # two cached positions
FULLY_MASKED = np.array([[False] * 5, [True] * 5, [True, True, False, False, False]])

# (op_type, inputs, attributes, output count); None is an absent optional input.
CASES_23 = [
    ("Attention", [Q4, K4, V4], {}, 1),
    ("Attention", [Q4, K4, V4], {"scale": 0.3, "is_causal": 1}, 1),
    ("Attention", [Q4, KG, VG], {"softcap": 2.0, "qk_matmul_output_mode": 1}, 4),
    ("Attention", [Q4, K4, V4, f32(3, 5)], {"qk_matmul_output_mode": 2}, 4),
    ("Attention", [Q4, K4, V4, bools(2, 1, 3, 5)], {"is_causal": 1}, 1),
    ("Attention", [Q4, K4, V4, bools(3, 3)], {}, 1),  # shorter mask: padded as masked
    ("Attention", [Q4, K4, V4, f32(4, 3, 4)], {"is_causal": 1}, 1),
    ("Attention", [Q4, K4, V4, FULLY_MASKED], {"qk_matmul_output_mode": 3}, 4),
    ("Attention", [Q4, K4, V4, None, PK, PV], {"is_causal": 1, "qk_matmul_output_mode": 0}, 4),
    ("Attention", [Q4, K4, V4], {"softmax_precision": TensorProto.DOUBLE}, 1),
    ("Attention", [Q3, K3, V3], {"q_num_heads": 4, "kv_num_heads": 2}, 1),
    ("Attention", [Q3, K3, V3, f32(3, 5), f32(2, 2, 1, 8), f32(2, 2, 1, 4)],
     {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1}, 3),
    ("Attention", [Q4.astype(np.float16), K4.astype(np.float16), V4.astype(np.float16)],
     {"is_causal": 1}, 1),
    ("RotaryEmbedding", [f32(2, 4, 3, 8), f32(50, 4), f32(50, 4),
                         rng.integers(0, 50, (2, 3)).astype(np.int64)], {}, 1),
    ("RotaryEmbedding", [f32(2, 4, 3, 8), f32(50, 2), f32(50, 2),
                         rng.integers(0, 50, (2, 3)).astype(np.int64)],
     {"interleaved": 1, "rotary_embedding_dim": 4}, 1),
    ("RotaryEmbedding", [f32(2, 3, 32), f32(2, 3, 4), f32(2, 3, 4)],
     {"num_heads": 4, "interleaved": 1}, 1),
    ("RMSNormalization", [f32(2, 3, 4), f32(4)], {}, 1),
    ("RMSNormalization", [f32(2, 3, 4), f32(3, 4)], {"axis": -2, "epsilon": 0.1}, 1),
    ("LayerNormalization", [f32(2, 3, 4), f32(4), f32(4)], {}, 3),
    ("LayerNormalization", [f32(2, 3, 4), f32(2, 3, 4)], {"axis": 0, "epsilon": 0.1}, 3),
    ("LayerNormalization", [f32(2, 3, 4), f32(3, 4), f32(3, 4)], {"axis": -2}, 3),
]

NONPAD = np.array([3, 5], np.int64)
CASES_24 = [
    ("Attention", [Q4, K4, V4, None, None, None, NONPAD], {"is_causal": 1}, 1),
    ("Attention", [Q4, KG, VG, bools(3, 5), None, None, np.array([4, 2], np.int64)],
     {"is_causal": 1, "qk_matmul_output_mode": 3}, 4),
    ("Attention", [Q4, K4, V4, f32(2, 1, 3, 4), None, None, NONPAD], {}, 1),
    ("TensorScatter", [f32(2, 3, 6, 4), f32(2, 3, 2, 4), np.array([1, 4], np.int64)], {}, 1),
    ("TensorScatter", [f32(2, 6, 4), f32(2, 3, 4), np.array([5, 2], np.int64)],
     {"mode": "circular", "axis": 1}, 1),
    ("TensorScatter", [f32(2, 3, 6), f32(2, 3, 2)], {"axis": -1}, 1),
]

CASES_28 = [
    ("Attention", [Q4, K4, V4], {"is_causal": 1, "left_window_size": 1}, 1),
    ("Attention", [Q4, K4, V4, bools(5)], {"left_window_size": 2, "right_window_size": 1}, 1),
    ("Attention", [Q4, K4, V4, None, PK, PV], {"is_causal": 1, "left_window_size": 2}, 3),
    ("Attention", [Q4, K4, V4, f32(4, 3, 5), None, None, NONPAD],
     {"is_causal": 1, "left_window_size": 2}, 1),
    ("SwiGLU", [f32(3, 4), f32(3, 4)], {}, 1),
    ("SwiGLU", [f32(3, 4), f32(3, 4)], {"alpha": 1.702}, 1),
    ("LinearAttention", [f32(2, 4, 8), f32(2, 4, 8), f32(2, 4, 6)],
     {"q_num_heads": 2, "kv_num_heads": 2, "update_rule": "linear"}, 2),
    ("LinearAttention", [f32(2, 4, 8), f32(2, 4, 4), f32(2, 4, 6), f32(2, 1, 4, 6),
                         f32(2, 4, 1, low=-0.5, high=0.0)],
     {"q_num_heads": 2, "kv_num_heads": 1, "update_rule": "gated", "scale": 0.5}, 2),
    ("LinearAttention", [f32(2, 3, 8), f32(2, 3, 8), f32(2, 3, 4), None, None,
                         f32(2, 3, 2, low=0.0, high=1.0)],
     {"q_num_heads": 2, "kv_num_heads": 2, "update_rule": "delta"}, 2),
    ("LinearAttention", [f32(1, 3, 8), f32(1, 3, 8), f32(1, 3, 4), None,
                         f32(1, 3, 8, low=-0.5, high=0.0), f32(1, 3, 1, low=0.0, high=1.0)],
     {"q_num_heads": 2, "kv_num_heads": 2}, 2),
    ("CausalConvWithState", [f32(2, 3, 5), f32(3, 1, 3)], {}, 2),
    ("CausalConvWithState", [f32(2, 3, 5), f32(3, 1, 4), f32(3), f32(2, 3, 3)],
     {"activation": "silu"}, 2),
    ("CausalConvWithState", [f32(1, 2, 1), f32(2, 1, 3), None, f32(1, 2, 2)],
     {"activation": "swish"}, 2),
]


def _graph_parts(cases, prefix=""):
    nodes, inputs, outputs, feeds = [], [], [], {}
    for n, (op, arrays, attrs, count) in enumerate(cases):
        names = []
        for i, array in enumerate(arrays):
            if array is None:
                names.append("")
                continue
            name = f"{prefix}c{n}_in{i}"
            array = np.asarray(array)
            feeds[name] = array
            inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape))
            names.append(name)
        outs = [f"{prefix}c{n}_{op}_out{j}" for j in range(count)]
        outputs += [helper.make_empty_tensor_value_info(o) for o in outs]
        domain = PREVIEW if op == "FlexAttention" else ""
        nodes.append(helper.make_node(op, names, outs, name=f"{prefix}c{n}", domain=domain,
                                      **attrs))
    return nodes, inputs, outputs, feeds


def _model(cases, opset):
    nodes, inputs, outputs, feeds = _graph_parts(cases)
    graph = helper.make_graph(nodes, f"attention_{opset}", inputs, outputs)
    imports = [helper.make_opsetid("", opset), helper.make_opsetid(PREVIEW, 1)]
    return helper.make_model(graph, opset_imports=imports), feeds


def _compare(model, feeds, got):
    expected = ReferenceEvaluator(model).run(None, feeds)
    names = [o.name for o in model.graph.output]
    for name, want, have in zip(names, expected, got, strict=True):
        want = np.asarray(want)
        assert have.dtype == want.dtype, (name, have.dtype, want.dtype)
        assert have.shape == want.shape, (name, have.shape, want.shape)
        if want.dtype == ml_dtypes.bfloat16:
            have, want = have.astype(np.float32), want.astype(np.float32)
        tol = 3e-3 if want.dtype == np.float16 else 1e-5
        np.testing.assert_allclose(have, want, rtol=tol, atol=tol, err_msg=name)


@pytest.mark.parametrize("opset, cases", [(23, CASES_23), (24, CASES_24), (28, CASES_28)],
                         ids=["opset23", "opset24", "opset28"])
def test_every_operator_matches_onnx_reference(opset, cases):
    model, feeds = _model(cases, opset)
    _compare(model, feeds, backend.prepare(model).run(feeds))


def _modifier(op, constant, name):
    """A one-node subgraph ``x -> op(x, constant)`` over (B, H, L, S) float32."""
    x = helper.make_tensor_value_info(f"{name}_x", TensorProto.FLOAT, ["B", "H", "L", "S"])
    y = helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, ["B", "H", "L", "S"])
    value = helper.make_tensor(f"{name}_c", TensorProto.FLOAT, [], [constant])
    node = helper.make_node(op, [f"{name}_x", f"{name}_c"], [f"{name}_y"])
    return helper.make_graph([node], name, [x], [y], [value])


def test_flex_attention_matches_onnx_reference():
    cases = [
        ("FlexAttention", [Q4, K4, V4], {}, 1),
        ("FlexAttention", [Q4, KG, VG], {"scale": 0.25}, 1),
        ("FlexAttention", [Q4, K4, V4], {"score_mod": _modifier("Add", 0.5, "bias")}, 1),
        # Both modifiers name their constant "m_c": each keeps its own value.
        ("FlexAttention", [Q4, K4, V4], {"prob_mod": _modifier("Mul", 2.0, "m"),
                                         "score_mod": _modifier("Mul", 3.0, "m")}, 1),
        ("FlexAttention", [Q4.astype(np.float16), K4.astype(np.float16),
                           V4.astype(np.float16)], {}, 1),
    ]
    model, feeds = _model(cases, 26)
    _compare(model, feeds, backend.prepare(model).run(feeds))


def test_attention_qk_output_mode_0_is_before_softcap():
    """ONNX's function body (and spec) give the raw product in mode 0, softcap or not
    (ONNX's Python reference gives the softcapped one)."""
    cases = [("Attention", [Q4, K4, V4], {"softcap": 0.5}, 4),
             ("Attention", [Q4, K4, V4], {}, 4)]
    model, feeds = _model(cases, 23)
    got = backend.prepare(model).run(feeds)
    np.testing.assert_allclose(got[3], got[7], rtol=1e-6)
    assert np.abs(got[3]).max() > 0.5  # the softcap would have bounded it


def test_attention_fully_masked_rows_have_finite_gradients():
    """A row with no attendable key is zero, and differentiating through it stays finite."""
    mask = jnp.asarray(FULLY_MASKED)

    def loss(q, k, v):
        y, _, _, qk = attention.attention(q, k, v, mask, qk_matmul_output_mode=3)
        return jnp.sum(y * y) + jnp.sum(qk)

    grads = jax.grad(loss, argnums=(0, 1, 2))(jnp.asarray(Q4), jnp.asarray(K4),
                                               jnp.asarray(V4))
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)
    y = attention.attention(jnp.asarray(Q4), jnp.asarray(K4), jnp.asarray(V4), mask)[0]
    np.testing.assert_array_equal(np.asarray(y)[:, :, 0], 0.0)


def test_normalization_gradients_match_finite_differences():
    from jax.test_util import check_grads

    with jax.enable_x64(True):
        x = jnp.asarray(rng.standard_normal((2, 3, 4)))
        w, b = jnp.asarray(rng.standard_normal(4)), jnp.asarray(rng.standard_normal(4))
        check_grads(lambda x, w, b: attention_norms.layer_normalization(
            x, w, b, stash_type=11)[0], (x, w, b), order=1, modes=["rev"])
        check_grads(lambda x, w: attention_norms.rms_normalization(x, w, stash_type=11),
                    (x, w), order=1, modes=["rev"])


def _one_node_model(op, inputs, attrs, opset, outputs=1):
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, [f"y{j}" for j in range(outputs)], name="bad",
                            **attrs)
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in zip(names, inputs)],
        [helper.make_empty_tensor_value_info(f"y{j}") for j in range(outputs)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


ERRORS = [
    ("Attention", [Q3, K3, V3], {}, 23, "needs the q_num_heads attribute"),
    ("Attention", [Q4, f32(2, 3, 5, 8), f32(2, 3, 5, 6)], {}, 23, "cannot share 3"),
    ("Attention", [Q4, K4, V4], {"q_num_heads": 4}, 25, "for 3-D inputs only"),
    ("Attention", [Q4, K4, V4], {"softmax_precision": 7}, 23, "softmax_precision=7"),
    ("LayerNormalization", [f32(2, 3), f32(3)], {"axis": 2}, 17, "axis=2 is outside"),
    ("RotaryEmbedding", [f32(2, 3, 8), f32(3, 4), f32(3, 4)], {}, 23, "needs the num_heads"),
    ("LinearAttention", [f32(1, 2, 4), f32(1, 2, 4), f32(1, 2, 4)],
     {"q_num_heads": 1, "kv_num_heads": 1}, 27, "needs decay input"),
    ("TensorScatter", [f32(2, 4), f32(2, 1)], {"mode": "ring", "axis": 1}, 24,
     "is not 'linear' or 'circular'"),
]


@pytest.mark.parametrize("op, inputs, attrs, opset, match", ERRORS,
                         ids=[f"{e[0]}-{e[4][:12]}" for e in ERRORS])
def test_invalid_nodes_are_refused(op, inputs, attrs, opset, match):
    model = _one_node_model(op, inputs, attrs, opset)
    with pytest.raises(OnnxImportError, match=match):
        backend.prepare(model).run(inputs)


def test_window_attributes_need_opset_25():
    from ipuxl.onnx.importer import UnsupportedModelError

    model = _one_node_model("Attention", [Q4, K4, V4], {"left_window_size": 1}, 24)
    with pytest.raises(UnsupportedModelError, match="left_window_size not supported"):
        backend.prepare(model)
