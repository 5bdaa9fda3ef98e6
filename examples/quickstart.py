"""ipuxl quickstart: a PopXL program, its IR, and a run on the default device.

The program streams in a batch ``x``, multiplies it by a weight matrix ``w`` (a variable,
which lives on the device between runs), adds a bias, applies ``relu``, and streams the
result out. It also counts its runs in a variable, updated in place each run.

Run:  python examples/quickstart.py      (or: make demo)
"""

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops

ir = popxl.Ir()
with ir.main_graph:
    # Host -> device: each run takes one (2, 3) array for `x`.
    x_stream = popxl.h2d_stream((2, 3), popxl.float32, name="x")
    x = ops.host_load(x_stream)

    # Variables keep their values on the device between runs.
    w_data = np.array([[1, -1], [2, 0], [0, 1]], np.float32)
    w = popxl.variable(w_data, name="w")
    runs = popxl.variable(np.int32(0), name="runs")

    y = ops.relu(x @ w + 0.5)  # the Python number becomes a float32 constant
    ops.var_updates.accumulate_(runs, popxl.constant(np.int32(1), name="one"))

    # Device -> host: each run returns one (2, 2) array for `y`.
    y_stream = popxl.d2h_stream(y.shape, y.dtype, name="y")
    ops.host_store(y_stream, y)

print("The program, as ipuxl's IR (one op per line, with the line that created it):")
print(ir)
print()

x_data = np.array([[1, 2, 3], [-1, 0, 1]], np.float32)
with popxl.Session(ir) as session:  # the default device: "cpu"
    for _ in range(3):
        outputs = session.run({x_stream: x_data})

print(f"x =\n{x_data}")
print(f"relu(x @ w + 0.5) =\n{outputs[y_stream]}")
print(f"runs = {session.get_tensor_data(runs)}")
np.testing.assert_allclose(outputs[y_stream], np.maximum(x_data @ w_data + 0.5, 0))
