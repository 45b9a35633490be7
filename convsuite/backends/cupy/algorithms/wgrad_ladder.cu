// The weight-gradient (dW) ladder of the "Optimizing a CNN in CUDA" write-up,
// one kernel per step, so each step can be pinned, tested and timed:
//
//   dw[m, c, p, q] = sum over b, oh, ow of gy[b, m, oh, ow] * x[b, ci, oh*sh + p*dh - ph, ow*sw + q*dw - pw]
//
// (ci = the input channel of c in m's group). Every step sums block partials
// into dw with atomicAdd (dw is zeroed first), so the last bits depend on the
// order the blocks finish in: these kernels are not bit-reproducible, which
// is why the backend's default backward algorithms never use them.
//
//   1. wgrad_ladder_atomic    one tap per thread over the batch; shared-memory
//                             tree reduction per block; one atomicAdd per block.
//   2. wgrad_ladder_shuffle   as 1, but the last 64 values are reduced by one
//                             warp with __shfl_down_sync (no barrier per level).
//   3. wgrad_ladder_registers calculation separated from reduction: every
//                             K x K tap accumulates in registers per thread
//                             (gy read once for K*K products), then the taps
//                             are reduced one by one (warp shuffle + one warp).
//   4. wgrad_ladder_padded    a zero-padded copy of x (no bounds checks in the
//                             product), CS_LADDER_YB output rows per thread
//                             (the write-up's yBatch) from a register window of
//                             input rows: fewer loads per FFMA, fewer threads
//                             and so fewer reductions.
#include "common.cuh"

#ifndef CS_LADDER_YB
#error "compile with the -D options of convsuite.backends.cupy._sources.compile_options()"
#endif

// The input channel of weight row (m, c) and its offsets.
#define LADDER_CHANNEL                                      \
    const int mc = blockIdx.y, m = mc / Cg, c = mc % Cg;    \
    const int G = C / Cg, Mg = M / G, ci = (m / Mg) * Cg + c

template <typename T>
__device__ __forceinline__ T ladder_warp_sum(T v) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

// The sum of one tap over the batch at output pixel `pix` (step 1 and 2's calculation).
// MASK = 1 reads gy through the ReLU output yr (the "_masked" kernels of every step).
template <int MASK, typename T>
__device__ __forceinline__ T ladder_one_tap(const T* __restrict__ gy, const T* __restrict__ yr, const T* __restrict__ x,
                                            int m, int ci, i64 pix, int p, int q, CONV_PARAMS) {
    const i64 HoWo = (i64)Ho * Wo, HW = (i64)H * W;
    T acc = T(0);
    if (pix < HoWo) {
        const int oh = (int)(pix / Wo), ow = (int)(pix % Wo);
        const int ih = oh * sh + p * dh - ph, iw = ow * sw + q * dw - pw;
        if (ih >= 0 && ih < H && iw >= 0 && iw < W) {
            for (int b = 0; b < B; ++b)
                acc += relu_masked<MASK>(gy, yr, ((i64)b * M + m) * HoWo + pix) * x[((i64)b * C + ci) * HW + (i64)ih * W + iw];
        }
    }
    return acc;
}

// Step 1. grid (pixel blocks, M * Cg, KH * KW), CS_THREADS threads.
template <typename T, int MASK>
__device__ __forceinline__ void ladder_atomic_body(const T* __restrict__ gy, const T* __restrict__ yr,
                                                   const T* __restrict__ x, T* __restrict__ dwt, CONV_PARAMS) {
    __shared__ T red[CS_THREADS];
    LADDER_CHANNEL;
    const int tap = blockIdx.z, p = tap / KW, q = tap % KW;
    const i64 pix = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    red[threadIdx.x] = ladder_one_tap<MASK>(gy, yr, x, m, ci, pix, p, q, CONV_ARGS);
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(&dwt[(i64)mc * KH * KW + tap], red[0]);
}

template <typename T>
__global__ void __launch_bounds__(CS_THREADS) wgrad_ladder_atomic(const T* __restrict__ gy, const T* __restrict__ x,
                                                                  T* __restrict__ dwt, CONV_PARAMS) {
    ladder_atomic_body<T, 0>(gy, nullptr, x, dwt, CONV_ARGS);
}

