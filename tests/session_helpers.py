"""Small helpers shared by the subgraph tests: store a tensor to a new stream, and run an
Ir once returning its outputs and final variable values by name."""

import ipuxl as popxl
import ipuxl.ops as ops


def store(tensor, name):
    """Host-store ``tensor`` to a new d2h stream called ``name``; return the stream."""
    stream = popxl.d2h_stream(tensor.shape, tensor.dtype, name=name)
    ops.host_store(stream, tensor)
    return stream


def run(ir, inputs=None):
    """The run outputs keyed by stream name, and the variables' values after the run."""
    with popxl.Session(ir, "cpu") as session:
        outputs = session.run(inputs or {})
    values = session.get_tensors_data(list(ir.main_graph.variables))
    return ({s.tensor_id: a for s, a in outputs.items()},
            {v.name: values[v] for v in ir.main_graph.variables})
