"""PopXL ops (``popxl.ops``): functions that add one op to the current graph.

Every op is declared once, as an :class:`ipuxl.op.OpDef` next to the function that builds
it; the modules here group them by family.
"""

from ipuxl.ops import var_updates
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
from ipuxl.ops.host_io import host_load, host_store
from ipuxl.ops.matmul import matmul
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
    "var_updates",
    "abs", "add", "add_", "cast", "ceil", "clamp", "clip", "cos", "detach", "detach_", "div",
    "equal", "exp", "exp_", "floor", "fmod", "gelu", "gelu_", "geluerf", "geluerf_",
    "greater", "identity", "increment_mod", "increment_mod_", "isfinite", "isinf", "isnan",
    "log", "logical_and", "logical_not", "logical_or", "maximum", "mul", "negate", "pow",
    "relu", "relu_", "rename", "scaled_add", "scaled_add_", "sigmoid", "sign", "sin", "sqrt",
    "sub", "swish", "swish_", "tanh", "where",
    "host_load", "host_store", "matmul",
    "concat", "concat_", "flatten", "flatten_", "reshape", "reshape_", "slice", "slice_",
    "split", "squeeze", "subsample", "transpose", "transpose_",
]
