"""PopXL user guide, listing 12.7 (``repeat_graph_2.py``): ``num_host_transfers`` with a
``repeat`` op.

A ``Module`` builds a linear layer that loads its input from a stream and stores its
output to another, each iteration. ``ops.repeat`` runs it ``_REPEAT_COUNT`` times in one
``session.run``, so every stream is used ``_REPEAT_COUNT`` times per run: that is the
number of host transfers, and the leading dimension of the host arrays.

Run:  python examples/repeat_graph_2.py
"""

from typing import Tuple  # noqa: UP035 - as in the guide

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops

# Creating a model with popxl
ir = popxl.Ir()
main = ir.main_graph

_INPUT_SHAPE = [2, 2]
_REPEAT_COUNT = 8


class Linear(popxl.Module):
    def __init__(
        self, x_h2d_: popxl.HostToDeviceStream, y_d2h_: popxl.DeviceToHostStream
    ):
        self.x_h2d = x_h2d_
        self.y_d2h = y_d2h_
        self.W: popxl.Tensor = None
        self.b: popxl.Tensor = None

    def build(
        self, x: popxl.Tensor, out_features: int, bias: bool = True
    ) -> Tuple[popxl.Tensor, ...]:  # noqa: UP006 - as in the guide

        x = ops.host_load(self.x_h2d, "x")
        self.W = popxl.graph_input((x.shape[-1], out_features), popxl.float32, "W")
        y = x @ self.W
        if bias:
            self.b = popxl.graph_input((out_features,), popxl.float32, "b")
            y = y + self.b

        ops.host_store(self.y_d2h, y)
        return y


with main:
    # host load
    x_h2d = popxl.h2d_stream(_INPUT_SHAPE, popxl.float32, name="x_stream")
    y_d2h = popxl.d2h_stream(_INPUT_SHAPE, popxl.float32, name="y_stream")
    W_data = np.ones([2, 2], np.float32)
    b_data = np.ones([2], np.float32)
    W = popxl.variable(W_data, name="W")
    b = popxl.variable(b_data, name="b")

    # This is the loop carried input.
    x = ops.init([2, 2], popxl.float32, "init")

    # Create graph, pass in streams
    linear = Linear(x_h2d, y_d2h)
    linear_graph = ir.create_graph(linear, x, out_features=2)

    # call graph in a loop
    # the x, W, b will be copied to the input of the `linear_graph` before the first iteration
    # the outputs of each iteration will be copied to the inputs of the next iteration
    # The outputs of the last iteration serve as the output of the `repeat` op
    # Note the iterations of 8, which we will also use as the num_host_transfers
    (o,) = ops.repeat(
        linear_graph, _REPEAT_COUNT, x, inputs_dict={linear.W: W, linear.b: b}
    )

# The host_load and host_store ops are both run _REPEAT_COUNT number of times, so set
# num_host_transfers
ir.num_host_transfers = _REPEAT_COUNT

# Note the input shape here (_REPEAT_COUNT, *data_shape):
x_data = np.random.default_rng(0).random([_REPEAT_COUNT, 2, 2]).astype(np.float32)
input_ = {x_h2d: x_data}

with popxl.Session(ir, "ipu_model") as session:
    outputs = session.run(input_)

# Iteration i loads slot i of x and stores x @ W + b into slot i of y.
expected = x_data @ W_data + b_data
print(f"Output shape is {outputs[y_d2h].shape}")
print(f"Last iteration's output is {outputs[y_d2h][-1].ravel().tolist()}")
np.testing.assert_allclose(outputs[y_d2h], expected, rtol=1e-6)
