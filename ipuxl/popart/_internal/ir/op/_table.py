"""Which PopART op class each ipuxl op is: ``OpDef`` name -> ``[submodule.]ClassName``.

PopART binds its ops as ``popart._internal.ir.op.<Class>``, and those whose headers
live in a folder of ``popart/op/`` under a submodule of that name: the host and remote
exchanges under ``op.exchange``, the collectives under ``op.collectives``, the dynamic
slices and updates under ``op.dynamic``. Several
ipuxl ops can share one class: PopART's ``AccumulateOp`` takes its accumulation type as
an attribute, where ipuxl has one op per type. ipuxl ops that PopXL builds out of several
PopART ops (``log2``, ``isfinite``...) and the ONNX importer's ops have no entry: their
views are plain ``Op``\\ s.
"""

from __future__ import annotations

__all__ = ["CLASS_OF", "OP_TYPE_OF"]

CLASS_OF: dict[str, str] = {
    # arithmetic and elementwise
    "abs": "AbsOp", "add": "AddOp", "add_": "AddLhsInplaceOp", "add_rhs_": "AddRhsInplaceOp",
    "sub": "SubtractOp", "mul": "MulOp", "mul_": "MulLhsInplaceOp",
    "mul_rhs_": "MulRhsInplaceOp", "div": "DivOp", "pow": "PowOp", "fmod": "FmodOp", "negate": "NegateOp",
    "maximum": "MaxOp", "ceil": "CeilOp", "floor": "FloorOp", "clip": "ClipOp",
    "cos": "CosOp", "sin": "SinOp", "tanh": "TanhOp", "exp": "ExpOp", "exp_": "ExpInplaceOp",
    "log": "LogOp", "sqrt": "SqrtOp", "sign": "SignOp", "sigmoid": "SigmoidOp",
    "relu": "ReluOp", "relu_": "ReluInplaceOp", "gelu": "GeluOp", "gelu_": "GeluInplaceOp",
    "geluerf": "GeluErfOp", "geluerf_": "GeluErfInplaceOp", "swish": "SwishOp",
    "swish_": "SwishInplaceOp", "isinf": "IsInf", "isnan": "IsNaN", "equal": "EqualOp",
    "greater": "GreaterOp", "logical_and": "AndOp", "logical_or": "OrOp",
    "logical_not": "NotOp", "where": "WhereOp", "cast": "CastOp", "identity": "IdentityOp",
    "detach": "DetachOp", "detach_": "DetachInplaceOp", "scaled_add": "ScaledAddOp",
    "scaled_add_": "ScaledAddLhsInplaceOp", "increment_mod": "IncrementModOp",
    "increment_mod_": "IncrementModInplaceOp",
    "pow2scale_cast_to_fp8": "Pow2ScaleThenCastOp",
    "pow2scale_cast_from_fp8": "CastThenPow2ScaleOp",
    # matmul, conv, pool, nn
    "matmul": "MatMulOp", "matmul_pow2scaled": "MatMulOp", "conv": "ConvOp",
    "conv_pow2scaled": "ConvOp", "conv_transpose": "ConvTransposeOp",
    "conv_transpose_pow2scaled": "ConvTransposeOp", "average_pool": "AveragePoolOp",
    "max_pool": "MaxPoolOp", "softmax": "SoftmaxOp", "log_softmax": "LogSoftmaxOp",
    "group_norm": "GroupNormOp", "layer_norm": "GroupNormOp",
    "batch_norm_inference": "BatchNormOp", "dropout": "DropoutOp",
    "shaped_dropout": "ShapedDropoutOp", "interpolate": "ResizeOp", "roi_align": "RoiAlignOp",
    "nll_loss": "NllOp", "nll_loss_with_softmax_grad": "NlllWithSoftmaxGradDirectOp",
    "onehot": "OnehotOp", "histogram": "HistogramOp", "topk": "TopKOp", "cumsum": "CumSumOp",
    # reductions
    "sum": "ReduceSumOp", "mean": "ReduceMeanOp", "prod": "ReduceProdOp",
    "max": "ReduceMaxOp", "min": "ReduceMinOp", "median": "ReduceMedianOp",
    "sumsquare": "ReduceSumSquareOp", "l1": "ReduceL1Op", "l2": "ReduceL2Op",
    "logsum": "ReduceLogSumOp", "logsumexp": "ReduceLogSumExpOp",
    "argmax": "ArgMaxOp", "argmin": "ArgMinOp",
    # shape and indexing
    "reshape": "ReshapeOp", "reshape_": "ReshapeInplaceOp", "transpose": "TransposeOp",
    "transpose_": "TransposeInplaceOp", "slice": "SliceOp", "slice_": "SliceInplaceOp",
    "concat": "ConcatOp", "concat_": "ConcatInplaceOp", "split": "SplitOp",
    "subsample": "SubsampleOp", "gather": "GatherOp", "groupedgather": "GatherOp",
    "tied_gather": "TiedGatherOp", "scatter": "ScatterOp", "scatter_reduce": "ScatterReduceOp",
    "dynamic_slice": "dynamic.DynamicSliceOp", "dynamic_update": "dynamic.DynamicUpdateOp",
    "dynamic_update_": "dynamic.DynamicUpdateInplaceOp",
    # variables and optimiser updates
    "init": "InitOp", "accumulate_": "AccumulateOp", "accumulate_square_": "AccumulateOp",
    "accumulate_mean_": "AccumulateOp", "accumulate_moving_average_": "AccumulateOp",
    "accumulate_moving_average_square_": "AccumulateOp",
    "sparse_accumulate_": "SparseAccumulateOp", "accumulator_scale_": "AccumulatorScaleOp",
    "accumulator_zero_": "AccumulatorZeroOp", "copy_var_update_": "CopyVarUpdateOp",
    "adam_updater": "AdamUpdaterOp", "adamax_updater": "AdamUpdaterOp",
    "lamb_updater": "AdamUpdaterOp", "adam_var_update": "AdamVarUpdateOp",
    "lamb_square": "LambSquareOp",
    # random
    "random_normal": "RandomNormalOp", "random_uniform": "RandomUniformOp",
    "create_random_seed": "ModifyRandomSeedOp",
    # control flow, placement, printing
    "call": "CallOp", "repeat": "LoopOp", "conditional": "IfOp", "ipu_copy": "IpuCopyOp",
    "io_tile_copy": "IoTileCopyOp", "print_tensor": "PrintTensorOp",
    # exchange
    "host_load": "exchange.HostLoadOp", "host_store": "exchange.HostStoreOp",
    "remote_load": "exchange.RemoteLoadOp", "remote_load_": "exchange.RemoteLoadInplaceOp",
    "remote_store": "exchange.RemoteStoreOp", "remote_code_load": "exchange.RemoteCodeLoadOp",
    # collectives
    "all_reduce": "collectives.AllReduceOp",
    "all_reduce_identical_inputs": "collectives.AllReduceOp",
    "all_reduce_identical_grad_inputs": "collectives.AllReduceOp",
    "replicated_all_reduce": "collectives.ReplicatedAllReduceOp",
    "replicated_all_reduce_": "collectives.ReplicatedAllReduceInplaceOp",
    "replicated_all_gather": "collectives.ReplicatedAllGatherOp",
    "replicated_reduce_scatter": "collectives.ReplicatedReduceScatterOp",
    "replica_sharded_slice": "collectives.ReplicatedReduceScatterOp",
    "replicated_slice": "collectives.ReplicatedReduceScatterOp",
}

# ``Op.opType()`` where it is not the class name less its ``Op`` suffix: the type of the
# op's ``OperatorIdentifier`` (ONNX's name, or the ``ai.graphcore`` one PopART registers).
# ``AccumulatorZeroOp`` is built with its base's identifier.
OP_TYPE_OF: dict[str, str] = {
    "SubtractOp": "Sub", "NegateOp": "Neg", "BatchNormOp": "BatchNormalization",
    "GroupNormOp": "GroupNormalization", "OnehotOp": "OneHot",
    "TiedGatherOp": "PopartTiedGather", "SparseAccumulateOp": "PopartSparseAccumulate",
    "AccumulatorZeroOp": "AccumulatorScale",
}
