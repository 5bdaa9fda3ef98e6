"""``popart.ir`` user guide, section 11.4 (``tensor_addition_popart_ir.py``): a variable,
a constant and an intermediate tensor.

``a`` is a variable tensor, ``b`` a constant tensor and ``o`` an intermediate tensor (the
output of an op). A Python number is turned into a constant implicitly, so ``a + 1``
computes the same as ``a + b``. The guide stops after building the Ir; the Session lines
at the end run it.

Run:  python examples/tensor_addition_popart_ir.py
"""

import numpy as np

import ipuxl as pir  # popart.ir's name for the package
import ipuxl.ops as ops

ir = pir.Ir()
main = ir.main_graph()
with main:
    a = pir.variable(3, dtype=pir.int8, name="variable_a")
    b = pir.constant(1, dtype=pir.int8, name="constant_b")

    # addition
    o = a + b
    # can also be written as (the literal becomes an int8 constant)
    o_literal = a + 1

    o_d2h = pir.d2h_stream(o.shape, o.dtype, name="output_stream")
    ops.host_store(o_d2h, o)
    o_literal_d2h = pir.d2h_stream(o_literal.shape, o_literal.dtype, name="literal_stream")
    ops.host_store(o_literal_d2h, o_literal)

print(ir)

with pir.Session(ir, "ipu_model") as session:
    outputs = session.run()
    a_data = session.get_tensor_data(a)
print(f"a + b is {outputs[o_d2h]}, a + 1 is {outputs[o_literal_d2h]}, a is {a_data}")
assert outputs[o_d2h] == outputs[o_literal_d2h] == np.int8(4)
assert outputs[o_d2h].dtype == np.int8
