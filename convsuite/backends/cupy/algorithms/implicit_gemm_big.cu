// igemm_big: float32 implicit GEMM with BM x 128 block tiles, BM = 128 or 64
// (layers with at most 64 output channels per group would leave half of a
// 128-row tile idle).
//
// 2*BM threads (256 or 128), each owning an 8 x 8 register tile made of four
// 4 x 4 quarters BM/2 rows and 64 columns apart, so a warp's shared-memory
// reads are 16-byte vectors, conflict-free or broadcast, and every slice
// costs 4 vector loads per 64 FMAs (the multiply is bound by FMA issue, not
// by shared memory); a reduction slice of BK = 8 per stage. The forward's
// chunked gather copies global -> shared with cp.async from sm_80, BIG_STAGES
// stages in flight (no registers held for the loads, one instruction per element); the
// table gather, the ReLU-masked gather and the weight gradient keep two
// shared-memory stages with the next slice's global loads issued into
// registers before the current slice is multiplied. One barrier per slice
// either way. The forward's im2col gather is a template switch,
// CHUNKED: 0 reduces in the weights' order k = (c, p, q) through a per-plan
// table of filter offsets, koff[k] = (c*H*W + p*dh*W + q*dw, p*dh, q*dw, 0)
// (a tap costs a 16-byte table load, its dependent input load and two
// compares); 1 reduces over chunks of 8 channels, tap by tap, so a slice is one
// tap of 8 channels: one bounds check per slice, the 8 input loads H*W apart
// and independent (H100, 3x3 C=64 B=64: 0.79 -> 0.56 ms; the backend's rule
// takes it from 8 channels). The weight gradient keeps the table.
//
// conv2d_igemm_fwd:   Y_g (Mg x N) = W_g (Mg x Kd) X_g (Kd x N), N = B*Ho*Wo.
//                     grid = (ceil(N/128), ceil(Mg/BM), groups).
//                     The input gradient of a stride-1 convolution runs
//                     through it too: a convolution of grad_y with the
//                     flipped, transposed filters (see the backend).
// conv2d_igemm_wgrad: gW_g (Mg x Kd) = gY_g (Mg x N) X_g^T (N x Kd), split-K
//                     over N: blockIdx.z = split * groups + g writes
//                     partial[split, g*Mg + m, k]; the splits are summed in a
//                     fixed order afterwards (deterministic, no atomics).
//                     grid = (ceil(Kd/128), ceil(Mg/BM), splits * groups).
#include "common.cuh"

#define BIG_BN 128
#define BIG_BK 8
#define BIG_PAD 4   // row padding of the A tile: the w-grad loader stores columns
// cp.async stages of the chunked float forward. Against the register pipeline, H100, 2026-11-27,
// through the API, alternating processes (docs/measurements/igemm-big-cp-async-2026-11-27-h100.md): 3x3 C=64
// 56x56 B=64 0.447-0.455 -> 0.406-0.408 ms, 3x3 C=32->64 1.07-1.10x -> 1.19-1.20x cuDNN, C=128
// and 256 1.03-1.09x faster, 1x1 C=96->24 1.02-1.14x; the loads hold no registers (spills 40 -> 8
// bytes at 128 registers, sm_90). Four stages (BM = 64: 25 KB a block) where an SM's shared memory
// holds four such blocks (sm_80, sm_90: 164-228 KB; measured on sm_90 only); three elsewhere (100
// KB on sm_86/89); none below sm_80, where cp.async is an ordinary load and store (common.cuh) and
// the register pipeline overlaps better.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define BIG_STAGES 0
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 800 && __CUDA_ARCH__ != 900
#define BIG_STAGES 3
#else
#define BIG_STAGES 4
#endif

// The 8 x 8 outer products of one shared-memory stage (thread (ty, tx), ty < BM/8, tx < 16).
template <typename T, int BM>
__device__ __forceinline__ void big_tile_multiply(const T (*As)[BM + BIG_PAD], const T (*Bs)[BIG_BN], T acc[8][8],
                                                  int ty, int tx) {
#pragma unroll
    for (int kk = 0; kk < BIG_BK; ++kk) {
        T a[8], b[8];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            a[i] = As[kk][ty * 4 + i];
            a[4 + i] = As[kk][BM / 2 + ty * 4 + i];
            b[i] = Bs[kk][tx * 4 + i];
            b[4 + i] = Bs[kk][64 + tx * 4 + i];
        }
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[i][j] += a[i] * b[j];
    }
}

