"""``builder.aiGraphcore``: PopART's own operators, in the ``ai.graphcore`` domain.

Each method writes one node whose import rule is in :mod:`ipuxl.onnx.ops.graphcore`::

    probs = builder.aiOnnx.softmax([logits])
    loss = builder.aiGraphcore.nllloss([probs, labels], popart.ReductionType.Mean)

The methods take ``args`` (input ids), PopART's attributes in PopART's order and
``debugContext``; they return one id, or a list for ``groupnormalization`` (result, mean,
inverse standard deviation) and ``call``. Losses take a ``popart.ReductionType``
(``Sum``, ``Mean``, ``NoReduction``) and write it as PopART does, ``"Sum"``, ``"Mean"``,
``"None"``.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from ipuxl.popart.errors import popart_exception
from ipuxl.popart.losses import ReductionType

__all__ = ["AiGraphcoreOpset1", "InitType"]

DOMAIN = "ai.graphcore"


class InitType(IntEnum):
    """``aiGraphcore.init``'s initial value."""

    NoInit = 0  # noqa: N815 - PopART's names
    Zero = 1  # noqa: N815


def _reduction(value: Any) -> str:
    if isinstance(value, ReductionType):
        return {"NoReduction": "None"}.get(value.name, value.name)
    if isinstance(value, str) and value in ("Sum", "Mean", "None", "NoReduction"):
        return "None" if value == "NoReduction" else value
    raise popart_exception(f"Expected a popart.ReductionType (Sum, Mean, NoReduction), got "
                           f"{value!r}.")


