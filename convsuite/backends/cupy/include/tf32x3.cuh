// The error-compensated TF32 arithmetic shared by the tf32x3 kernels
// (implicit_gemm_tf32x3.cu, tf32x3_image.cu): the split of a float32 operand
// into TF32 big and small parts, the check for operands that cannot be split,
// and one m16n8k8 TF32 MMA. Needs sm_80 (mma.sync .tf32).
#pragma once

#if !defined(CS_TX_PROMOTE)
#error "compile with the -D options of convsuite.backends.cupy._sources.compile_options() (CS_TX_PROMOTE)"
#endif

// One TF32 value (as its 32-bit pattern) rounded to nearest, ties away from
// zero, from a finite float below 2^126: what cvt.rna.tf32.f32 gives, in two
// integer operations (sm_90 has no conversion instruction: the cvt is
// emulated in ~6). Adding half of the dropped 13 bits' unit carries into the
// kept mantissa (and exponent) exactly as rounding does.
__device__ __forceinline__ unsigned tx_tf32(float v) { return (__float_as_uint(v) + 0x1000u) & 0xffffe000u; }

// v = big + small (+ a residue below 2^-22 |v|), both TF32.
__device__ __forceinline__ void tx_split(float v, unsigned& big, unsigned& small) {
    big = tx_tf32(v);
    small = tx_tf32(v - __uint_as_float(big));
}

// d += a * b for one 16x8x8 TF32 tile (PTX ISA fragment layouts: a row-major, b column-major).
__device__ __forceinline__ void tx_mma(float d[4], const unsigned a[4], const unsigned b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d += a * b taken as big*small + small*big + big*big (the corrections first, the big product last).
// With CS_TX_PROMOTE (the default) the three MMAs sum into a zeroed tile, which d then takes with
// float32 adds, rounded to nearest. The tensor cores round the sum of an MMA toward zero, so three
// MMAs a k-step into d itself lose up to an ulp of d's running sum each, always in the same
// direction: over a long reduction that bias outgrows float32's rounding (2304-4608 products: 17-26x
// cuDNN-FP32's error). Against one k-step's own sum the bias is that of 24 products, and the running
// sum takes round-to-nearest adds, as an FMA reduction does.
__device__ __forceinline__ void tx_mma3(float d[4], const unsigned ab[4], const unsigned as[4], const unsigned bb[2],
                                        const unsigned bs[2]) {
#if CS_TX_PROMOTE
    float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    tx_mma(t, ab, bs);
    tx_mma(t, as, bb);
    tx_mma(t, ab, bb);
#pragma unroll
    for (int e = 0; e < 4; ++e) d[e] += t[e];
#else
    tx_mma(d, ab, bs);
    tx_mma(d, as, bb);
    tx_mma(d, ab, bb);
#endif
}

// Four 8 x 4 matrices of 32-bit words from shared memory (ldmatrix, sm_75+), one
// register each: lane l gives the address of row l % 8 of matrix l / 8 (16-byte
// aligned), and receives word l % 4 of row l / 4 of each matrix.
__device__ __forceinline__ void tx_ldmatrix_x4(unsigned r[4], const unsigned* row) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// Whether a loaded operand cannot be split (inf, NaN, or so large that big*big may overflow differently);
// the forward kernel asks it of its sums, which such an operand makes inf or NaN.
__device__ __forceinline__ bool tx_unsplittable(float v) { return !(fabsf(v) < 8.5070592e37f); }   // 2^126

// tx_split, noting in `unsplittable` an operand that cannot be split (the
// block then recomputes its tile in float32).
__device__ __forceinline__ void tx_split_noting(float v, unsigned& big, unsigned& small, bool& unsplittable) {
    unsplittable |= tx_unsplittable(v);
    tx_split(v, big, small);
}

// As cp_async_16 (common.cuh), cached in L1 on the way (.ca): for a tile every block of a
// multiprocessor copies at about the same time (the split weights of the forward kernels), so L1
// serves the blocks after the first instead of L2. Nsight Compute on an H100, 3x3 C=64 (2026-11-27):
// both forward kernels were bound by L2's throughput (60-72% busy, L1 hit rate 37-45%), half of
// their L2 requests the weights' .cg copies, re-read by every block at every k-step.
__device__ __forceinline__ void cp_async_16_l1(void* dst, const void* src, bool ok) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
}

// One output (output channel m of group g, output pixel n) of a tf32x3 forward tile, recomputed
// with float32 FMAs in the weights' order: the path of blocks whose sums met inf, NaN or a huge
// operand (cold), so IEEE specials come out as in every other algorithm; 0 outside the output.
// koff[k] = (c*H*W + p*dh*W + q*dw, p*dh, q*dw, -) for k = (c, p, q). Needs common.cuh first.
__device__ __forceinline__ float tx_fma_output(const float* __restrict__ x, const float* __restrict__ w,
                                            const int4* __restrict__ koff, int g, int m, i64 n, CONV_PARAMS) {
    const int Mg = M / (C / Cg), Kd = Cg * KH * KW;
    const i64 HoWo = (i64)Ho * Wo;
    if (m >= Mg || n >= (i64)B * HoWo) return 0.0f;
    const i64 b = n / HoWo;
    const int r = (int)(n % HoWo);
    const int oh0 = (r / Wo) * sh - ph, ow0 = (r % Wo) * sw - pw;
    const float* xs = x + (b * C + (i64)g * Cg) * H * W;
    const float* wr = w + ((i64)g * Mg + m) * Kd;
    float sum = 0.0f;
    for (int k = 0; k < Kd; ++k) {
        const int4 o = koff[k];
        const int ih = oh0 + o.y, iw = ow0 + o.z;
        const float v = ((unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W) ? xs[(i64)oh0 * W + ow0 + o.x] : 0.0f;
        sum = fmaf(wr[k], v, sum);
    }
    return sum;
}
