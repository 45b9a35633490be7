// fused_gemm: implicit GEMM. Per group g, Y_g (Mg x N) = W_g (Mg x Kd) X_g
// (Kd x N) with N = B*Ho*Wo and Kd = Cg*KH*KW, where column n of X_g is the
// receptive field of output n. X_g is never stored: the unroll (im2col)
// happens while each BK x BN slice of it is loaded into shared memory.
// Block tile BM x BN, 256 threads, each owning a 4 x 4 register micro-tile
// (joint shared-memory and register tiling). grid = (ceil(N/BN), ceil(Mg/BM), groups).
#include "common.cuh"

#define GEMM_BM CS_GEMM_BM
#define GEMM_BN CS_GEMM_BN
#define GEMM_BK CS_GEMM_BK
// The loaders are written for 64 x 64 block tiles and 256 threads; the slice
// depth BK (the tunable bk: -D CS_GEMM_BK) sets how many elements each thread
// loads per stage (BK / 4 of each operand), so any multiple of 4 that keeps
// 256 a multiple of BK works: 8, 16 or 32.
#if GEMM_BM != 64 || GEMM_BN != 64 || (GEMM_BK != 8 && GEMM_BK != 16 && GEMM_BK != 32)
#error "the implicit-GEMM loaders assume 64 x 64 tiles, 8, 16 or 32 deep, 256 threads"
#endif
#define GEMM_LOADS (GEMM_BK / 4)   // elements of each operand a thread loads per stage

