"""``popart.InferenceSession.fromIr``: a PopXL Ir run with PopART's session API.

PopXL builds its program as an Ir and hands PopART's view of it (``ir._pb_ir``) to
``InferenceSession.fromIr(ir=ir._pb_ir, deviceInfo=device)``. The session then speaks
PopART's API about the Ir's own streams and variables:

* the inputs of ``run(popart.PyStepIO(inputs, anchors))`` are keyed by the ``tensor_id``
  of the Ir's h2d streams (those some ``host_load`` reads);
* the anchors are the DataFlow that ``ir._pb_ir.setDataFlow(...)`` gave, each naming a d2h
  stream's ``tensor_id``; ``batchesPerStep`` is ``ir.num_host_transfers``, and
  ``AnchorReturnType`` shapes them as in any session (``All``: ``[bps, replicas, *shape]``
  with dimensions of size 1 left out);
* the weights are the main graph's variables, by tensor id: ``weightsFromHost`` writes
  their initial (or written) values, ``readWeights``/``writeWeights`` read and write the
  host's copy, in each variable's host shape (a grouped variable's groups first).

The session runs the Ir as it is (no loss, no optimizer: PopART's ``fromIr`` makes an
inference session); gradient accumulation is 1 and the replication factor the Ir's.

Example:
    >>> import numpy as np, ipuxl as popxl, ipuxl.ops as ops
    >>> from ipuxl import popart
    >>> ir = popxl.Ir()
    >>> with ir.main_graph:
    ...     x_stream = popxl.h2d_stream([2], popxl.float32, name="x_stream")
    ...     y_stream = popxl.d2h_stream([2], popxl.float32, name="y_stream")
    ...     ops.host_store(y_stream, ops.host_load(x_stream) * 2)
    >>> ir._pb_ir.setDataFlow(popart.DataFlow(1, {"y_stream": popart.AnchorReturnType("All")}))
    >>> device = popart.DeviceManager().createCpuDevice()
    >>> session = popart.InferenceSession.fromIr(ir=ir._pb_ir, deviceInfo=device)
    >>> session.prepareDevice()
    >>> anchors = session.initAnchorArrays()
    >>> session.run(popart.PyStepIO({"x_stream": np.float32([1, 2])}, anchors))
    >>> anchors["y_stream"]
    array([2., 4.], dtype=float32)
"""

from __future__ import annotations

from typing import Any

from ipuxl.popart.errors import popart_exception
from ipuxl.popart.program import Plan, Program

__all__ = ["ir_of_view", "program_from_ir"]


def ir_of_view(ir: Any) -> Any:
    """The ipuxl ``Ir`` behind PopART's Ir view ``ir`` (``popxl_ir._pb_ir``).

    Raises:
        TypeError: ``ir`` is no such view (an ipuxl Ir itself is named in the message).
    """
    import ipuxl
    from ipuxl.popart._internal.ir import Ir as IrView

    if isinstance(ir, IrView):
        return ir._object
    hint = " (this is a popxl.Ir: pass its `_pb_ir`)" if isinstance(ir, ipuxl.Ir) else ""
    raise TypeError(
        f"InferenceSession.fromIr takes PopART's Ir, got {type(ir).__name__}{hint}. Pass "
        "`ir=popxl_ir._pb_ir`.")


def program_from_ir(ir: Any) -> Program:
    """Where a session finds the streams and variables of the Ir behind view ``ir``.

    Raises:
        popart_exception: an anchor of the Ir's DataFlow that is no d2h stream the Ir
            writes; or no anchors (PopART's message: an inference session needs one).
    """
    import onnx

    ipuxl_ir = ir_of_view(ir)
    flow = ir.getDataFlow()
    if flow.nAnchors() == 0:  # PopART's whole message (Ir::setDataFlow)
        raise popart_exception("User must specify an anchor tensor when doing inference.")
    plan = Plan(ipuxl_ir.num_host_transfers, 1, ipuxl_ir.replication_factor)
    # No ONNX model: an empty one, so nothing reads stream settings from its metadata.
    program = Program(ipuxl_ir, plan, onnx.ModelProto(), source="popxl.Ir")
    for stream in ipuxl_ir.get_all_h2d_streams():
        program.inputs[stream.tensor_id] = stream
        program.infos[stream.tensor_id] = (tuple(stream.shape), stream.dtype)
    written = {stream.tensor_id: stream for stream in ipuxl_ir.get_all_d2h_streams()}
    for anchor in flow.anchors():
        if anchor not in written:
            raise popart_exception(
                f"Anchor tensor {anchor!r} is not a d2h stream that the Ir writes: a session "
                "made with fromIr returns what `ops.host_store` sends. Its d2h streams: "
                f"{sorted(written)}. Name a stream's `tensor_id` in the DataFlow.")
        program.anchors[anchor] = written[anchor]
        program.infos[anchor] = (tuple(written[anchor].shape), written[anchor].dtype)
    for variable in ipuxl_ir.main_graph.variables:
        program.weights[variable.id] = variable
        program.infos[variable.id] = (tuple(variable.shape), variable.dtype)
    return program
