"""``repeat``: run a graph many times inside one ``session.run``, loading a new batch
from a stream on every iteration.

With N graph outputs, output i of one iteration becomes input i of the next (the
loop-carried inputs); the other inputs are bound once and every iteration sees the same
value. The loop lowers to one ``lax.fori_loop``: a loop of 10,000 iterations compiles as
fast as a loop of one.

Run:  python examples/graphs_repeat.py
"""

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops.repeat import repeat

BATCHES = 4

ir = popxl.Ir()
# Each stream is used once per iteration, so a run moves BATCHES slots per stream.
ir.num_host_transfers = BATCHES

with ir.main_graph:
    data = popxl.h2d_stream((3,), popxl.float32, name="data")
    running = popxl.d2h_stream((3,), popxl.float32, name="running_sum")
    total = popxl.variable(np.zeros(3, np.float32), name="total")
    weight = popxl.variable(np.array([1.0, 0.5, 2.0], np.float32), name="weight")

    def accumulate(total: popxl.Tensor, weight: popxl.Tensor) -> popxl.Tensor:
        batch = ops.host_load(data)          # slot i on iteration i
        new_total = total + batch * weight   # `total` is loop-carried (output 0)
        ops.host_store(running, new_total)   # slot i on iteration i
        return new_total                     # one output: `weight` is invariant

    body = ir.create_graph(accumulate, total, weight)
    (final,) = repeat(body, BATCHES, total, weight)

    result = popxl.d2h_stream((3,), popxl.float32, name="final")
    ops.host_store(result, final)

batches = np.arange(BATCHES * 3, dtype=np.float32).reshape(BATCHES, 3)
with popxl.Session(ir, "cpu") as session:
    outputs = session.run({data: batches})  # host array: (num_host_transfers, *shape)

weights = np.array([1.0, 0.5, 2.0], np.float32)
print(f"running sums:\n{outputs[running]}")
# `final` is stored once in the main graph: slot 0 holds it (other slots stay zero).
print(f"final = {outputs[result][0].tolist()}")
np.testing.assert_allclose(outputs[running], np.cumsum(batches * weights, axis=0))
np.testing.assert_allclose(outputs[result][0], (batches * weights).sum(axis=0))
