"""The numba backend's ``blocked`` algorithm: a register-blocked direct convolution.

The ``direct`` kernel adds one tap at a time to a tile of accumulators in
L1, so every multiply-add also loads and stores its accumulator: the store
port, not the FMA units, sets the pace. Here a whole row of KW taps is
applied to MB = 4 output channels in one pass over the output columns, in
the style of Zhang, Franchetti and Low (ICML 2018) and oneDNN's blocked
direct convolution: for each output column vector the four accumulators are
loaded once, receive 4 * KW FMAs (the input loaded once per tap and shared
by the four channels), and are stored once. For stride 1 and the common
widths (KW = 1..5, 7) the tap loop is instantiated with KW as a constant, so
LLVM unrolls it completely and vectorises the column loop around it; other
cases run the same loop with a runtime KW. (``numba.literally`` on KW was
tried first: it re-dispatches on every call, 0.5 s each.)

Halo cells: for each input channel the KH input rows a tile needs are first
copied into a small zero-padded row buffer, so the inner loop has no bounds
tests at all (padding taps are multiplied by zeros; the copy costs one load
per KW * MB FMAs).

Work items: (batch, group, block of MB output channels, output row, tile of
``tile_w`` columns), dealt out in ``chunks`` pieces like ``direct``; both
are runtime arguments, so a sweep over them recompiles nothing.

Generated code (``inspect_asm``, float32, on this AVX-512 Xeon, where
numba's LLVM uses 256-bit vectors): the stride-1 KW = 5 column loop is, per
8 columns, 4 accumulator loads (``vmovups`` ymm), 5 input loads, 20
``vfmadd231ps`` ymm with the 20 weights held in ymm16-ymm31-class registers
(AVX-512 gives 32 of them; with AVX2's 16 some weights would be reloaded
from L1), and 4 stores: 5 FMAs per store instead of direct's 1. The last n %
8 columns and the stride > 1 / other-width branch run scalar ``vfmadd*ss``.
Measured (1 thread, noisy shared machine): 1.1-1.9x faster than ``direct``
on fa19/fa21 conv1, 3x3 C=64 and 5x5 stride 2; still behind ``gemm`` where
the reduction is long (the row copies and weight copies per item, and short
rows of 44 columns that leave a scalar tail).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._numba_cache import kernel_jit

__all__ = ["forward"]

MB = 4  # output channels per pass: each input load feeds MB FMAs
TILE_W = 512  # default output columns per item (``tile_w``): 4 accumulator rows stay in L1
# The accumulator rows are TILE_W_MAX apart whatever ``tile_w``: a constant
# row pitch tells LLVM that the MB rows never overlap, which it needs to
# vectorise the column loop (a pitch of ``tile_w``, a runtime value, measured
# 2.7x slower on fa19 conv1). Only the first ``tile_w`` columns are touched.
TILE_W_MAX = 2048

_FLAGS = dict(parallel=True, nogil=True, error_model="numpy", fastmath={"contract"})


@njit(inline="always", error_model="numpy", fastmath={"contract"})
def _row_pass(rb, wl, acc, p, n, sw, dw, KW):
    """acc[i, k] += sum_q wl[i, p, q] * rb[k*sw + q*dw] for i < MB, k < n (KW a literal)."""
    for k in range(n):
        base = np.uint64(k * sw)
        a0 = acc[0, k]
        a1 = acc[1, k]
        a2 = acc[2, k]
        a3 = acc[3, k]
        for q in range(KW):
            xv = rb[base + np.uint64(q * dw)]
            a0 += wl[0, p, q] * xv
            a1 += wl[1, p, q] * xv
            a2 += wl[2, p, q] * xv
            a3 += wl[3, p, q] * xv
        acc[0, k] = a0
        acc[1, k] = a1
        acc[2, k] = a2
        acc[3, k] = a3


@njit(inline="always", error_model="numpy", fastmath={"contract"})
def _dispatch(rb, wl, acc, p, n, sw, dw, KW):
    """_row_pass with the common stride-1 widths as constants (tap loop fully unrolled)."""
    if sw == 1 and KW == 3:
        _row_pass(rb, wl, acc, p, n, 1, dw, 3)
    elif sw == 1 and KW == 5:
        _row_pass(rb, wl, acc, p, n, 1, dw, 5)
    elif sw == 1 and KW == 7:
        _row_pass(rb, wl, acc, p, n, 1, dw, 7)
    elif sw == 1 and KW == 1:
        _row_pass(rb, wl, acc, p, n, 1, dw, 1)
    elif sw == 1 and KW == 2:
        _row_pass(rb, wl, acc, p, n, 1, dw, 2)
    elif sw == 1 and KW == 4:
        _row_pass(rb, wl, acc, p, n, 1, dw, 4)
    else:
        _row_pass(rb, wl, acc, p, n, sw, dw, KW)


@kernel_jit(**_FLAGS)
def forward(x, w, bias, out, sh, sw, dh, dw, pad_top, pad_left, groups, tile_w, chunks):
    """out[b, m] = bias[m] + sum_{c,p,q} x[b, g*Cg + c, ...] * w[m, c, p, q].

    ``tile_w`` output columns per work item, ``chunks`` pieces of work.
    """
    B, H, W = x.shape[0], x.shape[2], x.shape[3]
    M, Cg, KH, KW = w.shape
    Ho, Wo = out.shape[2], out.shape[3]
    Mg = M // groups
    blocks = (Mg + MB - 1) // MB
    if tile_w < 1 or tile_w > TILE_W_MAX:
        raise ValueError("tile_w must be between 1 and TILE_W_MAX")
    tiles = (Wo + tile_w - 1) // tile_w
    items = B * groups * blocks * Ho * tiles
    # Rows for the widest tile this call has (not tile_w past the output's width): with validation's
    # bounds every term is below 2**62 here, and the backend's check keeps KH * span_max small.
    span_max = (min(tile_w, Wo) - 1) * sw + (KW - 1) * dw + 1
    chunks = max(1, min(items, chunks))
    for chunk in prange(chunks):
        acc = np.empty((MB, TILE_W_MAX), dtype=out.dtype)
        rows = np.empty((KH, span_max), dtype=out.dtype)
        wl = np.zeros((MB, KH, KW), dtype=out.dtype)
        for item in range(chunk * items // chunks, (chunk + 1) * items // chunks):
            t = item % tiles
            rest = item // tiles
            r = rest % Ho
            rest //= Ho
            blk = rest % blocks
            rest //= blocks
            g = rest % groups
            b = rest // groups
            m0 = g * Mg + blk * MB
            nm = min(MB, (g + 1) * Mg - m0)
            t0 = t * tile_w
            n = min(tile_w, Wo - t0)
            span = (n - 1) * sw + (KW - 1) * dw + 1
            col0 = t0 * sw - pad_left  # input column of rows[:, 0]
            for i in range(MB):
                bv = bias[m0 + i] if i < nm else out.dtype.type(0)
                for k in range(n):
                    acc[i, k] = bv
            for c in range(Cg):
                ci = g * Cg + c
                # Weights of this channel block (missing channels of a short block stay zero).
                for i in range(nm):
                    for p in range(KH):
                        for q in range(KW):
                            wl[i, p, q] = w[m0 + i, c, p, q]
                # Zero-padded copy of the KH input rows the tile reads.
                for p in range(KH):
                    ih = r * sh + p * dh - pad_top
                    if ih < 0 or ih >= H:
                        for j in range(span):
                            rows[p, j] = 0
                        continue
                    lo = min(span, max(0, -col0))
                    hi = max(lo, min(span, W - col0))
                    for j in range(lo):
                        rows[p, j] = 0
                    for j in range(lo, hi):
                        rows[p, j] = x[b, ci, ih, col0 + j]
                    for j in range(hi, span):
                        rows[p, j] = 0
                for p in range(KH):
                    _dispatch(rows[p], wl, acc, p, n, sw, dw, KW)
            for i in range(nm):
                for k in range(n):
                    out[b, m0 + i, r, t0 + k] = acc[i, k]
