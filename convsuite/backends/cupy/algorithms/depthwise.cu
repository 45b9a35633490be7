// Depthwise convolution, forward and backward: groups == C (one input channel
// per group), any channel multiplier Mg = M / C. These layers are bound by
// memory bandwidth, so each kernel reads every input once from DRAM and keeps
// the re-use in registers and L1 instead of recomputing addresses per tap.
//   x (B, C, H, W), w (M, 1, KH, KW), y (B, M, Ho, Wo); output m reads input c = m / Mg.
#include "common.cuh"

// Forward. Each thread computes a CS_DW_PY x CS_DW_PX block of outputs of one
// (b, m) plane. With K and S fixed at compile time (square kernel, stride S,
// dilation 1) it walks the (PY-1)*S+K input rows its block reads, loads each
// row's (PX-1)*S+K inputs into registers once and feeds every output and tap
// that uses them: one load per input per thread instead of one per tap. The
// K*K weights of its channel sit in registers too. K == 0 is the general
// path (any kernel, stride, dilation), still several outputs per thread.
// Consecutive threads take consecutive column blocks of one row (coalesced).
// ACT: the activation epilogue (activate<ACT>, common.cuh). I is int when
// every tile index (plus the grid stride) fits in 31 bits, long long
// otherwise: the three divisions per tile are 64-bit emulations otherwise.
template <typename T, int K, int S, int ACT, typename I>
__global__ void __launch_bounds__(CS_THREADS) depthwise_forward(const T* __restrict__ x, const T* __restrict__ w,
                                                               const T* __restrict__ bias, T* __restrict__ y,
                                                               CONV_PARAMS) {
    constexpr int PX = CS_DW_PX, PY = CS_DW_PY;
    const int Mg = M / C;
    const int tiles_x = (Wo + PX - 1) / PX, tiles_y = (Ho + PY - 1) / PY;
    const I per_plane = (I)tiles_x * tiles_y;
    const I total = (I)B * M * per_plane;
    for (I t = blockIdx.x * (I)blockDim.x + threadIdx.x; t < total; t += (I)gridDim.x * blockDim.x) {
        const I plane = t / per_plane;                   // b * M + m
        const int tile = (int)(t - plane * per_plane);
        const int m = (int)(plane % M);
        const i64 b = plane / M;
        const int oy0 = (tile / tiles_x) * PY, ox0 = (tile % tiles_x) * PX;
        const T* xp = x + (b * C + m / Mg) * (i64)H * W;
        const T bm = bias[m];
        T acc[PY][PX];
#pragma unroll
        for (int v = 0; v < PY; ++v)
#pragma unroll
            for (int u = 0; u < PX; ++u) acc[v][u] = bm;
        if constexpr (K > 0) {
            constexpr int SPX = (PX - 1) * S + K, SPY = (PY - 1) * S + K;
            T wk[K * K];
#pragma unroll
            for (int j = 0; j < K * K; ++j) wk[j] = w[(i64)m * K * K + j];
            const int ih0 = oy0 * S - ph, iw0 = ox0 * S - pw;
#pragma unroll
            for (int r = 0; r < SPY; ++r) {
                const int ih = ih0 + r;
                const bool row_ok = ih >= 0 && ih < H;
                const T* xr = xp + (i64)ih * W;
                T v[SPX];
#pragma unroll
                for (int j = 0; j < SPX; ++j) {
                    const int iw = iw0 + j;
                    v[j] = (row_ok && iw >= 0 && iw < W) ? xr[iw] : T(0);
                }
#pragma unroll
                for (int py = 0; py < PY; ++py) {
                    const int p = r - py * S;            // a compile-time constant after unrolling
                    if (p < 0 || p >= K) continue;
#pragma unroll
                    for (int q = 0; q < K; ++q) {
                        const T wv = wk[p * K + q];
#pragma unroll
                        for (int u = 0; u < PX; ++u) acc[py][u] += v[u * S + q] * wv;
                    }
                }
            }
        } else {
            const T* wm = w + (i64)m * KH * KW;
            for (int p = 0; p < KH; ++p) {
                for (int q = 0; q < KW; ++q) {
                    const T wv = wm[p * KW + q];
#pragma unroll
                    for (int py = 0; py < PY; ++py) {
                        const int ih = (oy0 + py) * sh + p * dh - ph;
                        if (ih < 0 || ih >= H) continue;
#pragma unroll
                        for (int u = 0; u < PX; ++u) {
                            const int iw = (ox0 + u) * sw + q * dw - pw;
                            if (iw >= 0 && iw < W) acc[py][u] += xp[(i64)ih * W + iw] * wv;
                        }
                    }
                }
            }
        }
        T* yp = y + (i64)plane * Ho * Wo;
#pragma unroll
        for (int py = 0; py < PY; ++py) {
            if (oy0 + py >= Ho) break;
#pragma unroll
            for (int u = 0; u < PX; ++u)
                if (ox0 + u < Wo) yp[(i64)(oy0 + py) * Wo + ox0 + u] = activate<ACT>(acc[py][u]);
        }
    }
}

