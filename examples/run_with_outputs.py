"""PopXL user guide, listing 12.3: ``session.run_with_outputs`` fills the caller's arrays.

The output array may be part of a larger array: here each run writes one row of a table,
through a view, with ``num_host_transfers = 3`` slots per run.

Run:  python examples/run_with_outputs.py
"""

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops

ir = popxl.Ir()
with ir.main_graph:
    input0 = popxl.h2d_stream([1], popxl.float32, name="input0_stream")
    input1 = popxl.h2d_stream([1], popxl.float32, name="input1_stream")
    o_d2h = popxl.d2h_stream([1], popxl.float32, name="output_stream")
    # Three loads and stores per run: slot k of each stream is used by the k-th pair.
    for _ in range(3):
        a = ops.host_load(input0, "a")
        b = ops.host_load(input1, "b")
        ops.host_store(o_d2h, ops.add(a, b))

ir.num_host_transfers = 3

data_a = np.arange(3, dtype=np.float32).reshape(3, 1)        # host layout [3, 1]
data_b = np.full((3, 1), 10, dtype=np.float32)
inputs = {input0: data_a, input1: data_b}

# One row per run; each run writes the 3 slots of its row, in place.
table = np.zeros((2, 3, 1), dtype=np.float32)

with popxl.Session(ir, "ipu_model") as session:
    for run in range(2):
        run_output = {o_d2h: table[run]}
        session.run_with_outputs(inputs, run_output)
        inputs = {input0: data_a * 2, input1: data_b}

print(f"Table is {table.ravel().tolist()}")
np.testing.assert_array_equal(table[0], data_a + data_b)
np.testing.assert_array_equal(table[1], data_a * 2 + data_b)
