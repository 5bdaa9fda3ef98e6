"""The ONNX operators ipuxl imports, declared by family (see :mod:`ipuxl.onnx.registry`).

* ``constants``: Constant, Identity and the other value plumbing;
* ``math``: elementwise arithmetic, comparisons, logic, casts, activations, MatMul/Gemm,
  quantization;
* ``tensor``: shapes, indexing, slicing, reductions, scatter/gather, sorting;
* ``nn``: convolutions, pooling, normalizations, resizing, recurrent layers, losses;
* ``attention``: attention and the transformer-era operators;
* ``control_flow``: If, Loop, Scan, and the sequence and optional operators;
* ``gradient``: ``Gradient`` of the training domain, by ipuxl's autodiff;
* ``graphcore``: the ``ai.graphcore`` domain that ``popart.Builder().aiGraphcore`` writes
  (``graphcore_indexing`` and ``graphcore_nn`` hold its indexing and neural-network families).
"""

from ipuxl.onnx.ops import (  # noqa: F401 - each module declares its rules
    attention,
    constants,
    control_flow,
    gradient,
    graphcore,
    graphcore_indexing,
    graphcore_nn,
    math,
    nn,
    tensor,
)
