// 2-D convolution kernels of the direct family (1-D problems run as H = 1):
// direct, const_weights, tiled_shared, register_tiled (depthwise: depthwise.cu).
#include "common.cuh"

// One thread per output, grid-stride over all B*M*Ho*Wo outputs; the weights
// come from `w`: global memory (direct) or constant memory (const_weights).
// I is int when every index fits in 31 bits (cheap division), long long otherwise.
template <typename T, typename I>
__device__ __forceinline__ void conv2d_per_output(const T* __restrict__ x, const T* __restrict__ w,
                                                  const T* __restrict__ bias, T* __restrict__ y, CONV_PARAMS) {
    const I total = (I)B * M * Ho * Wo;
    const int Mg = M / (C / Cg);
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const int ow = (int)(i % Wo);
        I t = i / Wo;
        const int oh = (int)(t % Ho);
        t /= Ho;
        const int m = (int)(t % M);
        const i64 b = t / M;
        const int c0 = (m / Mg) * Cg;
        T acc = bias[m];
        for (int c = 0; c < Cg; ++c) {
            const T* xc = x + (b * C + c0 + c) * (i64)H * W;
            const T* wc = w + ((i64)m * Cg + c) * KH * KW;
            for (int p = 0; p < KH; ++p) {
                const int ih = oh * sh + p * dh - ph;
                if (ih < 0 || ih >= H) continue;
                for (int q = 0; q < KW; ++q) {
                    const int iw = ow * sw + q * dw - pw;
                    if (iw >= 0 && iw < W) acc += xc[(i64)ih * W + iw] * wc[p * KW + q];
                }
            }
        }
        y[i] = acc;
    }
}

// direct: one thread per output, everything from global memory.
template <typename T, typename I>
__global__ void conv2d_direct(const T* __restrict__ x, const T* __restrict__ w,
                              const T* __restrict__ bias, T* __restrict__ y, CONV_PARAMS) {
    conv2d_per_output<T, I>(x, w, bias, y, CONV_ARGS);
}

// const_weights: as direct, with every weight in constant memory (<= 64 KiB).
template <typename T, typename I>
__global__ void conv2d_const_weights(const T* __restrict__ x, const T* __restrict__ bias,
                                     T* __restrict__ y, CONV_PARAMS) {
    conv2d_per_output<T, I>(x, const_weights<T>(), bias, y, CONV_ARGS);
}

// The input patch a (TH x TW) output tile reads, per channel (tile plus halo;
// shared by the tiled kernels): put(j, inside, offset) for every element j of
// the span_h x span_w patch, split across the block's threads; inside says the
// element lies in the H x W plane (else it is padding, a zero), offset is its
// index in the plane when it does.
template <typename Put>
__device__ __forceinline__ void for_each_patch_element(int H, int W, int ih0, int iw0, int span_h, int span_w,
                                                       Put put) {
    const int n = span_h * span_w;
    for (int j = threadIdx.y * blockDim.x + threadIdx.x; j < n; j += blockDim.x * blockDim.y) {
        const int r = j / span_w, q = j % span_w;
        const int ih = ih0 + r, iw = iw0 + q;
        put(j, ih >= 0 && ih < H && iw >= 0 && iw < W, (i64)ih * W + iw);
    }
}

template <typename T>
__device__ __forceinline__ void load_patch(T* patch, const T* __restrict__ xc, int H, int W, int ih0, int iw0,
                                           int span_h, int span_w) {
    for_each_patch_element(H, W, ih0, iw0, span_h, span_w,
                           [&](int j, bool inside, i64 at) { patch[j] = inside ? xc[at] : T(0); });
}

// load_patch of the gradient through a ReLU (the masked input gradient runs
// register_tiled on grad_y): xc[i] where the ReLU output mc[i] is not <= 0.
template <typename T>
__device__ __forceinline__ void load_patch_masked(T* patch, const T* __restrict__ xc, const T* __restrict__ mc,
                                                  int H, int W, int ih0, int iw0, int span_h, int span_w) {
    for_each_patch_element(H, W, ih0, iw0, span_h, span_w, [&](int j, bool inside, i64 at) {
        patch[j] = inside ? relu_masked<1>(xc, mc, at) : T(0);
    });
}

