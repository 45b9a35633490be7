# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Single-core 2-D convolution kernels (1-D runs as 2-D with a unit height).

Arrays arrive validated, C-contiguous and of one dtype (the front end does
that); these functions only compute, with the GIL released so several Python
threads can run kernels at once. No OpenMP: this is the single-core rung.

Loop order, and why. For one (batch, block of MB output channels, output row)
the outputs are produced in tiles of ``tile_w`` columns (default TILE_W,
at most TILE_W_MAX: the accumulators are stack arrays of that size, so the
tile width is a runtime argument that costs no rebuild) held in MB small
local arrays. For each input channel c and kernel tap (p, q) the tile receives MB
AXPYs that share one input load:

    xv = x[b, c, ih, ow*sw + q*dw - pad_left]
    acc_i[ow] += w[m + i, c, p, q] * xv        for i < MB

over the range of ow whose input column is inside the image (computed before
the loop, so the inner loop has no branch). With stride 1 both acc and x are
read contiguously, the weights are loop-invariant scalars, and gcc -O3
vectorises the loop into packed FMAs. The tiles stay in L1 across all
C/g * KH * KW taps, so even a 1e7-sample signal with a 31-tap mask streams
through memory once instead of once per tap. Halo (padding) taps are skipped,
never multiplied (the front end restores IEEE NaN * 0 where it matters, see
convsuite/_nonfinite.py).

Generated code (objdump of the -O3 -march=native -mprefer-vector-width=256
build on the AVX-512 Xeon): with the stride as a runtime value gcc
vectorised the 4-channel loop with one ``vinsertps`` per lane to gather x
(even for stride 1) and xmm/ymm ``vfmadd213ps`` whose accumulator is a
memory operand, stored back after every FMA. The stride-1 branch spells the
unit stride out, so x comes in with plain ``vmovups``; each FMA still loads
and stores its accumulator (the register-blocked ``blocked`` algorithm of
the numba rung is the answer to that). (Measured alternatives, see docs/measurements: a 4x16
register block that gcc would not keep in registers, and a "flat" stride-1
variant with rows of H*W, were no faster.)

