"""PopART's ``aiGraphcore.dynamicslice`` gradients in a TrainingSession: with
``noOverlap`` the slices' gradients are written in forward order (a later slice's
gradient replaces an earlier one's where the windows overlap), without it they add."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from builder_helpers import run_training_session  # noqa: E402

import ipuxl.popart as popart  # noqa: E402


def _weight_gradient(no_overlap: int, offsets=(0, 3), scales=(1.0, 2.0)) -> np.ndarray:
    builder = popart.Builder()
    weight = builder.addInitializedInputTensor(np.arange(10, dtype=np.float32))
    parts, feeds = [], {}
    for offset, scale in zip(offsets, scales):
        index = builder.addInputTensor(popart.TensorInfo("UINT32", [1]))
        feeds[index] = np.array([offset], np.uint32)
        window = builder.aiGraphcore.dynamicslice([weight, index], axes=[0], sizes=[5],
                                                  noOverlap=no_overlap)
        parts.append(builder.aiGraphcore.scale([window], scale))
    total = builder.aiOnnx.sum(parts)
    loss = builder.aiGraphcore.l1loss([total], 1.0, reduction=popart.ReductionType.Sum)
    grad = popart.reservedGradientPrefix() + weight
    return run_training_session(builder, loss, [grad], feeds)[grad]


def _windows(offsets, scales, overwrite: bool) -> np.ndarray:
    grad = np.zeros(10, np.float32)
    for offset, scale in zip(offsets, scales):
        window = grad[offset:offset + 5]
        window[:] = scale if overwrite else window + scale
    return grad


def test_no_overlap_slices_write_their_gradients_in_forward_order():
    # Every element of the summed windows is positive: the l1 gradient of a window is its
    # scale.
    np.testing.assert_array_equal(_weight_gradient(1), _windows((0, 3), (1.0, 2.0), True))
    np.testing.assert_array_equal(_weight_gradient(1, offsets=(3, 0)),
                                  _windows((3, 0), (1.0, 2.0), True))


def test_overlapping_slices_without_no_overlap_add_their_gradients():
    np.testing.assert_array_equal(_weight_gradient(0), _windows((0, 3), (1.0, 2.0), False))
