"""The numba backend's ``gemm`` algorithm: im2col tiles and ``np.dot`` inside ``njit``.

Forward. The outputs are dealt out as work items (batch, group, block of
output rows). An item copies the receptive fields of its rows into a private
``(C/g * KH * KW, rows * Wo)`` matrix (im2col; halo cells become zeros, stride
and dilation are folded into the copy) and multiplies it by the group's
weights, ``(M/g, C/g * KH * KW)``, with ``np.dot``, which numba hands to the
BLAS ``sgemm``/``dgemm`` that SciPy ships. A 1x1 kernel with stride 1 and no
padding needs no copy: the input channels of one image already are the
matrix (the pointwise specialisation).

Backward, from the same pieces. One item is (batch, group): for each block of
rows it builds the im2col tile once and uses it twice, ``dW += dY @ cols.T``
and ``dcols = W.T @ dY``, then scatters ``dcols`` back onto the input
gradient (col2im, the adjoint of the copy). The item owns ``grad_x[b, group
channels]``, so scatters never race. ``dW`` and ``db`` are summed into one
private partial per chunk of items; the chunks are fixed by the problem (not
by the thread count) and reduced in order at the end, so the result is the
same bits on 1 or 16 threads and no atomics are needed.

Thread safety of BLAS. Every ``prange`` iteration calls BLAS; the BLAS must
then run one thread per call (the backend limits it with ``threadpoolctl``
for the duration of a launch, see ``numba_backend``), else the two pools
oversubscribe the cores.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._numba_epilogue import activate

__all__ = ["forward", "backward"]

_FLAGS = dict(parallel=True, cache=True, nogil=True, error_model="numpy", fastmath={"contract"})


@njit(inline="always")
def _valid_columns(shift, sw, W, Wo):
    """[lo, hi): output columns whose input column ow*sw - shift lies in [0, W)."""
    lo = (shift + sw - 1) // sw if shift > 0 else 0
    last = W - 1 + shift
    hi = min(Wo, last // sw + 1) if last >= 0 else 0
    lo = min(lo, Wo)
    return lo, max(lo, hi)


@njit(cache=True, nogil=True, error_model="numpy")
def _im2col(x, b, c0, Cg, KH, KW, r0, rt, Wo, sh, sw, dh, dw, pad_top, pad_left, cols):
    """cols[(c, p, q), rr * Wo + ow] = x[b, c0 + c, (r0 + rr)*sh + p*dh - pad_top, ow*sw + q*dw - pad_left].

    The copies index 1-D row views with unsigned indices: numba wraps negative
    signed indices around (a compare and select per element, which also keeps
    LLVM from vectorising), and these indices are never negative in [lo, hi).
    Slice assignment was slower still (a view and a call per run of Wo values).
    2-core VM, 2026-11-24, im2col of 64 images, one thread: LeNet conv1 599 ->
    148 us, conv2 814 -> 367, 6 channels 5x5 padding 2 1456 -> 564.
    """
    H, W = x.shape[2], x.shape[3]
    for c in range(Cg):
        image = x[b, c0 + c]
        for p in range(KH):
            for q in range(KW):
                dst = cols[(c * KH + p) * KW + q]
                shift = pad_left - q * dw
                lo, hi = _valid_columns(shift, sw, W, Wo)
                for rr in range(rt):
                    base = rr * Wo
                    ih = (r0 + rr) * sh + p * dh - pad_top
                    if ih < 0 or ih >= H:
                        for ow in range(Wo):
                            dst[base + ow] = 0
                        continue
                    src = image[ih]
                    for ow in range(lo):
                        dst[base + ow] = 0
                    if sw == 1:
                        for ow in range(lo, hi):
                            dst[np.uint64(base + ow)] = src[np.uint64(ow - shift)]
                    else:
                        for ow in range(lo, hi):
                            dst[np.uint64(base + ow)] = src[np.uint64(ow * sw - shift)]
                    for ow in range(hi, Wo):
                        dst[base + ow] = 0


@njit(cache=True, nogil=True, error_model="numpy")
def _col2im_add(dcols, gx, b, c0, Cg, KH, KW, r0, rt, Wo, sh, sw, dh, dw, pad_top, pad_left):
    """The adjoint of _im2col: gx[b, c0 + c, ih, iw] += dcols[(c, p, q), rr * Wo + ow] (same indexing)."""
    H, W = gx.shape[2], gx.shape[3]
    for c in range(Cg):
        image = gx[b, c0 + c]
        for p in range(KH):
            for q in range(KW):
                src = dcols[(c * KH + p) * KW + q]
                shift = pad_left - q * dw
                lo, hi = _valid_columns(shift, sw, W, Wo)
                for rr in range(rt):
                    ih = (r0 + rr) * sh + p * dh - pad_top
                    if ih < 0 or ih >= H:
                        continue
                    base = rr * Wo
                    dst = image[ih]
                    if sw == 1:
                        for ow in range(lo, hi):
                            dst[np.uint64(ow - shift)] += src[np.uint64(base + ow)]
                    else:
                        for ow in range(lo, hi):
                            dst[np.uint64(ow * sw - shift)] += src[np.uint64(base + ow)]


@njit(**_FLAGS)
def forward(x, w, bias, out, sh, sw, dh, dw, pad_top, pad_left, groups, rows, mrows, act):
    """out[b, m] = bias[m] + (W_g @ im2col(x[b, group]))[m], ``rows`` output rows and ``mrows``
    output channels per work item, through the activation ``act`` (``_numba_epilogue``).
    """
    B, C, H, W = x.shape
    M, Cg, KH, KW = w.shape
    Ho, Wo = out.shape[2], out.shape[3]
    Mg = M // groups
    K = Cg * KH * KW
    wm = w.reshape(M, K)
    tiles = (Ho + rows - 1) // rows
    mtiles = (Mg + mrows - 1) // mrows
    items = B * groups * tiles * mtiles
    pointwise = KH == 1 and KW == 1 and sh == 1 and sw == 1 and pad_top == 0 and pad_left == 0 and Ho == H
    pointwise = pointwise and Wo == W and rows == Ho
    x2 = x.reshape(B * C, H * W)
    out_flat = out.reshape(B, M, Ho * Wo)
    zero, six = out.dtype.type(0), out.dtype.type(6)
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
        wg = wm[m0 : m0 + mn]  # rows of a C-contiguous matrix: contiguous
        if pointwise:
            # 1x1, stride 1, no padding: the channels of image b are the matrix.
            cols = x2[b * C + g * Cg : b * C + (g + 1) * Cg]
        else:
            cols = np.empty((K, L), dtype=out.dtype)
            _im2col(x, b, g * Cg, Cg, KH, KW, r0, rt, Wo, sh, sw, dh, dw, pad_top, pad_left, cols)
        res = np.dot(wg, cols)
        start = r0 * Wo  # rows r0 .. r0 + rt of a channel: one contiguous run of L values
        for i in range(mn):
            m = m0 + i
            bv = bias[m]
            dst = out_flat[b, m]
            src = res[i]
            for k in range(L):  # unsigned indices: see _im2col
                dst[np.uint64(start + k)] = activate(src[np.uint64(k)] + bv, act, zero, six)


@njit(**_FLAGS)
def backward(grad_y, x, w, grad_x, grad_w, grad_b, sh, sw, dh, dw, pad_top, pad_left, groups, rows, chunks):
    """Gradients of sum(y * grad_y): dW, db by per-chunk partials, dX by col2im of W.T @ dY."""
    B, C, H, W = x.shape
    M, Cg, KH, KW = w.shape
    Ho, Wo = grad_y.shape[2], grad_y.shape[3]
    Mg = M // groups
    K = Cg * KH * KW
    wm = w.reshape(M, K)
    items = B * groups
    gy_flat = grad_y.reshape(B, M, Ho * Wo)
    chunks = max(1, min(items, chunks))
    part_w = np.zeros((chunks, M, K), dtype=grad_w.dtype)
    part_b = np.zeros((chunks, M), dtype=grad_b.dtype)
    for chunk in prange(chunks):
        for item in range(chunk * items // chunks, (chunk + 1) * items // chunks):
            g = item % groups
            b = item // groups
            wg_t = np.ascontiguousarray(wm[g * Mg : (g + 1) * Mg].T)
            for i in range(Cg):
                for ih in range(H):
                    for iw in range(W):
                        grad_x[b, g * Cg + i, ih, iw] = 0
            for r0 in range(0, Ho, rows):
                rt = min(rows, Ho - r0)
                L = rt * Wo
                cols = np.empty((K, L), dtype=x.dtype)
                _im2col(x, b, g * Cg, Cg, KH, KW, r0, rt, Wo, sh, sw, dh, dw, pad_top, pad_left, cols)
                gy = np.empty((Mg, L), dtype=x.dtype)
                start = r0 * Wo
                for i in range(Mg):
                    m = g * Mg + i
                    src = gy_flat[b, m]
                    dst = gy[i]
                    total = grad_b.dtype.type(0)
                    for k in range(L):  # unsigned indices: see _im2col
                        v = src[np.uint64(start + k)]
                        dst[np.uint64(k)] = v
                        total += v
                    part_b[chunk, m] += total
                part_w[chunk, g * Mg : (g + 1) * Mg] += np.dot(gy, cols.T)
                dcols = np.dot(wg_t, gy)
                _col2im_add(dcols, grad_x, b, g * Cg, Cg, KH, KW, r0, rt, Wo, sh, sw, dh, dw, pad_top, pad_left)
    # Fixed-order reduction of the partials: deterministic, whatever the threads.
    gw = grad_w.reshape(M, K)
    for m in prange(M):
        for k in range(K):
            total = grad_w.dtype.type(0)
            for chunk in range(chunks):
                total += part_w[chunk, m, k]
            gw[m, k] = total
        total = grad_b.dtype.type(0)
        for chunk in range(chunks):
            total += part_b[chunk, m]
        grad_b[m] = total