Index arithmetic is Py_ssize_t (64-bit) throughout, and that is sufficient:
validation (convsuite/_validation.py, INDEX_LIMIT) refuses any stride,
dilation, padding side, dilated span or padded length of 2**62 or more, and
the widest value formed here is a sum of two such quantities (shift + sw - 1,
W - 1 + shift, r*sh + p*dh <= padded length), below 2**63. Geometry arrives
as Python ints; one past int64 would raise OverflowError at the call, never wrap.
"""

from libc.string cimport memset
from fused_types cimport real

cdef enum:
    TILE_W = 256  # default output columns per tile: MB rows of accumulators stay in L1
    TILE_W_MAX = 1024  # largest tile_w: the stack accumulators' length (4 x 8 KiB in float64)
    MB = 4        # output channels per pass: each input load feeds MB FMAs


cdef inline Py_ssize_t _first_valid(Py_ssize_t shift, Py_ssize_t stride) noexcept nogil:
    """Smallest ow >= 0 with ow*stride - shift >= 0, i.e. ceil(shift / stride) for shift > 0."""
    if shift <= 0:
        return 0
    return (shift + stride - 1) // stride


cdef inline Py_ssize_t _end_valid(Py_ssize_t last, Py_ssize_t stride, Py_ssize_t limit) noexcept nogil:
    """One past the largest ow with ow*stride <= last, clipped to [0, limit]."""
    if last < 0:
        return 0
    cdef Py_ssize_t end = last // stride + 1
    return end if end < limit else limit


def forward(
    const real[:, :, :, ::1] x,
    const real[:, :, :, ::1] w,
    const real[::1] bias,
    real[:, :, :, ::1] out,
    Py_ssize_t sh, Py_ssize_t sw,
    Py_ssize_t dh, Py_ssize_t dw,
    Py_ssize_t pad_top, Py_ssize_t pad_left,
    Py_ssize_t groups,
    Py_ssize_t tile_w=TILE_W,
):
    """out[b, m] = bias[m] + sum_{c,p,q} x[b, g*Cg + c, ...] * w[m, c, p, q].

    ``tile_w`` output columns are accumulated per pass (1..TILE_W_MAX).
    """
    cdef Py_ssize_t B = x.shape[0], H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t M = w.shape[0], Cg = w.shape[1], KH = w.shape[2], KW = w.shape[3]
    cdef Py_ssize_t Ho = out.shape[2], Wo = out.shape[3]
    cdef Py_ssize_t Mg = M // groups
    cdef Py_ssize_t b, grp, m, m_end, n, i, c, ci, p, q, r, ih, ow, t0, t1, lo, hi, shift, k
    cdef real w0, w1, w2, w3, xv
    cdef real acc0[TILE_W_MAX]
    cdef real acc1[TILE_W_MAX]
    cdef real acc2[TILE_W_MAX]
    cdef real acc3[TILE_W_MAX]
    cdef real* accs[MB]
    cdef const real* xrow
    cdef const real* xs
    if tile_w < 1 or tile_w > TILE_W_MAX:
        raise ValueError(f"`tile_w` must be between 1 and {TILE_W_MAX}; got {tile_w}")
    accs[0], accs[1], accs[2], accs[3] = acc0, acc1, acc2, acc3
    with nogil:
        for b in range(B):
            for grp in range(groups):
                m = grp * Mg
                m_end = m + Mg
                while m < m_end:
                    n = MB if m + MB <= m_end else 1  # output channels in this pass
                    for r in range(Ho):
                        t0 = 0
                        while t0 < Wo:  # a variable-step range() is not a C loop in Cython
                            t1 = t0 + tile_w if t0 + tile_w < Wo else Wo
                            for i in range(n):
                                for ow in range(t1 - t0):
                                    accs[i][ow] = bias[m + i]
                            for c in range(Cg):
                                ci = grp * Cg + c
                                for p in range(KH):
                                    ih = r * sh + p * dh - pad_top
                                    if ih < 0 or ih >= H:
                                        continue  # halo row: zero padding contributes nothing
                                    xrow = &x[b, ci, ih, 0]
                                    for q in range(KW):
                                        shift = pad_left - q * dw  # input column = ow*sw - shift
                                        lo = _first_valid(shift, sw)
                                        hi = _end_valid(W - 1 + shift, sw, Wo)
                                        lo = lo if lo > t0 else t0
                                        hi = hi if hi < t1 else t1
                                        if hi <= lo:
                                            continue
                                        if n == MB:
                                            w0 = w[m, c, p, q]
                                            w1 = w[m + 1, c, p, q]
                                            w2 = w[m + 2, c, p, q]
                                            w3 = w[m + 3, c, p, q]
                                            if sw == 1:
                                                # Unit stride spelled out: gcc then loads x with
                                                # plain vector loads, not a gather per lane.
                                                xs = xrow + (lo - shift)
                                                for k in range(hi - lo):
                                                    xv = xs[k]
                                                    acc0[lo - t0 + k] += w0 * xv
                                                    acc1[lo - t0 + k] += w1 * xv
                                                    acc2[lo - t0 + k] += w2 * xv
                                                    acc3[lo - t0 + k] += w3 * xv
                                            else:
                                                for ow in range(lo, hi):
                                                    xv = xrow[ow * sw - shift]
                                                    acc0[ow - t0] += w0 * xv
                                                    acc1[ow - t0] += w1 * xv
                                                    acc2[ow - t0] += w2 * xv
                                                    acc3[ow - t0] += w3 * xv
                                        else:
                                            w0 = w[m, c, p, q]
                                            if sw == 1:
                                                xs = xrow + (lo - shift)
                                                for k in range(hi - lo):
                                                    acc0[lo - t0 + k] += w0 * xs[k]
                                            else:
                                                for ow in range(lo, hi):
                                                    acc0[ow - t0] += w0 * xrow[ow * sw - shift]
                            for i in range(n):
                                for ow in range(t1 - t0):
                                    out[b, m + i, r, t0 + ow] = accs[i][ow]
                            t0 += tile_w
                    m = m + n


def backward(
    const real[:, :, :, ::1] grad_y,
    const real[:, :, :, ::1] x,
    const real[:, :, :, ::1] w,
    real[:, :, :, ::1] grad_x,
    real[:, :, :, ::1] grad_w,
    real[::1] grad_b,
    Py_ssize_t sh, Py_ssize_t sw,
    Py_ssize_t dh, Py_ssize_t dw,
    Py_ssize_t pad_top, Py_ssize_t pad_left,
    Py_ssize_t groups,
):
    """Gradients of sum(y * grad_y): each product sends grad_y back to both factors."""
    cdef Py_ssize_t B = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t M = w.shape[0], Cg = w.shape[1], KH = w.shape[2], KW = w.shape[3]
    cdef Py_ssize_t Ho = grad_y.shape[2], Wo = grad_y.shape[3]
    cdef Py_ssize_t Mg = M // groups
    cdef Py_ssize_t b, m, c, ci, p, q, oh, ih, ow, lo, hi, shift
    cdef real wv, dot, total
    cdef const real* xrow
    cdef const real* gyrow
    cdef real* gxrow
    with nogil:
        memset(&grad_x[0, 0, 0, 0], 0, B * C * H * W * sizeof(real))
        memset(&grad_w[0, 0, 0, 0], 0, M * Cg * KH * KW * sizeof(real))
        for m in range(M):
            total = 0
            for b in range(B):
                for oh in range(Ho):
                    for ow in range(Wo):
                        total = total + grad_y[b, m, oh, ow]
            grad_b[m] = total
        for b in range(B):
            for m in range(M):
                for oh in range(Ho):
                    gyrow = &grad_y[b, m, oh, 0]
                    for c in range(Cg):
                        ci = (m // Mg) * Cg + c
                        for p in range(KH):
                            ih = oh * sh + p * dh - pad_top
                            if ih < 0 or ih >= H:
                                continue
                            xrow = &x[b, ci, ih, 0]
                            gxrow = &grad_x[b, ci, ih, 0]
                            for q in range(KW):
                                shift = pad_left - q * dw
                                lo = _first_valid(shift, sw)
                                hi = _end_valid(W - 1 + shift, sw, Wo)
                                # grad_w: a dot product of the output-gradient row
                                # with the input row the tap saw.
                                dot = 0
                                for ow in range(lo, hi):
                                    dot = dot + gyrow[ow] * xrow[ow * sw - shift]
                                grad_w[m, c, p, q] += dot
                                # grad_x: an AXPY of the gradient row into the input
                                # row (vectorised for stride 1, like the forward).
                                wv = w[m, c, p, q]
                                for ow in range(lo, hi):
                                    gxrow[ow * sw - shift] += wv * gyrow[ow]