// load_patch, asynchronously: the copies are in flight until cp_async_wait.
template <typename T>
__device__ __forceinline__ void load_patch_async(T* patch, const T* __restrict__ xc, int H, int W, int ih0, int iw0,
                                                 int span_h, int span_w) {
    for_each_patch_element(H, W, ih0, iw0, span_h, span_w, [&](int j, bool inside, i64 at) {
        cp_async_element(patch + j, inside ? xc + at : xc, inside);   // padding: zero-filled, xc not read
    });
}

// tiled_shared: a (blockDim.y x blockDim.x) tile of outputs of one (b, m)
// plane; for each input channel the block loads the input patch the tile
// reads (tile plus halo, zeros in the padding) into shared memory once, and
// every thread reads its window from there.
// grid.x = b * M + m, grid.y = tile index within the plane.
template <typename T>
__global__ void conv2d_tiled_shared(const T* __restrict__ x, const T* __restrict__ w,
                                    const T* __restrict__ bias, T* __restrict__ y, CONV_PARAMS) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* patch = reinterpret_cast<T*>(smem_raw);
    const i64 plane = blockIdx.x;
    const int m = (int)(plane % M);
    const i64 b = plane / M;
    const int c0 = (m / (M / (C / Cg))) * Cg;
    const int tiles_w = (Wo + blockDim.x - 1) / blockDim.x;
    const int oh0 = (blockIdx.y / tiles_w) * blockDim.y, ow0 = (blockIdx.y % tiles_w) * blockDim.x;
    const int oh = oh0 + threadIdx.y, ow = ow0 + threadIdx.x;
    const int span_h = (blockDim.y - 1) * sh + (KH - 1) * dh + 1;
    const int span_w = (blockDim.x - 1) * sw + (KW - 1) * dw + 1;
    T acc = bias[m];
    for (int c = 0; c < Cg; ++c) {
        load_patch(patch, x + (b * C + c0 + c) * (i64)H * W, H, W, oh0 * sh - ph, ow0 * sw - pw, span_h, span_w);
        __syncthreads();
        const T* wc = w + ((i64)m * Cg + c) * KH * KW;
        for (int p = 0; p < KH; ++p)
            for (int q = 0; q < KW; ++q)
                acc += patch[(threadIdx.y * sh + p * dh) * span_w + threadIdx.x * sw + q * dw] * wc[p * KW + q];
        __syncthreads();
    }
    if (oh < Ho && ow < Wo) y[plane * Ho * Wo + (i64)oh * Wo + ow] = acc;
}

// 16 bytes of shared memory into registers in one load (4 floats or 2 doubles; src 16-byte aligned).
__device__ __forceinline__ void load16(float* dst, const float* src) {
    const float4 v = *reinterpret_cast<const float4*>(src);
    dst[0] = v.x, dst[1] = v.y, dst[2] = v.z, dst[3] = v.w;
}
__device__ __forceinline__ void load16(double* dst, const double* src) {
    const double2 v = *reinterpret_cast<const double2*>(src);
    dst[0] = v.x, dst[1] = v.y;
}

// The MT filters' weights of one tap, contiguous in register_tiled's [KK][MT]
// shared-memory layout: MT / 4 (float) or MT / 2 (double) 16-byte broadcast loads
// instead of MT scalar ones (fa19 conv2, MT = 24: 6 instead of 24 per 96 FMAs).
template <typename T, int MT>
__device__ __forceinline__ void load_tap_weights(T (&wv)[MT], const T* wp) {
    constexpr int PER = 16 / sizeof(T);
    static_assert(MT % PER == 0, "register_tiled: MT must fill whole 16-byte loads");
#pragma unroll
    for (int j = 0; j < MT; j += PER) load16(wv + j, wp + j);
}

