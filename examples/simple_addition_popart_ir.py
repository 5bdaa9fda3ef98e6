"""``popart.ir`` user guide, section 11.2 (``simple_addition_popart_ir.py``): the first
program of PopXL's predecessor, ``popart.ir`` (imported as ``pir``), on ipuxl.

``ir.main_graph()`` is called as a method, as ``popart.ir`` did; in PopXL and ipuxl it
is a property, and calling the graph returns the graph itself. The guide stops after
building the Ir; the Session lines at the end run it.

Run:  python examples/simple_addition_popart_ir.py
"""

import numpy as np

import ipuxl as pir  # popart.ir's name for the package
import ipuxl.ops as ops

# Creating a model with popart.ir
ir = pir.Ir()
main = ir.main_graph()
with main:
    # host load
    input0 = pir.h2d_stream([1], pir.float32, name="input0_stream")
    a = ops.host_load(input0, "a")
    input1 = pir.h2d_stream([1], pir.float32, name="input1_stream")
    b = ops.host_load(input1, "b")

    # addition
    o = ops.add(a, b)

    # host store
    o_d2h = pir.d2h_stream(o.shape, o.dtype, name="output_stream")
    ops.host_store(o_d2h, o)

print(ir)

inputs = {input0: np.array([3.0], np.float32), input1: np.array([4.5], np.float32)}
with pir.Session(ir, "ipu_model") as session:
    outputs = session.run(inputs)
print(f"Result is {outputs[o_d2h]}")
np.testing.assert_array_equal(outputs[o_d2h], [7.5])
