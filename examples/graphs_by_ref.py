"""Pass by value versus pass by reference.

A subgraph works on copies of its inputs: an in-place update inside it is visible to its
later ops and its outputs, but not to the caller's tensor. Annotate a parameter with
``popxl.TensorByRef`` (or create the input with ``graph_input(..., by_ref=True)``) and the
caller's tensor receives the input's final value.

Run:  python examples/graphs_by_ref.py
"""

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops
from ipuxl.ops.call import call
from ipuxl.ops.repeat import repeat

ir = popxl.Ir()

with ir.main_graph:
    by_value = popxl.variable(np.float32(1), name="by_value")
    by_ref = popxl.variable(np.float32(1), name="by_ref")
    counter = popxl.variable(np.float32(0), name="counter")

    def increment_copy(x: popxl.Tensor) -> None:
        ops.var_updates.accumulate_(x, popxl.constant(np.float32(1)))

    def increment(x: popxl.TensorByRef) -> None:
        ops.var_updates.accumulate_(x, popxl.constant(np.float32(1)))

    # A by-reference call site modifies its parent tensor, so its order against other
    # uses of that tensor must be fixed: `in_sequence` orders the ops created inside.
    # (Without it the Session would raise "Inplacing ambiguity detected.")
    with popxl.in_sequence():
        call(ir.create_graph(increment_copy, by_value), by_value)  # stays 1
        call(ir.create_graph(increment, by_ref), by_ref)           # becomes 2
        # In a loop, a by-reference input keeps its updates from one iteration to the
        # next, and the parent receives the total after the loop.
        repeat(ir.create_graph(increment, counter), 5, counter)    # becomes 5
        seen = popxl.d2h_stream((), popxl.float32, name="seen")
        ops.host_store(seen, by_ref)  # after the by-reference call: sees 2

with popxl.Session(ir, "cpu") as session:
    stored = session.run()[seen]
values = session.get_tensors_data([by_value, by_ref, counter])

print(f"by value: {values[by_value]}, by reference: {values[by_ref]}, "
      f"counter after 5 iterations: {values[counter]}, stored: {stored}")
assert (values[by_value], values[by_ref], values[counter], stored) == (1, 2, 5, 2)
