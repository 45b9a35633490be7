# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Cython rung's ``depthwise`` algorithm: polyphase planes and one flat AXPY per tap (one core).

The same method as the numba rung's ``_numba_depthwise`` (read its module
docstring for the derivation): for each (image, input channel, band of
output rows x columns) the input is copied once into ``sh * sw``
zero-padded phase planes of one pitch ``wq``; then every tap ``(p, q)`` of
every output of the band is the flat AXPY

    acc[j] += w[m, 0, p, q] * plane[phase(p, q)][j + offset(p, q)]

over the flattened ``(rows, wq)`` grid, unit stride whatever the stride or
dilation, and the valid ``Wo`` columns of each row are copied out. Each item
serves every output channel of its group (the channel multiplier). Halo
cells are zeros in the planes: zero padding is multiplied, not skipped.

Generated code (``objdump -d`` of the build): the AXPY is the C function
below with ``restrict`` pointers, so gcc vectorises it without an overlap
check: the native build (``CONVSUITE_NATIVE_BUILD=1``, as ``make`` does) gets
``vfmadd213ps`` on ymm with the accumulator loaded and stored around it;
portable builds (the SSE2 baseline) get 128-bit multiplies and adds. Its length is rounded up to ``VEC`` so a 7x7 plane's 63
outputs do not fall to the scalar remainder loop; the extra outputs read the
planes' zeroed slack and are dropped.

