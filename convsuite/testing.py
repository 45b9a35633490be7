"""An independent float64 reference and the tolerances results are held to.

The reference shares no code with any backend: it pads with ``numpy.pad``,
dilates the kernel by inserting zeros, and lets ``scipy.signal.correlate``
(direct method, float64) do the sums; stride is applied by subsampling the
stride-1 result. Gradients come from the same scipy routines (a correlation
with the stride-dilated output gradient for the weights, a full convolution
for the input).

Tolerances are the classical worst-case bound of a floating-point sum of
``n`` products, whatever the summation order: ``|fl(s) - s| <= n * eps *
sum|terms|``. ``sum|terms|`` is the same reference computed on absolute
values, so the bound is per element and exact zeros must stay exact.
"""

from __future__ import annotations

import numpy as np

from ._buffers import poisoned_outputs
from ._spec import ConvSpec

__all__ = [
    "poisoned_outputs",
    "reference_forward",
    "reference_backward",
    "forward_tolerance",
    "backward_tolerances",
    "assert_within",
]


def _as4d(spec: ConvSpec, x, w):
    s = spec.as_2d()
    x4 = np.asarray(x, dtype=np.float64).reshape(s.x_shape)
    w4 = np.asarray(w, dtype=np.float64).reshape(s.w_shape)
    return s, x4, w4


def _dilate(w4: np.ndarray, dilation: tuple[int, int]) -> np.ndarray:
    """Insert ``dilation - 1`` zeros between kernel taps."""
    M, Cg, KH, KW = w4.shape
    dh, dw = dilation
    out = np.zeros((M, Cg, (KH - 1) * dh + 1, (KW - 1) * dw + 1))
    out[:, :, ::dh, ::dw] = w4
    return out


def _stride_dilate(g4: np.ndarray, stride: tuple[int, int]) -> np.ndarray:
    """Spread output-gradient samples ``stride`` apart (zeros between)."""
    B, M, Ho, Wo = g4.shape
    sh, sw = stride
    out = np.zeros((B, M, (Ho - 1) * sh + 1, (Wo - 1) * sw + 1))
    out[:, :, ::sh, ::sw] = g4
    return out


def reference_forward(spec: ConvSpec, x, w, bias=None) -> np.ndarray:
    """float64 ``conv(x, w) + bias`` in canonical shape ``spec.y_shape``."""
    from scipy.signal import correlate

    s, x4, w4 = _as4d(spec, x, w)
    (pt, pb), (pl, pr) = s.padding
    xp = np.pad(x4, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    wd = _dilate(w4, s.dilation)
    Cg, Mg = s.channels_per_group, s.out_channels_per_group
    Ho, Wo = s.out_size
    y = np.empty(s.y_shape)
    for b in range(s.batch):
        for m in range(s.out_channels):
            g = m // Mg
            full = correlate(xp[b, g * Cg : (g + 1) * Cg], wd[m], mode="valid", method="direct")
            y[b, m] = full[0, :: s.stride[0], :: s.stride[1]][:Ho, :Wo]
    if bias is not None:
        y += np.asarray(bias, dtype=np.float64)[None, :, None, None]
    return y.reshape(spec.y_shape)


def reference_backward(spec: ConvSpec, grad_y, x, w):
    """float64 ``(grad_x, grad_w, grad_b)`` in canonical shapes."""
    from scipy.signal import convolve, correlate

    s, x4, w4 = _as4d(spec, x, w)
    g4 = np.asarray(grad_y, dtype=np.float64).reshape(s.y_shape)
    (pt, pb), (pl, pr) = s.padding
    xp = np.pad(x4, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    wd = _dilate(w4, s.dilation)
    gd = _stride_dilate(g4, s.stride)
    Cg, Mg = s.channels_per_group, s.out_channels_per_group
    KH, KW = s.kernel_size
    dh, dw = s.dilation
    H, W = s.in_size

    grad_w = np.zeros(s.w_shape)
    grad_xp = np.zeros(xp.shape)
    reach_h, reach_w = gd.shape[2] + wd.shape[2] - 1, gd.shape[3] + wd.shape[3] - 1
    for b in range(s.batch):
        for m in range(s.out_channels):
            g = m // Mg
            for c in range(Cg):
                ci = g * Cg + c
                # grad_w[p, q] = sum_o grad_y[o] * xp[o*s + p*d]: a correlation
                # of xp with the stride-spread gradient, read every d-th lag.
                lags = correlate(xp[b, ci], gd[b, m], mode="valid", method="direct")
                grad_w[m, c] += lags[: (KH - 1) * dh + 1 : dh, : (KW - 1) * dw + 1 : dw]
                # grad_xp[i] = sum_{o, k: o*s + k*d = i} grad_y[o] * w[k]: a full
                # convolution of the spread gradient with the dilated kernel.
                grad_xp[b, ci, :reach_h, :reach_w] += convolve(gd[b, m], wd[m, c], mode="full", method="direct")
    grad_x = grad_xp[:, :, pt : pt + H, pl : pl + W]
    grad_b = g4.sum(axis=(0, 2, 3))
    return grad_x.reshape(spec.x_shape), grad_w.reshape(spec.w_shape), grad_b


def _eps(dtype) -> float:
    return float(np.finfo(np.dtype(dtype)).eps)


def forward_tolerance(spec: ConvSpec, x, w, bias=None) -> np.ndarray:
    """Per-element bound ``(n + 1) * eps * (|x| * |w| + |bias|)``, n = C/g * prod(K)."""
    magnitude = reference_forward(spec, np.abs(x), np.abs(w), None if bias is None else np.abs(bias))
    n = spec.reduction_length + 1
    return n * _eps(spec.dtype) * magnitude + np.finfo(np.float64).tiny


def backward_tolerances(spec: ConvSpec, grad_y, x, w):
    """Per-element bounds for ``(grad_x, grad_w, grad_b)`` built the same way.

    The reduction lengths are ``(M/g) * prod(K)`` for grad_x and
    ``B * prod(out_size)`` for grad_w and grad_b.
    """
    mags = reference_backward(spec, np.abs(grad_y), np.abs(x), np.abs(w))
    eps = _eps(spec.dtype)
    tiny = np.finfo(np.float64).tiny
    n_x = spec.out_channels_per_group * int(np.prod(spec.kernel_size)) + 1
    n_w = spec.batch * int(np.prod(spec.out_size)) + 1
    return (n_x * eps * mags[0] + tiny, n_w * eps * mags[1] + tiny, n_w * eps * mags[2] + tiny)


def assert_within(actual, expected, tolerance, name: str = "result") -> None:
    """Raise AssertionError unless ``|actual - expected| <= tolerance`` everywhere.

    NaN in ``actual`` (an unwritten, poisoned element) always fails.
    """
    actual = np.asarray(actual, dtype=np.float64)
    if actual.shape != np.shape(expected):
        raise AssertionError(f"{name}: shape {actual.shape} != expected {np.shape(expected)}")
    error = np.abs(actual - expected)
    bad = ~(error <= tolerance)  # NaN compares False, so it counts as bad
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {actual.size} elements out of tolerance; first at "
            f"{index}: got {actual[index]!r}, expected {expected[index]!r}, tolerance {tolerance[index]:.3g}"
        )