// register_tiled: joint shared-memory and register tiling for layers with
// few output channels per group (ECE408 conv1 and conv2). A block owns a
// spatial tile of one (b, group) and MT output channels; the input patch and
// the MT filters of the current input channel sit in shared memory. Each
// thread keeps MT x PX accumulators in registers for PX horizontally adjacent
// outputs, so every weight it loads (a broadcast) feeds PX FMAs and every
// input value MT FMAs. The block is blockDim.x * PX outputs wide (chosen from
// Wo in Python). grid.x = b * groups + g, grid.y = tile, grid.z = channel block.
// MASK = 1 (conv2d_register_tiled_masked) reads x through the ReLU mask xmask
// (same shape as x): the input gradient of a layer followed by a ReLU.
//
// Two shared-memory stages (a channel's filters then its patch; each stage
// rounded up to 16 bytes, and every tap's MT weights start on a 16-byte
// boundary as MT is a multiple of 4): the next channel's copies are issued
// with cp.async before this channel's FMAs, so their latency overlaps the
// arithmetic instead of stalling every thread at the barrier (ECE408 fa19
// conv2: 4 blocks of 3 warps per multiprocessor, too few to cover it;
// 2.46 -> 2.07 ms on an H200). The masked variant loads its patch
// synchronously (the mask is applied on the way), still one channel ahead.
template <typename T, int MT, int MASK>
__device__ __forceinline__ void register_tiled_body(const T* __restrict__ x, const T* __restrict__ xmask,
                                                    const T* __restrict__ w, const T* __restrict__ bias,
                                                    T* __restrict__ y, CONV_PARAMS) {
    extern __shared__ __align__(16) unsigned char smem_raw[];   // 16-byte loads of the filters
    const int G = C / Cg, Mg = M / G;
    const int tile_w = blockDim.x * CS_RT_PX;
    const int span_h = (blockDim.y - 1) * sh + (KH - 1) * dh + 1;
    const int span_w = (tile_w - 1) * sw + (KW - 1) * dw + 1;
    const int KK = KH * KW;
    constexpr int ALIGN = 16 / sizeof(T);   // elements per 16 bytes
    // One stage: [KK][MT] filters of a channel (a tap's MT weights together), then its patch.
    const int stage_elems = (MT * KK + span_h * span_w + ALIGN - 1) / ALIGN * ALIGN;
    T* stages = reinterpret_cast<T*>(smem_raw);
    const i64 bg = blockIdx.x;
    const int g = (int)(bg % G);
    const i64 b = bg / G;
    const int m0 = g * Mg + blockIdx.z * MT;
    const int nm = min(MT, g * Mg + Mg - m0);
    const int tiles_w = (Wo + tile_w - 1) / tile_w;
    const int oh0 = (blockIdx.y / tiles_w) * blockDim.y, ow0 = (blockIdx.y % tiles_w) * tile_w;
    const int oh = oh0 + threadIdx.y, owt = ow0 + threadIdx.x * CS_RT_PX;   // this thread's first column
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, nthreads = blockDim.x * blockDim.y;

    auto stage_in = [&](int c, int st) {   // channel c's filters and patch into stage st, as one commit group
        T* wsh = stages + st * stage_elems;
        for (int j = tid; j < MT * KK; j += nthreads) {   // coalesced reads, transposed stores
            const int mj = j / KK, tap = j - mj * KK;
            const bool ok = mj < nm;
            cp_async_element(wsh + tap * MT + mj, ok ? w + ((i64)(m0 + mj) * Cg + c) * KK + tap : w, ok);
        }
        const i64 plane = (b * C + g * Cg + c) * (i64)H * W;
        if (MASK)
            load_patch_masked(wsh + MT * KK, x + plane, xmask + plane, H, W, oh0 * sh - ph, ow0 * sw - pw, span_h,
                              span_w);
        else
            load_patch_async(wsh + MT * KK, x + plane, H, W, oh0 * sh - ph, ow0 * sw - pw, span_h, span_w);
        cp_async_commit();
    };

    T acc[MT][CS_RT_PX];
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
        for (int u = 0; u < CS_RT_PX; ++u) acc[j][u] = (j < nm) ? bias[m0 + j] : T(0);
    stage_in(0, 0);
    for (int c = 0; c < Cg; ++c) {
        // Stage (c + 1) & 1 was last read in iteration c - 1, before its closing barrier.
        if (c + 1 < Cg) {
            stage_in(c + 1, (c + 1) & 1);
            cp_async_wait<1>();   // channel c's group has landed (c + 1's may still be in flight)
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const T* wsh = stages + (c & 1) * stage_elems;
        const T* win = wsh + MT * KK + (threadIdx.y * sh) * span_w + threadIdx.x * CS_RT_PX * sw;
        if (sw == 1 && dw == 1) {
            // Unit stride and dilation (every stride-1 input gradient, most layers): tap q + 1
            // reads tap q's PX inputs shifted by one, so each tap loads one new input from shared
            // memory and moves PX - 1 in registers, instead of loading PX. With few channels per
            // thread the loads, not the FMAs, were the limit: MT = 4, PX = 4 issued 4 scalar loads
            // (2-way bank conflicts) and a 16-byte weight load per 16 FMAs (ECE408 fa21 conv2's
            // input gradient: 14 TFLOP/s on an H100).
            for (int p = 0; p < KH; ++p) {
                const T* wrow = win + p * dh * span_w;
                T v[CS_RT_PX];
#pragma unroll
                for (int u = 0; u + 1 < CS_RT_PX; ++u) v[u + 1] = wrow[u];   // shifted into place at q = 0
                for (int q = 0; q < KW; ++q) {
#pragma unroll
                    for (int u = 0; u + 1 < CS_RT_PX; ++u) v[u] = v[u + 1];
                    v[CS_RT_PX - 1] = wrow[q + CS_RT_PX - 1];
                    T wv[MT];   // same addresses for the whole warp: broadcasts
                    load_tap_weights(wv, wsh + (p * KW + q) * MT);
#pragma unroll
                    for (int j = 0; j < MT; ++j)
#pragma unroll
                        for (int u = 0; u < CS_RT_PX; ++u) acc[j][u] += v[u] * wv[j];
                }
            }
        } else {
            for (int p = 0; p < KH; ++p) {
                const T* wrow = win + p * dh * span_w;
                for (int q = 0; q < KW; ++q) {
                    T v[CS_RT_PX];
#pragma unroll
                    for (int u = 0; u < CS_RT_PX; ++u) v[u] = wrow[u * sw + q * dw];
                    T wv[MT];   // same addresses for the whole warp: broadcasts
                    load_tap_weights(wv, wsh + (p * KW + q) * MT);
#pragma unroll
                    for (int j = 0; j < MT; ++j)
#pragma unroll
                        for (int u = 0; u < CS_RT_PX; ++u) acc[j][u] += v[u] * wv[j];
                }
            }
        }
        __syncthreads();
    }
    if (oh >= Ho) return;
#pragma unroll
    for (int j = 0; j < MT; ++j) {
        if (j >= nm) break;
        T* yrow = y + ((b * M + m0 + j) * Ho + oh) * (i64)Wo;
#pragma unroll
        for (int u = 0; u < CS_RT_PX; ++u)
            if (owt + u < Wo) yrow[owt + u] = acc[j][u];
    }
}

template <typename T, int MT>
__global__ void conv2d_register_tiled(const T* __restrict__ x, const T* __restrict__ w,
                                      const T* __restrict__ bias, T* __restrict__ y, CONV_PARAMS) {
    register_tiled_body<T, MT, 0>(x, nullptr, w, bias, y, CONV_ARGS);
}

template <typename T, int MT>
__global__ void conv2d_register_tiled_masked(const T* __restrict__ x, const T* __restrict__ xmask,
                                             const T* __restrict__ w, const T* __restrict__ bias,
                                             T* __restrict__ y, CONV_PARAMS) {
    register_tiled_body<T, MT, 1>(x, xmask, w, bias, y, CONV_ARGS);
}
