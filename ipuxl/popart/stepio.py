"""The data of one ``session.run``: ``PyStepIO``, ``PyStepIOCallback``, ``PyWeightsIO``.

``PyStepIO(inputs, outputs)`` holds, per input tensor id, a NumPy array of the whole
step (``[bps, accl, repl, *shape]``, size-1 dimensions left out; no ``repl`` for a
broadcast input, :mod:`ipuxl.popart.stream_layout`) and, per anchor, the array ``run``
fills (``session.initAnchorArrays()`` makes them). Like PopART's, it remembers where each
input's reading stopped (:meth:`PyStepIO.read_input`). ``PyStepIOCallback``
asks for each micro-batch's input and hands over each output through four callbacks,
as PopART's does. ``PyWeightsIO`` names the host arrays ``readWeights``/``writeWeights``
copy weights into and out of.

The values are checked where they enter: input data must be numbers (None, strings and
objects are refused here; the session converts them to the tensor's dtype with the PopXL
rule, :func:`ipuxl.host_values.cast`), and the arrays PopART writes into (anchors,
``readWeights`` targets) must be writeable NumPy arrays (their dtype and size are
checked against the model before a run; see :func:`ipuxl.popart.arguments.output_array`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ipuxl.host_values import check_numbers
from ipuxl.popart.errors import popart_exception

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
        self.inputs = {name: _input_data(name, value, "PyStepIO input")
                       for name, value in inputs.items()}
        for name, array in outputs.items():
            _check_id(name, "PyStepIO anchor")
            _check_writeable(array, f"PyStepIO: the array of anchor {name!r}",
                             "Use session.initAnchorArrays() to make the anchor arrays.")
        self.outputs = dict(outputs)
        self._offsets = dict.fromkeys(self.inputs, 0)

    def read_input(self, name: str, fetches: int, fetch_elements: int) -> np.ndarray:
        """The next ``fetches`` micro-batches of ``fetch_elements`` elements of input
        ``name``, flat, read as PopART's does: from where the last run stopped, wrapping
        around to the start of the array when its end is reached exactly. An array of
        exactly one step's elements (what the runtime asserts check) is read whole by
        every run; with the asserts off, a shorter array repeats within a step and a
        longer one goes on where the previous step stopped.

        Raises:
            popart_exception: the array does not hold a whole number of micro-batches
                (PopART would read past its end).
        """
        data = self.inputs[name].reshape(-1)
        if fetch_elements == 0:
            return data[:0]
        stored, rest = divmod(data.size, fetch_elements)
        if rest or not stored:
            raise popart_exception(
                f"PyStepIO input {name!r} has {data.size} elements, not a whole number of "
                f"micro-batches of {fetch_elements} elements: the stream reads the array one "
                "micro-batch at a time and wraps around at its end, so it would read past "
                "it. Give a multiple of the micro-batch's elements (with the runtime asserts "
                "on, exactly one step's).")
        start = self._offsets[name] // fetch_elements
        order = (start + np.arange(fetches)) % stored
        self._offsets[name] = int((start + fetches) % stored) * fetch_elements
        return data.reshape(stored, fetch_elements)[order].reshape(-1)


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
        callbacks = {"input_callback": input_callback,
                     "input_complete_callback": input_complete_callback,
                     "output_callback": output_callback,
                     "output_complete_callback": output_complete_callback}
        for name, callback in callbacks.items():
            if not callable(callback):
                raise TypeError(f"PyStepIOCallback: {name} must be callable, got "
                                f"{type(callback).__name__}. Pass a function.")
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
        for name, value in weights.items():
            _input_data(name, value, "PyWeightsIO weight")
        self.weights = dict(weights)

    def contains(self, tensor_id: str) -> bool:
        return tensor_id in self.weights


def _check_id(name: Any, what: str) -> None:
    if not isinstance(name, str):
        raise TypeError(f"{what} ids are strings (the ids the Builder returns), got "
                        f"{type(name).__name__} {name!r}.")


def _input_data(name: Any, value: Any, what: str) -> Any:
    """``value`` as an array of numbers (a NumPy array stays the same object)."""
    _check_id(name, what)
    if value is None:
        raise TypeError(f"{what} {name!r} is None: pass a numpy array of the tensor's data.")
    try:
        array = value if isinstance(value, np.ndarray) else np.asarray(value)
    except ValueError as error:  # ragged nested lists
        raise TypeError(f"{what} {name!r} is not an array: {error}. Pass a numpy array of "
                        "the tensor's data.") from None
    check_numbers(array, f"{what} {name!r}")
    return array


def _check_writeable(array: Any, what: str, fix: str) -> None:
    if not isinstance(array, np.ndarray):
        raise popart_exception(f"{what} must be a numpy array (PopART writes into it), got "
                               f"{type(array).__name__}. {fix}")
    if not array.flags.writeable:
        raise popart_exception(f"{what} is read-only, and PopART writes the result into "
                               f"it. Pass a writeable array. {fix}")
