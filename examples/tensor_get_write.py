"""PopXL user guide, listing 12.4 (``tensor_get_write.py``): read and write tensor data.

``session.get_tensor_data`` reads a ``Variable`` or a ``Constant``;
``session.write_variable_data`` writes a ``Variable`` on the host and, while attached,
on the device.

Run:  python examples/tensor_get_write.py
"""

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops

ir = popxl.Ir()
main = ir.main_graph
with main:
    a = popxl.variable(3, dtype=popxl.int32, name="variable_a")
    b = popxl.constant(1, dtype=popxl.int32, name="constant_b")

    # addition
    o = a + b

    # host store
    o_d2h = popxl.d2h_stream(o.shape, o.dtype, name="output_stream")
    ops.host_store(o_d2h, o)

ir.num_host_transfers = 1

with popxl.Session(ir, "ipu_model") as session:
    outputs = session.run()

    print(f"Result is {outputs[o_d2h]}")

    # Takes a `popxl.Constant` or `popxl.Variable` tensor
    # Retrieves the data for the specified tensor
    a_data = session.get_tensor_data(a)
    b_data = session.get_tensor_data(b)

    # Check the device values of 'a', 'b'
    assert a_data == np.array(3)
    assert b_data == np.array(1)

    # Takes a `popxl.Variable`
    # Writes a new value for `a` on device
    session.write_variable_data(a, np.array(5).astype(np.int32))

    # Variable now updated on 'device'
    assert session.get_tensor_data(a) == np.array(5)

    # ... and the next run uses it
    outputs = session.run()
    print(f"Result after the write is {outputs[o_d2h]}")
    assert outputs[o_d2h] == np.array(6)
