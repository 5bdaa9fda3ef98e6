"""``conditional``: run one of two graphs, chosen at run time by a one-element bool tensor.
It lowers to ``lax.cond``, so only the branch taken runs (and only its streams advance).

Run:  python examples/graphs_conditional.py
"""

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops.conditional import conditional
from ipuxl.ops.repeat import repeat

ir = popxl.Ir()
ir.num_host_transfers = 4

with ir.main_graph:
    flag_stream = popxl.h2d_stream((1,), popxl.bool, name="flag")
    out = popxl.d2h_stream((2,), popxl.float32, name="out")
    x = popxl.variable(np.array([1.0, -2.0], np.float32), name="x")

    # Branches must have the same number of outputs, with matching dtypes and shapes.
    double = ir.create_graph(lambda t: t * 2.0, x)
    negate = ir.create_graph(lambda t: -t, x)

    def step(t: popxl.Tensor) -> popxl.Tensor:
        flag = ops.host_load(flag_stream)  # a new condition on every iteration
        (t,) = conditional(flag, double, negate, then_inputs=[t], else_inputs=[t])
        ops.host_store(out, t)
        return t

    repeat(ir.create_graph(step, x), 4, x)

print(f"conditional outputs are named {double.outputs[0].name}_or_{negate.outputs[0].name}")

flags = np.array([[True], [False], [True], [True]])
with popxl.Session(ir, "cpu") as session:
    values = session.run({flag_stream: flags})[out]

expected, t = [], np.array([1.0, -2.0], np.float32)
for flag in flags[:, 0]:
    t = t * 2 if flag else -t
    expected.append(t)
print(f"values per iteration:\n{values}")
np.testing.assert_allclose(values, np.array(expected))