Index arithmetic is Py_ssize_t, as in ``_conv_cy`` (validation bounds every
value below 2**62); ``convsuite.backends._depthwise_bands`` sizes the bands
so one item's planes stay within the tunable ``band_kib``.
"""

from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from fused_types cimport real

cdef extern from *:
    """
    /* restrict: the planes and the accumulator never overlap, so gcc vectorises without a runtime check.
       noinline: inlined into the tap loop, gcc -O3 interchanged the loops and ran a scalar loop (perf). */
    static __attribute__((noinline)) void convsuite_axpy_f(float *restrict acc, const float *restrict src, float a, Py_ssize_t n) {
        for (Py_ssize_t j = 0; j < n; ++j) acc[j] += a * src[j];
    }
    static __attribute__((noinline)) void convsuite_axpy_d(double *restrict acc, const double *restrict src, double a, Py_ssize_t n) {
        for (Py_ssize_t j = 0; j < n; ++j) acc[j] += a * src[j];
    }
    """
    void convsuite_axpy_f(float* acc, const float* src, float a, Py_ssize_t n) noexcept nogil
    void convsuite_axpy_d(double* acc, const double* src, double a, Py_ssize_t n) noexcept nogil

cdef enum:
    ACC = 2048  # flat outputs per pass: 8 KiB (float32) in L1
    VEC = 32    # AXPY lengths are rounded up to this


cdef inline bint _phase_used(Py_ssize_t phase, Py_ssize_t stride, Py_ssize_t dilation, Py_ssize_t taps) noexcept nogil:
    """Whether some tap t < taps lands on ``phase``: (t * dilation) % stride == phase."""
    cdef Py_ssize_t t
    for t in range(taps):
        if (t * dilation) % stride == phase:
            return True
    return False


cdef void _fill(
    const real[:, :, :, ::1] x, real* buf, Py_ssize_t b, Py_ssize_t c, Py_ssize_t r0, Py_ssize_t c0,
    Py_ssize_t nrows, Py_ssize_t wq, Py_ssize_t plen, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t dh, Py_ssize_t dw,
    Py_ssize_t KH, Py_ssize_t KW, Py_ssize_t pad_top, Py_ssize_t pad_left,
) noexcept nogil:
    """Phase planes of the band: buf[(a*sw + e)*plen + rr*wq + k] = xpad[(r0+rr)*sh + a, (c0+k)*sw + e]."""
    cdef Py_ssize_t H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t a, e, base, shift, lo, hi, last, rr, i, k
    cdef real* dst
    cdef const real* xrow
    for a in range(sh):
        for e in range(sw):
            base = (a * sw + e) * plen
            if not (_phase_used(a, sh, dh, KH) and _phase_used(e, sw, dw, KW)):
                # No tap reads it, but the padded AXPYs of the plane before may run into it.
                memset(buf + base, 0, plen * sizeof(real))
                continue
            # Output column k reads input column (c0+k)*sw + e - pad_left: valid k in [lo, hi).
            shift = pad_left - e - c0 * sw
            lo = (shift + sw - 1) // sw if shift > 0 else 0
            last = W - 1 + shift
            hi = min(wq, last // sw + 1) if last >= 0 else 0
            lo = min(lo, wq)
            hi = max(hi, lo)
            for rr in range(nrows):
                dst = buf + base + rr * wq
                i = (r0 + rr) * sh + a - pad_top
                if i < 0 or i >= H:
                    memset(dst, 0, wq * sizeof(real))
                    continue
                xrow = &x[b, c, i, 0]
                memset(dst, 0, lo * sizeof(real))
                if sw == 1:
                    memcpy(dst + lo, xrow + (lo - shift), (hi - lo) * sizeof(real))
                else:
                    for k in range(lo, hi):
                        dst[k] = xrow[k * sw - shift]
                memset(dst + hi, 0, (wq - hi) * sizeof(real))
            # Slack read only by the dropped columns of the last rows: zeros, never garbage.
            memset(buf + base + nrows * wq, 0, (plen - nrows * wq) * sizeof(real))


def forward(
    const real[:, :, :, ::1] x,
    const real[:, :, :, ::1] w,
    const real[::1] bias,
    real[:, :, :, ::1] out,
    Py_ssize_t sh, Py_ssize_t sw,
    Py_ssize_t dh, Py_ssize_t dw,
    Py_ssize_t pad_top, Py_ssize_t pad_left,
    Py_ssize_t groups,
    Py_ssize_t rows, Py_ssize_t cols,
):
    """Depthwise out[b, m] = bias[m] + sum_{p,q} xpad[b, m // Mg, ...] * w[m, 0, p, q].

    ``rows`` x ``cols`` outputs per band (the planes' budget, see
    ``convsuite.backends._depthwise_bands``).
    """
    cdef Py_ssize_t B = x.shape[0], C = x.shape[1]
    cdef Py_ssize_t M = w.shape[0], KH = w.shape[2], KW = w.shape[3]
    cdef Py_ssize_t Ho = out.shape[2], Wo = out.shape[3]
    cdef Py_ssize_t Mg = M // groups
    cdef Py_ssize_t rowoff, coloff, plane_max, b, c, m, r0, c0, nr, nc, wq, plen, total, seg, n, nv
    cdef Py_ssize_t t, p, q, j, rr, lo, hi, first, end, rb, cb, sb
    cdef real bv
    cdef real* buf
    cdef real* acc
    cdef Py_ssize_t* taps
    if rows < 1 or cols < 1:
        raise ValueError(f"`rows` and `cols` must be positive; got {rows}, {cols}")
    # The algorithm's check says the same; a direct call must not write past `out` either.
    if w.shape[1] != 1 or groups != C or M % groups != 0 or out.shape[1] != M or out.shape[0] != B:
        raise ValueError(
            f"depthwise needs one input channel per group: x {tuple(x.shape)}, w {tuple(w.shape)}, groups {groups}"
        )
    if Ho == 0 or Wo == 0 or B == 0 or M == 0:
        return
    rowoff = ((KH - 1) * dh) // sh
    coloff = ((KW - 1) * dw) // sw
    plane_max = (rows + rowoff) * (cols + coloff) + coloff
    buf = <real*> malloc((sh * sw * plane_max + VEC) * sizeof(real))
    acc = <real*> malloc(ACC * sizeof(real))
    taps = <Py_ssize_t*> malloc(KH * KW * 3 * sizeof(Py_ssize_t))
    if buf == NULL or acc == NULL or taps == NULL:
        free(buf)
        free(acc)
        free(taps)
        raise MemoryError("depthwise: could not allocate the phase planes")
    with nogil:
        # Per tap: its phase plane, and the rows and columns it reaches into that plane.
        for p in range(KH):
            for q in range(KW):
                t = 3 * (p * KW + q)
                taps[t] = ((p * dh) % sh) * sw + (q * dw) % sw
                taps[t + 1] = (p * dh) // sh
                taps[t + 2] = (q * dw) // sw
        for b in range(B):
            for c in range(C):
                for rb in range((Ho + rows - 1) // rows):
                    r0 = rb * rows
                    nr = min(rows, Ho - r0)
                    for cb in range((Wo + cols - 1) // cols):
                        c0 = cb * cols
                        nc = min(cols, Wo - c0)
                        wq = nc + coloff
                        plen = (nr + rowoff) * wq + coloff
                        _fill(x, buf, b, c, r0, c0, nr + rowoff, wq, plen, sh, sw, dh, dw, KH, KW, pad_top, pad_left)
                        memset(buf + sh * sw * plen, 0, VEC * sizeof(real))  # read by the last plane's padded AXPYs
                        total = nr * wq
                        for m in range(c * Mg, (c + 1) * Mg):
                            for sb in range((total + ACC - 1) // ACC):
                                seg = sb * ACC
                                n = min(<Py_ssize_t> ACC, total - seg)
                                nv = (n + VEC - 1) // VEC * VEC
                                bv = bias[m]
                                for j in range(nv):
                                    acc[j] = bv
                                for t in range(KH * KW):
                                    p = t // KW
                                    q = t - p * KW
                                    if real is float:
                                        convsuite_axpy_f(
                                            acc, buf + taps[3 * t] * plen + taps[3 * t + 1] * wq + taps[3 * t + 2] + seg,
                                            w[m, 0, p, q], nv,
                                        )
                                    else:
                                        convsuite_axpy_d(
                                            acc, buf + taps[3 * t] * plen + taps[3 * t + 1] * wq + taps[3 * t + 2] + seg,
                                            w[m, 0, p, q], nv,
                                        )
                                # The segment's valid columns (k < nc of each row) to the output.
                                first = seg // wq
                                end = (seg + n - 1) // wq + 1
                                for rr in range(first, end):
                                    lo = max(seg, rr * wq)
                                    hi = min(seg + n, rr * wq + nc)
                                    if hi > lo:  # a segment may start in a row's dropped columns
                                        memcpy(&out[b, m, r0 + rr, c0 + lo - rr * wq], acc + (lo - seg), (hi - lo) * sizeof(real))
    free(buf)
    free(acc)
    free(taps)