template <typename T>
__global__ void __launch_bounds__(CS_THREADS) wgrad_ladder_atomic_masked(const T* __restrict__ gy,
                                                                         const T* __restrict__ yr,
                                                                         const T* __restrict__ x,
                                                                         T* __restrict__ dwt, CONV_PARAMS) {
    ladder_atomic_body<T, 1>(gy, yr, x, dwt, CONV_ARGS);
}

// Step 2. As step 1; the tree stops at 64 values, which one warp sums with shuffles.
template <typename T, int MASK>
__device__ __forceinline__ void ladder_shuffle_body(const T* __restrict__ gy, const T* __restrict__ yr,
                                                    const T* __restrict__ x, T* __restrict__ dwt, CONV_PARAMS) {
    __shared__ T red[CS_THREADS];
    LADDER_CHANNEL;
    const int tap = blockIdx.z, p = tap / KW, q = tap % KW;
    const i64 pix = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    red[threadIdx.x] = ladder_one_tap<MASK>(gy, yr, x, m, ci, pix, p, q, CONV_ARGS);
    __syncthreads();
    for (int s = blockDim.x / 2; s > 32; s /= 2) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x < 32) {
        const T v = ladder_warp_sum(red[threadIdx.x] + red[threadIdx.x + 32]);
        if (threadIdx.x == 0) atomicAdd(&dwt[(i64)mc * KH * KW + tap], v);
    }
}

template <typename T>
__global__ void __launch_bounds__(CS_THREADS) wgrad_ladder_shuffle(const T* __restrict__ gy, const T* __restrict__ x,
                                                                   T* __restrict__ dwt, CONV_PARAMS) {
    ladder_shuffle_body<T, 0>(gy, nullptr, x, dwt, CONV_ARGS);
}

template <typename T>
__global__ void __launch_bounds__(CS_THREADS) wgrad_ladder_shuffle_masked(const T* __restrict__ gy,
                                                                          const T* __restrict__ yr,
                                                                          const T* __restrict__ x,
                                                                          T* __restrict__ dwt, CONV_PARAMS) {
    ladder_shuffle_body<T, 1>(gy, yr, x, dwt, CONV_ARGS);
}

// Sum acc over the block (warp shuffles, then one warp over the warps' sums)
// and add it to *target. Every thread of the block must call it.
template <typename T>
__device__ __forceinline__ void ladder_block_atomic(T acc, T* red, T* target) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    acc = ladder_warp_sum(acc);
    if (lane == 0) red[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        T v = ladder_warp_sum(lane < warps ? red[lane] : T(0));
        if (lane == 0) atomicAdd(target, v);
    }
    __syncthreads();  // red is reused by the next tap
}

// Step 3. grid (pixel blocks, M * Cg); a K x K kernel, any stride, dilation and padding.
template <typename T, int K, int MASK>
__device__ __forceinline__ void ladder_registers_body(const T* __restrict__ gy, const T* __restrict__ yr,
                                                      const T* __restrict__ x, T* __restrict__ dwt, CONV_PARAMS) {
    __shared__ T red[CS_THREADS / 32];
    LADDER_CHANNEL;
    const i64 HoWo = (i64)Ho * Wo, HW = (i64)H * W;
    const i64 pix = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    T acc[K][K];
#pragma unroll
    for (int p = 0; p < K; ++p)
#pragma unroll
        for (int q = 0; q < K; ++q) acc[p][q] = T(0);
    if (pix < HoWo) {
        const int oh = (int)(pix / Wo), ow = (int)(pix % Wo);
        for (int b = 0; b < B; ++b) {
            const T g = relu_masked<MASK>(gy, yr, ((i64)b * M + m) * HoWo + pix);
            const T* xb = x + ((i64)b * C + ci) * HW;
#pragma unroll
            for (int p = 0; p < K; ++p) {
                const int ih = oh * sh + p * dh - ph;
                if (ih < 0 || ih >= H) continue;
#pragma unroll
                for (int q = 0; q < K; ++q) {
                    const int iw = ow * sw + q * dw - pw;
                    if (iw >= 0 && iw < W) acc[p][q] += g * xb[(i64)ih * W + iw];
                }
            }
        }
    }
#pragma unroll
    for (int p = 0; p < K; ++p)
#pragma unroll
        for (int q = 0; q < K; ++q) ladder_block_atomic(acc[p][q], red, &dwt[(i64)mc * K * K + p * K + q]);
}

