"""A float64 reference that multiplies every tap, padding included (IEEE, as torch).

``convsuite.testing``'s reference dilates the kernel by inserting zeros, so an
infinite input meeting an inserted zero gives a NaN no convolution forms; this
one forms exactly the products of the definition on the zero-padded input: for
every output and every kernel tap, ``x_padded[...] * w[tap]``. It is written
for clarity, one strided slab per tap, and shares no code with any backend.
"""

from __future__ import annotations

import numpy as np

from convsuite._spec import ConvSpec


def _slab(spec: ConvSpec, p: int, q: int) -> tuple:
    """Index of the padded-input samples tap ``(p, q)`` reads for every output."""
    (sh, sw), (dh, dw) = spec.stride, spec.dilation
    Ho, Wo = spec.out_size
    rows = slice(p * dh, p * dh + (Ho - 1) * sh + 1, sh)
    cols = slice(q * dw, q * dw + (Wo - 1) * sw + 1, sw)
    return (slice(None), slice(None), rows, cols)


def _padded(spec: ConvSpec, x4: np.ndarray) -> np.ndarray:
    (pt, pb), (pl, pr) = spec.padding
    return np.pad(x4, ((0, 0), (0, 0), (pt, pb), (pl, pr)))


def ieee_forward(spec: ConvSpec, x, w, bias=None) -> np.ndarray:
    """``y`` in canonical shape, every padding tap multiplied."""
    s = spec.as_2d()
    x4 = np.asarray(x, dtype=np.float64).reshape(s.x_shape)
    w4 = np.asarray(w, dtype=np.float64).reshape(s.w_shape)
    xp = _padded(s, x4)
    Cg, Mg = s.channels_per_group, s.out_channels_per_group
    y = np.zeros(s.y_shape)
    with np.errstate(invalid="ignore", over="ignore"):
        for p in range(s.kernel_size[0]):
            for q in range(s.kernel_size[1]):
                xs = xp[_slab(s, p, q)]
                for g in range(s.groups):
                    m, c = slice(g * Mg, (g + 1) * Mg), slice(g * Cg, (g + 1) * Cg)
                    y[:, m] += np.einsum("bchw,mc->bmhw", xs[:, c], w4[m, :, p, q])
        if bias is not None:
            y += np.asarray(bias, dtype=np.float64)[None, :, None, None]
    return y.reshape(spec.y_shape)


def ieee_backward(spec: ConvSpec, grad_y, x, w):
    """``(grad_x, grad_w, grad_b)`` in canonical shapes, every padding tap multiplied."""
    s = spec.as_2d()
    x4 = np.asarray(x, dtype=np.float64).reshape(s.x_shape)
    w4 = np.asarray(w, dtype=np.float64).reshape(s.w_shape)
    g4 = np.asarray(grad_y, dtype=np.float64).reshape(s.y_shape)
    xp = _padded(s, x4)
    Cg, Mg = s.channels_per_group, s.out_channels_per_group
    grad_xp = np.zeros(xp.shape)
    grad_w = np.zeros(s.w_shape)
    with np.errstate(invalid="ignore", over="ignore"):
        for p in range(s.kernel_size[0]):
            for q in range(s.kernel_size[1]):
                slab = _slab(s, p, q)
                xs = xp[slab]
                for g in range(s.groups):
                    m, c = slice(g * Mg, (g + 1) * Mg), slice(g * Cg, (g + 1) * Cg)
                    grad_w[m, :, p, q] = np.einsum("bmhw,bchw->mc", g4[:, m], xs[:, c])
                    grad_xp[:, c][slab] += np.einsum("bmhw,mc->bchw", g4[:, m], w4[m, :, p, q])
        grad_b = g4.sum(axis=(0, 2, 3))
    (pt, _), (pl, _) = s.padding
    H, W = s.in_size
    grad_x = grad_xp[:, :, pt : pt + H, pl : pl + W]
    return grad_x.reshape(spec.x_shape), grad_w.reshape(spec.w_shape), grad_b


def assert_same_ieee(actual, expected, tolerance, name: str) -> None:
    """NaN where NaN, +-inf where +-inf, finite elements within ``tolerance``."""
    actual = np.asarray(actual, dtype=np.float64).reshape(np.shape(expected))
    for what, test in (("NaN", np.isnan), ("+inf", np.isposinf), ("-inf", np.isneginf)):
        where_a, where_e = test(actual), test(expected)
        if (where_a != where_e).any():
            index = tuple(int(i) for i in np.argwhere(where_a != where_e)[0])
            raise AssertionError(
                f"{name}: {int((where_a != where_e).sum())} elements disagree on {what}; first at "
                f"{index}: got {actual[index]!r}, expected {expected[index]!r}"
            )
    finite = np.isfinite(expected)
    with np.errstate(invalid="ignore"):
        error = np.abs(np.where(finite, actual - expected, 0.0))
    bad = finite & ~(error <= tolerance)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(
            f"{name}: {int(bad.sum())} finite elements out of tolerance; first at {index}: got "
            f"{actual[index]!r}, expected {expected[index]!r}, tolerance {tolerance[index]:.3g}"
        )
