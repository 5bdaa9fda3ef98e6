"""The helpers the PopART Builder tests share: import a Builder's model with
``ipuxl.onnx.model_to_ir`` and run it once (:func:`run_builder`), or run it once in a
PopART InferenceSession (:func:`run_inference_session`) or TrainingSession
(:func:`run_training_session`)."""

from __future__ import annotations

from typing import Any

import numpy as np

import ipuxl
from ipuxl.onnx import model_to_ir


def run_builder(builder: Any, feeds: dict[str, np.ndarray], device: str = "cpu"
                ) -> dict[str, np.ndarray]:
    """Import the builder's model and run it once; the outputs by id."""
    program = model_to_ir(builder.getModelProto())
    with ipuxl.Session(program.ir, device) as session:
        outputs = session.run({program.inputs[k]: v for k, v in feeds.items()})
    return {name: np.asarray(outputs[stream]) for name, stream in program.outputs.items()}


def run_inference_session(builder: Any, outputs: list[str], feeds: dict[str, np.ndarray]
                          ) -> dict[str, np.ndarray]:
    """Make ``outputs`` the builder's outputs and run its model once in a PopART
    InferenceSession on the CPU; the anchors by id."""
    import ipuxl.popart as popart

    for output in outputs:
        builder.addOutputTensor(output)
    flow = popart.DataFlow(1, {o: popart.AnchorReturnType("All") for o in outputs})
    session = popart.InferenceSession(builder.getModelProto(), flow,
                                      popart.DeviceManager().createCpuDevice())
    anchors = session.initAnchorArrays()
    session.prepareDevice()
    session.weightsFromHost()
    session.run(popart.PyStepIO(feeds, anchors))
    return anchors


def run_training_session(builder: Any, loss: str, anchors: list[str],
                         feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One step of the builder's model in a PopART TrainingSession on the CPU (loss
    ``loss``, ``ConstSGD(0.1)``); the anchors by id."""
    import ipuxl.popart as popart

    flow = popart.DataFlow(1, {a: popart.AnchorReturnType("All") for a in anchors})
    session = popart.TrainingSession(builder.getModelProto(), flow, loss, popart.ConstSGD(0.1),
                                     deviceInfo=popart.DeviceManager().createCpuDevice())
    session.prepareDevice()
    session.weightsFromHost()
    arrays = session.initAnchorArrays()
    session.run(popart.PyStepIO(feeds, arrays))
    return arrays
