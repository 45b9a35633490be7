"""The ``numpy`` backend: im2col through ``sliding_window_view`` + BLAS matmul.

``sliding_window_view`` gives every receptive field as a zero-copy view;
copying a tile of those windows into a contiguous ``(C/g * KH * KW, L)``
matrix per group (im2col) turns the convolution into one batched matrix
product ``(g, M/g, CKK) @ (B, g, CKK, L)``, which NumPy hands to BLAS. Groups
ride in the batch dimension of ``matmul``, so depthwise layers need no Python
loop over channels. The im2col copy is tiled over batch, output rows and, for
very long 1-D signals, output columns, so the workspace stays near
:data:`WORKSPACE_BYTES` whatever the problem size.

Where the padded copy itself would be too large (a huge dilation with
``padding="same"``, a huge explicit padding: more zeros than input, and over
:data:`PADDING_ALLOWANCE_BYTES`), the backend computes tap by tap on slices
of the unpadded input instead (:mod:`._numpy_taps`), so no geometry that
validation accepts makes it allocate more than an input-sized slab.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .._spec import ConvSpec
from . import _numpy_taps
from .base import Algorithm, Backend, Launch, Tunable

__all__ = ["ALGORITHMS", "NumpyBackend", "WORKSPACE_BYTES"]

#: Target size of one im2col tile: large enough for BLAS to run at speed,
#: small enough that the tile and its product stay in cache between the copy
#: and the matmul. 32 MiB until the sweeps of 2026-11-22 (2-core Xeon): tiles
#: of 1-2 MiB were 1.4-3.9x faster on every seed layer
#: (docs/measurements/sweep-cpu-2026-11-22/).
WORKSPACE_BYTES = 2 * 2**20

#: Zero padding im2col may materialise beyond the size of the input itself:
#: above it (huge dilation with "same"/"full", huge explicit padding) the
#: backend computes tap by tap instead (``_numpy_taps``), with no padded copy.
PADDING_ALLOWANCE_BYTES = 256 * 2**20


def _read_extent(s: ConvSpec, axis: int) -> int:
    """How much of the padded input along ``axis`` the outputs actually read."""
    return (s.out_size[axis] - 1) * s.stride[axis] + (s.kernel_size[axis] - 1) * s.dilation[axis] + 1


def _padded_source(x4: np.ndarray, s: ConvSpec) -> np.ndarray:
    """The zero-padded input, cut to the region the outputs read.

    Padding that no output reaches (large ``after`` padding, or input rows past
    the last window with stride > 1) is never materialised.
    """
    (top, _), (left, _) = s.padding
    Hn, Wn = _read_extent(s, 0), _read_extent(s, 1)
    H, W = s.in_size
    if top == 0 and left == 0 and Hn <= H and Wn <= W:
        return x4[:, :, :Hn, :Wn]  # no padding is read: a view, no copy
    source = np.zeros((s.batch, s.in_channels, Hn, Wn), dtype=x4.dtype)
    rows = max(0, min(H, Hn - top))
    cols = max(0, min(W, Wn - left))
    source[:, :, top : top + rows, left : left + cols] = x4[:, :, :rows, :cols]
    return source


def _source_elements(s: ConvSpec) -> int:
    """Elements of the padded source :func:`_padded_source` allocates (0 for a view)."""
    (top, _), (left, _) = s.padding
    Hn, Wn = _read_extent(s, 0), _read_extent(s, 1)
    H, W = s.in_size
    if top == 0 and left == 0 and Hn <= H and Wn <= W:
        return 0
    return s.batch * s.in_channels * Hn * Wn


def _tile_bytes(s: ConvSpec, budget: int | None = None) -> int:
    """Bytes of one im2col tile plus its matmul product (as :func:`_tiles` sizes them)."""
    budget = WORKSPACE_BYTES if budget is None else budget
    per_output = s.in_channels * s.kernel_size[0] * s.kernel_size[1] * s.itemsize
    positions = min(max(budget // per_output, 1), s.batch * s.out_size[0] * s.out_size[1])
    return positions * (per_output + s.out_channels * s.itemsize)


def _windows(source: np.ndarray, s: ConvSpec) -> np.ndarray:
    """Zero-copy view of shape ``(B, C, Ho, Wo, KH, KW)``: every receptive field."""
    (sh, sw), (dh, dw) = s.stride, s.dilation
    span = ((s.kernel_size[0] - 1) * dh + 1, (s.kernel_size[1] - 1) * dw + 1)
    view = sliding_window_view(source, span, axis=(2, 3))
    return view[:, :, ::sh, ::sw, ::dh, ::dw]


def _tiles(s: ConvSpec, budget_bytes: int) -> Iterator[tuple[slice, slice, slice]]:
    """Batch/row/column slices of the output whose im2col fits ``budget_bytes``."""
    B = s.batch
    Ho, Wo = s.out_size
    per_output = s.in_channels * s.kernel_size[0] * s.kernel_size[1] * s.itemsize
    budget = max(budget_bytes // per_output, 1)  # output positions per tile
    if budget >= Ho * Wo:
        step = max(budget // (Ho * Wo), 1)
        for b0 in range(0, B, step):
            yield slice(b0, min(b0 + step, B)), slice(0, Ho), slice(0, Wo)
    elif budget >= Wo:
        step = budget // Wo
        for b in range(B):
            for r0 in range(0, Ho, step):
                yield slice(b, b + 1), slice(r0, min(r0 + step, Ho)), slice(0, Wo)
    else:
        for b in range(B):
            for r in range(Ho):
                for c0 in range(0, Wo, budget):
                    yield slice(b, b + 1), slice(r, r + 1), slice(c0, min(c0 + budget, Wo))


def _im2col(windows: np.ndarray, s: ConvSpec, bs: slice, rs: slice, cs: slice) -> np.ndarray:
    """Copy one tile of windows into ``(Bt, groups, C/g * KH * KW, Rt * Ct)``."""
    tile = windows[bs, :, rs, cs]  # (Bt, C, Rt, Ct, KH, KW), still a view
    Bt, _, Rt, Ct, KH, KW = tile.shape
    G, Cg = s.groups, s.channels_per_group
    tile = tile.reshape(Bt, G, Cg, Rt, Ct, KH, KW).transpose(0, 1, 2, 5, 6, 3, 4)
    return np.ascontiguousarray(tile).reshape(Bt, G, Cg * KH * KW, Rt * Ct)


def _forward(s: ConvSpec, x, w, bias, out, budget: int) -> None:
    """Write the forward of the 2-D view ``s`` into ``out``, im2col tiles of ``budget`` bytes."""
    G, Mg = s.groups, s.out_channels_per_group
    windows = _windows(_padded_source(x.reshape(s.x_shape), s), s)
    w_mat = w.reshape(G, Mg, -1)
    out4 = out.reshape(s.y_shape)
    for bs, rs, cs in _tiles(s, budget):
        cols = _im2col(windows, s, bs, rs, cs)
        tile = np.matmul(w_mat, cols)  # (Bt, G, Mg, L): NCHW order already
        if bias is not None:
            tile += bias.reshape(G, Mg, 1)
        Bt = tile.shape[0]
        out4[bs, :, rs, cs] = tile.reshape(Bt, s.out_channels, rs.stop - rs.start, cs.stop - cs.start)


def _backward(s: ConvSpec, grad_y, x, w, grad_x, grad_w, grad_b, budget: int) -> None:
    """Write the three gradients of the 2-D view ``s``, im2col tiles of ``budget`` bytes."""
    G, Cg, Mg = s.groups, s.channels_per_group, s.out_channels_per_group
    KH, KW = s.kernel_size
    (sh, sw), (dh, dw) = s.stride, s.dilation
    x4 = x.reshape(s.x_shape)
    source = _padded_source(x4, s)
    windows = _windows(source, s)
    gy4 = grad_y.reshape(s.y_shape)
    w_mat = w.reshape(G, Mg, -1)
    w_mat_t = np.ascontiguousarray(w_mat.transpose(0, 2, 1))
    grad_w_acc = np.zeros_like(w_mat)
    # The gradient with respect to the padded, cut source; its interior is
    # copied to grad_x at the end (padding positions have no input).
    grad_source = np.zeros(source.shape, dtype=source.dtype)

    grad_b[...] = gy4.sum(axis=(0, 2, 3))
    for bs, rs, cs in _tiles(s, budget):
        Rt, Ct = rs.stop - rs.start, cs.stop - cs.start
        cols = _im2col(windows, s, bs, rs, cs)
        Bt = cols.shape[0]
        gy_tile = np.ascontiguousarray(gy4[bs, :, rs, cs]).reshape(Bt, G, Mg, Rt * Ct)
        # dL/dw = sum over batch and positions of grad_y times the window.
        grad_w_acc += np.matmul(gy_tile, cols.transpose(0, 1, 3, 2)).sum(axis=0)
        # dL/dcols, then col2im: each kernel tap scatters one strided slab.
        grad_cols = np.matmul(w_mat_t, gy_tile).reshape(Bt, G * Cg, KH, KW, Rt, Ct)
        for p in range(KH):
            h0 = rs.start * sh + p * dh
            for q in range(KW):
                w0 = cs.start * sw + q * dw
                grad_source[bs, :, h0 : h0 + (Rt - 1) * sh + 1 : sh, w0 : w0 + (Ct - 1) * sw + 1 : sw] += grad_cols[
                    :, :, p, q
                ]
    grad_w.reshape(G, Mg, -1)[...] = grad_w_acc

    (top, _), (left, _) = s.padding
    H, W = s.in_size
    gx4 = grad_x.reshape(s.x_shape)
    rows = max(0, min(H, source.shape[2] - top))
    cols_in = max(0, min(W, source.shape[3] - left))
    gx4[...] = 0  # inputs no output reads get zero gradient
    gx4[:, :, :rows, :cols_in] = grad_source[:, :, top : top + rows, left : left + cols_in]


def _padding_too_large(s: ConvSpec) -> bool:
    """Whether im2col would materialise more zero padding than the allowance."""
    input_bytes = s.batch * s.in_channels * s.in_size[0] * s.in_size[1] * s.itemsize
    padding_bytes = _source_elements(s) * s.itemsize - input_bytes
    return padding_bytes > max(PADDING_ALLOWANCE_BYTES, input_bytes)


def _workspace_bytes(spec: ConvSpec, direction: str) -> int:
    """Padded source (twice in backward: its gradient), one im2col tile and its product."""
    s = spec.as_2d()
    if _padding_too_large(s):
        return _numpy_taps.workspace_bytes(s, direction)
    source = _source_elements(s) * s.itemsize
    if direction == "forward":
        return source + _tile_bytes(s)
    # backward: grad_source like the source (a full one even when the source
    # is a view), the transposed weights and grad_w accumulator, two tiles.
    full_source = max(_source_elements(s), s.batch * s.in_channels * s.in_size[0] * s.in_size[1])
    weights = 2 * s.out_channels * s.channels_per_group * s.kernel_size[0] * s.kernel_size[1]
    return source + full_source * s.itemsize + weights * s.itemsize + 2 * _tile_bytes(s)


def _forward_taps(s: ConvSpec, x, w, bias, out, budget: int) -> None:
    """Forward tap by tap on slices of the unpadded input (no padded copy; no tile, ``budget`` unused)."""
    _numpy_taps.forward(s, x.reshape(s.x_shape), w.reshape(s.w_shape), bias, out.reshape(s.y_shape))


def _backward_taps(s: ConvSpec, grad_y, x, w, grad_x, grad_w, grad_b, budget: int) -> None:
    """Backward tap by tap on slices of the unpadded input (no padded copy; no tile, ``budget`` unused)."""
    shapes = (s.y_shape, s.x_shape, s.w_shape, s.x_shape, s.w_shape)
    arrays = (grad_y, x, w, grad_x, grad_w)
    _numpy_taps.backward(s, *(a.reshape(shape) for a, shape in zip(arrays, shapes)), grad_b)


def _plan_im2col(spec: ConvSpec, direction: str, params) -> Launch:
    """Resolve the 2-D view (and im2col or tap-by-tap) once; the launch runs one call.

    ``params["tile_kib"]`` is the budget of one im2col tile.

    Non-finite operands follow IEEE arithmetic (NaN * 0 = NaN, as on every
    backend); NumPy's "invalid value" warnings would only say that happened,
    so each launch runs under a fresh ``errstate`` (one cannot be re-entered).
    """
    s = spec.as_2d()
    taps = _padding_too_large(s)
    budget = params["tile_kib"] * 1024
    if direction == "forward":
        run_forward = _forward_taps if taps else _forward

        def forward(x, w, bias, out):
            with np.errstate(invalid="ignore", over="ignore"):
                run_forward(s, x, w, bias, out, budget)

        return forward
    run_backward = _backward_taps if taps else _backward

    def backward(grad_y, x, w, grad_x, grad_w, grad_b):
        with np.errstate(invalid="ignore", over="ignore"):
            run_backward(s, grad_y, x, w, grad_x, grad_w, grad_b, budget)

    return backward


def _default_tile_kib(spec: ConvSpec, direction: str) -> int:
    """:data:`WORKSPACE_BYTES` in KiB, read at plan time (2048)."""
    return WORKSPACE_BYTES // 1024


def _tile_constraint(spec: ConvSpec, direction: str, params) -> bool | str:
    """The tap-by-tap path has no im2col tile: only the default ``tile_kib`` there."""
    default = _default_tile_kib(spec, direction)
    if params["tile_kib"] != default and _padding_too_large(spec.as_2d()):
        return (
            f"this case runs tap by tap (padding larger than the input), with no im2col tile: "
            f"'tile_kib' takes only its default, {default}; got {params['tile_kib']!r}"
        )
    return True


ALGORITHMS = {
    "im2col": Algorithm(
        name="im2col",
        summary="sliding_window_view im2col tiles + one batched BLAS matmul per tile; col2im for backward",
        plan=_plan_im2col,
        directions=("forward", "backward"),
        tunables=(
            Tunable(
                "tile_kib",
                # No value above the default: the memory reserved before a call
                # (workspace_bytes) counts the default tile, which must stay an upper bound.
                (256, 512, 1024, 2048),
                _default_tile_kib,
                "KiB budget of one im2col tile (batch, row or column slices of the output as fit); "
                "at most the default, which workspace_bytes reserves",
            ),
        ),
        constraint=_tile_constraint,
    ),
}


class NumpyBackend(Backend):
    """Vectorised NumPy: im2col tiles and one batched BLAS product per tile."""

    name = "numpy"
    device = "cpu"
    priority = 10
    algorithms = tuple(ALGORITHMS)
    description = "NumPy im2col (sliding_window_view) + batched BLAS matmul"

    def ieee_padding(self, spec: ConvSpec, algorithm: str, direction: str) -> bool:
        """im2col copies padding zeros into its columns and multiplies them; the tap path skips them."""
        return not _padding_too_large(spec.as_2d())

    def workspace_bytes(self, spec: ConvSpec, algorithm: str, direction: str) -> int:
        """Padded source (twice in backward: its gradient), one im2col tile and its product."""
        return _workspace_bytes(spec, direction)

    def algorithm_table(self):
        """The one record, ``im2col``."""
        return ALGORITHMS