class AiGraphcoreOpset1:
    """The ai.graphcore opset 1 operators (see the module docstring)."""

    version = 1

    def __init__(self, builder: Any):
        self._builder = builder

    def _node(self, op_type: str, args: Any, attributes: dict[str, Any], *,
              inputs: tuple[int, int], debug: Any, outputs: int = 1) -> list[str]:
        ids = [args] if isinstance(args, str) else list(args)
        low, high = inputs
        if not low <= len(ids) <= high:
            expected = f"{low}" if low == high else f"{low} to {high}"
            raise popart_exception(f"aiGraphcore.{op_type.lower()} ({op_type}) takes "
                                   f"{expected} input(s), got {len(ids)}: {ids}.")
        written = {k: v for k, v in attributes.items() if v is not None}
        return self._builder.add_node(op_type, ids, written, outputs, domain=DOMAIN,
                                      version=self.version, debug_context=debug)

    def _one(self, op_type: str, args: Any, debug: Any, arity: int = 1, **attrs: Any) -> str:
        return self._node(op_type, args, attrs, inputs=(arity, arity), debug=debug)[0]

    # ------------------------------------------------------------------ losses
    def nllloss(self, args: list[str], reduction: Any = ReductionType.Mean,
                ignoreIndex: int | None = None,  # noqa: N803 - PopART's names
                inputIsLogProbability: bool = False, debugContext: Any = "") -> str:  # noqa: N803
        """Negative log likelihood of ``args = [probs, labels]`` (classes on the last
        axis of ``probs``; ``inputIsLogProbability`` when they are log-probabilities)."""
        attributes = {"reduction": _reduction(reduction),
                      "ignoreIndex": None if ignoreIndex is None else int(ignoreIndex),
                      "inputIsLogProbability": int(bool(inputIsLogProbability))}
        return self._node("Nll", args, attributes, inputs=(2, 2), debug=debugContext)[0]

    def l1loss(self, args: list[str], lambda_: float, reduction: Any = ReductionType.Mean,
               debugContext: Any = "") -> str:  # noqa: N803
        """``lambda * |x|`` reduced (``lambda`` is positional: it is a Python keyword)."""
        attributes = {"lambda": float(lambda_), "reduction": _reduction(reduction)}
        return self._node("L1", args, attributes, inputs=(1, 1), debug=debugContext)[0]

    def identityloss(self, args: list[str], reduction: Any = ReductionType.Mean,
                     debugContext: Any = "") -> str:  # noqa: N803
        """The input reduced (a scalar input is the loss as it is)."""
        return self._one("IdentityLoss", args, debugContext, reduction=_reduction(reduction))

    # ------------------------------------------------------------------ elementwise
    def gelu(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        return self._one("Gelu", args, debugContext)

    def swish(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        return self._one("Swish", args, debugContext)

    def square(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        return self._one("Square", args, debugContext)

    def detach(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        """The input, with no gradient flowing back through it."""
        return self._one("Detach", args, debugContext)

    def round(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        """Round half away from zero."""
        return self._one("Round", args, debugContext)

    def expm1(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        return self._one("Expm1", args, debugContext)

    def log1p(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        return self._one("Log1p", args, debugContext)

    def atan2(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        """``atan2(args[0], args[1])``, elementwise."""
        return self._one("Atan2", args, debugContext, arity=2)

    def fmod(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        return self._one("Fmod", args, debugContext, arity=2)

    def remainder(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        return self._one("Remainder", args, debugContext, arity=2)

    def bitwisenot(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        return self._one("BitwiseNot", args, debugContext)

    def bitwiseand(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        return self._one("BitwiseAnd", args, debugContext, arity=2)

    def bitwiseor(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        return self._one("BitwiseOr", args, debugContext, arity=2)

    def bitwisexor(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        return self._one("BitwiseXor", args, debugContext, arity=2)

    def scale(self, args: list[str], scale: float, debugContext: Any = "") -> str:  # noqa: N803
        """``x * scale``."""
        return self._one("Scale", args, debugContext, scale=float(scale))

    def scaledadd(self, args: list[str], scale0: float = 1.0, scale1: float = 1.0,
                  debugContext: Any = "") -> str:  # noqa: N803
        """``a * scale0 + b * scale1`` (the scales may also be inputs 3 and 4)."""
        attributes = {"scale0": float(scale0), "scale1": float(scale1)}
        return self._node("ScaledAdd", args, attributes, inputs=(2, 4), debug=debugContext)[0]

    # ------------------------------------------------------------------ tensors
    def groupnormalization(self, args: list[str], num_groups: int, epsilon: float = 1e-5,
                           debugContext: Any = "") -> list[str]:  # noqa: N803
        """Group norm of ``[x, scale, bias]``; returns ``[y, mean, invStdDev]``."""
        attributes = {"num_groups": int(num_groups), "epsilon": float(epsilon)}
        return self._node("GroupNormalization", args, attributes, inputs=(3, 3),
                          debug=debugContext, outputs=3)

    def lstm(self, args: list[str], outputFullSequence: int = 1,  # noqa: N803
             debugContext: Any = "") -> list[str]:  # noqa: N803
        """PopART's LSTM of ``[x, weights, biases, (initial_state)]``; returns ``[output,
        cell_state]`` (see :func:`ipuxl.onnx.ops.graphcore.lstm` for the layouts)."""
        return self._node("LSTM", args, {"output_full_sequence": int(outputFullSequence)},
                          inputs=(3, 5), debug=debugContext, outputs=2)

    def convflipweights(self, args: list[str], group: int = 1,
                        debugContext: Any = "") -> str:  # noqa: N803
        """The weights of the transposed convolution (channels swapped, kernel flipped)."""
        return self._one("ConvFlipWeights", args, debugContext, group=int(group))

    def subsample(self, args: list[str], strides: list[int], debugContext: Any = ""  # noqa: N803
                  ) -> str:
        """Every ``strides[i]``-th element along each axis ``i``."""
        return self._one("Subsample", args, debugContext, strides=[int(s) for s in strides])

    def depthtospace(self, args: list[str], blocksize: int, mode: str = "DCR",
                     debugContext: Any = "") -> str:  # noqa: N803
        return self._one("DepthToSpace", args, debugContext, blocksize=int(blocksize),
                         mode=str(mode))

    def reverse(self, args: list[str], dimensions: list[int], debugContext: Any = ""  # noqa: N803
                ) -> str:
        """Reverse the order of the elements along ``dimensions``."""
        return self._one("Reverse", args, debugContext,
                         dimensions=[int(d) for d in dimensions])

    def init(self, shape: list[int], data_type: Any, init_type: Any = InitType.Zero,
             batch_axis: int = -1, debugContext: Any = "") -> str:  # noqa: N803
        """A new tensor of ``shape`` and ``data_type`` (a ``popart.DataType`` or name),
        zero-filled."""
        from ipuxl.popart.tensor_info import data_type_of

        attributes = {"shape": [int(d) for d in shape],
                      "data_type": int(data_type_of(data_type).value),
                      "init_type": int(init_type), "batch_axis": int(batch_axis)}
        return self._node("Init", [], attributes, inputs=(0, 0), debug=debugContext)[0]

    def dynamicslice(self, args: list[str], axes: list[int], sizes: list[int],
                     noOverlap: int = 0, debugContext: Any = "") -> str:  # noqa: N803
        """``args = [x, offset]``: the window of ``sizes`` at ``offset`` along ``axes``."""
        return self._dynamic("DynamicSlice", args, axes, sizes, noOverlap, debugContext, 2)

    def dynamicupdate(self, args: list[str], axes: list[int], sizes: list[int],
                      noOverlap: int = 0, debugContext: Any = "") -> str:  # noqa: N803
        """``args = [x, offset, update]``: ``x`` with the window replaced by ``update``."""
        return self._dynamic("DynamicUpdate", args, axes, sizes, noOverlap, debugContext, 3)

    def dynamiczero(self, args: list[str], axes: list[int], sizes: list[int],
                    debugContext: Any = "") -> str:  # noqa: N803
        """``args = [x, offset]``: ``x`` with the window set to zero."""
        return self._dynamic("DynamicZero", args, axes, sizes, None, debugContext, 2)

    def dynamicadd(self, args: list[str], axes: list[int], sizes: list[int],
                   debugContext: Any = "") -> str:  # noqa: N803
        """``args = [x, offset, update]``: ``x`` with ``update`` added to the window."""
        return self._dynamic("DynamicAdd", args, axes, sizes, None, debugContext, 3)

    def _dynamic(self, op_type: str, args: Any, axes: Any, sizes: Any, no_overlap: Any,
                 debug: Any, arity: int) -> str:
        if len(list(axes)) != len(list(sizes)):
            raise popart_exception(f"aiGraphcore.{op_type.lower()}: axes {list(axes)} and "
                                   f"sizes {list(sizes)} differ in length.")
        attributes = {"axes": [int(a) for a in axes], "sizes": [int(s) for s in sizes],
                      "noOverlap": None if no_overlap is None else int(no_overlap)}
        return self._node(op_type, args, attributes, inputs=(arity, arity), debug=debug)[0]

    # ------------------------------------------------------------------ plumbing
    def printtensor(self, args: list[str], print_gradient: int = 1,
                    debugContext: Any = "", title: str = "") -> str:  # noqa: N803
        """The input, printed when the model runs (and its gradient, if
        ``print_gradient``)."""
        attributes = {"print_gradient": int(print_gradient), "title": title or None}
        return self._node("PrintTensor", args, attributes, inputs=(1, 1),
                          debug=debugContext)[0]

    def replicatedallreduce(self, args: list[str], commGroup: Any = None,  # noqa: N803
                            debugContext: Any = "") -> str:  # noqa: N803
        """The sum of the input over the replicas (all of them: ``commGroup`` is
        accepted, and only the default group is supported)."""
        return self._one("ReplicatedAllReduce", args, debugContext)

    def call(self, args: list[str], num_outputs: int, callee: Any,
             debugContext: Any = "") -> list[str]:  # noqa: N803
        """Call the subgraph built by ``callee`` (a subgraph Builder) on ``args``."""
        from ipuxl.popart.builder import Builder

        if not isinstance(callee, Builder):
            raise TypeError(f"aiGraphcore.call: callee must be a subgraph Builder "
                            f"(builder.createSubgraphBuilder()), got {type(callee).__name__}.")
        graph = callee.graph_proto()
        if len(graph.input) != len(list(args)) or len(graph.output) != int(num_outputs):
            raise popart_exception(
                f"aiGraphcore.call: the callee takes {len(graph.input)} input(s) and makes "
                f"{len(graph.output)} output(s); the call gives {len(list(args))} input(s) "
                f"and asks for {num_outputs}.")
        return self._node("Call", args, {"callee": graph}, inputs=(0, len(graph.input)),
                          debug=debugContext, outputs=int(num_outputs))
