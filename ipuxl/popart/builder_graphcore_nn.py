"""``builder.aiGraphcore``: PopART's neural-network, loss, normalization, spline and miscellaneous operators.

Mixed into :class:`ipuxl.popart.builder_graphcore.AiGraphcoreOpset1`; each method writes one
node (through ``self._node`` / ``self._one``) whose import rule is in
:mod:`ipuxl.onnx.ops.graphcore_nn`::

    values, indices = builder.aiGraphcore.reducemedian([x], axes=[1], keepdims=0)
    c0, c1 = builder.aiGraphcore.multiconv([[x0, w0], [x1, w1, b1]], strides=[[2, 2], [1]])
    loss = builder.aiGraphcore.ctcloss([log_probs, targets, in_lengths, target_lengths])

Names, argument orders and defaults are PopART's Python bindings' (``ctcbeamsearchdecoder``
takes ``beam_width``, ``top_paths`` and ``debug_context``). Checks PopART makes when the op
is added, or when its node becomes an op, are made here with its messages.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ipuxl.popart import builder_graphcore as _graphcore
from ipuxl.popart.errors import popart_exception
from ipuxl.popart.losses import ReductionType

__all__ = ["NnOpsMixin"]

_PARTIALS = ("float", "half")


class NnOpsMixin:
    """Methods of ``AiGraphcoreOpset1`` (see the module docstring)."""

    # ------------------------------------------------------------------ reductions
    def reducemedian(self, args: list[str], axes: Any = None, keepdims: int = 1,
                     debugContext: Any = "") -> list[str]:  # noqa: N803 - PopART's names
        """The lower median over ``axes`` (all, by default) and its int32 index in the
        reduced axes, flattened; returns ``[values, indices]``."""
        attributes = {"keepdims": _graphcore._flag("keepdims", keepdims, "reducemedian"),
                      "axes": None if axes is None else
                      _graphcore._ints("axes", axes, "reducemedian")}
        return self._node("ReduceMedian", args, attributes, inputs=(1, 1),
                          debug=debugContext, outputs=2)

    # ------------------------------------------------------------------ convolutions
    def multiconv(self, args: list[list[str]], dilations: Any = (), inDilations: Any = (),  # noqa: N803
                  pads: Any = (), outPads: Any = (), strides: Any = (),  # noqa: N803
                  availableMemoryProportions: Any = (), partialsTypes: Any = (),  # noqa: N803
                  planType: str | None = None, perConvReservedTiles: int | None = None,  # noqa: N803
                  cycleBackOff: float | None = None, enableConvDithering: Any = (),  # noqa: N803
                  debugContext: Any = "") -> list[str]:  # noqa: N803
        """Independent convolutions in one op: ``args`` holds ``[data, weights]`` or
        ``[data, weights, bias]`` per convolution; each other list argument is empty or
        holds one entry per convolution. Returns one output per convolution."""
        where = f"MultiConvOp '{debugContext or ''}'"
        if not isinstance(args, (list, tuple)) or not len(args):
            raise popart_exception(f"{where} has no input tensors. Provide at least one set "
                                   f"of inputs, as [[data, weights], ...].")
        groups = [_graphcore.tensor_ids(conv, "aiGraphcore.multiconv",
                                        "aiGraphcore.multiconv([[x, w], [x, w, b], ...])")
                  for conv in args]
        for conv in groups:
            if len(conv) < 2:
                raise popart_exception(f"Each convolution of {where} must have at least "
                                       f"two inputs - data and weights")
            if len(conv) > 3:
                raise popart_exception(f"Each convolution of {where} can have at most three "
                                       f"inputs - data, weights, and bias")
        per_conv = {"dilations": dilations, "inDilations": inDilations, "pads": pads,
                    "outPads": outPads, "strides": strides,
                    "availableMemoryProportions": availableMemoryProportions,
                    "partialsTypes": partialsTypes, "enableConvDithering": enableConvDithering}
        for name, values in per_conv.items():
            if len(values) not in (0, len(groups)):
                raise popart_exception(
                    f"For {where}, number of {name} parameter sets ({len(values)}) does not "
                    f"match the number of input sets ({len(groups)})")
        windows = {name: [_graphcore._ints(name, v, "multiconv") for v in per_conv[name]]
                   for name in ("dilations", "inDilations", "pads", "outPads", "strides")}
        for index, conv in enumerate(groups):
            self._verify_conv(conv, {name: values[index] if values else []
                                     for name, values in windows.items()})
        attributes: dict[str, Any] = {
            name: [v for values in windows[name] for v in values] or None for name in windows}
        attributes.update(self._conv_options(availableMemoryProportions, partialsTypes,
                                             planType, perConvReservedTiles, cycleBackOff,
                                             enableConvDithering))
        attributes["numConvs"] = len(groups)
        flat = [tensor for conv in groups for tensor in (conv + [""])[:3]]
        return self._node("MultiConv", flat, attributes, inputs=(len(flat), len(flat)),
                          debug=debugContext, outputs=len(groups))

    def _verify_conv(self, conv: list[str], windows: dict[str, list[int]]) -> None:
        """PopART's per-convolution checks of ``multiconv``: the lengths of the window
        lists against the data's spatial rank (messages compared whole by PopART's
        tests), then the output size."""
        from ipuxl.popart.builder_shapes import verify_window_node

        types = self._builder._inferred_types()
        if conv[0] in types:
            spatial = len(types[conv[0]][0]) - 2
            for name in ("strides", "dilations", "inDilations"):
                if windows[name] and len(windows[name]) != spatial:
                    raise popart_exception(f"Length of {name} vector {len(windows[name])} "
                                           f"!= number of spatial dimensions {spatial}")
        verify_window_node(types, "Conv", conv, {k: v for k, v in windows.items() if v})

    @staticmethod
    def _conv_options(proportions: Any, partials: Any, plan: Any, reserved: Any,
                      back_off: Any, dithering: Any) -> dict[str, Any]:
        """``multiconv``'s planning options as PopART writes them (the IPU model reads the
        memory proportions and partials types)."""
        amps = [_graphcore._float("availableMemoryProportions", p, "multiconv")
                for p in proportions]
        if any(not 0.0 < p <= 1.0 for p in amps):
            raise popart_exception(f"availableMemoryProportion must be in (0,1] (got {amps}"
                                   f" in aiGraphcore.multiconv). Give each in (0, 1].")
        for kind in partials:
            if str(kind).lower() not in _PARTIALS:
                raise popart_exception(f"Bad partialsType '{str(kind).lower()}': "
                                       f"aiGraphcore.multiconv takes \"float\" or \"half\".")
        return {"planType": plan,
                "perConvReservedTiles": None if reserved is None else
                _graphcore._int("perConvReservedTiles", reserved, "multiconv"),
                "cycleBackOff": None if back_off is None else
                _graphcore._float("cycleBackOff", back_off, "multiconv"),
                "__available_memory": amps or None,
                "__partials_type": [str(k).lower() for k in partials] or None,
                "__enable_conv_dithering": [int(bool(d)) for d in dithering] or None}

    # ------------------------------------------------------------------ losses
    def ctcloss(self, args: list[str], reduction: Any = ReductionType.Mean, blank: int = 0,
                outDataType: str = "UNDEFINED", zeroInfinity: bool = False,  # noqa: N803
                debugContext: Any = "") -> str:  # noqa: N803
        """The CTC loss of ``[log_probs [T, N, C], targets [N, S], input_lengths [N],
        target_lengths [N]]`` (lengths and targets uint32 or int32). The node's second
        output, the gradient of each sample's loss, is PopART's too; this returns the
        loss."""
        from onnx import TensorProto

        from ipuxl.popart.tensor_info import data_type_of

        out_type = 0 if outDataType == "UNDEFINED" else \
            int(getattr(TensorProto, data_type_of(outDataType).name))
        if out_type not in (0, TensorProto.FLOAT, TensorProto.FLOAT16,
                            TensorProto.DOUBLE, TensorProto.BFLOAT16):
            raise popart_exception(
                f"Unsupported data type for output 0 of Op aiGraphcore.ctcloss (expected a "
                f"floating point type, got {outDataType}). Give outDataType \"FLOAT\", "
                f"\"FLOAT16\" or \"UNDEFINED\" (the log-probabilities' type).")
        attributes = {"reduction": _graphcore._reduction(reduction, "ctcloss"),
                      "blank": _graphcore._int("blank", blank, "ctcloss"),
                      "outDataType": out_type,
                      "zeroInfinity": int(bool(zeroInfinity))}
        return self._node("Ctc", args, attributes, inputs=(4, 4), debug=debugContext,
                          outputs=2)[0]

    def ctcbeamsearchdecoder(self, args: list[str], blank: int = 0, beam_width: int = 100,
                             top_paths: int = 1, debug_context: Any = "") -> list[str]:
        """Prefix beam search of ``[log_probs [T, N, C], data_lengths [N] (uint32)]``;
        returns ``[label_probs [N, top_paths], label_lengths [N, top_paths],
        decoded_labels [N, top_paths, T]]``."""
        width = _graphcore._int("beam_width", beam_width, "ctcbeamsearchdecoder")
        paths = _graphcore._int("top_paths", top_paths, "ctcbeamsearchdecoder")
        if not 1 <= paths <= width:
            raise popart_exception(
                f"aiGraphcore.ctcbeamsearchdecoder: top_paths ({paths}) must be between 1 and "
                f"beam_width ({width}): the decoder returns the best of the beams it keeps.")
        attributes = {"blank": _graphcore._int("blank", blank, "ctcbeamsearchdecoder"),
                      "beam_width": width, "top_paths": paths}
        return self._node("CtcBeamSearchDecoder", args, attributes, inputs=(2, 2),
                          debug=debug_context, outputs=3)

    # ------------------------------------------------------------------ normalizations
    def batchnormalization(self, args: list[str], num_outputs: int, epsilon: float = 1e-5,
                           momentum: float = 0.9, debugContext: Any = ""  # noqa: N803
                           ) -> list[str]:
        """PopART's batch norm of ``[x, scale, bias, mean, var]``: with ``num_outputs`` 5
        it trains, its running variance from the unbiased batch variance (PyTorch's);
        returns ``num_outputs`` ids ``[y, mean, var, saved mean, saved var]``."""
        count = _graphcore._int("num_outputs", num_outputs, "batchnormalization")
        if count not in (1, 5):
            raise popart_exception(
                f"aiGraphcore.batchnormalization: num_outputs is 1 (inference) or 5 "
                f"(training: y, running mean and variance, batch mean and variance), got "
                f"{count}.")
        eps = _graphcore._float("epsilon", epsilon, "batchnormalization")
        mom = _graphcore._float("momentum", momentum, "batchnormalization")
        attributes = {"epsilon": None if np.float32(eps) == np.float32(1e-5) else eps,
                      "momentum": None if np.float32(mom) == np.float32(0.9) else mom,
                      "unbiased_variance": 0}
        return self._node("BatchNormalization", args, attributes, inputs=(5, 5),
                          debug=debugContext, outputs=count)

    def normalize_image(self, args: list[str], scale: float = 1.0,
                        debugContext: Any = "") -> str:  # noqa: N803
        """``[image, offsets, scales]`` (channels last, 3 of them): ``(image * scale -
        offsets) * scales``, padded to 4 channels; a uint8 image gives float16."""
        value = _graphcore._float("scale", scale, "normalize_image")
        if abs(value) < np.finfo(np.float32).eps:
            raise popart_exception("[normalizeImageOpCreator] scale should be greater than 0."
                                   f" aiGraphcore.normalize_image got scale={value}.")
        ids = _graphcore.tensor_ids(args, "aiGraphcore.normalize_image",
                                    "aiGraphcore.normalize_image([image, offsets, scales])")
        types = self._builder._inferred_types()
        if ids and ids[0] in types and (len(types[ids[0]][0]) < 2 or
                                        types[ids[0]][0][-1] != 3):
            raise popart_exception(f"requires the inner dimension to be 3. The image "
                                   f"{ids[0]!r} of aiGraphcore.normalize_image has shape "
                                   f"{types[ids[0]][0]}; give it 3 channels, last.")
        return self._one("NormalizeImage", args, debugContext, arity=3, scale=value)

    # ------------------------------------------------------------------ splines
    def splinebasis(self, args: list[str], degree: int = 1,
                    debugContext: Any = "") -> list[str]:  # noqa: N803
        """``[pseudo [E, D], kernel_size [D] (int32), is_open_spline [D] (uint8)]``:
        returns ``[basis, weight_index]``, both ``[E, (degree + 1) ** D]``."""
        value = _graphcore._int("degree", degree, "splinebasis")
        if not 0 <= value <= 3:
            raise popart_exception(f"SplineBasisOp degree = {value} is not valid: must be "
                                   f"between 0 and 3.")
        return self._node("SplineBasis", args, {"degree": value}, inputs=(3, 3),
                          debug=debugContext, outputs=2)

    def splineweighting(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        """``[input [E, I], weight [K, I, O], basis [E, S], weight_index [E, S]]``: the
        input weighted by the spline kernel, ``[E, O]``."""
        return self._one("SplineWeighting", args, debugContext, arity=4)

    # ------------------------------------------------------------------ elementwise
    def geluerf(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        """GELU computed with the error function (``gelu`` uses the tanh approximation)."""
        return self._one("GeluErf", args, debugContext)

    def nearbyint(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        """Round half to even (``round`` rounds half away from zero)."""
        return self._one("NearbyInt", args, debugContext)

    def bitwisexnor(self, args: list[str], debugContext: Any = "") -> str:  # noqa: N803
        return self._one("BitwiseXnor", args, debugContext, arity=2)

    def shapeddropout(self, args: list[str], shape: Any, ratio: float = 0.5,
                      debugContext: Any = "") -> str:  # noqa: N803
        """Dropout with one mask of ``shape`` broadcast over the input (PopART drops only
        in training sessions; ipuxl imports it as the identity)."""
        dims = _graphcore._ints("shape", shape, "shapeddropout")
        value = _graphcore._float("ratio", ratio, "shapeddropout")
        if not 0.0 <= np.float32(value) < 1.0:
            raise popart_exception(
                f"aiGraphcore.shapeddropout drops each element with probability ratio: "
                f"ai.graphcore.ShapedDropout:1 ratio value {np.float32(value)} is not valid. "
                f"Please use a value in the interval [0,1)")
        ids = _graphcore.tensor_ids(args, "aiGraphcore.shapeddropout",
                                    "aiGraphcore.shapeddropout([x], shape)")
        types = self._builder._inferred_types()
        if ids and ids[0] in types and not _broadcastable(types[ids[0]][0], dims):
            raise popart_exception(
                f"ShapedDropout: incompatible input tensor and dropout shape. "
                f"ai.graphcore.ShapedDropout:1 is configured with shape {dims} which is not "
                f"broadcastable to the input tensor with shape {types[ids[0]][0]}.")
        return self._one("ShapedDropout", args, debugContext, shape=dims, ratio=value)

    # ------------------------------------------------------------------ plumbing
    def abort(self, args: Any = (), debugContext: Any = "") -> None:  # noqa: N803
        """Stop the run: always (``args`` empty), or when ``args[0]``, one element, is
        non-zero. The session's ``run`` raises ``poplar_application_runtime_error``."""
        ids = _graphcore.tensor_ids(args, "aiGraphcore.abort", "aiGraphcore.abort([condition])")
        types = self._builder._inferred_types()
        if ids and ids[0] in types and int(np.prod(types[ids[0]][0])) > 1:
            raise popart_exception(f"Conditional abort op can only test a scalar tensor: "
                                   f"{ids[0]!r} has shape {types[ids[0]][0]}.")
        self._node("Abort", ids, {}, inputs=(0, 1), debug=debugContext, outputs=0)

    def replicatedreducescatter(self, args: list[str], collectiveOperator: Any = None,  # noqa: N803
                                commGroup: Any = None, debugContext: Any = ""  # noqa: N803
                                ) -> str:
        """This replica's chunk of the input, flattened, zero-padded to a multiple of the
        group size and reduced (``collectiveOperator``: ``Add`` by default) over the
        replicas of ``commGroup`` (all of them by default)."""
        attributes: dict[str, Any] = {}
        if collectiveOperator is not None:
            from ipuxl.ops.collectives.collectives import CollectiveOperator

            operator = collectiveOperator if isinstance(collectiveOperator,
                                                        CollectiveOperator) else \
                CollectiveOperator(_graphcore._int("collectiveOperator", collectiveOperator,
                                                   "replicatedreducescatter"))
            attributes["__collectiveOperator"] = operator.value
        if commGroup is not None:
            attributes["__collectiveCommGroup"] = [int(commGroup.type.value),
                                                   int(commGroup.replicaGroupSize)]
        return self._node("ReplicatedReduceScatter", args, attributes, inputs=(1, 1),
                          debug=debugContext)[0]


def _broadcastable(shape: list[int], mask: list[int]) -> bool:
    """Whether a mask of shape ``mask`` broadcasts to ``shape`` (NumPy's rule)."""
    if len(mask) > len(shape):
        return False
    return all(m in (1, s) for m, s in zip(reversed(mask), reversed(shape)))
