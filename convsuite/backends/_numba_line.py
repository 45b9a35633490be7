"""The numba backend's ``line1d`` algorithm: a 1-D signal in one pass, taps in registers.

For one input and one output channel per group (the 1-D report's signal, or
a depthwise 1-D layer), every output is ``bias + sum_k w[k] * x[ow*s + k*d -
pad]``. The ``direct`` kernel computes that as K AXPYs over a tile of
accumulators in L1: each tap loads and stores every accumulator once, so a
K=3 filter costs 3 loads and 3 stores per output on top of the signal.

Here the taps are consumed four at a time inside one loop over the outputs:

    acc[k] += w0*x[i] + w1*x[i+d] + w2*x[i+2d] + w3*x[i+3d]

the four weights are loop-invariant scalars, held in vector registers
(broadcast once), and the loop over ``k`` is vectorised by LLVM: for K <= 4
the sum is written straight to the output with no accumulator at all (one
read of the signal, one write of the output: a copy's traffic), and for K =
31 the accumulator tile is touched 8 times instead of 31. Columns where some
tap falls in the zero padding (at most K-1 per side) take a scalar loop
that skips those taps.

Generated code (``inspect_asm`` of a fresh compile, float32, on the AVX-512
Xeon, where numba's LLVM uses 256-bit vectors): the stride-1 K = 3 loop is,
per 8 outputs, one ``vmovups`` ymm load of x, ``vfmadd213ps`` (w0 * x +
bias) and two ``vfmadd231ps`` with the shifted x as memory operands, and one
``vmovups`` store, unrolled 2x (16 outputs per iteration); no gathers. The
4-tap group of the long-kernel branch is ``vmulps`` + 3 ``vfmadd231ps`` +
``vaddps`` into the accumulator (``contract`` fuses along the products'
chain only), one accumulator load and store per 4 taps. Edges and the
stride > 1 branch are scalar (``vfmadd*ss``).

Work items are (batch, channel, tile of ``tile`` output columns), dealt out
in ``chunks`` pieces (a few per thread); each chunk allocates its
accumulator tile once. Both are runtime arguments: changing them recompiles
nothing.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._numba_cache import kernel_jit
from ._numba_kernels import schedule_dynamically

__all__ = ["forward", "TILE"]

TILE = 4096  # default outputs per work item (``tile``): the accumulator (16 KiB in float32) stays in L1

_FLAGS = dict(parallel=True, nogil=True, error_model="numpy", fastmath={"contract"})


@njit(inline="always", error_model="numpy", fastmath={"contract"})
def _edge(xr, wr, ow, sw, dw, pad, W, bv):
    """One output whose taps may fall in the padding (those are skipped)."""
    total = bv
    for k in range(wr.shape[0]):
        i = ow * sw + k * dw - pad
        if 0 <= i < W:
            total += wr[k] * xr[i]
    return total


@njit(inline="always", error_model="numpy", fastmath={"contract"})
def _interior(xr, wr, orow, acc, lo, hi, sw, dw, pad, bv):
    """Outputs lo..hi-1, every tap inside the signal; sw == 1 is inlined as a constant."""
    K = wr.shape[0]
    n = hi - lo
    if n <= 0:
        return
    # Unsigned offsets: numba then emits no negative-index wraparound check,
    # which would block vectorisation.
    ub = np.uint64(lo * sw - pad)
    uo = np.uint64(lo)
    # Tap offsets as uint64 computed from ints: ``2 * ud`` would mix int64 and
    # uint64, which numba types as float64 (and LLVM then emits gathers).
    ud, ud2, ud3 = np.uint64(dw), np.uint64(2 * dw), np.uint64(3 * dw)
    us = np.uint64(sw)
    if K <= 4:
        w0 = wr[0]
        # Valid indices whatever K (a placeholder weight is never used): keeps
        # every weight in the input dtype, where ``wr[0] * 0`` would be float64.
        w1, w2, w3 = wr[min(1, K - 1)], wr[min(2, K - 1)], wr[min(3, K - 1)]
        if K == 1:
            for k in range(n):
                uk = np.uint64(k) * us + ub
                orow[uo + np.uint64(k)] = bv + w0 * xr[uk]
        elif K == 2:
            for k in range(n):
                uk = np.uint64(k) * us + ub
                orow[uo + np.uint64(k)] = bv + w0 * xr[uk] + w1 * xr[uk + ud]
        elif K == 3:
            for k in range(n):
                uk = np.uint64(k) * us + ub
                orow[uo + np.uint64(k)] = bv + w0 * xr[uk] + w1 * xr[uk + ud] + w2 * xr[uk + ud2]
        else:
            for k in range(n):
                uk = np.uint64(k) * us + ub
                orow[uo + np.uint64(k)] = bv + w0 * xr[uk] + w1 * xr[uk + ud] + w2 * xr[uk + ud2] + w3 * xr[uk + ud3]
        return
    for k in range(n):
        acc[k] = bv
    full = K - K % 4
    for g in range(0, full, 4):
        w0, w1, w2, w3 = wr[g], wr[g + 1], wr[g + 2], wr[g + 3]
        ug = ub + np.uint64(g) * ud
        for k in range(n):
            uk = np.uint64(k) * us + ug
            acc[k] += w0 * xr[uk] + w1 * xr[uk + ud] + w2 * xr[uk + ud2] + w3 * xr[uk + ud3]
    for g in range(full, K):  # the last K % 4 taps, one AXPY each
        wv = wr[g]
        ug = ub + np.uint64(g) * ud
        for k in range(n):
            acc[k] += wv * xr[np.uint64(k) * us + ug]
    for k in range(n):
        orow[uo + np.uint64(k)] = acc[k]


# Its chunks are dealt one at a time to whichever thread is free (_numba_kernels.DYNAMIC_CHUNK).
@schedule_dynamically
@kernel_jit(**_FLAGS)
def forward(x, w, bias, out, sh, sw, dh, dw, pad_top, pad_left, groups, tile, chunks):
    """out[b, c, 0, ow] = bias[c] + sum_k w[c, 0, 0, k] * x[b, c, 0, ow*sw + k*dw - pad_left].

    ``tile`` outputs per work item, ``chunks`` pieces of work.
    """
    B, C, W = x.shape[0], x.shape[1], x.shape[3]
    K = w.shape[3]
    Wo = out.shape[3]
    tiles = (Wo + tile - 1) // tile
    items = B * C * tiles
    chunks = max(1, min(items, chunks))
    # Outputs [ilo, ihi) have every tap inside the signal.
    ilo = min(Wo, (pad_left + sw - 1) // sw)
    last = W - 1 + pad_left - (K - 1) * dw
    ihi = max(ilo, min(Wo, last // sw + 1) if last >= 0 else 0)
    for chunk in prange(chunks):
        acc = np.empty(tile, dtype=out.dtype)
        for item in range(chunk * items // chunks, (chunk + 1) * items // chunks):
            t = item % tiles
            bc = item // tiles
            c = bc % C
            b = bc // C
            xr = x[b, c, 0]
            wr = w[c, 0, 0]
            orow = out[b, c, 0]
            bv = bias[c]
            t0 = t * tile
            t1 = min(t0 + tile, Wo)
            lo = min(max(t0, ilo), t1)
            hi = max(min(t1, ihi), lo)
            for ow in range(t0, lo):
                orow[ow] = _edge(xr, wr, ow, sw, dw, pad_left, W, bv)
            if sw == 1:
                _interior(xr, wr, orow, acc, lo, hi, 1, dw, pad_left, bv)
            else:
                _interior(xr, wr, orow, acc, lo, hi, sw, dw, pad_left, bv)
            for ow in range(hi, t1):
                orow[ow] = _edge(xr, wr, ow, sw, dw, pad_left, W, bv)