// Tile row (half = BM/2) or column (half = 64) that register index i (0..7) of thread t holds.
__device__ __forceinline__ int big_lane(int t, int i, int half) { return t * 4 + (i & 3) + (i >> 2) * half; }

// ACT fuses an activation into the epilogue (activate<ACT> in common.cuh: 1 ReLU, 2 ReLU6).
// MASK = 1 reads x through a ReLU mask xmask of x's shape (relu_masked): the
// stride-1 input gradient of a layer followed by a ReLU runs this kernel on
// grad_y with the layer's ReLU output as the mask (conv2d_igemm_fwd_masked).
template <typename T, int BM, int ACT, int MASK, int CHUNKED>
__device__ __forceinline__ void igemm_fwd_body(const T* __restrict__ x, const T* __restrict__ xmask,
                                               const T* __restrict__ w, const T* __restrict__ bias,
                                               T* __restrict__ y, const int4* __restrict__ koff, CONV_PARAMS) {
    constexpr int NT = 2 * BM, A_PER = BM * BIG_BK / NT, B_PER = BIG_BN * BIG_BK / NT;   // 4 and 4 or 8
    // The chunked gather of x itself goes through cp.async; with a mask each element is
    // two loads and a select, which a copy cannot do.
    constexpr bool ASYNC = CHUNKED && !MASK && BIG_STAGES > 0;
    constexpr int NS = ASYNC && sizeof(T) == 4 ? BIG_STAGES : 2;   // (double: instantiated for the PTX check only)
    __shared__ __align__(16) T As[NS][BIG_BK][BM + BIG_PAD];   // weights, As[k][m]
    __shared__ __align__(16) T Bs[NS][BIG_BK][BIG_BN];         // unrolled input, Bs[k][n]
    const int G = C / Cg, Mg = M / G, g = blockIdx.z;
    const int Kd = Cg * KH * KW;
    const i64 HoWo = (i64)Ho * Wo, N = (i64)B * HoWo;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * BM;
    const i64 n0 = (i64)blockIdx.x * BIG_BN;

    // Weight loads. Table gather: row am of the tile, A_PER consecutive k (a warp
    // instruction spans 32 rows, but each thread's four loads share a line). Chunked
    // gather: channel akq of the chunk at the stage's tap, of rows arow + r * NT / 8,
    // so a warp instruction reads four rows' 8 channels, 3-4 cache lines at a 3x3's
    // 36-byte channel stride; one row per thread there put 32 rows' lines in every
    // instruction, one L1 wavefront each: the L1 was 85% busy (Nsight Compute, H100,
    // 3x3 C=64) and the chunked forward 1.25x slower. (The table gather on the chunked
    // mapping: 6% slower on ECE408 fa19 conv2, one run; not kept.)
    const int am = tid % BM, ak = (tid / BM) * A_PER;
    const bool a_ok = m0 + am < Mg;
    const T* wrow = w + ((i64)g * Mg + (a_ok ? m0 + am : 0)) * Kd;
    const int akq = tid % BIG_BK, arow = tid / BIG_BK;
    const T* wq = w + ((i64)g * Mg + min(m0 + arow, Mg - 1)) * Kd;
    unsigned a_rows = 0;   // bit r: row arow + r * NT / 8 exists
#pragma unroll
    for (int r = 0; r < A_PER; ++r) a_rows |= unsigned(m0 + arow + r * (NT / BIG_BK) < Mg) << r;
    // Input loads: output column bn of the tile (decoded once), B_PER consecutive k.
    const int bn = tid % BIG_BN, bk = (tid / BIG_BN) * B_PER;
    const i64 n_load = n0 + bn;
    const bool n_ok = n_load < N;
    const i64 b_load = n_ok ? n_load / HoWo : 0;
    const int r_load = n_ok ? (int)(n_load % HoWo) : 0;
    const int ih0 = (r_load / Wo) * sh - ph, iw0 = (r_load % Wo) * sw - pw;
    const i64 xoff = (b_load * C + (i64)g * Cg) * H * W;
    const T* xb = x + xoff;
    const T* mb = MASK ? xmask + xoff : xmask;   // the mask of the same image and group (unread without MASK)
    const i64 xb_off = (i64)ih0 * W + iw0;

    // CHUNKED: the reduction order of tf32x3's CHUNKED gather (implicit_gemm_tf32x3.cu):
    // stages of one tap (p, q) of 8 consecutive channels, so a thread's B_PER
    // elements share one bounds check and lie H*W apart (no table, no division).
    const int taps = KH * KW, HW = H * W;   // one group's input fits in an int (the backend's check)
    const int steps = CHUNKED ? (Cg + BIG_BK - 1) / BIG_BK * taps : (Kd + BIG_BK - 1) / BIG_BK;
    int lc = 0, lp = 0, lq = 0;   // CHUNKED: the first channel and the tap the next load() reads

    T ra[A_PER], rb[B_PER];
    auto load = [&](int step) {
        if constexpr (CHUNKED) {
            const int ca = lc + akq;
            const T* wp = opaque_pointer(wq + (ca * taps + lp * KW + lq));
#pragma unroll
            for (int r = 0; r < A_PER; ++r, wp += (NT / BIG_BK) * Kd)
                ra[r] = (a_rows >> r & 1) && ca < Cg ? __ldg(wp) : T(0);
            const int ih = ih0 + lp * dh, iw = iw0 + lq * dw;
            // Channels of this chunk the thread reads: 0 outside the image or past N.
            const bool inside = n_ok && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
            const int live = inside ? Cg - (lc + bk) : 0;
            // Formed, not read, where live <= 0; unsigned, so a last chunk past a group of
            // nearly 2^31 elements wraps instead of overflowing (it is exact where read).
            const int first = (int)((unsigned)(lc + bk) * (unsigned)HW + (unsigned)(ih * W + iw));
            const T* xp = opaque_pointer(xb + first);
            const T* mp = MASK ? opaque_pointer(mb + first) : mb;
#pragma unroll
            for (int r = 0; r < B_PER; ++r, xp += HW) {
                T v = T(0);
                if (r < live) {   // relu_masked, both loads issued before the select (no branch)
                    v = __ldg(xp);
                    if (MASK && __ldg(mp) <= T(0)) v = T(0);
                }
                rb[r] = v;
                if (MASK) mp += HW;
            }
            if (++lq == KW) {
                lq = 0;
                if (++lp == KH) lp = 0, lc += BIG_BK;
            }
        } else {
            const int k0 = step * BIG_BK;
#pragma unroll
            for (int r = 0; r < A_PER; ++r) {
                const int k = k0 + ak + r;
                ra[r] = (a_ok && k < Kd) ? wrow[k] : T(0);
            }
#pragma unroll
            for (int r = 0; r < B_PER; ++r) {
                const int k = k0 + bk + r;
                T v = T(0);
                if (n_ok && k < Kd) {
                    const int4 o = koff[k];
                    const int ih = ih0 + o.y, iw = iw0 + o.z;
                    if ((unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
                        v = relu_masked<MASK>(xb, mb, xb_off + o.x);
                }
                rb[r] = v;
            }
        }
    };
    // ASYNC: stage s's copies, in load()'s order and mapping (zeros where load() has them).
    auto load_async = [&](int s) {
        const int ca = lc + akq;
        const T* wp = opaque_pointer(wq + (ca * taps + lp * KW + lq));
#pragma unroll
        for (int r = 0; r < A_PER; ++r, wp += (NT / BIG_BK) * Kd)
            cp_async_element(&As[s][akq][arow + r * (NT / BIG_BK)], wp, (a_rows >> r & 1) && ca < Cg);
        const int ih = ih0 + lp * dh, iw = iw0 + lq * dw;
        const bool inside = n_ok && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
        const int live = inside ? Cg - (lc + bk) : 0;
        const int first = (int)((unsigned)(lc + bk) * (unsigned)HW + (unsigned)(ih * W + iw));
        const T* xp = opaque_pointer(xb + first);
#pragma unroll
        for (int r = 0; r < B_PER; ++r, xp += HW) cp_async_element(&Bs[s][bk + r][bn], xp, r < live);
        if (++lq == KW) {
            lq = 0;
            if (++lp == KH) lp = 0, lc += BIG_BK;
        }
    };
    auto store = [&](int s) {
#pragma unroll
        for (int r = 0; r < A_PER; ++r) {
            if constexpr (CHUNKED)
                As[s][akq][arow + r * (NT / BIG_BK)] = ra[r];
            else
                As[s][ak + r][am] = ra[r];
        }
#pragma unroll
        for (int r = 0; r < B_PER; ++r) Bs[s][bk + r][bn] = rb[r];
    };

    T acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = T(0);

    if constexpr (ASYNC) {
        // Stages 0 .. NS - 2 in flight before the first multiply; each iteration waits for
        // its own stage, then (after the barrier that ends every warp's reads of the
        // previous stage) issues the copies of stage step + NS - 1 into that stage's
        // buffer. One commit group per stage, empty past the end, so the count
        // cp_async_wait keeps is the same every iteration.
#pragma unroll
        for (int p = 0; p < NS - 1; ++p) {
            if (p < steps) load_async(p);
            cp_async_commit();
        }
        int s = 0, next_s = NS - 1;
        for (int step = 0; step < steps; ++step) {
            cp_async_wait<NS - 2>();
            __syncthreads();
            if (step + NS - 1 < steps) load_async(next_s);
            cp_async_commit();
            big_tile_multiply<T, BM>(As[s], Bs[s], acc, ty, tx);
            s = s == NS - 1 ? 0 : s + 1;
            next_s = next_s == NS - 1 ? 0 : next_s + 1;
        }
        cp_async_wait<0>();   // the empty trailing groups, so no copy outlives the block
    } else {
        load(0);
        store(0);
        __syncthreads();
        int s = 0;
        for (int step = 0; step < steps; ++step) {
            const bool more = step + 1 < steps;
            if (more) load(step + 1);   // in flight while this slice is multiplied
            big_tile_multiply<T, BM>(As[s], Bs[s], acc, ty, tx);
            if (more) store(s ^ 1);         // stage s^1 was last read before the previous barrier
            __syncthreads();
            s ^= 1;
        }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const i64 n = n0 + big_lane(tx, j, 64);
        if (n >= N) continue;
        const i64 b = n / HoWo, r = n % HoWo;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int m = m0 + big_lane(ty, i, BM / 2);
            if (m < Mg) {
                const int mo = g * Mg + m;
                const T v = acc[i][j] + bias[mo];
                y[(b * M + mo) * HoWo + r] = activate<ACT>(v);
            }
        }
    }
}

template <typename T, int BM, int ACT, int CHUNKED>
__global__ void __launch_bounds__(2 * BM, sizeof(T) == 4 ? 256 / BM : 1)
    conv2d_igemm_fwd(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ y,
                     const int4* __restrict__ koff, CONV_PARAMS) {
    igemm_fwd_body<T, BM, ACT, 0, CHUNKED>(x, nullptr, w, bias, y, koff, CONV_ARGS);
}

template <typename T, int BM, int CHUNKED>
__global__ void __launch_bounds__(2 * BM, sizeof(T) == 4 ? 256 / BM : 1)
    conv2d_igemm_fwd_masked(const T* __restrict__ x, const T* __restrict__ xmask, const T* __restrict__ w,
                            const T* __restrict__ bias, T* __restrict__ y, const int4* __restrict__ koff,
                            CONV_PARAMS) {
    igemm_fwd_body<T, BM, 0, 1, CHUNKED>(x, xmask, w, bias, y, koff, CONV_ARGS);
}

// MASK = 1 reads gy through the ReLU output yr (conv2d_igemm_wgrad_masked).
template <typename T, int BM, int MASK>
__device__ __forceinline__ void igemm_wgrad_body(const T* __restrict__ gy, const T* __restrict__ yr,
                                                 const T* __restrict__ x, T* __restrict__ partial,
                                                 const int4* __restrict__ koff, int splits, CONV_PARAMS) {
    constexpr int NT = 2 * BM, A_STEP = NT / BIG_BK, A_PER = BM / A_STEP, B_PER = BIG_BN * BIG_BK / NT;
    __shared__ __align__(16) T As[2][BIG_BK][BM + BIG_PAD];   // output gradient, As[n][m]
    __shared__ __align__(16) T Bs[2][BIG_BK][BIG_BN];         // unrolled input, Bs[n][k]
    const int G = C / Cg, Mg = M / G;
    const int g = blockIdx.z % G, split = blockIdx.z / G;
    const int Kd = Cg * KH * KW;
    const i64 HoWo = (i64)Ho * Wo, N = (i64)B * HoWo;
    const i64 steps = (N + BIG_BK - 1) / BIG_BK;
    const i64 n_begin = steps * split / splits * BIG_BK;
    const i64 n_end = min(N, steps * (split + 1) / splits * BIG_BK);
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * BM;
    const int kc0 = blockIdx.x * BIG_BN;

    // grad_y loads: one n per thread per slice (eight consecutive threads read
    // eight consecutive pixels), rows am + A_STEP * t of the tile.
    const int an = tid % BIG_BK, am = tid / BIG_BK;
    const T* gyg = gy + (i64)g * Mg * HoWo;
    const T* yrg = MASK ? yr + (i64)g * Mg * HoWo : yr;   // unread without MASK
    // Input loads: tap column bk of the tile (its table entry read once), B_PER consecutive n.
    const int bk = tid % BIG_BN, bn = (tid / BIG_BN) * B_PER;
    const bool k_ok = kc0 + bk < Kd;
    const int4 o = k_ok ? koff[kc0 + bk] : make_int4(0, 0, 0, 0);
    const T* xg = x + (i64)g * Cg * H * W + o.x;

    T ra[A_PER], rb[B_PER];
    auto load = [&](i64 nb) {
        {
            const i64 n = nb + an;
            const bool ok = n < n_end;
            const i64 b = ok ? n / HoWo : 0;
            const i64 r = ok ? n - b * HoWo : 0;
            const i64 off = b * M * HoWo + r;
            const T* p = gyg + off;
            const T* q = MASK ? yrg + off : yrg;
#pragma unroll
            for (int t = 0; t < A_PER; ++t) {
                const int m = m0 + am + A_STEP * t;
                ra[t] = (ok && m < Mg) ? relu_masked<MASK>(p, q, (i64)m * HoWo) : T(0);
            }
        }
        i64 n = nb + bn;
        i64 b = n / HoWo;
        int r = (int)(n - b * HoWo);
        int oh = r / Wo, ow = r % Wo;
#pragma unroll
        for (int t = 0; t < B_PER; ++t) {
            T v = T(0);
            if (k_ok && n < n_end) {
                const int ih = oh * sh - ph + o.y, iw = ow * sw - pw + o.z;
                if ((unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
                    v = xg[b * C * (i64)H * W + (i64)(oh * sh - ph) * W + (ow * sw - pw)];
            }
            rb[t] = v;
            ++n;                                  // next pixel: step ow, carrying into oh and b
            if (++ow == Wo) { ow = 0; if (++oh == Ho) { oh = 0; ++b; } }
        }
    };
    auto store = [&](int s) {
#pragma unroll
        for (int t = 0; t < A_PER; ++t) As[s][an][am + A_STEP * t] = ra[t];
#pragma unroll
        for (int t = 0; t < B_PER; ++t) Bs[s][bn + t][bk] = rb[t];
    };

    T acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[i][j] = T(0);

    if (n_begin < n_end) {
        load(n_begin);
        store(0);
    }
    __syncthreads();
    int s = 0;
    for (i64 nb = n_begin; nb < n_end; nb += BIG_BK) {
        const bool more = nb + BIG_BK < n_end;
        if (more) load(nb + BIG_BK);
        big_tile_multiply<T, BM>(As[s], Bs[s], acc, ty, tx);
        if (more) store(s ^ 1);
        __syncthreads();
        s ^= 1;
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int m = m0 + big_lane(ty, i, BM / 2);
        if (m >= Mg) continue;
        T* out = partial + ((i64)split * M + (i64)g * Mg + m) * Kd;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int k = kc0 + big_lane(tx, j, 64);
            if (k < Kd) out[k] = acc[i][j];
        }
    }
}

template <typename T, int BM>
__global__ void __launch_bounds__(2 * BM, sizeof(T) == 4 ? 256 / BM : 1)
    conv2d_igemm_wgrad(const T* __restrict__ gy, const T* __restrict__ x, T* __restrict__ partial,
                       const int4* __restrict__ koff, int splits, CONV_PARAMS) {
    igemm_wgrad_body<T, BM, 0>(gy, nullptr, x, partial, koff, splits, CONV_ARGS);
}

template <typename T, int BM>
__global__ void __launch_bounds__(2 * BM, sizeof(T) == 4 ? 256 / BM : 1)
    conv2d_igemm_wgrad_masked(const T* __restrict__ gy, const T* __restrict__ yr, const T* __restrict__ x,
                              T* __restrict__ partial, const int4* __restrict__ koff, int splits, CONV_PARAMS) {
    igemm_wgrad_body<T, BM, 1>(gy, yr, x, partial, koff, splits, CONV_ARGS);
}