// ACT fuses an activation into the epilogue (activate<ACT> in common.cuh: 1 ReLU, 2 ReLU6).
// MASK = 1 reads x through a ReLU mask xmask of x's shape (relu_masked): the
// stride-1 input gradient of a layer followed by a ReLU runs this kernel on
// grad_y with the layer's ReLU output as the mask (conv2d_implicit_gemm_masked).
template <typename T, int ACT, int MASK>
__device__ __forceinline__ void implicit_gemm_body(const T* __restrict__ x, const T* __restrict__ xmask,
                                                   const T* __restrict__ w, const T* __restrict__ bias,
                                                   T* __restrict__ y, CONV_PARAMS) {
    __shared__ T As[GEMM_BK][GEMM_BM];   // weights, transposed: As[k][m]
    __shared__ T Bs[GEMM_BK][GEMM_BN];   // unrolled input: Bs[k][n]
    const int G = C / Cg, Mg = M / G, g = blockIdx.z;
    const int KK = KH * KW, Kd = Cg * KK;
    const i64 HoWo = (i64)Ho * Wo, N = (i64)B * HoWo;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * GEMM_BM;
    const i64 n0 = (i64)blockIdx.x * GEMM_BN;

    // The output column this thread loads for Bs is the same at every k step
    // (256 threads cover 4 rows of 64 columns), so decode it once.
    const int ln = tid % GEMM_BN, lk = tid / GEMM_BN;   // lk in 0..3
    const i64 n_load = n0 + ln;
    const bool n_ok = n_load < N;
    const i64 b_load = n_ok ? n_load / HoWo : 0;
    const int r_load = n_ok ? (int)(n_load % HoWo) : 0;
    const int ih0 = (r_load / Wo) * sh - ph, iw0 = (r_load % Wo) * sw - pw;
    const i64 xoff = (b_load * C + (i64)g * Cg) * H * W;
    const T* xb = x + xoff;
    const T* mb = MASK ? xmask + xoff : xmask;   // the mask of the same image and group (unread without MASK)

    T acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = T(0);

    for (int k0 = 0; k0 < Kd; k0 += GEMM_BK) {
        // Weights: 64 x BK, BK / 4 per thread; consecutive threads read consecutive k.
#pragma unroll
        for (int r = 0; r < GEMM_LOADS; ++r) {
            const int idx = tid + r * 256, mm = idx / GEMM_BK, kk = idx % GEMM_BK;
            const int m = m0 + mm, k = k0 + kk;
            As[kk][mm] = (m < Mg && k < Kd) ? w[((i64)g * Mg + m) * Kd + k] : T(0);
        }
        // Unrolled input: BK x 64, BK / 4 per thread; consecutive threads read
        // consecutive output columns (coalesced along ow).
#pragma unroll
        for (int r = 0; r < GEMM_LOADS; ++r) {
            const int kk = lk + 4 * r, k = k0 + kk;
            T v = T(0);
            if (n_ok && k < Kd) {
                const int c = k / KK, pq = k % KK;
                const int ih = ih0 + (pq / KW) * dh, iw = iw0 + (pq % KW) * dw;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W) v = relu_masked<MASK>(xb, mb, ((i64)c * H + ih) * W + iw);
            }
            Bs[kk][ln] = v;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GEMM_BK; ++kk) {
            T a[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = As[kk][ty * 4 + i];
#pragma unroll
            for (int j = 0; j < 4; ++j) bv[j] = Bs[kk][tx * 4 + j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * bv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const i64 n = n0 + tx * 4 + j;
        if (n >= N) continue;
        const i64 b = n / HoWo, r = n % HoWo;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int m = m0 + ty * 4 + i;
            if (m < Mg) {
                const int mo = g * Mg + m;
                const T v = acc[i][j] + bias[mo];
                y[(b * M + mo) * HoWo + r] = activate<ACT>(v);
            }
        }
    }
}

template <typename T, int ACT>
__global__ void __launch_bounds__(256) conv2d_implicit_gemm(const T* __restrict__ x, const T* __restrict__ w,
                                                           const T* __restrict__ bias, T* __restrict__ y,
                                                           CONV_PARAMS) {
    implicit_gemm_body<T, ACT, 0>(x, nullptr, w, bias, y, CONV_ARGS);
}

template <typename T>
__global__ void __launch_bounds__(256) conv2d_implicit_gemm_masked(const T* __restrict__ x,
                                                                  const T* __restrict__ xmask,
                                                                  const T* __restrict__ w,
                                                                  const T* __restrict__ bias, T* __restrict__ y,
                                                                  CONV_PARAMS) {
    implicit_gemm_body<T, 0, 1>(x, xmask, w, bias, y, CONV_ARGS);
}

// Input gradient as an implicit GEMM (a "transposed" convolution, no col2im
// buffer). Per group g: gX_g (Cg x N') = W'_g (Cg x Kd') G_g (Kd' x N'), with
// N' = B*H*W input pixels, Kd' = Mg*KH*KW, W'_g[c][(m,p,q)] = w[g*Mg+m, c, p, q]
// and G_g[(m,p,q)][n'] = gy[b, g*Mg+m, oh, ow] for the output (oh, ow) whose
// tap (p, q) read pixel n' (zero when no output did: stride gaps, borders).
// Same tiling as the forward kernel. grid = (ceil(N'/BN), ceil(Cg/BM), groups).
// MASK = 1 reads gy through the ReLU output yr (conv2d_dgrad_implicit_gemm_masked).
template <typename T, int MASK>
__device__ __forceinline__ void dgrad_implicit_gemm_body(const T* __restrict__ gy, const T* __restrict__ yr,
                                                         const T* __restrict__ w, T* __restrict__ gx,
                                                         CONV_PARAMS) {
    __shared__ T As[GEMM_BK][GEMM_BM];   // weights: As[k][c]
    __shared__ T Bs[GEMM_BK][GEMM_BN];   // gathered output gradient: Bs[k][n']
    const int G = C / Cg, Mg = M / G, g = blockIdx.z;
    const int KK = KH * KW, Kd = Mg * KK;
    const i64 HW = (i64)H * W, N = (i64)B * HW;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int c0 = blockIdx.y * GEMM_BM;
    const i64 n0 = (i64)blockIdx.x * GEMM_BN;

    const int ln = tid % GEMM_BN, lk = tid / GEMM_BN;   // lk in 0..3
    const i64 n_load = n0 + ln;
    const bool n_ok = n_load < N;
    const i64 b_load = n_ok ? n_load / HW : 0;
    const int r_load = n_ok ? (int)(n_load % HW) : 0;
    const int hs0 = r_load / W + ph, ws0 = r_load % W + pw;   // ih + ph, iw + pw
    const i64 gyoff = (b_load * M + (i64)g * Mg) * Ho * Wo;
    const T* gyb = gy + gyoff;
    const T* yrb = MASK ? yr + gyoff : yr;   // unread without MASK

    T acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = T(0);

    for (int k0 = 0; k0 < Kd; k0 += GEMM_BK) {
#pragma unroll
        for (int r = 0; r < GEMM_LOADS; ++r) {
            const int idx = tid + r * 256, cc = idx / GEMM_BK, kk = idx % GEMM_BK;
            const int c = c0 + cc, k = k0 + kk;
            T v = T(0);
            if (c < Cg && k < Kd) {
                const int m = k / KK, pq = k % KK;
                v = w[(((i64)g * Mg + m) * Cg + c) * KK + pq];
            }
            As[kk][cc] = v;
        }
#pragma unroll
        for (int r = 0; r < GEMM_LOADS; ++r) {
            const int kk = lk + 4 * r, k = k0 + kk;
            T v = T(0);
            if (n_ok && k < Kd) {
                const int m = k / KK, pq = k % KK;
                const int hs = hs0 - (pq / KW) * dh, ws = ws0 - (pq % KW) * dw;
                if (hs >= 0 && ws >= 0 && hs % sh == 0 && ws % sw == 0) {
                    const int oh = hs / sh, ow = ws / sw;
                    if (oh < Ho && ow < Wo) v = relu_masked<MASK>(gyb, yrb, ((i64)m * Ho + oh) * Wo + ow);
                }
            }
            Bs[kk][ln] = v;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GEMM_BK; ++kk) {
            T a[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = As[kk][ty * 4 + i];
#pragma unroll
            for (int j = 0; j < 4; ++j) bv[j] = Bs[kk][tx * 4 + j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * bv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const i64 n = n0 + tx * 4 + j;
        if (n >= N) continue;
        const i64 b = n / HW, r = n % HW;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int c = c0 + ty * 4 + i;
            if (c < Cg) gx[(b * C + (i64)g * Cg + c) * HW + r] = acc[i][j];
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(256) conv2d_dgrad_implicit_gemm(const T* __restrict__ gy, const T* __restrict__ w,
                                                                 T* __restrict__ gx, CONV_PARAMS) {
    dgrad_implicit_gemm_body<T, 0>(gy, nullptr, w, gx, CONV_ARGS);
}

template <typename T>
__global__ void __launch_bounds__(256) conv2d_dgrad_implicit_gemm_masked(const T* __restrict__ gy,
                                                                        const T* __restrict__ yr,
                                                                        const T* __restrict__ w,
                                                                        T* __restrict__ gx, CONV_PARAMS) {
    dgrad_implicit_gemm_body<T, 1>(gy, yr, w, gx, CONV_ARGS);
}

// Weight gradient as an implicit GEMM with split-K. Per group g: gW_g (Mg x Kd)
// = gY_g (Mg x N) X_g^T (N x Kd), N = B*Ho*Wo, Kd = Cg*KH*KW, X_g the
// (never stored) unrolled input of the forward kernel. The reduction over N
// is long and the output small, so it is split: blockIdx.z = split * groups + g
// sums the N range of its split and writes partial[split, g*Mg + m, k]; the
// splits are then summed in a fixed order (deterministic, no atomics).
// grid = (ceil(Kd/BN), ceil(Mg/BM), splits * groups).
// MASK = 1 reads gy through the ReLU output yr (conv2d_wgrad_implicit_gemm_masked).
template <typename T, int MASK>
__device__ __forceinline__ void wgrad_implicit_gemm_body(const T* __restrict__ gy, const T* __restrict__ yr,
                                                         const T* __restrict__ x, T* __restrict__ partial,
                                                         int splits, CONV_PARAMS) {
    __shared__ T As[GEMM_BK][GEMM_BM + 4];   // output gradient: As[n][m] (padded: column stores)
    __shared__ T Bs[GEMM_BK][GEMM_BN];       // unrolled input: Bs[n][k]
    const int G = C / Cg, Mg = M / G;
    const int g = blockIdx.z % G, split = blockIdx.z / G;
    const int KK = KH * KW, Kd = Cg * KK;
    const i64 HoWo = (i64)Ho * Wo, N = (i64)B * HoWo;
    const i64 steps = (N + GEMM_BK - 1) / GEMM_BK;
    const i64 n_begin = steps * split / splits * GEMM_BK, n_end = min(N, steps * (split + 1) / splits * GEMM_BK);
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * GEMM_BM;
    const int k_base = blockIdx.x * GEMM_BN;

    // The unrolled-input column (kernel tap) this thread loads is the same at
    // every step: decode it once.
    const int ln = tid % GEMM_BN, lk = tid / GEMM_BN;   // lk in 0..3
    const int k_load = k_base + ln;
    const bool k_ok = k_load < Kd;
    const int c_load = k_ok ? k_load / KK : 0, pq = k_ok ? k_load % KK : 0;
    const int dih = (pq / KW) * dh - ph, diw = (pq % KW) * dw - pw;
    // Output-gradient loads: 64 m x BK n per step, BK / 4 per thread, consecutive
    // threads on consecutive n (contiguous along ow).
    const int an = tid % GEMM_BK, am = tid / GEMM_BK;   // am in 0..256/BK-1

    T acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = T(0);

    for (i64 nb = n_begin; nb < n_end; nb += GEMM_BK) {
        {
            const i64 n = nb + an;
            const bool ok = n < n_end;
            const i64 b = ok ? n / HoWo : 0;
            const i64 r = ok ? n % HoWo : 0;
            const i64 gyoff = (b * M + (i64)g * Mg) * HoWo + r;
            const T* gyb = gy + gyoff;
            const T* yrb = MASK ? yr + gyoff : yr;   // unread without MASK
#pragma unroll
            for (int t = 0; t < GEMM_LOADS; ++t) {
                const int mm = am + (256 / GEMM_BK) * t, m = m0 + mm;
                As[an][mm] = (ok && m < Mg) ? relu_masked<MASK>(gyb, yrb, (i64)m * HoWo) : T(0);
            }
        }
#pragma unroll
        for (int t = 0; t < GEMM_LOADS; ++t) {
            const int kk = lk + 4 * t;
            const i64 n = nb + kk;
            T v = T(0);
            if (k_ok && n < n_end) {
                const i64 b = n / HoWo;
                const int r = (int)(n - b * HoWo);
                const int ih = (r / Wo) * sh + dih, iw = (r % Wo) * sw + diw;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                    v = x[((b * C + (i64)g * Cg + c_load) * H + ih) * (i64)W + iw];
            }
            Bs[kk][ln] = v;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GEMM_BK; ++kk) {
            T a[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = As[kk][ty * 4 + i];
#pragma unroll
            for (int j = 0; j < 4; ++j) bv[j] = Bs[kk][tx * 4 + j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * bv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int m = m0 + ty * 4 + i;
        if (m >= Mg) continue;
        T* out = partial + ((i64)split * M + (i64)g * Mg + m) * Kd;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int k = k_base + tx * 4 + j;
            if (k < Kd) out[k] = acc[i][j];
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(256) conv2d_wgrad_implicit_gemm(const T* __restrict__ gy, const T* __restrict__ x,
                                                                 T* __restrict__ partial, int splits, CONV_PARAMS) {
    wgrad_implicit_gemm_body<T, 0>(gy, nullptr, x, partial, splits, CONV_ARGS);
}

template <typename T>
__global__ void __launch_bounds__(256) conv2d_wgrad_implicit_gemm_masked(const T* __restrict__ gy,
                                                                        const T* __restrict__ yr,
                                                                        const T* __restrict__ x,
                                                                        T* __restrict__ partial, int splits,
                                                                        CONV_PARAMS) {
    wgrad_implicit_gemm_body<T, 1>(gy, yr, x, partial, splits, CONV_ARGS);
}
