"""PopXL ops (``popxl.ops``): functions that add one op to the current graph.

Every op is declared once, as an :class:`ipuxl.op.OpDef` next to the function that builds
it; the modules here group them by family.
"""


from ipuxl.ops import collectives, var_updates
from ipuxl.ops.call import CallSiteInfo, call, call_with_info
from ipuxl.ops.conditional import ConditionalSiteInfo, conditional, conditional_with_info
from ipuxl.ops.elementwise import (
    abs,
    add,
    add_,
    cast,
    ceil,
    clamp,
    clip,
    cos,
    detach,
    detach_,
    div,
    equal,
    exp,
    exp_,
    floor,
    fmod,
    gelu,
    gelu_,
    geluerf,
    geluerf_,
    greater,
    identity,
    increment_mod,
    increment_mod_,
    isfinite,
    isinf,
    isnan,
    log,
    log2,  # noqa: F401 - importable, but not in PopXL's __all__
    logical_and,
    logical_not,
    logical_or,
    maximum,
    mul,
    negate,
    pow,
    relu,
    relu_,
    rename,
    scaled_add,
    scaled_add_,
    sigmoid,
    sign,
    sin,
    sqrt,
    sub,
    swish,
    swish_,
    tanh,
    where,
)
from ipuxl.ops.fp8 import pow2scale_cast_from_fp8, pow2scale_cast_to_fp8
from ipuxl.ops.host_io import host_load, host_store
from ipuxl.ops.indexing import (
    dynamic_slice,
    dynamic_update,
    dynamic_update_,
    gather,
    groupedgather,
    init,
    onehot,
    scatter,
    scatter_reduce,
    tied_gather,
)
from ipuxl.ops.matmul import matmul, matmul_pow2scaled
from ipuxl.ops.placement import io_tile_copy, ipu_copy
from ipuxl.ops.print_tensor import print_tensor
from ipuxl.ops.reduce import (
    argmax,
    argmin,
    cumsum,
    histogram,
    l1,
    l2,
    lamb_square,
    logsum,
    logsumexp,
    max,
    mean,
    median,
    min,
    prod,
    sum,
    sumsquare,
    topk,
)
from ipuxl.ops.repeat import repeat, repeat_with_info
from ipuxl.ops.shape import (
    concat,
    concat_,
    flatten,
    flatten_,
    reshape,
    reshape_,
    slice,
    slice_,
    split,
    squeeze,
    subsample,
    transpose,
    transpose_,
)

__all__ = [
    "var_updates", "collectives",
    "call", "call_with_info", "CallSiteInfo", "repeat", "repeat_with_info", "conditional",
    "conditional_with_info", "ConditionalSiteInfo", "ipu_copy", "io_tile_copy", "PadType",
    "abs", "add", "add_", "cast", "ceil", "clamp", "clip", "cos", "detach", "detach_", "div",
    "equal", "exp", "exp_", "floor", "fmod", "gelu", "gelu_", "geluerf", "geluerf_",
    "greater", "identity", "increment_mod", "increment_mod_", "isfinite", "isinf", "isnan",
    "log", "logical_and", "logical_not", "logical_or", "maximum", "mul", "negate", "pow",
    "relu", "relu_", "rename", "scaled_add", "scaled_add_", "sigmoid", "sign", "sin", "sqrt",
    "sub", "swish", "swish_", "tanh", "where",
    "host_load", "host_store", "matmul", "matmul_pow2scaled",
    "concat", "concat_", "flatten", "flatten_", "reshape", "reshape_", "slice", "slice_",
    "split", "squeeze", "subsample", "transpose", "transpose_",
    "pow2scale_cast_from_fp8", "pow2scale_cast_to_fp8", "print_tensor",
    "dynamic_slice", "dynamic_update", "dynamic_update_", "gather", "groupedgather", "init",
    "onehot", "scatter", "scatter_reduce", "tied_gather",
    "argmax", "argmin", "cumsum", "histogram", "l1", "l2", "lamb_square", "logsum",
    "logsumexp", "max", "mean", "median", "min", "prod", "sum", "sumsquare", "topk",
]

# The NN, loss, convolution, pooling, resampling, random and remote families export their ops
# through their modules' ``__all__`` (``ops.conv`` is the op, not the module).
from ipuxl.ops import conv as _conv  # noqa: E402
from ipuxl.ops import negative_log_likelihood as _loss  # noqa: E402
from ipuxl.ops import nn as _nn  # noqa: E402
from ipuxl.ops import pool as _pool  # noqa: E402
from ipuxl.ops import random as _random  # noqa: E402
from ipuxl.ops import remote as _remote  # noqa: E402
from ipuxl.ops import resize as _resize  # noqa: E402
from ipuxl.ops.conv import *  # noqa: E402, F403
from ipuxl.ops.negative_log_likelihood import *  # noqa: E402, F403
from ipuxl.ops.nn import *  # noqa: E402, F403
from ipuxl.ops.pool import *  # noqa: E402, F403
from ipuxl.ops.random import *  # noqa: E402, F403
from ipuxl.ops.remote import *  # noqa: E402, F403
from ipuxl.ops.resize import *  # noqa: E402, F403

for _family in (_conv, _loss, _nn, _pool, _random, _remote, _resize):
    __all__ += _family.__all__
del _family

from ipuxl.ops.conv import PadType  # noqa: E402 - the padding modes of `conv`
