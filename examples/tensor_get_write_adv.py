"""PopXL user guide, listing 12.5 (``tensor_get_write_adv.py``): exactly when the host and
the device exchange weights while tensors are read and written.

The host keeps a copy of the weights that acts as a cache of the device's: a read copies
the weights from the device only when a ``run`` may have changed them since the last
copy. The comments are the guide's; the asserts pin each one with
``session.transfers`` (an ipuxl addition counting ``weights_from_host`` and
``weights_to_host``).

Run:  python examples/tensor_get_write_adv.py
"""

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops

ir = popxl.Ir()
with ir.main_graph:
    a = popxl.variable(3, dtype=popxl.int32, name="variable_a")
    b = popxl.constant(1, dtype=popxl.int32, name="constant_b")
    # Each run adds b to a on the device, so a run makes the host copy of a out of date.
    a_updated = ops.var_updates.accumulate_(a, b)
    o_d2h = popxl.d2h_stream(a_updated.shape, a_updated.dtype, name="output_stream")
    ops.host_store(o_d2h, a_updated)

some_new_np_data = np.array(10, dtype=np.int32)


def transfers() -> tuple[int, int]:
    """(weights_from_host, weights_to_host) so far."""
    return session.transfers.weights_from_host, session.transfers.weights_to_host


session = popxl.Session(ir, "ipu_model")
assert transfers() == (0, 0)

# Allowed when detached, device weights will be updated on next context enter
session.write_variable_data(a, some_new_np_data)
assert transfers() == (0, 0)

with session:
    assert transfers() == (1, 0)  # entering the context: weights_from_host
    # No weights_to_host as no `run` has invalidated the host weights yet
    a_data = session.get_tensor_data(a)
    assert transfers() == (1, 0) and a_data == 10

    outputs = session.run()
    assert outputs[o_d2h] == 11

    # No weights_to_host, is constant
    b_data = session.get_tensor_data(b)
    assert transfers() == (1, 0) and b_data == 1
    # Causes weights_to_host as host weights currently out-of-sync
    datas = session.get_tensors_data([a, b])
    assert transfers() == (1, 1) and datas[a] == 11 and datas[b] == 1
    # Any number of further reads: no more transfers
    session.get_tensors_data([a, b])
    assert transfers() == (1, 1)

    # Performs weights_from_host
    session.write_variable_data(a, some_new_np_data)
    assert transfers() == (2, 1)

    # No weights_to_host, write_variable_data did not invalidate
    a_data = session.get_tensor_data(a)
    assert transfers() == (2, 1) and a_data == 10

    outputs = session.run()
    assert outputs[o_d2h] == 11

# Leave context, causes detach and weights_to_host
assert transfers() == (2, 2)

# No weights_to_host as detached. Latest weights were already fetched due to
# leaving context
tensor_datas = session.get_tensors_data([a, b])
assert transfers() == (2, 2)
print(f"a is {tensor_datas[a]}, b is {tensor_datas[b]}")
print(f"weights_from_host: {session.transfers.weights_from_host}, "
      f"weights_to_host: {session.transfers.weights_to_host}")
