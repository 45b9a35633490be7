"""Tap-by-tap NumPy convolution that never materialises padding.

The ``numpy`` backend's im2col path copies the zero-padded input; with a
huge dilation and ``padding="same"``, or a huge explicit padding, that copy
would be larger than memory although almost every tap only reads zeros.
This path loops over kernel taps instead: for tap ``(p, q)`` the outputs
that read real input form a rectangle (``convsuite._spec.tap_output_ranges``)
and the inputs they read are a strided slice of ``x``, so one batched matmul
over channels (groups in the batch dimension) adds that tap's contribution.
Taps that only ever read padding are skipped, and the workspace is one
input-sized slab at most. Halo taps are skipped, not multiplied by zero:
the front end's non-finite fix-up (``convsuite._nonfinite``) restores the
IEEE result where a non-finite operand meets padding.
"""

from __future__ import annotations

import numpy as np

from .._spec import ConvSpec, tap_output_ranges

__all__ = ["forward", "backward", "workspace_bytes"]


def _live_taps(s: ConvSpec):
    """``(p, q, out_rows, out_cols, in_rows, in_cols)`` for every tap that reads input."""
    (lo_h, hi_h), (lo_w, hi_w) = tap_output_ranges(s, 0), tap_output_ranges(s, 1)
    (sh, sw), (dh, dw) = s.stride, s.dilation
    (top, _), (left, _) = s.padding
    for p in range(s.kernel_size[0]):
        if lo_h[p] >= hi_h[p]:
            continue
        first_row = lo_h[p] * sh + p * dh - top
        in_rows = slice(first_row, first_row + (hi_h[p] - lo_h[p] - 1) * sh + 1, sh)
        for q in range(s.kernel_size[1]):
            if lo_w[q] >= hi_w[q]:
                continue
            first_col = lo_w[q] * sw + q * dw - left
            in_cols = slice(first_col, first_col + (hi_w[q] - lo_w[q] - 1) * sw + 1, sw)
            yield p, q, slice(lo_h[p], hi_h[p]), slice(lo_w[q], hi_w[q]), in_rows, in_cols


def _grouped(array: np.ndarray, groups: int) -> np.ndarray:
    """``(B, C, h, w)`` as a contiguous ``(B, groups, C/groups, h*w)``."""
    B, C, h, w = array.shape
    return np.ascontiguousarray(array).reshape(B, groups, C // groups, h * w)


def workspace_bytes(s: ConvSpec, direction: str) -> int:
    """At most one input-sized and one output-sized slab (two of each in backward)."""
    x_bytes = s.batch * s.in_channels * s.in_size[0] * s.in_size[1] * s.itemsize
    y_bytes = s.batch * s.out_channels * s.out_size[0] * s.out_size[1] * s.itemsize
    return (1 if direction == "forward" else 2) * (x_bytes + y_bytes)


def forward(s: ConvSpec, x4: np.ndarray, w4: np.ndarray, bias, out4: np.ndarray) -> None:
    """``out4 = bias + sum over live taps`` (2-D view arrays)."""
    G, Mg, Cg = s.groups, s.out_channels_per_group, s.channels_per_group
    B = s.batch
    out4[...] = 0 if bias is None else bias.reshape(1, -1, 1, 1)
    for p, q, out_rows, out_cols, in_rows, in_cols in _live_taps(s):
        slab = _grouped(x4[:, :, in_rows, in_cols], G)  # (B, G, Cg, h*w)
        taps = w4[:, :, p, q].reshape(G, Mg, Cg)
        h, w = out_rows.stop - out_rows.start, out_cols.stop - out_cols.start
        out4[:, :, out_rows, out_cols] += np.matmul(taps, slab).reshape(B, G * Mg, h, w)


def backward(s: ConvSpec, gy4, x4, w4, grad_x4, grad_w4, grad_b) -> None:
    """Gradients tap by tap: grad_w from slab products, grad_x scattered into slices."""
    G, Mg, Cg = s.groups, s.out_channels_per_group, s.channels_per_group
    B = s.batch
    grad_x4[...] = 0
    grad_w4[...] = 0  # taps that only read padding have zero gradient
    grad_b[...] = gy4.sum(axis=(0, 2, 3))
    for p, q, out_rows, out_cols, in_rows, in_cols in _live_taps(s):
        slab = _grouped(x4[:, :, in_rows, in_cols], G)  # (B, G, Cg, L)
        grads = _grouped(gy4[:, :, out_rows, out_cols], G)  # (B, G, Mg, L)
        grad_w4[:, :, p, q] = np.matmul(grads, slab.transpose(0, 1, 3, 2)).sum(axis=0).reshape(G * Mg, Cg)
        taps_t = w4[:, :, p, q].reshape(G, Mg, Cg).transpose(0, 2, 1)  # (G, Cg, Mg)
        h, w = out_rows.stop - out_rows.start, out_cols.stop - out_cols.start
        grad_x4[:, :, in_rows, in_cols] += np.matmul(taps_t, grads).reshape(B, G * Cg, h, w)
