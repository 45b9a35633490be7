# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The Cython rung's ``gemm`` algorithm: packed im2col tiles and BLAS ``sgemm``/``dgemm``.

For one (batch item, group, block of output rows) the receptive fields are
copied into a packed ``(C/g * KH * KW, rows * Wo)`` tile (halo cells as
zeros, stride and dilation folded into the copy), and one BLAS call writes
``W_g @ tile`` straight into the output rows: BLAS takes the output's row
pitch as its leading dimension, so there is no result copy, and the bias is
there already (beta = 1 on a tile pre-filled with it). A 1x1 kernel with
stride 1 and no padding skips the copy: the image's channels are the matrix.

Backward from the same pieces, per (batch item, group, row block): one tile,
used twice: ``dW += dY @ tile.T`` (beta = 1 into grad_w, in a fixed order, so
deterministic) and ``dtile = W.T @ dY``, scattered back onto grad_x (col2im,
the adjoint of the copy); ``db`` is summed in the same pass.

BLAS is the Fortran-interface ``sgemm``/``dgemm`` that ``_blas_routines``
finds at import time (the ``scipy-openblas32`` package's OpenBLAS, else
SciPy's ``cython_blas``, as scikit-learn uses it): function pointers, so
building this extension needs no BLAS or SciPy headers.
Row-major ``C = A @ B`` is column-major ``C.T = B.T @ A.T``: every call below
passes the operands swapped. Like the rest of the rung it runs with the GIL
released; how many threads BLAS itself uses is the BLAS setting
(``threadpoolctl``), one by default in the benchmarks of this rung.
"""

from libc.stdlib cimport free, malloc
from libc.string cimport memset

from fused_types cimport real
from row_copy cimport copy_row

ctypedef void (*sgemm_t)(char*, char*, int*, int*, int*, float*, float*, int*, float*, int*,
                         float*, float*, int*) noexcept nogil
ctypedef void (*dgemm_t)(char*, char*, int*, int*, int*, double*, double*, int*, double*, int*,
                         double*, double*, int*) noexcept nogil

cdef sgemm_t _sgemm = NULL
cdef dgemm_t _dgemm = NULL

#: Target bytes of one packed tile: BLAS at speed, tile still in L2/L3.
WORKSPACE_BYTES = 2 * 2**20


cdef int _load_blas() except -1:
    """Take the routines' addresses on first use (``_blas_routines``; a bad ``CONVSUITE_BLAS``
    is then the caller's ValueError, not a failed import of the whole rung)."""
    global _sgemm, _dgemm
    if _sgemm == NULL:
        from convsuite.backends._blas_routines import gemm_routines

        routines = gemm_routines()
        _dgemm = <dgemm_t><size_t>routines.dgemm
        _sgemm = <sgemm_t><size_t>routines.sgemm
    return 0


cdef inline void _gemm(char* ta, char* tb, int m, int n, int k, real alpha, const real* a, int lda,
                       const real* b, int ldb, real beta, real* c, int ldc) noexcept nogil:
    """Column-major C = alpha * op(A) @ op(B) + beta * C, float or double."""
    if real is float:
        _sgemm(ta, tb, &m, &n, &k, &alpha, <float*>a, &lda, <float*>b, &ldb, &beta, c, &ldc)
    else:
        _dgemm(ta, tb, &m, &n, &k, &alpha, <double*>a, &lda, <double*>b, &ldb, &beta, c, &ldc)


cdef inline real _sum(const real* v, Py_ssize_t n) noexcept nogil:
    """sum(v[:n]) with eight running sums: independent adds that gcc vectorises. One running
    sum is a chain of dependent adds, one per 4 cycles: db of a 1x1 layer (96 x 12,544
    values) took 1.5 ms of its 2.1 ms backward that way (2-core EPYC VM, 2026-11-26).
    The order is fixed by n alone: the same bits on every call."""
    cdef real acc[8]
    cdef Py_ssize_t i, j, whole = n - n % 8
    for j in range(8):
        acc[j] = 0
    for i in range(0, whole, 8):
        for j in range(8):
            acc[j] = acc[j] + v[i + j]
    for i in range(whole, n):
        acc[i - whole] = acc[i - whole] + v[i]
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))


