"""Non-finite values meet zero padding the same way on every backend.

The rule is IEEE arithmetic on the zero-padded input, as in PyTorch: a halo
(padding) tap is a product like any other, so a NaN or infinite weight that
meets a padding zero contributes ``NaN * 0 = NaN`` (``inf * 0 = NaN``), and
in the backward pass a NaN or infinite ``grad_y`` at an output whose tap
reads padding makes that tap's weight gradient NaN.

Some kernels skip halo taps instead of multiplying zeros (python, cython,
numba, and GPU kernels that test bounds); others load zeros and multiply
(numpy's im2col). Rather than slowing every kernel down with products it
knows are zero, the front end applies the fix-up below after the backend
ran, and only when an operand is non-finite. It is idempotent, so it is
correct after either kind of kernel.

Which outputs a tap reads padding for is a prefix and a suffix of each
spatial axis: tap ``p`` at output ``o`` reads input ``o*s + p*d - before``,
which is in the padding exactly when ``o < lo[p]`` or ``o >= hi[p]``. The
fix-ups therefore work on per-channel prefix/suffix lengths and never build
an ``(outputs x taps)`` mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._spec import ConvSpec, tap_output_ranges

__all__ = ["fix_forward", "fix_backward", "halo_bounds"]


def halo_bounds(spec: ConvSpec, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Per tap ``p`` of ``axis``: output ``o`` reads padding iff ``o < lo[p]`` or ``o >= hi[p]``."""
    lo, hi = tap_output_ranges(spec, axis)
    return np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)


def _host(array: Any) -> np.ndarray:
    """A small device array (flags, indices) as a NumPy array."""
    return array if isinstance(array, np.ndarray) else array.get()


def _has_padding(spec: ConvSpec) -> bool:
    """Whether any tap of any output can read padding at all."""
    return any(before or after for before, after in spec.padding)


def _all_finite(array: Any, xp: Any) -> bool:
    """Whether every element is finite (exact; no floating-point warnings, no errstate)."""
    return bool(xp.isfinite(array).all())


def fix_forward(spec: ConvSpec, w: Any, out: Any, xp: Any = np) -> None:
    """Set to NaN the outputs where a non-finite weight met a padding zero.

    ``w`` and ``out`` are the canonical weight and output buffers (any
    array module ``xp``); does nothing (after one pass over ``w``) when every
    weight is finite or there is no padding.
    """
    if not _has_padding(spec) or _all_finite(w, xp):
        return
    s = spec.as_2d()
    w4 = w.reshape(s.w_shape)
    out4 = out.reshape(s.y_shape)
    bad = ~xp.isfinite(w4)  # (M, Cg, KH, KW)
    bad_rows = _host(bad.any(axis=(1, 3)))  # (M, KH): tap row p has a bad weight
    bad_cols = _host(bad.any(axis=(1, 2)))  # (M, KW)
    (lo_h, hi_h), (lo_w, hi_w) = halo_bounds(s, 0), halo_bounds(s, 1)
    Ho, Wo = s.out_size
    # For channel m the NaN region is the union over bad taps of their
    # padding prefix/suffix: rows < max lo, rows >= min hi, same for columns.
    top = np.where(bad_rows, lo_h, 0).max(axis=1)
    bottom = np.where(bad_rows, hi_h, Ho).min(axis=1)
    left = np.where(bad_cols, lo_w, 0).max(axis=1)
    right = np.where(bad_cols, hi_w, Wo).min(axis=1)
    nan = float("nan")
    for m in np.flatnonzero(bad_rows.any(axis=1)):
        plane = out4[:, m]
        plane[:, : top[m], :] = nan
        plane[:, bottom[m] :, :] = nan
        plane[:, :, : left[m]] = nan
        plane[:, :, right[m] :] = nan


def fix_backward(spec: ConvSpec, grad_y: Any, grad_w: Any, grad_b: Any, xp: Any = np, relu_output: Any = None) -> None:
    """Set to NaN the weight gradients of taps that met a non-finite ``grad_y`` in padding.

    ``grad_w[m, c, p, q]`` sums ``grad_y[b, m, o] * x_padded[...]`` over every
    output ``o``; where tap ``(p, q)`` reads padding at an output whose
    ``grad_y`` is NaN or infinite, IEEE gives NaN. ``grad_b`` (already
    computed, the sum of ``grad_y`` per channel) is non-finite exactly for the
    channels concerned, so finite inputs cost nothing here. ``grad_x`` needs
    no fix-up: padding positions have no input gradient.

    ``relu_output``: the kernels read ``grad_y`` through that ReLU (the
    fused mask), so an output where ``relu_output <= 0`` contributed 0
    whatever its ``grad_y``: it is not counted as non-finite.
    """
    if not _has_padding(spec):
        return
    channels = np.flatnonzero(~np.isfinite(_host(grad_b)))
    if channels.size == 0:
        return
    s = spec.as_2d()
    gy4 = grad_y.reshape(s.y_shape)
    gw4 = grad_w.reshape(s.w_shape)
    (lo_h, hi_h), (lo_w, hi_w) = halo_bounds(s, 0), halo_bounds(s, 1)
    nan = float("nan")
    for m in channels:
        bad = ~xp.isfinite(gy4[:, m])  # (B, Ho, Wo)
        if relu_output is not None:
            bad &= ~(relu_output.reshape(s.y_shape)[:, m] <= 0)  # masked to 0 in the kernels
        rows = np.flatnonzero(_host(bad.any(axis=(0, 2))))
        cols = np.flatnonzero(_host(bad.any(axis=(0, 1))))
        if rows.size == 0:
            continue  # grad_b overflowed from finite values: nothing non-finite here
        # Tap row p reads padding at a bad output when some bad row is < lo[p]
        # or >= hi[p]; likewise for tap columns. Either makes the tap NaN.
        hit_rows = (rows[0] < lo_h) | (rows[-1] >= hi_h)  # (KH,)
        hit_cols = (cols[0] < lo_w) | (cols[-1] >= hi_w)  # (KW,)
        taps = hit_rows[:, None] | hit_cols[None, :]  # (KH, KW)
        if taps.any():
            # where() rather than a mixed slice/boolean index: works on CuPy too.
            gw4[m] = xp.where(xp.asarray(taps)[None], nan, gw4[m])
