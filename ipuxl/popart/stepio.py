"""The data of one ``session.run``: ``PyStepIO``, ``PyStepIOCallback``, ``PyWeightsIO``.

``PyStepIO(inputs, outputs)`` holds, per input tensor id, a NumPy array of the whole
step (``[bps, accl, repl, *shape]``, size-1 dimensions left out) and, per anchor, the
array ``run`` fills (``session.initAnchorArrays()`` makes them). ``PyStepIOCallback``
asks for each micro-batch's input and hands over each output through four callbacks,
as PopART's does. ``PyWeightsIO`` names the host arrays ``readWeights``/``writeWeights``
copy weights into and out of.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["PyStepIO", "PyStepIOCallback", "PyWeightsIO", "StepIOBase"]


class StepIOBase:
    """What a session reads: ``enableRuntimeAsserts``/``enableNanChecks`` switches."""

    def __init__(self) -> None:
        self.runtime_asserts = True
        self.nan_checks = False

    def enableRuntimeAsserts(self, enabled: bool) -> None:  # noqa: N802 - PopART's names
        self.runtime_asserts = bool(enabled)

    def enableNanChecks(self, enabled: bool) -> None:  # noqa: N802
        self.nan_checks = bool(enabled)


class PyStepIO(StepIOBase):
    """``PyStepIO({input_id: array}, {anchor_id: array})``."""

    def __init__(self, inputs: Mapping[str, Any], outputs: Mapping[str, np.ndarray]):
        super().__init__()
        if not isinstance(inputs, Mapping) or not isinstance(outputs, Mapping):
            raise TypeError("PyStepIO(inputs, outputs) takes two dicts keyed by tensor id: "
                            "the input arrays and the anchor arrays (initAnchorArrays()).")
        self.inputs = dict(inputs)
        self.outputs = dict(outputs)


class PyStepIOCallback(StepIOBase):
    """``PyStepIOCallback(input_callback, input_complete_callback, output_callback,
    output_complete_callback)``.

    * ``input_callback(tensor_id, prefetch) -> array``: one micro-batch of an input;
    * ``input_complete_callback(tensor_id)``: that array has been consumed;
    * ``output_callback(tensor_id) -> array``: the array to write one returned value of
      an anchor into (a micro-batch for ALL/EVERYN, the run's value for FINAL/SUM);
    * ``output_complete_callback(tensor_id)``: that array has been written.
    """

    def __init__(self, input_callback: Callable[[str, bool], Any],
                 input_complete_callback: Callable[[str], None],
                 output_callback: Callable[[str], np.ndarray],
                 output_complete_callback: Callable[[str], None]):
        super().__init__()
        self.input_callback = input_callback
        self.input_complete_callback = input_complete_callback
        self.output_callback = output_callback
        self.output_complete_callback = output_complete_callback


class PyWeightsIO:
    """``PyWeightsIO({weight_id: array})``: the arrays ``readWeights`` fills and
    ``writeWeights`` reads."""

    def __init__(self, weights: Mapping[str, np.ndarray]):
        if not isinstance(weights, Mapping):
            raise TypeError("PyWeightsIO takes a dict {weight id: numpy array}.")
        self.weights = dict(weights)

    def contains(self, tensor_id: str) -> bool:
        return tensor_id in self.weights
