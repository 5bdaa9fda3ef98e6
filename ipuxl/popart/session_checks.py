"""What a PopART session checks before it compiles and before each run.

* :func:`check_engine_options`: ``SessionOptions.engineOptions`` go to Poplar's engine,
  which refuses a name it does not know with ``Unrecognised option '<name>'`` (a
  ``popart.poplar_exception`` from ``prepareDevice``). Poplar's engine options are all
  in named groups (``debug.instrument``, ``autoReport.directory``...); a name outside the
  groups is refused here, a name inside one is accepted (ipuxl honours
  ``debug.allowOutOfMemory``; the others tune the IPU, which the model does not have).
* :func:`check_step_inputs`: PopART's rules for the arrays of a ``PyStepIO`` (its
  ``CorrectnessAsserter``): an array for a tensor of the model must have the step's
  number of elements and be a model input; an array for a model input the program does
  not use is ignored with a warning; an array for a tensor the model does not have is
  refused. ``stepio.enableRuntimeAsserts(False)`` turns the checks off, as in PopART.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ipuxl.popart.errors import popart_exception, poplar_exception

__all__ = ["ENGINE_OPTION_GROUPS", "check_engine_options", "check_step_inputs"]

# The groups of Poplar's engine option names.
ENGINE_OPTION_GROUPS = ("autoReport", "debug", "exchange", "opt", "platform", "profiler",
                        "streamCallbacks", "target")
_LOGGER = logging.getLogger("popart.devicex")


def check_engine_options(options: Any) -> None:
    """Refuse an engine option outside Poplar's groups.

    Raises:
        poplar_exception: a name such as ``"option"`` (Poplar's message ends the text).
    """
    engine = getattr(options, "engineOptions", None) or {}
    for name in engine:
        group, dot, rest = str(name).partition(".")
        if not (dot and rest and group in ENGINE_OPTION_GROUPS):
            raise poplar_exception(
                "SessionOptions.engineOptions go to Poplar's engine, whose option names "
                f"are <group>.<name> with a group in {list(ENGINE_OPTION_GROUPS)} (for "
                "example 'debug.instrument'): fix or remove the name. Unrecognised option "
                f"'{name}'")


def check_step_inputs(inputs: Mapping[str, Any], program: Any, model_inputs: list[str],
                      expected: Any) -> None:
    """PopART's checks of a step's input arrays (see the module's docstring).

    Args:
        inputs: the PyStepIO's ``{tensor id: array}``.
        program: the session's :class:`~ipuxl.popart.program.Program`.
        model_inputs: the ONNX model's graph inputs (initialized ones included, as PopART).
        expected: ``expected(tensor_id) -> (number of elements, description)``.

    Raises:
        popart_exception: a wrong number of elements, an array for a tensor that is not
            an input, or for a tensor the model does not have (PopART's messages).
    """
    for name, array in inputs.items():
        if name in program.infos:
            count, layout = expected(name)
            if array.size != count:
                raise popart_exception(
                    f"Unexpected number of input elements for Tensor {name}. Expected "
                    f"{count}, but received {array.size}. {layout} To disable this check "
                    "at your own risk, use IStepIO::enableRuntimeAsserts.")
            if name not in model_inputs:
                raise popart_exception(
                    f"The tensor '{name}' has been provided as one of the inputs to the "
                    "stepIO, but it is not registered as one of the inputs to the model. "
                    "Please check this tensor and your stepIO.")
        elif name in model_inputs:
            _LOGGER.warning(
                "The input Tensor %s to the ONNX Model does not appear in the optimized "
                "PopART Ir, possibly due to constant folding. Therefore, the input buffer "
                "provided will not be used. ", name)
        else:
            raise popart_exception(
                f"Testing that the buffer provided by user for input Tensor {name} has the "
                f"correct number of elements, But there is no Tensor named {name} in the "
                "Ir's main Graph, and it does not exist in the original ONNX Model. Give "
                f"only the model's inputs ({sorted(model_inputs)}).")
