"""The numba backend's ``gemm`` algorithm: im2col tiles and a BLAS ``gemm`` inside ``njit``.

Forward. The outputs are dealt out as work items (batch, group, block of
output rows). An item copies the receptive fields of its rows into a private
``(C/g * KH * KW, rows * Wo)`` matrix (im2col; halo cells become zeros, stride
and dilation are folded into the copy) and multiplies it by the group's
weights, ``(M/g, C/g * KH * KW)``, with the BLAS ``sgemm``/``dgemm`` whose
address the launch passes (``_blas_routines`` finds it, ``_numba_blas``
calls it; numba's own ``np.dot`` would call SciPy's older OpenBLAS and
allocate its result). A 1x1 kernel with
stride 1 and no padding needs no copy: the input channels of one image already are the
matrix (the pointwise specialisation). With stride 1 and short output rows
the tile is "wide" (``wide`` 1, chosen by ``numba_backend._wide_tiles``): it
takes the padded input's row pitch, so each of its rows is one run of the
(padded) input and im2col is a few long copies instead of a copy per output
row and tap; the unused columns it computes are dropped by the epilogue.

Backward, from the same pieces. One item is (batch, group): for each block of
rows it builds the im2col tile once and uses it twice, ``dW += dY @ cols.T``
and ``dcols = W.T @ dY``, then scatters ``dcols`` back onto the input
gradient (col2im, the adjoint of the copy); without an input gradient
(``input_grad`` 0) the second product and the scatter are skipped. The item
owns ``grad_x[b, group channels]``, so scatters never race. A ReLU's mask
of ``dY`` is applied as ``dY`` is copied into the tile. ``dW`` and ``db``
are summed into one private partial per chunk of items; the chunks are
fixed by the problem (not by the thread count) and reduced in order at the
end, so the result is the same bits on 1 or 16 threads and no atomics are needed.

Thread safety of BLAS. Every ``prange`` iteration calls BLAS; the BLAS must
then run one thread per call (the backend limits it with ``threadpoolctl``
for the duration of a launch, see ``numba_backend``), else the two pools
oversubscribe the cores.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._numba_blas import NO_TRANS, TRANS, gemm
from ._numba_cache import kernel_jit
from ._numba_epilogue import activate

__all__ = ["forward", "backward"]

_FLAGS = dict(parallel=True, nogil=True, error_model="numpy", fastmath={"contract"})
#: Rows of dW's (K, M) partials reduced per work item: one cache line of grad_w's rows (float32).
REDUCE_K = 16


@njit(inline="always")
def _valid_columns(shift, sw, W, Wo):
    """[lo, hi): output columns whose input column ow*sw - shift lies in [0, W)."""
    lo = (shift + sw - 1) // sw if shift > 0 else 0
    last = W - 1 + shift
    hi = min(Wo, last // sw + 1) if last >= 0 else 0
    lo = min(lo, Wo)
    return lo, max(lo, hi)


@kernel_jit(nogil=True, error_model="numpy")
def _im2col(x, b, c0, Cg, KH, KW, r0, rt, Wo, sh, sw, dh, dw, pad_top, pad_left, cols):
    """cols[(c, p, q), rr * Wo + ow] = x[b, c0 + c, (r0 + rr)*sh + p*dh - pad_top, ow*sw + q*dw - pad_left].

    Both arrays are read flat (C-contiguous), at unsigned offsets: numba wraps
    negative signed indices around (a compare and select per element that also
    kept LLVM from vectorising the copy), and these offsets are never negative
    in a run's valid columns [lo, hi). Per-run slice assignment was slower
    still (a view and a call per run of Wo values). 2-core VM, 2026-11-24,
    64 images, one thread: LeNet conv1 (1 -> 6 5x5, 32x32) 767 -> 147 us,
    conv2 (6 -> 16 5x5, 14x14) 1429 -> 388, with padding 2 1810 -> 637.
    """
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    flat_x = x.reshape(x.size)
    flat_cols = cols.reshape(cols.size)
    L = cols.shape[1]
    for c in range(Cg):
        plane = ((b * C) + c0 + c) * H * W
        for p in range(KH):
            for q in range(KW):
                row = ((c * KH + p) * KW + q) * L
                shift = pad_left - q * dw
                lo, hi = _valid_columns(shift, sw, W, Wo)
                for rr in range(rt):
                    d = row + rr * Wo
                    ih = (r0 + rr) * sh + p * dh - pad_top
                    if ih < 0 or ih >= H:
                        flat_cols[d : d + Wo] = 0
                        continue
                    if lo > 0:
                        flat_cols[d : d + lo] = 0
                    if hi < Wo:
                        flat_cols[d + hi : d + Wo] = 0
                    _copy_run(flat_x, plane + ih * W + lo * sw - shift, sw, flat_cols, d + lo, hi - lo)


@kernel_jit(nogil=True, error_model="numpy")
def _col2im_add(dcols, gx, b, c0, Cg, KH, KW, r0, rt, Wo, sh, sw, dh, dw, pad_top, pad_left):
    """The adjoint of _im2col: gx[b, c0 + c, ih, iw] += dcols[(c, p, q), rr * Wo + ow] (same flat offsets)."""
    C, H, W = gx.shape[1], gx.shape[2], gx.shape[3]
    flat_gx = gx.reshape(gx.size)
    flat_dcols = dcols.reshape(dcols.size)
    L = dcols.shape[1]
    for c in range(Cg):
        plane = ((b * C) + c0 + c) * H * W
        for p in range(KH):
            for q in range(KW):
                row = ((c * KH + p) * KW + q) * L
                shift = pad_left - q * dw
                lo, hi = _valid_columns(shift, sw, W, Wo)
                for rr in range(rt):
                    ih = (r0 + rr) * sh + p * dh - pad_top
                    if ih < 0 or ih >= H:
                        continue
                    _add_run(flat_dcols, row + rr * Wo + lo, flat_gx, plane + ih * W + lo * sw - shift, sw, hi - lo)


@kernel_jit(nogil=True, error_model="numpy")
def _pad_rows(x, b, c0, Cg, first, Rp, Wp, pad_top, pad_left, xp):
    """xp[c, r, col] = x[b, c0 + c, first + r - pad_top, col - pad_left], zero outside ``x``.

    ``xp`` is flat, ``(Cg, Rp, Wp)``: the padded rows a stride-1 tile reads (the
    "wide" layout, see :func:`forward`).
    """
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    flat_x = x.reshape(x.size)
    zero = xp.dtype.type(0)
    lo = min(pad_left, Wp)
    hi = min(Wp, pad_left + W)  # columns [lo, hi) come from x
    for c in range(Cg):
        plane = ((b * C) + c0 + c) * H * W
        for r in range(Rp):
            d = np.uint64((c * Rp + r) * Wp)
            ih = first + r - pad_top
            if ih < 0 or ih >= H:
                for k in range(Wp):
                    xp[d + np.uint64(k)] = zero
                continue
            for k in range(lo):
                xp[d + np.uint64(k)] = zero
            for k in range(hi, Wp):
                xp[d + np.uint64(k)] = zero
            _copy_run(flat_x, plane + ih * W, 1, xp, (c * Rp + r) * Wp + lo, hi - lo)


@kernel_jit(nogil=True, error_model="numpy")
def _wide_cols(src, base, pitch, Cg, KH, KW, dh, dw, Wp, cols):
    """cols[(c, p, q), j] = src[base + c * pitch + p * dh * Wp + q * dw + j]: one run per row of cols."""
    L = cols.shape[1]
    flat_cols = cols.reshape(cols.size)
    for c in range(Cg):
        for p in range(KH):
            for q in range(KW):
                row = (c * KH + p) * KW + q
                _copy_run(src, base + c * pitch + p * dh * Wp + q * dw, 1, flat_cols, row * L, L)


@kernel_jit(nogil=True, error_model="numpy")
def _wide_col2im_add(dcols, dst, base, pitch, Cg, KH, KW, dh, dw, Wp):
    """The adjoint of :func:`_wide_cols`: dst[base + c * pitch + p * dh * Wp + q * dw + j] += dcols[(c, p, q), j]."""
    L = dcols.shape[1]
    flat = dcols.reshape(dcols.size)
    for c in range(Cg):
        for p in range(KH):
            for q in range(KW):
                row = (c * KH + p) * KW + q
                _add_run(flat, row * L, dst, base + c * pitch + p * dh * Wp + q * dw, 1, L)


@njit(inline="always")
def _sum_run(v, start, n):
    """sum(v[start : start + n]) in eight running sums, combined in a fixed tree.

    One running sum is a chain of dependent adds (4 cycles each), fused into the copy it
    also kept that loop scalar: 2-core VM, 2026-11-26, alternating processes, the backward
    of 1x1 C16->96 112x112 B=1 2.72 -> 1.93-2.29 ms (3x3 C32->64 unchanged). The order
    depends on ``n`` alone: the same bits on any thread count.
    """
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = v.dtype.type(0)
    s = np.uint64(start)
    whole = n - n % 8
    for i in range(0, whole, 8):
        j = s + np.uint64(i)
        a0 += v[j]
        a1 += v[j + np.uint64(1)]
        a2 += v[j + np.uint64(2)]
        a3 += v[j + np.uint64(3)]
        a4 += v[j + np.uint64(4)]
        a5 += v[j + np.uint64(5)]
        a6 += v[j + np.uint64(6)]
        a7 += v[j + np.uint64(7)]
    for i in range(whole, n):
        a0 += v[s + np.uint64(i)]
    return ((a0 + a4) + (a1 + a5)) + ((a2 + a6) + (a3 + a7))


@njit(inline="always")
def _grad_rows(src, through, masked, start, dst, rt, Wo, pitch):
    """dst[rr * pitch + k] = src[start + rr * Wo + k] for k < Wo (0 where ``through <= 0`` when
    ``masked``), the gap ``[Wo, pitch)`` of every row but the last zeroed; returns the sum copied.
    """
    zero = dst.dtype.type(0)
    total = dst.dtype.type(0)
    for rr in range(rt):
        at, frm = np.uint64(rr * pitch), np.uint64(start + rr * Wo)
        if masked:
            for k in range(Wo):  # unsigned indices: see _im2col
                v = zero if through[frm + np.uint64(k)] <= 0 else src[frm + np.uint64(k)]
                dst[at + np.uint64(k)] = v
        else:
            for k in range(Wo):
                dst[at + np.uint64(k)] = src[frm + np.uint64(k)]
        # Summed from the copy (in L1) apart from it: the copy loop vectorises, the sum runs
        # eight independent chains (see _sum_run).
        total += _sum_run(dst, at, Wo)
        if rr < rt - 1:
            for k in range(Wo, pitch):
                dst[at + np.uint64(k)] = zero
    return total


@njit(inline="always")
def _finite(flat, start, n):
    """Whether flat[start : start + n] holds no inf or NaN (``v - v`` is NaN exactly for those)."""
    total = flat.dtype.type(0)
    for k in range(n):
        v = flat[np.uint64(start + k)]
        total += v - v
    return total == 0


@kernel_jit(nogil=True, error_model="numpy")
def _unpad_planes(padded, Hp, Wp, pad_top, pad_left, flat_gx, first, Cg, H, W):
    """flat_gx[first + (c, ih, iw)] = padded[c, ih + pad_top, iw + pad_left] (zero outside ``padded``)."""
    zero = flat_gx.dtype.type(0)
    for c in range(Cg):
        for ih in range(H):
            r = ih + pad_top
            d = np.uint64(first + (c * H + ih) * W)
            for iw in range(W):
                col = iw + pad_left
                inside = r < Hp and col < Wp
                flat_gx[d + np.uint64(iw)] = padded[np.uint64((c * Hp + r) * Wp + col)] if inside else zero


@njit(inline="always")
def _copy_run(src, start, step, dst, at, n):
    """dst[at + i] = src[start + i * step] for i < n; ``start`` and ``at`` non-negative.

    Generated code (``inspect_asm``, float32, AVX-512 EPYC VM, 2026-11-26): the unit-stride
    copy is 16-wide ``vmovups`` zmm loads and stores, unrolled; the strided one is scalar.
    The multiply-adds are all in BLAS (OpenBLAS's SkylakeX ``sgemm`` kernel: zmm FMAs).
    """
    s, d = np.uint64(start), np.uint64(at)
    if step == 1:
        for i in range(n):
            dst[d + np.uint64(i)] = src[s + np.uint64(i)]
    else:
        st = np.uint64(step)
        for i in range(n):
            dst[d + np.uint64(i)] = src[s + np.uint64(i) * st]


@njit(inline="always")
def _add_run(src, start, dst, at, step, n):
    """dst[at + i * step] += src[start + i] for i < n; ``start`` and ``at`` non-negative."""
    s, d = np.uint64(start), np.uint64(at)
    if step == 1:
        for i in range(n):
            dst[d + np.uint64(i)] += src[s + np.uint64(i)]
    else:
        st = np.uint64(step)
        for i in range(n):
            dst[d + np.uint64(i) * st] += src[s + np.uint64(i)]


@kernel_jit(**_FLAGS)
def forward(x, w, bias, out, sh, sw, dh, dw, pad_top, pad_left, groups, rows, mrows, wide, act, blas):
    """out[b, m] = bias[m] + (W_g @ im2col(x[b, group]))[m], ``rows`` output rows and ``mrows``
    output channels per work item, through the activation ``act`` (``_numba_epilogue``);
    ``blas``, last, is the address of this process's ``sgemm``/``dgemm`` for the dtype
    (``_blas_routines.gemm_address``, passed at every launch: ``KernelSpec.blas_address``).

    ``wide`` 1 (stride 1 only): the im2col tile has ``Wp = Wo + (KW - 1) * dw``
    columns per output row, the row pitch of the padded input, so each row of
    it is one run of the (padded) input planes (see :func:`_wide_cols`); the
    product computes ``Wp - Wo`` unused columns per row, which the epilogue
    skips.
    """
    B, C, H, W = x.shape
    M, Cg, KH, KW = w.shape
    Ho, Wo = out.shape[2], out.shape[3]
    Mg = M // groups
    K = Cg * KH * KW
    tiles = (Ho + rows - 1) // rows
    mtiles = (Mg + mrows - 1) // mrows
    items = B * groups * tiles * mtiles
    pointwise = KH == 1 and KW == 1 and sh == 1 and sw == 1 and pad_top == 0 and pad_left == 0 and Ho == H
    pointwise = pointwise and Wo == W and rows == Ho
    Wp = Wo + (KW - 1) * dw
    # Wide tiles read the input planes in place when no padding is needed: no copy.
    in_place = pad_top == 0 and pad_left == 0 and Wp == W and Ho + (KH - 1) * dh <= H
    flat_x = x.reshape(x.size)
    out_flat = out.reshape(B, M, Ho * Wo)
    zero, one, six = out.dtype.type(0), out.dtype.type(1), out.dtype.type(6)
    for item in prange(items):
        mt = item % mtiles
        rest = item // mtiles
        t = rest % tiles
        rest = rest // tiles
        g = rest % groups
        b = rest // groups
        r0 = t * rows
        rt = min(rows, Ho - r0)
        L = rt * Wo
        m0 = g * Mg + mt * mrows
        mn = min(mrows, (g + 1) * Mg - m0)
        # Row-major res (mn, n) = W[m0 : m0 + mn] (mn, K) @ tile (K, n) is column-major
        # res.T = tile.T @ W.T: the Fortran call takes the operands swapped.
        if wide and not pointwise:
            Rp = rt + (KH - 1) * dh
            if in_place:
                src, base, pitch = flat_x, ((b * C + g * Cg) * H + r0) * W, H * W
            else:
                src, base, pitch = np.empty(Cg * Rp * Wp, dtype=x.dtype), 0, Rp * Wp
                _pad_rows(x, b, g * Cg, Cg, r0, Rp, Wp, pad_top, pad_left, src)
            n = (rt - 1) * Wp + Wo
            cols = np.empty((K, n), dtype=out.dtype)
            _wide_cols(src, base, pitch, Cg, KH, KW, dh, dw, Wp, cols)
            res = np.empty((mn, n), dtype=out.dtype)
            gemm(blas, NO_TRANS, NO_TRANS, n, mn, K, one, cols, 0, n, w, m0 * K, K, zero, res, 0, n)
            # The result's rows: Wo values every Wp columns.
            runs, run, res_pitch = rt, Wo, Wp
        else:
            res = np.empty((mn, L), dtype=out.dtype)
            if pointwise:
                # 1x1, stride 1, no padding: the channels of image b are the matrix.
                at = (b * C + g * Cg) * H * W
                gemm(blas, NO_TRANS, NO_TRANS, L, mn, K, one, x, at, L, w, m0 * K, K, zero, res, 0, L)
            else:
                cols = np.empty((K, L), dtype=out.dtype)
                _im2col(x, b, g * Cg, Cg, KH, KW, r0, rt, Wo, sh, sw, dh, dw, pad_top, pad_left, cols)
                gemm(blas, NO_TRANS, NO_TRANS, L, mn, K, one, cols, 0, L, w, m0 * K, K, zero, res, 0, L)
            # Rows r0 .. r0 + rt of a channel: one contiguous run of L values.
            runs, run, res_pitch = 1, L, L
        for i in range(mn):
            m = m0 + i
            bv = bias[m]
            dst = out_flat[b, m]
            src_row = res[i]
            for rr in range(runs):
                at, frm = np.uint64(r0 * Wo + rr * run), np.uint64(rr * res_pitch)
                for k in range(run):  # unsigned indices: see _im2col
                    dst[at + np.uint64(k)] = activate(src_row[frm + np.uint64(k)] + bv, act, zero, six)


@kernel_jit(nogil=True, error_model="numpy", fastmath={"contract"})
def _backward_item(
    grad_y,
    x,
    w,
    grad_x,
    part_w,
    part_b,
    b,
    g,
    sh,
    sw,
    dh,
    dw,
    pad_top,
    pad_left,
    groups,
    rows,
    wide,
    input_grad,
    relu,
    masked,
    blas,
):
    """:func:`backward`'s work for image ``b``, group ``g``: adds into ``part_w`` ``(K, M)`` and ``part_b``."""
    B, C, H, W = x.shape
    M, Cg, KH, KW = w.shape
    Ho, Wo = grad_y.shape[2], grad_y.shape[3]
    Mg = M // groups
    K = Cg * KH * KW
    wm = w.reshape(M, K)
    gy_flat = grad_y.reshape(B, M, Ho * Wo)
    relu_flat = relu.reshape(B, M, Ho * Wo) if masked else relu.reshape(1, 1, relu.size)
    Wp = Wo + (KW - 1) * dw
    Hp = Ho + (KH - 1) * dh
    in_place = pad_top == 0 and pad_left == 0 and Wp == W and Hp <= H  # as in forward
    flat_x = x.reshape(x.size)
    flat_gx = grad_x.reshape(grad_x.size)
    first = (b * C + g * Cg) * H * W  # this item's input planes: one contiguous run
    if input_grad:
        for i in range(first, first + Cg * H * W):
            flat_gx[np.uint64(i)] = 0
    # Wide tiles add 0 * x (dW) and W.T @ 0 (dX) for their unused columns: exact
    # zeros only where x and W are finite, else the compact tiles (torch's NaN/inf).
    use_wide = wide and _finite(flat_x, first, Cg * H * W)
    use_wide = use_wide and (not input_grad or _finite(wm.reshape(wm.size), g * Mg * K, Mg * K))
    src, base, pitch, gsrc, gbase = flat_x, 0, 0, flat_gx, 0
    if use_wide:
        if in_place:
            src, base, pitch = flat_x, first, H * W
            gsrc, gbase = flat_gx, first
        else:
            src, base, pitch = np.empty(Cg * Hp * Wp, dtype=x.dtype), 0, Hp * Wp
            _pad_rows(x, b, g * Cg, Cg, 0, Hp, Wp, pad_top, pad_left, src)
            gsrc, gbase = np.zeros(Cg * Hp * Wp if input_grad else 0, dtype=x.dtype), 0
    for r0 in range(0, Ho, rows):
        rt = min(rows, Ho - r0)
        if use_wide:
            L, pitch_y = (rt - 1) * Wp + Wo, Wp
            cols = np.empty((K, L), dtype=x.dtype)
            _wide_cols(src, base + r0 * Wp, pitch, Cg, KH, KW, dh, dw, Wp, cols)
        else:
            L, pitch_y = rt * Wo, Wo
            cols = np.empty((K, L), dtype=x.dtype)
            _im2col(x, b, g * Cg, Cg, KH, KW, r0, rt, Wo, sh, sw, dh, dw, pad_top, pad_left, cols)
        gy = np.empty((Mg, L), dtype=x.dtype)
        for i in range(Mg):
            m = g * Mg + i
            part_b[m] += _grad_rows(
                gy_flat[b, m], relu_flat[b, m] if masked else relu_flat[0, 0], masked, r0 * Wo, gy[i], rt, Wo, pitch_y
            )
        # dW.T += cols @ gy.T (rows K, columns g * Mg.. of the (K, M) partial): BLAS's
        # long-reduction product is ~2.3x faster this way round than gy @ cols.T (2-core
        # VM, one thread, LeNet conv2: 16 x 150 from 100 pixels, 861 -> 371 us per 64
        # images). Column-major, it is part.T (Mg, K) += gy (Mg, L) @ cols.T (L, K).
        one = x.dtype.type(1)
        gemm(blas, TRANS, NO_TRANS, Mg, K, L, one, gy, 0, L, cols, 0, L, one, part_w, g * Mg, M)
        if not input_grad:
            continue
        # dcols (K, L) = W_g.T (K, Mg) @ gy (Mg, L); column-major dcols.T = gy.T @ W_g.
        dcols = np.empty((K, L), dtype=x.dtype)
        gemm(blas, NO_TRANS, TRANS, L, K, Mg, one, gy, 0, L, w, g * Mg * K, K, x.dtype.type(0), dcols, 0, L)
        if use_wide:
            _wide_col2im_add(dcols, gsrc, gbase + r0 * Wp, pitch, Cg, KH, KW, dh, dw, Wp)
        else:
            _col2im_add(dcols, grad_x, b, g * Cg, Cg, KH, KW, r0, rt, Wo, sh, sw, dh, dw, pad_top, pad_left)
    if use_wide and input_grad and not in_place:
        _unpad_planes(gsrc, Hp, Wp, pad_top, pad_left, flat_gx, first, Cg, H, W)


@kernel_jit(**_FLAGS)
def backward(
    grad_y,
    x,
    w,
    grad_x,
    grad_w,
    grad_b,
    sh,
    sw,
    dh,
    dw,
    pad_top,
    pad_left,
    groups,
    rows,
    chunks,
    wide,
    input_grad,
    relu,
    masked,
    blas,
):
    """Gradients of sum(y * grad_y): dW, db by per-chunk partials, dX by col2im of W.T @ dY.

    ``input_grad`` 0: dW and db only, ``grad_x`` left untouched (a network's
    first layer, whose input needs no gradient). ``masked`` 1: the gradient
    through a ReLU whose output is ``relu`` (shape of ``grad_y``): ``grad_y``
    counts as 0 where ``relu <= 0`` (a NaN output passes), applied while
    ``grad_y`` is copied into each tile, with no masked copy of it first;
    ``masked`` 0 ignores ``relu`` (any array of its type). ``wide`` 1 (stride 1):
    the tiles of :func:`forward`'s wide layout, ``grad_y`` copied into them with
    zeros in the unused columns, and ``dcols`` added back in runs of the padded
    planes; an item whose input (or, for dX, weights) holds an inf or NaN takes
    the compact tiles, where no unused column can turn ``0 * inf`` into NaN.
    """
    B = x.shape[0]
    M, Cg, KH, KW = w.shape
    K = Cg * KH * KW
    items = B * groups
    chunks = max(1, min(items, chunks))
    part_w = np.zeros((chunks, K, M), dtype=grad_w.dtype)  # dW transposed: see _backward_item
    part_b = np.zeros((chunks, M), dtype=grad_b.dtype)
    for chunk in prange(chunks):
        for item in range(chunk * items // chunks, (chunk + 1) * items // chunks):
            # One item in a function of its own: with this code inline in the prange body
            # (the wide tiles' scratch planes allocated in a branch), the parallel build
            # indexed out of bounds (a heap corruption; IndexError with boundscheck) where
            # the serial build of the same source was right. numba 0.68, 2026-11-24.
            _backward_item(
                grad_y,
                x,
                w,
                grad_x,
                part_w[chunk],
                part_b[chunk],
                item // groups,
                item % groups,
                sh,
                sw,
                dh,
                dw,
                pad_top,
                pad_left,
                groups,
                rows,
                wide,
                input_grad,
                relu,
                masked,
                blas,
            )
    # Fixed-order reduction of the partials (chunk 0, 1, ... into a zero): deterministic,
    # whatever the threads. By blocks of REDUCE_K rows of the (K, M) partials, each read
    # along M (contiguous) and written as full runs of grad_w's rows: walked by m first,
    # every cache line of the partials was loaded once per m it holds. 2-core EPYC VM,
    # 2026-11-26, 32 partials: backward 3x3 C=128 7x7 B=16 7.9 -> 5.9-6.2 ms, C=256 14x14 B=8
    # 33.0 -> 25.0-27.8.
    gw = grad_w.reshape(M, K)
    blocks = (K + REDUCE_K - 1) // REDUCE_K
    for kb in prange(blocks):
        k0 = kb * REDUCE_K
        kn = min(REDUCE_K, K - k0)
        acc = np.zeros((REDUCE_K, M), dtype=grad_w.dtype)
        for chunk in range(chunks):
            for kk in range(kn):
                row = part_w[chunk, k0 + kk]
                for m in range(M):
                    acc[kk, m] += row[m]
        for m in range(M):
            for kk in range(kn):
                gw[m, k0 + kk] = acc[kk, m]
    for m in range(M):
        total = grad_b.dtype.type(0)
        for chunk in range(chunks):
            total += part_b[chunk, m]
        grad_b[m] = total
