"""PopXL user guide, listings 12.1–12.3 (``tensor_addition.py``): add two streamed inputs.

Runs the Ir twice on one Session: with ``session.run`` (which creates the output arrays)
and with ``session.run_with_outputs`` (which fills arrays the caller made).

Run:  python examples/tensor_addition.py
"""

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops

# Creating a model with popxl
ir = popxl.Ir()
main = ir.main_graph
with main:
    # host load
    input0 = popxl.h2d_stream([1], popxl.float32, name="input0_stream")
    a = ops.host_load(input0, "a")
    input1 = popxl.h2d_stream([1], popxl.float32, name="input1_stream")
    b = ops.host_load(input1, "b")

    # addition
    o = ops.add(a, b)

    # host store
    o_d2h = popxl.d2h_stream(o.shape, o.dtype, name="output_stream")
    ops.host_store(o_d2h, o)

# Some input data (the guide draws it at random; fixed values make the output checkable)
data_a = np.array([1.5], dtype=np.float32)
data_b = np.array([2.25], dtype=np.float32)
inputs = {input0: data_a, input1: data_b}

# Listing 12.1: construct the Session
ir.num_host_transfers = 1

with popxl.Session(ir, "ipu_model") as session:
    outputs = session.run(inputs)

# Listing 12.2: run the model
with session:
    outputs = session.run(inputs)

print(f"Input a is {data_a}")
print(f"Input b is {data_b}")
print(f"Result is {outputs[o_d2h]}")
np.testing.assert_array_equal(outputs[o_d2h], data_a + data_b)

# Listing 12.3: alternatively, write into output arrays we made ourselves
run_output = {o_d2h: np.empty(shape=[1]).astype(np.float32)}

with session:
    session.run_with_outputs(inputs, run_output)

print(f"Input a is {data_a}")
print(f"Input b is {data_b}")
print(f"Result is {run_output[o_d2h]}")
np.testing.assert_array_equal(run_output[o_d2h], data_a + data_b)
