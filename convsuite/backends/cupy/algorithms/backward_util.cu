// Small kernels the GPU backward passes share.
//
// The bias gradient of every backward algorithm but depthwise's (which sums it
// in its weight-gradient kernel): gb[m] = sum over b and the output pixels l of
// gy[b, m, l], in two launches of fixed order (no atomics: reproducible bit for
// bit). bias_grad_partial: block (m, chunk) sums a contiguous share of channel
// m's B*L values (rows b, pixels l) and writes partial[chunk, m]; enough chunks
// that a few channels still fill the device (summing straight to M values, as
// one reduction over axes (0, 2) would, runs M blocks over the whole gradient).
// chunk_sums adds the chunks in order. MASK = 1 reads gy through the ReLU
// output yr (bias_grad_partial_masked, named by backward_util_masked.cu, the module
// a backward through a ReLU compiles).
#include "common.cuh"

template <typename T, int MASK>
__device__ __forceinline__ void bias_grad_partial_body(const T* __restrict__ gy, const T* __restrict__ yr,
                                                       T* __restrict__ partial, int B, int M, i64 L, int chunks) {
    __shared__ T red[CS_THREADS / 32];
    const int m = blockIdx.x, chunk = blockIdx.y;
    const i64 n = (i64)B * L;
    const i64 e0 = n * chunk / chunks, e1 = n * (chunk + 1) / chunks;
    T acc = T(0);
    // Position e = b * L + l stepped by the block size without a division per element.
    i64 e = e0 + threadIdx.x, b = e / L, l = e - b * L;
    for (; e < e1; e += blockDim.x) {
        acc += relu_masked<MASK>(gy, yr, (b * M + m) * L + l);
        l += blockDim.x;
        if (l >= L) b += l / L, l %= L;   // one wrap per step where L >= the block size
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
    if (lane == 0) red[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        T s = T(0);
        for (int j = 0; j < (int)(blockDim.x / 32); ++j) s += red[j];
        partial[(i64)chunk * M + m] = s;
    }
}

template <typename T>
__global__ void __launch_bounds__(CS_THREADS) bias_grad_partial(const T* __restrict__ gy, T* __restrict__ partial,
                                                               int B, int M, long long L, int chunks) {
    bias_grad_partial_body<T, 0>(gy, nullptr, partial, B, M, L, chunks);
}

template <typename T>
__global__ void __launch_bounds__(CS_THREADS) bias_grad_partial_masked(const T* __restrict__ gy,
                                                                      const T* __restrict__ yr,
                                                                      T* __restrict__ partial, int B, int M,
                                                                      long long L, int chunks) {
    bias_grad_partial_body<T, 1>(gy, yr, partial, B, M, L, chunks);
}

// out[e] = partial[0, e] + partial[1, e] + ... + partial[chunks - 1, e], in chunk
// order, grid-stride over the n values of a chunk: the second launch of the bias
// gradient (n = M) and the sum of a split weight gradient's slices (n = M * Kd).
template <typename T>
__global__ void __launch_bounds__(CS_THREADS) chunk_sums(const T* __restrict__ partial, T* __restrict__ out,
                                                        int chunks, long long n) {
    for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < n; e += (i64)gridDim.x * blockDim.x) {
        T s = T(0);
        for (int chunk = 0; chunk < chunks; ++chunk) s += partial[chunk * n + e];
        out[e] = s;
    }
}

// The filters of a stride-1 input gradient run as a forward convolution: wt[g, c, m, p, q] =
// w[g, m, c, KH-1-p, KW-1-q] (channels transposed within each group, taps flipped), one
// thread per element of wt, grid-stride; reads no gradient.
template <typename T>
__global__ void __launch_bounds__(CS_THREADS) flip_weights(const T* __restrict__ w, T* __restrict__ wt, int G,
                                                          int Mg, int Cg, int KH, int KW) {
    const i64 total = (i64)G * Mg * Cg * KH * KW;
    for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < total; e += (i64)gridDim.x * blockDim.x) {
        i64 r = e;
        const int q = (int)(r % KW);
        r /= KW;
        const int p = (int)(r % KH);
        r /= KH;
        const int m = (int)(r % Mg);
        r /= Mg;
        const int c = (int)(r % Cg);
        const i64 g = r / Cg;
        wt[e] = w[(((g * Mg + m) * Cg + c) * KH + (KH - 1 - p)) * KW + (KW - 1 - q)];
    }
}
