"""ONNX signal-processing operators: HannWindow, HammingWindow, BlackmanWindow,
MelWeightMatrix, DFT and STFT (part of the tensor family, see
:mod:`ipuxl.onnx.ops.tensor`).

ONNX holds a complex tensor as a real one with a last axis of 2 (real, imaginary); a
real signal has a last axis of 1. The windows and the mel matrix depend only on their
(static) sizes, so they are computed when the model is imported.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from jax import lax

from ipuxl.onnx.ops.tensor import norm_axis
from ipuxl.onnx.registry import onnx_op

__all__ = ["dft"]


def _np_dtype(onnx_type: int) -> np.dtype:
    from onnx import helper

    return np.dtype(helper.tensor_dtype_to_np_dtype(int(onnx_type)))


def _scalar(value: Any) -> Any:
    return np.asarray(value).reshape(-1)[0].item()


# ---------------------------------------------------------------------------- windows
def _window(size: np.ndarray, periodic: int, output_datatype: int,
            coefficients: tuple[float, ...]) -> np.ndarray:
    """``sum_k (-1)^k a_k cos(2 pi k n / N)``, N the size (periodic) or size - 1."""
    n = int(_scalar(size))
    span = n if periodic else n - 1
    phase = 2 * np.pi * np.arange(n, dtype=np.float64) / (span if span else 1)
    values = sum((-1) ** k * a * np.cos(k * phase) for k, a in enumerate(coefficients))
    return np.asarray(values, np.float64).astype(_np_dtype(output_datatype))


@onnx_op("HannWindow", since=17, static=(0,))
def hann_window(size: np.ndarray, *, periodic: int = 1, output_datatype: int = 1) -> Any:
    return _window(size, periodic, output_datatype, (0.5, 0.5))


@onnx_op("HammingWindow", since=17, static=(0,))
def hamming_window(size: np.ndarray, *, periodic: int = 1, output_datatype: int = 1) -> Any:
    return _window(size, periodic, output_datatype, (25 / 46, 21 / 46))


@onnx_op("BlackmanWindow", since=17, static=(0,))
def blackman_window(size: np.ndarray, *, periodic: int = 1, output_datatype: int = 1
                    ) -> Any:
    return _window(size, periodic, output_datatype, (0.42, 0.5, 0.08))


@onnx_op("MelWeightMatrix", since=17, static=(0, 1, 2, 3, 4))
def mel_weight_matrix(num_mel_bins: np.ndarray, dft_length: np.ndarray,
                      sample_rate: np.ndarray, lower_edge_hertz: np.ndarray,
                      upper_edge_hertz: np.ndarray, *, output_datatype: int = 1) -> Any:
    """Triangular filters, equally spaced on the mel scale, over the ``dft_length // 2 + 1``
    bins of a one-sided spectrum: ``[bins, num_mel_bins]``."""
    mels, length = int(_scalar(num_mel_bins)), int(_scalar(dft_length))
    rate = _scalar(sample_rate)
    low, high = float(_scalar(lower_edge_hertz)), float(_scalar(upper_edge_hertz))
    bins = length // 2 + 1
    low_mel = 2595 * np.log1p(low / 700) / np.log(10)
    high_mel = 2595 * np.log1p(high / 700) / np.log(10)
    step = (high_mel - low_mel) / (mels + 2)
    hertz = 700 * np.expm1((np.arange(mels + 2) * step + low_mel) / 2595 * np.log(10))
    edges = (((length + 1) * hertz) // rate).astype(np.int64)
    out = np.zeros((bins, mels), np.float64)
    for i in range(mels):
        left, center, right = edges[i], edges[i + 1], edges[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            j = np.arange(left, center + 1)
            out[j, i] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, i] = (right - j) / (right - center)
    return out.astype(_np_dtype(output_datatype))


# ---------------------------------------------------------------------------- DFT
def _parts(x: Any) -> tuple[Any, Any | None]:
    """Real and imaginary parts (None: a real signal) of an ONNX signal ``[..., 1 or 2]``,
    float16/bfloat16 widened to float32."""
    work = x.astype(jnp.float32) if x.dtype in (jnp.float16, jnp.bfloat16) else x
    if x.shape[-1] == 1:
        return work[..., 0], None
    if x.shape[-1] == 2:
        return work[..., 0], work[..., 1]
    raise ValueError(f"a DFT signal has a last axis of 1 (real) or 2 (complex), got "
                     f"{x.shape[-1]}")


def _fit(signal: Any, length: int) -> Any:
    """Zero-pad or truncate the last axis to ``length``."""
    dim = signal.shape[-1]
    if dim > length:
        return signal[..., :length]
    if dim < length:
        return jnp.pad(signal, [(0, 0)] * (signal.ndim - 1) + [(0, length - dim)])
    return signal


def dft(x: Any, length: int | None, axis: int, inverse: int, onesided: int) -> Any:
    """ONNX's DFT of ``x`` (``[..., 1 or 2]``) along ``axis`` (of ``x``, not the last). A
    real signal goes through a real FFT (exact zeros where its spectrum has them)."""
    axis = norm_axis(axis, x.ndim)
    if axis == x.ndim - 1:
        raise ValueError("the DFT axis cannot be the last (real/imaginary) axis")
    re, im = _parts(x)
    re = jnp.moveaxis(re, axis, -1)
    im = None if im is None else jnp.moveaxis(im, axis, -1)
    if inverse and onesided:  # one-sided spectrum -> real signal
        n = 2 * (re.shape[-1] - 1) if length is None else length
        spectrum = lax.complex(re, jnp.zeros_like(re) if im is None else im)
        out = jnp.fft.irfft(spectrum, n=n, axis=-1)
        return jnp.moveaxis(out, -1, axis)[..., None].astype(x.dtype)
    n = re.shape[-1] if length is None else length
    if im is None and not inverse:
        spectrum = jnp.fft.rfft(_fit(re, n), axis=-1)
        if not onesided:  # the other half is the mirrored conjugate
            mirror = jnp.conj(jnp.flip(spectrum[..., 1:n - n // 2], -1))
            spectrum = jnp.concatenate([spectrum, mirror], -1)
    else:
        signal = lax.complex(_fit(re, n), _fit(jnp.zeros_like(re) if im is None else im, n))
        spectrum = jnp.fft.ifft(signal, axis=-1) if inverse else jnp.fft.fft(signal, axis=-1)
        if onesided:
            spectrum = spectrum[..., :n // 2 + 1]
    out = jnp.stack([jnp.real(spectrum), jnp.imag(spectrum)], -1)
    return jnp.moveaxis(out, -2, axis).astype(x.dtype)


def _length(dft_length: np.ndarray | None) -> int | None:
    return None if dft_length is None else int(_scalar(dft_length))


@onnx_op("DFT", since=17, static=(1,), kind="reduce")
def dft_v17(x: Any, dft_length: np.ndarray | None = None, *, axis: int = 1,
            inverse: int = 0, onesided: int = 0) -> Any:
    return dft(x, _length(dft_length), axis, inverse, onesided)


@onnx_op("DFT", since=20, static=(1, 2), kind="reduce")
def dft_v20(x: Any, dft_length: np.ndarray | None = None, axis: np.ndarray | None = None,
            *, inverse: int = 0, onesided: int = 0) -> Any:
    """DFT-20 takes the axis as an input (default -2: the signal's last axis)."""
    return dft(x, _length(dft_length), -2 if axis is None else int(_scalar(axis)), inverse,
               onesided)


@onnx_op("STFT", since=17, static=(1, 3), kind="reduce")
def stft(signal: Any, frame_step: np.ndarray, window: Any = None,
         frame_length: np.ndarray | None = None, *, onesided: int = 1) -> Any:
    """``[batch, frames, bins, 2]``: the DFT of each (windowed) frame of the signal
    ``[batch, length, 1 or 2]``."""
    step = int(_scalar(frame_step))
    if frame_length is not None:
        size = int(_scalar(frame_length))
    elif window is not None:
        size = window.shape[0]
    else:
        raise ValueError("STFT needs a window or a frame_length")
    if window is not None and window.shape[0] != size:
        raise ValueError(f"STFT window of {window.shape[0]} samples for frames of {size}")
    frames = 1 + (signal.shape[1] - size) // step
    where = np.arange(frames)[:, None] * step + np.arange(size)[None, :]
    framed = jnp.take(signal, jnp.asarray(where.astype(np.int32)), axis=1)  # [b, f, n, c]
    if window is not None:
        framed = framed * jnp.reshape(window.astype(signal.dtype), (1, 1, size, 1))
    return dft(framed, size, 2, 0, onesided)
