"""The numba backend's ``depthwise`` algorithm: one input channel per group, polyphase planes, long AXPYs.

What it shows. A depthwise layer (MobileNetV2's 3x3 layers, ``groups == C``)
has only ``KH * KW`` products per output, so the ``direct`` kernel's costs
are all per row: on a 7x7 plane every tap is an AXPY of 7 elements after
index arithmetic that costs more than the arithmetic. Here the rows are made
long instead: an input tile is copied once into ``sh * sw`` zero-padded
*phase planes* (phase ``(a, b)`` holds ``xpad[r*sh + a, k*sw + b]``), all
with one pitch ``wq`` (the tile's output columns plus the kernel's reach),
after which tap ``(p, q)`` of every output of the tile is the same flat
AXPY::

    acc[j] += w[m, 0, p, q] * phase[(p*dh) % sh, (q*dw) % sw][j + ((p*dh)//sh)*wq + (q*dw)//sw]

over ``j`` of the flattened ``(rows, wq)`` output grid: unit stride for
every stride and dilation, length ``rows * wq`` instead of ``Wo``. The
``wq - Wo`` columns past each row's end are computed and dropped (2 of 9
on a 7x7 plane with a 3x3 kernel; 1 of 113 at 112x112); halo cells are
zeros in the planes, so no tap needs a bounds test.

Work. An item is (image, channel, band of output rows, band of output
columns); the bands keep the phase planes within ``band_kib`` (L2) and
make work for every thread at batch 1. Each item fills its planes once and
serves every output channel of the group (the channel multiplier). The
accumulator is a private ``ACC``-long array per chunk of items, which LLVM
knows aliases nothing (the condition for vectorising, as in
``_numba_kernels``); offsets are unsigned so no wraparound check is emitted.

Generated code (``inspect_asm`` of the float32 build on the AVX-512 Xeon,
2026-11-22): the tap loop is ``vfmadd213ps`` on ymm registers, unrolled 4
vectors wide (32 floats, hence ``VEC``), the accumulator loaded and stored
around each FMA (it lives in L1, not in registers: two loads per FMA); the
plane copies are plain ``vmovups`` (no gathers or scatters since the offsets
are unsigned); the scalar ``vfmadd213ss`` are the remainder loops.

Zero padding is multiplied, not skipped (an infinite weight on a halo tap
gives NaN, as IEEE arithmetic and torch do).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._numba_cache import kernel_jit
from ._numba_epilogue import activate

__all__ = ["forward", "ACC"]

#: Flat outputs accumulated per pass (8 KiB in float32): stays in L1 with the streamed plane.
ACC = 2048
#: The AXPYs' length is rounded up to this (LLVM's vector loop: 4 x 8 floats).
VEC = 32

_FLAGS = dict(parallel=True, nogil=True, error_model="numpy", fastmath={"contract"})


@njit(inline="always")
def _phase_used(phase, stride, dilation, taps):
    """Whether some tap t < taps lands on ``phase``: (t * dilation) % stride == phase."""
    for t in range(taps):
        if (t * dilation) % stride == phase:
            return True
    return False


@njit(inline="always")
def _fill(x, buf, b, c, r0, c0, nrows, wq, plen, sh, sw, dh, dw, KH, KW, pad_top, pad_left):
    """Phase planes of the tile: buf[(a*sw + e)*plen + rr*wq + k] = xpad[(r0+rr)*sh + a, (c0+k)*sw + e].

    Phases no tap reads (a stride longer than the kernel's reach) are left unfilled.
    """
    H, W = x.shape[2], x.shape[3]
    zero = buf.dtype.type(0)
    for a in range(sh):
        for e in range(sw):
            base = (a * sw + e) * plen
            if not (_phase_used(a, sh, dh, KH) and _phase_used(e, sw, dw, KW)):
                # No tap reads it, but the padded AXPYs of the phase before may run into it.
                for k in range(plen):
                    buf[np.uint64(base + k)] = zero
                continue
            # Output column k reads input column (c0+k)*sw + e - pad_left: valid k in [lo, hi).
            shift = pad_left - e - c0 * sw
            lo = (shift + sw - 1) // sw if shift > 0 else 0
            last = W - 1 + shift
            hi = min(wq, last // sw + 1) if last >= 0 else 0
            lo = min(lo, wq)
            hi = max(hi, lo)
            # Unsigned offsets throughout: with signed ones numba adds a
            # negative-index wraparound per element and LLVM turns the copies
            # into scatters (measured 3x slower than the AXPYs they feed).
            for rr in range(nrows):
                udst = np.uint64(base + rr * wq)
                i = (r0 + rr) * sh + a - pad_top
                if i < 0 or i >= H:
                    for k in range(wq):
                        buf[udst + np.uint64(k)] = zero
                    continue
                xrow = x[b, c, i]
                for k in range(lo):
                    buf[udst + np.uint64(k)] = zero
                if sw == 1:
                    usrc = np.uint64(lo - shift)
                    ulo = udst + np.uint64(lo)
                    for k in range(hi - lo):
                        uk = np.uint64(k)
                        buf[ulo + uk] = xrow[usrc + uk]
                else:
                    for k in range(lo, hi):
                        buf[udst + np.uint64(k)] = xrow[np.uint64(k * sw - shift)]
                for k in range(hi, wq):
                    buf[udst + np.uint64(k)] = zero
            # Slack read only by the dropped columns of the last rows: zeros, never garbage.
            for k in range(base + nrows * wq, base + plen):
                buf[np.uint64(k)] = zero


@njit(inline="always", fastmath={"contract"}, error_model="numpy")
def _outputs(w, bias, out, buf, acc, taps, b, m, r0, c0, nr, nc, wq, plen, act):
    """out[b, m, r0:r0+nr, c0:c0+nc] from the filled phase planes, ACC flat outputs per pass,
    through the activation ``act`` (``_numba_epilogue``).

    Each AXPY runs over a multiple of VEC elements: a 7x7 plane's 63 flat
    outputs would otherwise leave 31 to LLVM's scalar remainder loop (the
    extra outputs read the planes' zeroed slack and are dropped).
    """
    KW = w.shape[3]
    zero, six = out.dtype.type(0), out.dtype.type(6)
    total = nr * wq
    for seg in range(0, total, ACC):
        n = min(ACC, total - seg)
        nv = (n + VEC - 1) // VEC * VEC
        bv = bias[m]
        for j in range(nv):
            acc[j] = bv
        for t in range(taps.shape[0]):
            uo = np.uint64(taps[t, 0] * plen + taps[t, 1] * wq + taps[t, 2] + seg)
            wv = w[m, 0, t // KW, t % KW]
            for j in range(nv):
                uj = np.uint64(j)
                acc[uj] += wv * buf[uo + uj]
        # Scatter the flat segment's valid columns (k < nc of each row) to the output.
        first = seg // wq
        end = (seg + n - 1) // wq + 1
        for rr in range(first, end):
            lo = max(seg, rr * wq)
            hi = min(seg + n, rr * wq + nc)
            orow = out[b, m, r0 + rr]
            uo = np.uint64(c0 + lo - rr * wq)
            ua = np.uint64(lo - seg)
            for f in range(hi - lo):
                uf = np.uint64(f)
                orow[uo + uf] = activate(acc[ua + uf], act, zero, six)


@kernel_jit(**_FLAGS)
def forward(x, w, bias, out, sh, sw, dh, dw, pad_top, pad_left, groups, rows, cols, chunks, act):
    """Depthwise out[b, m] = bias[m] + sum_{p,q} xpad[b, m // Mg, ...] * w[m, 0, p, q], through
    the activation ``act`` (``_numba_epilogue``).

    ``rows`` and ``cols`` are the output band sizes (the planes' budget) and
    ``chunks`` how many pieces the items are dealt into; all are runtime
    arguments, so changing them recompiles nothing.
    """
    B, C = x.shape[0], x.shape[1]
    M, KH, KW = w.shape[0], w.shape[2], w.shape[3]
    Ho, Wo = out.shape[2], out.shape[3]
    # The algorithm's check says the same; a direct call must not write past `out` either.
    if w.shape[1] != 1 or groups != C or M % groups != 0 or out.shape[1] != M or out.shape[0] != B:
        raise ValueError("depthwise needs one input channel per group (w.shape[1] == 1, groups == C)")
    if rows < 1 or cols < 1:
        raise ValueError("rows and cols must be positive")
    Mg = M // groups
    rowoff = ((KH - 1) * dh) // sh
    coloff = ((KW - 1) * dw) // sw
    row_bands = (Ho + rows - 1) // rows
    col_bands = (Wo + cols - 1) // cols
    items = B * C * row_bands * col_bands
    plane_max = (rows + rowoff) * (cols + coloff) + coloff
    # Per tap: its phase plane, and the rows and columns it reaches into that plane
    # (the divisions done once per call, not once per item).
    taps = np.empty((KH * KW, 3), dtype=np.int64)
    for p in range(KH):
        for q in range(KW):
            taps[p * KW + q, 0] = ((p * dh) % sh) * sw + (q * dw) % sw
            taps[p * KW + q, 1] = (p * dh) // sh
            taps[p * KW + q, 2] = (q * dw) // sw
    chunks = max(1, min(items, chunks))
    for chunk in prange(chunks):
        buf = np.empty(sh * sw * plane_max + VEC, dtype=out.dtype)
        acc = np.empty(ACC, dtype=out.dtype)
        for item in range(chunk * items // chunks, (chunk + 1) * items // chunks):
            cb = item % col_bands
            rest = item // col_bands
            rb = rest % row_bands
            rest //= row_bands
            c = rest % C
            b = rest // C
            r0 = rb * rows
            nr = min(rows, Ho - r0)
            c0 = cb * cols
            nc = min(cols, Wo - c0)
            wq = nc + coloff
            plen = (nr + rowoff) * wq + coloff
            _fill(x, buf, b, c, r0, c0, nr + rowoff, wq, plen, sh, sw, dh, dw, KH, KW, pad_top, pad_left)
            end = sh * sw * plen
            for k in range(VEC):  # the last plane's padded AXPYs read up to VEC - 1 past it
                buf[end + k] = buf.dtype.type(0)
            for m in range(c * Mg, (c + 1) * Mg):
                _outputs(w, bias, out, buf, acc, taps, b, m, r0, c0, nr, nc, wq, plen, act)