// Input gradient: a depthwise convolution of the output gradient with the
// taps reversed, in gather form (no atomics): input pixel (ih, iw) of channel
// c sums gy[b, m, oh, ow] * w[m, p, q] over its Mg output channels and the
// taps with ih = oh*sh + p*dh - ph (likewise for w). One thread per input
// pixel; with K and S fixed at compile time the divisibility tests fold into
// shifts and masks and the tap loops unroll. MASK = 1 reads gy through the
// ReLU output yr (depthwise_grad_input_masked).
template <typename T, int K, int S, int MASK>
__device__ __forceinline__ void depthwise_grad_input_body(const T* __restrict__ gy, const T* __restrict__ yr,
                                                          const T* __restrict__ w, T* __restrict__ gx, CONV_PARAMS) {
    const int Mg = M / C;
    const int kh = K > 0 ? K : KH, kw = K > 0 ? K : KW;
    const int s_h = S > 0 ? S : sh, s_w = S > 0 ? S : sw;
    const int d_h = K > 0 ? 1 : dh, d_w = K > 0 ? 1 : dw;
    const i64 HW = (i64)H * W;
    const i64 total = (i64)B * C * HW;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
        const i64 plane = i / HW;                        // b * C + c
        const int r = (int)(i - plane * HW);
        const int ih = r / W, iw = r % W;
        const int c = (int)(plane % C);
        const i64 b = plane / C;
        T acc = T(0);
        for (int j = 0; j < Mg; ++j) {
            const int m = c * Mg + j;
            const i64 plane_off = (b * M + m) * (i64)Ho * Wo;
            const T* gp = gy + plane_off;
            const T* yp = MASK ? yr + plane_off : yr;   // unread without MASK
            const T* wm = w + (i64)m * kh * kw;
#pragma unroll
            for (int p = 0; p < kh; ++p) {
                const int hs = ih + ph - p * d_h;        // = oh * sh when tap p read row ih
                if (hs < 0 || hs % s_h) continue;
                const int oh = hs / s_h;
                if (oh >= Ho) continue;
#pragma unroll
                for (int q = 0; q < kw; ++q) {
                    const int ws = iw + pw - q * d_w;
                    if (ws < 0 || ws % s_w) continue;
                    const int ow = ws / s_w;
                    if (ow < Wo) acc += relu_masked<MASK>(gp, yp, (i64)oh * Wo + ow) * wm[p * kw + q];
                }
            }
        }
        gx[i] = acc;
    }
}

template <typename T, int K, int S>
__global__ void __launch_bounds__(CS_THREADS) depthwise_grad_input(const T* __restrict__ gy, const T* __restrict__ w,
                                                                  T* __restrict__ gx, CONV_PARAMS) {
    depthwise_grad_input_body<T, K, S, 0>(gy, nullptr, w, gx, CONV_ARGS);
}

template <typename T, int K, int S>
__global__ void __launch_bounds__(CS_THREADS) depthwise_grad_input_masked(const T* __restrict__ gy,
                                                                         const T* __restrict__ yr,
                                                                         const T* __restrict__ w,
                                                                         T* __restrict__ gx, CONV_PARAMS) {
    depthwise_grad_input_body<T, K, S, 1>(gy, yr, w, gx, CONV_ARGS);
}