cdef inline void _columns(Py_ssize_t shift, Py_ssize_t sw, Py_ssize_t W, Py_ssize_t Wo,
                          Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """[lo, hi): output columns whose input column ow*sw - shift lies in [0, W)."""
    cdef Py_ssize_t a = (shift + sw - 1) // sw if shift > 0 else 0
    cdef Py_ssize_t last = W - 1 + shift
    cdef Py_ssize_t b = last // sw + 1 if last >= 0 else 0
    if a > Wo:
        a = Wo
    if b > Wo:
        b = Wo
    if b < a:
        b = a
    lo[0] = a
    hi[0] = b


cdef void _im2col(const real[:, :, :, ::1] x, Py_ssize_t b, Py_ssize_t c0, Py_ssize_t Cg,
                  Py_ssize_t KH, Py_ssize_t KW, Py_ssize_t r0, Py_ssize_t rt, Py_ssize_t Wo,
                  Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t dh, Py_ssize_t dw,
                  Py_ssize_t pad_top, Py_ssize_t pad_left, real* cols) noexcept nogil:
    """cols[(c, p, q), rr*Wo + ow] = x[b, c0+c, (r0+rr)*sh + p*dh - pad_top, ow*sw + q*dw - pad_left]."""
    cdef Py_ssize_t H = x.shape[2], W = x.shape[3], L = rt * Wo
    cdef Py_ssize_t c, p, q, rr, ih, ow, lo, hi, shift
    cdef real* dst
    cdef const real* src
    for c in range(Cg):
        for p in range(KH):
            for q in range(KW):
                shift = pad_left - q * dw
                _columns(shift, sw, W, Wo, &lo, &hi)
                for rr in range(rt):
                    dst = cols + ((c * KH + p) * KW + q) * L + rr * Wo
                    ih = (r0 + rr) * sh + p * dh - pad_top
                    if ih < 0 or ih >= H:
                        memset(dst, 0, Wo * sizeof(real))
                        continue
                    src = &x[b, c0 + c, ih, 0]
                    if lo > 0:
                        memset(dst, 0, lo * sizeof(real))
                    if sw == 1:
                        copy_row(dst + lo, src + lo - shift, hi - lo)
                    else:
                        for ow in range(lo, hi):
                            dst[ow] = src[ow * sw - shift]
                    if hi < Wo:
                        memset(dst + hi, 0, (Wo - hi) * sizeof(real))


cdef void _col2im_add(const real* dcols, real[:, :, :, ::1] gx, Py_ssize_t b, Py_ssize_t c0,
                      Py_ssize_t Cg, Py_ssize_t KH, Py_ssize_t KW, Py_ssize_t r0, Py_ssize_t rt,
                      Py_ssize_t Wo, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t dh, Py_ssize_t dw,
                      Py_ssize_t pad_top, Py_ssize_t pad_left) noexcept nogil:
    """The adjoint of _im2col: gx[b, c0+c, ih, iw] += dcols[(c, p, q), rr*Wo + ow]."""
    cdef Py_ssize_t H = gx.shape[2], W = gx.shape[3], L = rt * Wo
    cdef Py_ssize_t c, p, q, rr, ih, ow, lo, hi, shift
    cdef const real* src
    cdef real* dst
    for c in range(Cg):
        for p in range(KH):
            for q in range(KW):
                shift = pad_left - q * dw
                _columns(shift, sw, W, Wo, &lo, &hi)
                for rr in range(rt):
                    ih = (r0 + rr) * sh + p * dh - pad_top
                    if ih < 0 or ih >= H:
                        continue
                    src = dcols + ((c * KH + p) * KW + q) * L + rr * Wo
                    dst = &gx[b, c0 + c, ih, 0]
                    for ow in range(lo, hi):
                        dst[ow * sw - shift] += src[ow]


def forward(
    const real[:, :, :, ::1] x,
    const real[:, :, :, ::1] w,
    const real[::1] bias,
    real[:, :, :, ::1] out,
    Py_ssize_t sh, Py_ssize_t sw,
    Py_ssize_t dh, Py_ssize_t dw,
    Py_ssize_t pad_top, Py_ssize_t pad_left,
    Py_ssize_t groups,
    Py_ssize_t rows,
):
    """out[b, m] = bias[m] + (W_g @ im2col(x[b, group]))[m], ``rows`` output rows per tile."""
    cdef Py_ssize_t B = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t M = w.shape[0], Cg = w.shape[1], KH = w.shape[2], KW = w.shape[3]
    cdef Py_ssize_t Ho = out.shape[2], Wo = out.shape[3]
    cdef Py_ssize_t Mg = M // groups, K = Cg * KH * KW
    cdef Py_ssize_t b, g, m, r0, rt, k
    cdef bint pointwise = (KH == 1 and KW == 1 and sh == 1 and sw == 1 and pad_top == 0
                           and pad_left == 0 and Ho == H and Wo == W)
    cdef real* cols = NULL
    cdef const real* tile
    cdef real* dst
    _load_blas()
    if not pointwise:
        cols = <real*>malloc(K * rows * Wo * sizeof(real))
        if cols == NULL:
            raise MemoryError("gemm: no memory for the im2col tile")
    try:
        with nogil:
            for b in range(B):
                for g in range(groups):
                    r0 = 0
                    while r0 < Ho:
                        rt = rows if r0 + rows <= Ho else Ho - r0
                        if pointwise:
                            tile = &x[b, g * Cg, 0, 0]
                            rt = Ho
                        else:
                            _im2col(x, b, g * Cg, Cg, KH, KW, r0, rt, Wo, sh, sw, dh, dw,
                                    pad_top, pad_left, cols)
                            tile = cols
                        for m in range(g * Mg, (g + 1) * Mg):
                            dst = &out[b, m, r0, 0]
                            for k in range(rt * Wo):
                                dst[k] = bias[m]
                        # out rows (Mg, rt*Wo), row pitch Ho*Wo  +=  W_g (Mg, K) @ tile (K, rt*Wo)
                        _gemm(b"N", b"N", <int>(rt * Wo), <int>Mg, <int>K, 1, tile,
                              <int>(rt * Wo if not pointwise else H * W), &w[g * Mg, 0, 0, 0], <int>K, 1,
                              &out[b, g * Mg, r0, 0], <int>(Ho * Wo))
                        r0 += rt
    finally:
        free(cols)


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
    Py_ssize_t rows,
):
    """Gradients of sum(y * grad_y) from one im2col tile per row block, used twice.

    A 1x1 kernel with stride 1 and no padding (as in :func:`forward`) needs
    no tile: an image's channels are the matrix, and dX = W_g.T @ dY is
    written straight into grad_x (no col2im). 2-core EPYC VM, 2026-11-26,
    one thread: 1x1 C16->96 112x112 B=1 2.16 -> 2.10 ms, C64->128 28x28 B=4
    1.54 -> 1.51: the tile was not the cost (db's sum was: see :func:`_sum`).
    """
    cdef Py_ssize_t B = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3]
    cdef Py_ssize_t M = w.shape[0], Cg = w.shape[1], KH = w.shape[2], KW = w.shape[3]
    cdef Py_ssize_t Ho = grad_y.shape[2], Wo = grad_y.shape[3]
    cdef Py_ssize_t Mg = M // groups, K = Cg * KH * KW
    cdef Py_ssize_t b, g, m, r0, rt, k
    cdef bint pointwise = (KH == 1 and KW == 1 and sh == 1 and sw == 1 and pad_top == 0
                           and pad_left == 0 and Ho == H and Wo == W)
    cdef real total
    cdef real* cols = NULL
    cdef real* dcols = NULL
    if not pointwise:
        cols = <real*>malloc(K * rows * Wo * sizeof(real))
        dcols = <real*>malloc(K * rows * Wo * sizeof(real))
        if cols == NULL or dcols == NULL:
            free(cols)
            free(dcols)
            raise MemoryError("gemm: no memory for the im2col tiles")
    try:
        _load_blas()
        with nogil:
            if not pointwise:  # pointwise: every element of grad_x is written by its product
                memset(&grad_x[0, 0, 0, 0], 0, B * C * H * W * sizeof(real))
            memset(&grad_w[0, 0, 0, 0], 0, M * K * sizeof(real))
            for m in range(M):
                total = 0
                for b in range(B):
                    total = total + _sum(&grad_y[b, m, 0, 0], Ho * Wo)
                grad_b[m] = total
            for b in range(B):
                for g in range(groups):
                    if pointwise:
                        # grad_w (Mg, Cg) += dY (Mg, HW) @ X_g.T, X_g = the image's channels (Cg, HW)
                        _gemm(b"T", b"N", <int>K, <int>Mg, <int>(H * W), 1, &x[b, g * Cg, 0, 0], <int>(H * W),
                              &grad_y[b, g * Mg, 0, 0], <int>(H * W), 1, &grad_w[g * Mg, 0, 0, 0], <int>K)
                        # grad_x[b, group] (Cg, HW) = W_g.T (Cg, Mg) @ dY (Mg, HW)
                        _gemm(b"N", b"T", <int>(H * W), <int>K, <int>Mg, 1, &grad_y[b, g * Mg, 0, 0],
                              <int>(H * W), &w[g * Mg, 0, 0, 0], <int>K, 0, &grad_x[b, g * Cg, 0, 0],
                              <int>(H * W))
                        continue
                    r0 = 0
                    while r0 < Ho:
                        rt = rows if r0 + rows <= Ho else Ho - r0
                        _im2col(x, b, g * Cg, Cg, KH, KW, r0, rt, Wo, sh, sw, dh, dw,
                                pad_top, pad_left, cols)
                        # grad_w (Mg, K) += dY (Mg, rt*Wo; pitch Ho*Wo) @ cols.T
                        _gemm(b"T", b"N", <int>K, <int>Mg, <int>(rt * Wo), 1, cols, <int>(rt * Wo),
                              &grad_y[b, g * Mg, r0, 0], <int>(Ho * Wo), 1,
                              &grad_w[g * Mg, 0, 0, 0], <int>K)
                        # dcols (K, rt*Wo) = W_g.T (K, Mg) @ dY (Mg, rt*Wo)
                        _gemm(b"N", b"T", <int>(rt * Wo), <int>K, <int>Mg, 1,
                              &grad_y[b, g * Mg, r0, 0], <int>(Ho * Wo), &w[g * Mg, 0, 0, 0], <int>K, 0,
                              dcols, <int>(rt * Wo))
                        _col2im_add(dcols, grad_x, b, g * Cg, Cg, KH, KW, r0, rt, Wo, sh, sw, dh, dw,
                                    pad_top, pad_left)
                        r0 += rt
    finally:
        free(cols)
        free(dcols)
