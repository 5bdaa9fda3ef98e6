"""ONNX operators: the nn family (see :mod:`ipuxl.onnx.ops`), declared by sub-family:

* :mod:`.nn_conv`: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv;
* :mod:`.nn_pool`: AveragePool, MaxPool, LpPool, the Global pools, MaxUnpool, MaxRoiPool,
  RoiAlign;
* :mod:`.nn_norm`: BatchNormalization, InstanceNormalization, GroupNormalization, LRN,
  LpNormalization, MeanVarianceNormalization, Dropout;
* :mod:`.nn_resize`: Resize, Upsample, GridSample, AffineGrid;
* :mod:`.nn_rnn`: RNN, GRU, LSTM;
* :mod:`.nn_loss`: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss, the random
  generators and the ``ai.onnx.preview.training`` optimizers.
"""

from __future__ import annotations

from ipuxl.onnx.ops import (  # noqa: F401 - each module declares its rules
    nn_conv,
    nn_loss,
    nn_norm,
    nn_pool,
    nn_resize,
    nn_rnn,
)
