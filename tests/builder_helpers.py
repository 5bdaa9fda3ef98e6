"""The helper the PopART Builder tests share: import a Builder's model with
``ipuxl.onnx.model_to_ir`` and run it once."""

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