// Weight gradient: gw[m, p, q] = sum over b, oh, ow of gy[b, m, oh, ow] *
// x[b, c, oh*sh + p*dh - ph, ow*sw + q*dw - pw]. Block (m, chunk) sums the
// chunk's share of the B*Ho output rows of channel m: every thread keeps all
// KH*KW partial sums in registers (KMAX bounds the extents), and the bias
// gradient's (the plain sum of gy) beside them, then the block reduces them in
// a fixed order (warp shuffles, then warps in index order) and writes
// partial[chunk, m, 0 .. KH*KW] (the bias sum last). No atomics: the result is
// reproducible bit for bit; depthwise_grad_finish sums the chunks afterwards,
// also in a fixed order. MASK = 1 reads gy through the ReLU output yr
// (depthwise_grad_weight_masked).
template <typename T, int KMAX, int MASK>
__device__ __forceinline__ void depthwise_grad_weight_body(const T* __restrict__ gy, const T* __restrict__ yr,
                                                           const T* __restrict__ x, T* __restrict__ partial,
                                                           int chunks, CONV_PARAMS) {
    __shared__ T red[CS_THREADS / 32][KMAX * KMAX + 1];
    const int m = blockIdx.x, chunk = blockIdx.y;
    const int Mg = M / C, c = m / Mg;
    const i64 rows = (i64)B * Ho;
    const i64 r0 = rows * chunk / chunks, r1 = rows * (chunk + 1) / chunks;
    const i64 n = (r1 - r0) * Wo;
    T acc[KMAX][KMAX];
#pragma unroll
    for (int p = 0; p < KMAX; ++p)
#pragma unroll
        for (int q = 0; q < KMAX; ++q) acc[p][q] = T(0);
    T bias_sum = T(0);
    for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
        const i64 row = r0 + i / Wo;
        const int ow = (int)(i % Wo);
        const i64 b = row / Ho;
        const int oh = (int)(row - b * Ho);
        const T g = relu_masked<MASK>(gy, yr, ((b * M + m) * Ho + oh) * (i64)Wo + ow);
        bias_sum += g;
        const T* xp = x + (b * C + c) * (i64)H * W;
#pragma unroll
        for (int p = 0; p < KMAX; ++p) {
            const int ih = oh * sh + p * dh - ph;
            if (p >= KH || ih < 0 || ih >= H) continue;
#pragma unroll
            for (int q = 0; q < KMAX; ++q) {
                const int iw = ow * sw + q * dw - pw;
                if (q < KW && iw >= 0 && iw < W) acc[p][q] += g * xp[(i64)ih * W + iw];
            }
        }
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int p = 0; p < KMAX; ++p)
#pragma unroll
        for (int q = 0; q < KMAX; ++q) {
            T v = acc[p][q];
#pragma unroll
            for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
            if (lane == 0) red[warp][p * KMAX + q] = v;
        }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) bias_sum += __shfl_down_sync(0xffffffffu, bias_sum, off);
    if (lane == 0) red[warp][KMAX * KMAX] = bias_sum;
    __syncthreads();
    const int taps = KH * KW;
    for (int t = threadIdx.x; t <= taps; t += blockDim.x) {
        const int slot = t < taps ? t / KW * KMAX + t % KW : KMAX * KMAX;
        T s = T(0);
        for (int j = 0; j < (int)(blockDim.x / 32); ++j) s += red[j][slot];
        partial[((i64)chunk * M + m) * (taps + 1) + t] = s;
    }
}

// The chunks of depthwise_grad_weight summed in chunk order: gw[m, t] for the
// KH*KW taps t and gb[m] from partial[chunk, m, 0 .. taps] (taps + 1 values
// per channel), one thread per value, grid-stride. Fixed order: reproducible.
template <typename T>
__global__ void __launch_bounds__(CS_THREADS) depthwise_grad_finish(const T* __restrict__ partial, T* __restrict__ gw,
                                                                   T* __restrict__ gb, int chunks, int M, int taps) {
    const i64 per_chunk = (i64)M * (taps + 1);
    for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < per_chunk; e += (i64)gridDim.x * blockDim.x) {
        T s = T(0);
        for (int chunk = 0; chunk < chunks; ++chunk) s += partial[chunk * per_chunk + e];
        const i64 m = e / (taps + 1);
        const int t = (int)(e - m * (taps + 1));
        if (t < taps) gw[m * taps + t] = s;
        else gb[m] = s;
    }
}

template <typename T, int KMAX>
__global__ void __launch_bounds__(CS_THREADS) depthwise_grad_weight(const T* __restrict__ gy, const T* __restrict__ x,
                                                                   T* __restrict__ partial, int chunks, CONV_PARAMS) {
    depthwise_grad_weight_body<T, KMAX, 0>(gy, nullptr, x, partial, chunks, CONV_ARGS);
}

template <typename T, int KMAX>
__global__ void __launch_bounds__(CS_THREADS) depthwise_grad_weight_masked(const T* __restrict__ gy,
                                                                          const T* __restrict__ yr,
                                                                          const T* __restrict__ x,
                                                                          T* __restrict__ partial, int chunks,
                                                                          CONV_PARAMS) {
    depthwise_grad_weight_body<T, KMAX, 1>(gy, yr, x, partial, chunks, CONV_ARGS);
}
