"""Subgraphs and ``call``: trace a function (or a ``popxl.Module``) into a graph once,
then call it from as many sites as you like.

Run:  python examples/graphs_call.py
"""

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops.call import call, call_with_info

ir = popxl.Ir()


def scale_and_shift(x: popxl.Tensor, shift: float) -> popxl.Tensor:
    # `x` is a graph input with the argument's shape and dtype; `shift` is a plain float,
    # baked into the graph as a constant.
    return x * 2.0 + shift


class Linear(popxl.Module):
    """A module keeps its weight input on `self`, so call sites can bind it by name."""

    def __init__(self):
        self.W: popxl.Tensor | None = None

    def build(self, x: popxl.Tensor) -> popxl.Tensor:
        self.W = popxl.graph_input((x.shape[-1], 2), popxl.float32, "W")
        return x @ self.W


with ir.main_graph:
    x = popxl.variable(np.array([[1.0, 2.0, 3.0]], np.float32), name="x")
    W = popxl.variable(np.arange(6, dtype=np.float32).reshape(3, 2), name="W")

    # Trace once: the graph has one input, `x`, of shape (1, 3).
    double = ir.create_graph(scale_and_shift, x, shift=1.0)

    # Call twice: the second call feeds the first call's output back in.
    (once,) = call(double, x)
    (twice,) = call(double, once)

    # Module graph inputs created inside `build` come after the signature's inputs;
    # bind them by name with `inputs_dict`.
    linear = Linear()
    linear_graph = ir.create_graph(linear, x)
    info = call_with_info(linear_graph, twice, inputs_dict={linear.W: W})
    (y,) = info.outputs

    out = popxl.d2h_stream(y.shape, y.dtype, name="y")
    ops.host_store(out, y)

# Every subgraph prints once; call sites name it.
print(ir)
print(f"graph ids: {double.id}, {linear_graph.id}")
print(f"graph input W is bound to parent tensor {info.graph_to_parent(linear.W).name}")

with popxl.Session(ir, "cpu") as session:
    result = session.run()[out]

x_data = np.array([[1.0, 2.0, 3.0]], np.float32)
expected = ((x_data * 2 + 1) * 2 + 1) @ np.arange(6, dtype=np.float32).reshape(3, 2)
print(f"y = {result.tolist()}")
np.testing.assert_allclose(result, expected)
