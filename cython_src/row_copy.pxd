# A short row copied without a libc call (the im2col tiles of _gemm_cy).
from fused_types cimport real

cdef extern from *:
    """
    /* A loop, not memcpy: the rows of an im2col tile are tens of elements,
       and a libc call per row cost a third of a C=1 7x7 layer's time (perf, 2-core EPYC VM,
       2026-11-25: ECE408 fa21 conv1 at batch 1000, 3.9 M rows of 80 floats, ~7 ns per call;
       83 -> 66 ms with this loop). gcc -O3 turns such a loop back into a memcpy call unless
       told not to (gcc only: other compilers build the plain loop). objdump of the native
       build (gcc 12, -O3 -march=native, AVX-512 EPYC, 2026-11-26): 64-byte vmovdqu64 zmm
       loads and stores, a masked vmovdqu8 zmm for the tail. */
    #if defined(__GNUC__) && !defined(__clang__)
    #define CONVSUITE_NO_MEMCPY_IDIOM __attribute__((optimize("no-tree-loop-distribute-patterns")))
    #else
    #define CONVSUITE_NO_MEMCPY_IDIOM
    #endif
    #define CONVSUITE_COPY_ROW(T) \\
        static inline CONVSUITE_NO_MEMCPY_IDIOM \\
        void convsuite_copy_row_##T(T *restrict dst, const T *restrict src, Py_ssize_t n) { \\
            for (Py_ssize_t i = 0; i < n; ++i) dst[i] = src[i]; \\
        }
    CONVSUITE_COPY_ROW(float)
    CONVSUITE_COPY_ROW(double)
    """
    void convsuite_copy_row_float(float* dst, const float* src, Py_ssize_t n) noexcept nogil
    void convsuite_copy_row_double(double* dst, const double* src, Py_ssize_t n) noexcept nogil


cdef inline void copy_row(real* dst, const real* src, Py_ssize_t n) noexcept nogil:
    """dst[:n] = src[:n] (see the C above for why not memcpy)."""
    if real is float:
        convsuite_copy_row_float(dst, src, n)
    else:
        convsuite_copy_row_double(dst, src, n)
