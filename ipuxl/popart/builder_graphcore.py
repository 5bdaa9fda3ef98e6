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

import numpy as np

from ipuxl.host_values import index_argument, index_arguments
from ipuxl.popart.arguments import enum_argument, number_argument
from ipuxl.popart.builder_graphcore_indexing import IndexingOpsMixin
from ipuxl.popart.builder_graphcore_nn import NnOpsMixin
from ipuxl.popart.errors import popart_exception
from ipuxl.popart.losses import ReductionType, reduction_type

__all__ = ["AiGraphcoreOpset1", "InitType", "tensor_ids"]

DOMAIN = "ai.graphcore"


class InitType(IntEnum):
    """``aiGraphcore.init``'s initial value."""

    NoInit = 0  # noqa: N815 - PopART's names
    Zero = 1  # noqa: N815


def _reduction(value: Any, op: str) -> str:
    """The ``reduction`` attribute as PopART writes it: ``"Sum"``, ``"Mean"``, ``"None"``."""
    reduction = reduction_type(value, f"aiGraphcore.{op}: reduction")
    return "None" if reduction is ReductionType.NoReduction else reduction.name


def _int(name: str, value: Any, op: str) -> int:
    return index_argument(name, value, f"aiGraphcore.{op}")


def _flag(name: str, value: Any, op: str) -> int:
    """A switch PopART takes as an int: a bool, 0 or 1."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    number = _int(name, value, op)
    if number not in (0, 1):
        raise popart_exception(f"aiGraphcore.{op}: {name} is a switch (0 or 1, or a bool), "
                               f"got {number}.")
    return number


def _ints(name: str, value: Any, op: str) -> list[int]:
    return list(index_arguments(name, value, f"aiGraphcore.{op}"))


def _float(name: str, value: Any, op: str) -> float:
    return number_argument(value, f"aiGraphcore.{op}: {name}")


def tensor_ids(args: Any, where: str, form: str) -> list[str]:
    """An op's ``args``: a list (or tuple) of tensor ids, as PopART takes them. A single
    id is refused: PopART's methods take ``[x]``, and a string is a sequence of letters.

    Raises:
        TypeError: ``args`` is not a list or tuple of strings.
    """
    if not isinstance(args, (list, tuple)):
        given = f"the single id {args!r}" if isinstance(args, str) else \
            f"{type(args).__name__} {args!r}"
        raise TypeError(f"{where} takes its inputs as a list of tensor ids, got {given}. "
                        f"Call it as {form}.")
    for tensor_id in args:
        if not isinstance(tensor_id, str):
            raise TypeError(f"{where}: tensor ids are strings, got "
                            f"{type(tensor_id).__name__} {tensor_id!r} in {list(args)}. "
                            f"Call it as {form}.")
    return list(args)


def input_count_error(op_type: str, ids: list[str], counts: tuple[int, int], where: str,
                      form: str, unbounded: int = 2**31 - 1) -> Exception:
    """PopART's error for an operator given too few or too many inputs (its message
    starts ``"Abs has invalid number of inputs 0. Must be between 1..1"``); ``counts`` is
    (fewest, most), the most ``unbounded`` for "any number" (written ``inf``)."""
    low, high = counts
    most = "inf" if high >= unbounded else str(high)
    return popart_exception(f"{op_type} has invalid number of inputs {len(ids)}. Must be "
                            f"between {low}..{most} ({where} got {ids}). Write {form}.")


class AiGraphcoreOpset1(IndexingOpsMixin, NnOpsMixin):
    """The ai.graphcore opset 1 operators (see the module docstring)."""

    version = 1

    def __init__(self, builder: Any):
        self._builder = builder

    def _node(self, op_type: str, args: Any, attributes: dict[str, Any], *,
              inputs: tuple[int, int], debug: Any, outputs: int = 1) -> list[str]:
        method = op_type.lower()
        low, high = inputs
        listed = ", ".join(["x", "y", "z"][:low]) if low == high and low <= 3 else "x, ..."
        ids = tensor_ids(args, f"aiGraphcore.{method} ({op_type})",
                         f"aiGraphcore.{method}([{listed}])")
        if not low <= len(ids) <= high:
            raise input_count_error(op_type, ids, (low, high), f"aiGraphcore.{method}",
                                    f"aiGraphcore.{method}([{listed}])")
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
        attributes = {"reduction": _reduction(reduction, "nllloss"),
                      "ignoreIndex": None if ignoreIndex is None else
                      _int("ignoreIndex", ignoreIndex, "nllloss"),
                      "inputIsLogProbability": int(bool(inputIsLogProbability))}
        return self._node("Nll", args, attributes, inputs=(2, 2), debug=debugContext)[0]

    def l1loss(self, args: list[str], lambda_: float, reduction: Any = ReductionType.Mean,
               debugContext: Any = "") -> str:  # noqa: N803
        """``lambda * |x|`` reduced (``lambda`` is positional: it is a Python keyword)."""
        attributes = {"lambda": _float("lambda", lambda_, "l1loss"),
                      "reduction": _reduction(reduction, "l1loss")}
        return self._node("L1", args, attributes, inputs=(1, 1), debug=debugContext)[0]

    def identityloss(self, args: list[str], reduction: Any = ReductionType.Mean,
                     debugContext: Any = "") -> str:  # noqa: N803
        """The input reduced (a scalar input is the loss as it is)."""
        return self._one("IdentityLoss", args, debugContext,
                         reduction=_reduction(reduction, "identityloss"))

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
        return self._one("Scale", args, debugContext, scale=_float("scale", scale, "scale"))

    def scaledadd(self, args: list[str], scale0: float = 1.0, scale1: float = 1.0,
                  debugContext: Any = "") -> str:  # noqa: N803
        """``a * scale0 + b * scale1`` (the scales may also be inputs 3 and 4)."""
        attributes = {"scale0": _float("scale0", scale0, "scaledadd"),
                      "scale1": _float("scale1", scale1, "scaledadd")}
        return self._node("ScaledAdd", args, attributes, inputs=(2, 4), debug=debugContext)[0]

    # ------------------------------------------------------------------ tensors
    def groupnormalization(self, args: list[str], num_groups: int, epsilon: float = 1e-5,
                           debugContext: Any = "") -> list[str]:  # noqa: N803
        """Group norm of ``[x, scale, bias]``; returns ``[y, mean, invStdDev]``."""
        attributes = {"num_groups": _int("num_groups", num_groups, "groupnormalization"),
                      "epsilon": _float("epsilon", epsilon, "groupnormalization")}
        return self._node("GroupNormalization", args, attributes, inputs=(3, 3),
                          debug=debugContext, outputs=3)

    def lstm(self, args: list[str], outputFullSequence: int = 1,  # noqa: N803
             debugContext: Any = "") -> list[str]:  # noqa: N803
        """PopART's LSTM of ``[x, weights, biases, (initial_state)]``; returns ``[output,
        cell_state]`` (see :func:`ipuxl.onnx.ops.graphcore.lstm` for the layouts)."""
        full = _flag("outputFullSequence", outputFullSequence, "lstm")
        return self._node("LSTM", args, {"output_full_sequence": full},
                          inputs=(3, 5), debug=debugContext, outputs=2)

    def convflipweights(self, args: list[str], group: int = 1,
                        debugContext: Any = "") -> str:  # noqa: N803
        """The weights of the transposed convolution (channels swapped, kernel flipped)."""
        return self._one("ConvFlipWeights", args, debugContext,
                         group=_int("group", group, "convflipweights"))

    def subsample(self, args: list[str], strides: list[int], debugContext: Any = ""  # noqa: N803
                  ) -> str:
        """Every ``strides[i]``-th element along each axis ``i``."""
        steps = _ints("strides", strides, "subsample")
        for index, step in enumerate(steps):
            if step <= 0:
                raise popart_exception(
                    f"Strides invalid. {step} stride at index {index}: aiGraphcore.subsample "
                    f"takes every strides[i]-th element, so strides are >= 1 (got {steps}).")
        return self._one("Subsample", args, debugContext, strides=steps)

    def depthtospace(self, args: list[str], blocksize: int, mode: str = "DCR",
                     debugContext: Any = "") -> str:  # noqa: N803
        if mode not in ("DCR", "CRD"):
            raise popart_exception(f"aiGraphcore.depthtospace: mode must be \"DCR\" or "
                                   f"\"CRD\", got {mode!r}.")
        return self._one("DepthToSpace", args, debugContext,
                         blocksize=_int("blocksize", blocksize, "depthtospace"), mode=mode)

    def reverse(self, args: list[str], dimensions: list[int], debugContext: Any = ""  # noqa: N803
                ) -> str:
        """Reverse the order of the elements along ``dimensions``."""
        return self._one("Reverse", args, debugContext,
                         dimensions=_ints("dimensions", dimensions, "reverse"))

    def init(self, shape: list[int], data_type: Any, init_type: Any = InitType.Zero,
             batch_axis: int = -1, debugContext: Any = "") -> str:  # noqa: N803
        """A new tensor of ``shape`` and ``data_type`` (a ``popart.DataType`` or name),
        zero-filled. PopART's two forms: ``init(shape, data_type, init_type, batch_axis,
        debugContext="")`` and ``init(shape, data_type, init_type, debugContext="")``."""
        from ipuxl.popart.tensor_info import data_type_of, shape_argument

        if isinstance(batch_axis, str) and debugContext == "":
            batch_axis, debugContext = -1, batch_axis  # the form without batch_axis

        attributes = {"shape": shape_argument(shape, "aiGraphcore.init"),
                      "data_type": int(data_type_of(data_type).value),
                      "init_type": int(enum_argument(InitType, init_type,
                                                     "aiGraphcore.init: init_type")),
                      "batch_axis": _int("batch_axis", batch_axis, "init")}
        return self._node("Init", [], attributes, inputs=(0, 0), debug=debugContext)[0]

    def dynamicslice(self, args: list[str], axes: list[int], sizes: list[int],
                     noOverlap: int = 0, debugContext: Any = "") -> str:  # noqa: N803
        """``args = [x, offset]``: the window of ``sizes`` at ``offset`` along ``axes``;
        ``[x, offset, slice]`` gives the window the shape of ``slice`` (a tensor of as
        many elements, from ``aiGraphcore.init``, that PopART writes the window into)."""
        return self._dynamic("DynamicSlice", args, axes, sizes, noOverlap, debugContext,
                             (2, 3))

    def dynamicupdate(self, args: list[str], axes: list[int], sizes: list[int],
                      noOverlap: int = 0, debugContext: Any = "") -> str:  # noqa: N803
        """``args = [x, offset, update]``: ``x`` with the window replaced by ``update``."""
        return self._dynamic("DynamicUpdate", args, axes, sizes, noOverlap, debugContext, (3, 3))

    def dynamiczero(self, args: list[str], axes: list[int], sizes: list[int],
                    debugContext: Any = "") -> str:  # noqa: N803
        """``args = [x, offset]``: ``x`` with the window set to zero."""
        return self._dynamic("DynamicZero", args, axes, sizes, None, debugContext, (2, 2))

    def dynamicadd(self, args: list[str], axes: list[int], sizes: list[int],
                   debugContext: Any = "") -> str:  # noqa: N803
        """``args = [x, offset, update]``: ``x`` with ``update`` added to the window."""
        return self._dynamic("DynamicAdd", args, axes, sizes, None, debugContext, (3, 3))

    def _dynamic(self, op_type: str, args: Any, axes: Any, sizes: Any, no_overlap: Any,
                 debug: Any, arity: tuple[int, int]) -> str:
        method = op_type.lower()
        axes, sizes = _ints("axes", axes, method), _ints("sizes", sizes, method)
        if len(axes) != len(sizes):
            raise popart_exception(f"aiGraphcore.{method}: axes {axes} and "
                                   f"sizes {sizes} differ in length.")
        attributes = {"axes": axes, "sizes": sizes,
                      "noOverlap": None if no_overlap is None else
                      _flag("noOverlap", no_overlap, method)}
        return self._node(op_type, args, attributes, inputs=arity, debug=debug)[0]

    # ------------------------------------------------------------------ plumbing
    def printtensor(self, args: list[str], print_gradient: int = 1,  # noqa: PLR0913
                    debugContext: Any = "", title: str = "",  # noqa: N803
                    summariseThreshold: int = 1000, edgeItems: int = 3,  # noqa: N803
                    maxLineWidth: int = 75, digits: int = 8,  # noqa: N803
                    floatFormat: int = 0, separator: str = " ",  # noqa: N803
                    openBracket: str = "[", closeBracket: str = "]") -> str:  # noqa: N803
        """The input, printed when the model runs (and its gradient, if
        ``print_gradient``), formatted as PopXL's ``print_tensor``: at most
        ``summariseThreshold`` elements before eliding to ``edgeItems`` per edge,
        ``floatFormat`` 0 auto, 1 fixed, 2 scientific, 3 none; brackets and separator are
        single characters (written as their codes, as PopART does)."""
        op = "printtensor"
        if floatFormat not in (0, 1, 2, 3):
            raise popart_exception(f"aiGraphcore.printtensor: floatFormat must be 0 (auto), 1 "
                                   f"(fixed), 2 (scientific) or 3 (none), got {floatFormat!r}.")
        characters = {}
        for name, value in (("separator", separator), ("openBracket", openBracket),
                            ("closeBracket", closeBracket)):
            if not isinstance(value, str) or len(value) != 1:
                raise popart_exception(f"aiGraphcore.printtensor: {name} must be one "
                                       f"character, got {value!r}.")
            characters[name] = ord(value)
        attributes = {"print_gradient": _flag("print_gradient", print_gradient, op),
                      "title": title or None,
                      "summariseThreshold": _int("summariseThreshold", summariseThreshold, op),
                      "edgeItems": _int("edgeItems", edgeItems, op),
                      "maxLineWidth": _int("maxLineWidth", maxLineWidth, op),
                      "digits": _int("digits", digits, op), "floatFormat": floatFormat,
                      **characters}
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
        args = tensor_ids(args, "aiGraphcore.call", "aiGraphcore.call([x, ...], n, callee)")
        num_outputs = _int("num_outputs", num_outputs, "call")
        graph = callee.graph_proto()
        for what, given, taken in (("input", len(args), len(graph.input)),
                                   ("output", num_outputs, len(graph.output))):
            if given != taken:  # PopART's exact message (its tests compare it whole)
                raise popart_exception(
                    f"For CallOp '{debugContext or ''}', number of {what}s ({given}) does not "
                    f"match that of the callee subgraph ({taken})")
        return self._node("Call", args, {"callee": graph}, inputs=(0, len(graph.input)),
                          debug=debugContext, outputs=num_outputs)