template <typename T, int K>
__global__ void __launch_bounds__(CS_THREADS) wgrad_ladder_registers(const T* __restrict__ gy, const T* __restrict__ x,
                                                                     T* __restrict__ dwt, CONV_PARAMS) {
    ladder_registers_body<T, K, 0>(gy, nullptr, x, dwt, CONV_ARGS);
}

template <typename T, int K>
__global__ void __launch_bounds__(CS_THREADS) wgrad_ladder_registers_masked(const T* __restrict__ gy,
                                                                            const T* __restrict__ yr,
                                                                            const T* __restrict__ x,
                                                                            T* __restrict__ dwt, CONV_PARAMS) {
    ladder_registers_body<T, K, 1>(gy, yr, x, dwt, CONV_ARGS);
}

// Step 4. x is the zero-padded input (H, W its padded extents; stride and
// dilation 1, ph = pw = 0). grid (blocks over Wo * ceil(Ho / YB), M * Cg).
// gy and yr keep their shape (only x is padded).
template <typename T, int K, int MASK>
__device__ __forceinline__ void ladder_padded_body(const T* __restrict__ gy, const T* __restrict__ yr,
                                                   const T* __restrict__ xp, T* __restrict__ dwt, CONV_PARAMS) {
    constexpr int YB = CS_LADDER_YB, ROWS = CS_LADDER_YB + K - 1;
    __shared__ T red[CS_THREADS / 32];
    LADDER_CHANNEL;
    const i64 HoWo = (i64)Ho * Wo, HW = (i64)H * W;
    const i64 t = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const i64 bands = (Ho + YB - 1) / YB;
    T acc[K][K];
#pragma unroll
    for (int p = 0; p < K; ++p)
#pragma unroll
        for (int q = 0; q < K; ++q) acc[p][q] = T(0);
    if (t < bands * Wo) {
        const int ow = (int)(t % Wo), oh0 = (int)(t / Wo) * YB;
        for (int b = 0; b < B; ++b) {
            const i64 g_off = ((i64)b * M + m) * HoWo + (i64)oh0 * Wo + ow;
            const T* gp = gy + g_off;
            const T* yq = MASK ? yr + g_off : yr;   // unread without MASK
            const T* xq = xp + ((i64)b * C + ci) * HW + (i64)oh0 * W + ow;
            T g[YB], xr[ROWS][K];
#pragma unroll
            for (int r = 0; r < YB; ++r) g[r] = (oh0 + r < Ho) ? relu_masked<MASK>(gp, yq, (i64)r * Wo) : T(0);
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
#pragma unroll
                for (int q = 0; q < K; ++q) xr[r][q] = (oh0 + r < H) ? xq[(i64)r * W + q] : T(0);
#pragma unroll
            for (int r = 0; r < YB; ++r)
#pragma unroll
                for (int p = 0; p < K; ++p)
#pragma unroll
                    for (int q = 0; q < K; ++q) acc[p][q] += g[r] * xr[r + p][q];
        }
    }
#pragma unroll
    for (int p = 0; p < K; ++p)
#pragma unroll
        for (int q = 0; q < K; ++q) ladder_block_atomic(acc[p][q], red, &dwt[(i64)mc * K * K + p * K + q]);
}

template <typename T, int K>
__global__ void __launch_bounds__(CS_THREADS) wgrad_ladder_padded(const T* __restrict__ gy, const T* __restrict__ xp,
                                                                  T* __restrict__ dwt, CONV_PARAMS) {
    ladder_padded_body<T, K, 0>(gy, nullptr, xp, dwt, CONV_ARGS);
}

template <typename T, int K>
__global__ void __launch_bounds__(CS_THREADS) wgrad_ladder_padded_masked(const T* __restrict__ gy,
                                                                         const T* __restrict__ yr,
                                                                         const T* __restrict__ xp,
                                                                         T* __restrict__ dwt, CONV_PARAMS) {
    ladder_padded_body<T, K, 1>(gy, yr, xp, dwt, CONV_ARGS);
}
