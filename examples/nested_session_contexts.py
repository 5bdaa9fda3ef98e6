"""PopXL user guide, listing 12.6 (``nested_session_contexts.py``): nested
``with session:`` blocks.

Only the block that attaches (entering while detached) copies the weights to the device,
and only that block copies them back and detaches when it exits.

Run:  python examples/nested_session_contexts.py
"""

import numpy as np

import ipuxl as popxl
import ipuxl.ops as ops

ir = popxl.Ir()
with ir.main_graph:
    a = popxl.variable(np.array([1.0, 2.0], dtype=np.float32), name="a")
    a_doubled = ops.var_updates.accumulate_(a, a)
    o_d2h = popxl.d2h_stream(a_doubled.shape, a_doubled.dtype, name="output_stream")
    ops.host_store(o_d2h, a_doubled)

# Enter Ctxt 1, causes attach, weights_from_host
with popxl.Session(ir, "ipu_model") as session:
    # Attach, weights_from_host
    assert session.is_attached
    assert session.transfers.weights_from_host == 1

    # Enter Ctxt 2, still attached, no weights_from_host again
    with session:
        assert session.is_attached
        session.run()

    # Exit Ctxt 2, no detach or weights_to_host, as attached on enter
    assert session.is_attached
    assert session.transfers.weights_from_host == 1
    assert session.transfers.weights_to_host == 0

# Exit Ctxt 1, causes detach and weights_to_host as detached on enter
assert not session.is_attached
assert session.transfers.weights_to_host == 1

print(f"a is {session.get_tensor_data(a)}")
print(f"weights_from_host: {session.transfers.weights_from_host}, "
      f"weights_to_host: {session.transfers.weights_to_host}")
