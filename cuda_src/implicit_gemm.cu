// fused_gemm: implicit GEMM. Per group g, Y_g (Mg x N) = W_g (Mg x Kd) X_g
// (Kd x N) with N = B*Ho*Wo and Kd = Cg*KH*KW, where column n of X_g is the
// receptive field of output n. X_g is never stored: the unroll (im2col)
// happens while each BK x BN slice of it is loaded into shared memory.
// Block tile BM x BN, 256 threads, each owning a 4 x 4 register micro-tile
// (joint shared-memory and register tiling). grid = (ceil(N/BN), ceil(Mg/BM), groups).
#include "common.cuh"

#define GEMM_BM 64
#define GEMM_BN 64
#define GEMM_BK 16

template <typename T>
__global__ void __launch_bounds__(256) conv2d_implicit_gemm(const T* __restrict__ x, const T* __restrict__ w,
                                                           const T* __restrict__ bias, T* __restrict__ y,
                                                           CONV_PARAMS) {
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
    const T* xb = x + (b_load * C + (i64)g * Cg) * H * W;

    T acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = T(0);

    for (int k0 = 0; k0 < Kd; k0 += GEMM_BK) {
        // Weights: 64 x 16, four per thread; consecutive threads read consecutive k.
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int idx = tid + r * 256, mm = idx / GEMM_BK, kk = idx % GEMM_BK;
            const int m = m0 + mm, k = k0 + kk;
            As[kk][mm] = (m < Mg && k < Kd) ? w[((i64)g * Mg + m) * Kd + k] : T(0);
        }
        // Unrolled input: 16 x 64, four per thread; consecutive threads read
        // consecutive output columns (coalesced along ow).
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int kk = lk + 4 * r, k = k0 + kk;
            T v = T(0);
            if (n_ok && k < Kd) {
                const int c = k / KK, pq = k % KK;
                const int ih = ih0 + (pq / KW) * dh, iw = iw0 + (pq % KW) * dw;
                if (ih >= 0 && ih < H && iw >= 0 && iw < W) v = xb[((i64)c * H + ih) * W + iw];
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
                y[(b * M + mo) * HoWo + r] = acc[i][j] + bias[mo];
            }
        }
    }
}
