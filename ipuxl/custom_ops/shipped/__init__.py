"""The Python implementations ipuxl ships for C++ custom ops real programs load:
popxl-addons' ops, each module registering its binding module(s) on import."""
from ipuxl.custom_ops.shipped import (  # noqa: F401
    collectives,  # noqa: F401
    cross_entropy_sharded,  # noqa: F401
    fp8_scale,
    grad_reduce_square_add,  # noqa: F401
    layer_norm_distributed,  # noqa: F401
    layout,
    quantize,
    rotary,  # noqa: F401
    sparse,
)
