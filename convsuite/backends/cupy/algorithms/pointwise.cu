// pointwise: a 1x1, stride-1, unpadded convolution (any groups) is a GEMM per
// image and group, y[b, g*Mg + m, :] = bias + w[g*Mg + m, :] @ x[b, g*Cg:(g+1)*Cg, :],
// over the L = H*W pixels. With few output channels per group it is bound by
// reading x, so each thread owns CS_PW_PX consecutive pixels of one image and
// MT output channels: per input channel it loads its pixels once (a 16-byte
// load for float32 where the rows are aligned) and that channel's MT weights
// from shared memory (a broadcast), MT * PX FMAs per load. Weights are staged
// through shared memory in chunks of 32 input channels. ACT: the activation
// epilogue (activate<ACT>, common.cuh), here and in the split-K kernels below.
// grid = (tiles * B * groups, ceil(Mg / MT)) with tiles = ceil(L / (blockDim.x * PX)).
#include "common.cuh"

template <typename T, int MT, int ACT>
__global__ void __launch_bounds__(CS_THREADS) conv2d_pointwise(const T* __restrict__ x, const T* __restrict__ w,
                                                              const T* __restrict__ bias, T* __restrict__ y,
                                                              int C, int L, int M, int Cg) {
    constexpr int PX = CS_PW_PX, CHUNK = 32;
    __shared__ __align__(16) T ws[CHUNK][MT];
    const int G = C / Cg, Mg = M / G;
    const int tiles = (L + blockDim.x * PX - 1) / (blockDim.x * PX);
    const i64 bg = blockIdx.x / tiles;
    const int tile = (int)(blockIdx.x - bg * tiles);
    const int g = (int)(bg % G);
    const i64 b = bg / G;
    const int m0 = blockIdx.y * MT, nm = min(MT, Mg - m0);
    const i64 i0 = ((i64)tile * blockDim.x + threadIdx.x) * PX;
    const T* xb = x + (b * C + (i64)g * Cg) * L;
    bool vec = false;
    if constexpr (sizeof(T) == 4 && PX == 4)
        vec = (L % 4 == 0) && ((reinterpret_cast<unsigned long long>(x) & 15) == 0);   // every row start aligned
    T acc[MT][PX];
#pragma unroll
    for (int j = 0; j < MT; ++j)
#pragma unroll
        for (int u = 0; u < PX; ++u) acc[j][u] = T(0);
    for (int c0 = 0; c0 < Cg; c0 += CHUNK) {
        const int nc = min(CHUNK, Cg - c0);
        __syncthreads();   // the previous chunk's weights have been read
        for (int j = threadIdx.x; j < CHUNK * MT; j += blockDim.x) {
            const int cc = j / MT, mm = j % MT;
            ws[cc][mm] = (cc < nc && mm < nm) ? w[((i64)g * Mg + m0 + mm) * Cg + c0 + cc] : T(0);
        }
        __syncthreads();
#pragma unroll 4
        for (int cc = 0; cc < nc; ++cc) {
            const T* xr = xb + (i64)(c0 + cc) * L + i0;
            T v[PX];
            if constexpr (sizeof(T) == 4 && PX == 4) {
                if (vec && i0 + 3 < L) {
                    const float4 q = *reinterpret_cast<const float4*>(xr);
                    v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
                } else {
#pragma unroll
                    for (int u = 0; u < PX; ++u) v[u] = (i0 + u < L) ? xr[u] : T(0);
                }
            } else {
#pragma unroll
                for (int u = 0; u < PX; ++u) v[u] = (i0 + u < L) ? xr[u] : T(0);
            }
#pragma unroll
            for (int mm = 0; mm < MT; ++mm) {
                const T wv = ws[cc][mm];
#pragma unroll
                for (int u = 0; u < PX; ++u) acc[mm][u] += wv * v[u];
            }
        }
    }
    if (i0 >= L) return;   // after every barrier
#pragma unroll
    for (int mm = 0; mm < MT; ++mm) {
        if (mm >= nm) break;
        const int mo = g * Mg + m0 + mm;
        const T bm = bias[mo];
        T* yr = y + (b * M + mo) * (i64)L + i0;
        if constexpr (sizeof(T) == 4 && PX == 4) {
            if (vec && i0 + 3 < L) {
                *reinterpret_cast<float4*>(yr) = make_float4(activate<ACT>(acc[mm][0] + bm), activate<ACT>(acc[mm][1] + bm),
                                                              activate<ACT>(acc[mm][2] + bm), activate<ACT>(acc[mm][3] + bm));
                continue;
            }
        }
#pragma unroll
        for (int u = 0; u < PX; ++u)
            if (i0 + u < L) yr[u] = activate<ACT>(acc[mm][u] + bm);
    }
}

// pointwise_splitk: the same 1x1 GEMM for layers with few pixels and long
// reductions (MobileNetV2's projections: 7x7 or 14x14 pixels, 384 to 960
// input channels). conv2d_pointwise gives such a layer a handful of blocks,
// each running the whole reduction alone (H100: 100 us for 960 -> 160 at 7x7,
// cuDNN 26 us). Here a block owns a CS_SPLITK_TILE (32) channel x pixel output tile and one
// slice of the input channels, so the grid has tiles x slices blocks; every
// thread keeps 4 output channels of one pixel (a warp shares its channels, so
// the weight reads are shared-memory broadcasts and the pixel reads are
// consecutive). Each slice writes its partial tile to part[slice]; the slices
// are then added in a fixed order, then the bias: the same bits on every run,
// no atomics on the values. Either a second kernel adds them
// (conv2d_pointwise_splitk_reduce), or, in conv2d_pointwise_splitk_fused, the
// last block of each tile to finish does (one launch instead of two: at batch 1
// the host's launches, not the GPU, bound a network).
// grid = (ceil(L / T) * B * groups, ceil(Mg / T), slices) with T = CS_SPLITK_TILE; part (slices, B, M, L).
template <typename T>
struct SplitkTile {
    static constexpr int TM = CS_SPLITK_TILE, TL = CS_SPLITK_TILE, KC = CS_SPLITK_TILE,
                         PER = TM / (CS_THREADS / TL);
    static_assert(CS_THREADS % TL == 0 && TM % (CS_THREADS / TL) == 0, "a warp row of the tile per thread row");
    T acc[PER];
    i64 row;     // element (b, g*Mg + m0 + ty*PER, l) of a (B, M, L) array; channel j adds j * L
    int m, Mg, l, L;   // this thread's first channel within the group, and its pixel

    // This block's partial sums of its tile over its slice of the input channels.
    __device__ void compute(const T* __restrict__ x, const T* __restrict__ w, int C, int L_, int M, int Cg,
                            int slice) {
        __shared__ T xs[KC][TL];
        __shared__ T wsh[KC][TM];
        const int G = C / Cg;
        Mg = M / G;
        L = L_;
        const int ltiles = (L + TL - 1) / TL;
        const i64 bg = blockIdx.x / ltiles;
        const int l0 = (int)(blockIdx.x - bg * ltiles) * TL;
        const int g = (int)(bg % G);
        const i64 b = bg / G;
        const int m0 = blockIdx.y * TM;
        const int c_begin = blockIdx.z * slice, c_end = min(Cg, c_begin + slice);
        const int tx = threadIdx.x % TL, ty = threadIdx.x / TL;   // a warp: one ty, 32 pixels
        const T* xb = x + (b * C + (i64)g * Cg) * L;
#pragma unroll
        for (int j = 0; j < PER; ++j) acc[j] = T(0);
        for (int c0 = c_begin; c0 < c_end; c0 += KC) {
            const int nc = min(KC, c_end - c0);
            __syncthreads();   // the previous chunk has been read
            for (int i = threadIdx.x; i < KC * TL; i += CS_THREADS) {
                const int cc = i / TL, ll = i % TL;
                xs[cc][ll] = (cc < nc && l0 + ll < L) ? xb[(i64)(c0 + cc) * L + l0 + ll] : T(0);
            }
            for (int i = threadIdx.x; i < KC * TM; i += CS_THREADS) {
                const int mm = i / KC, cc = i % KC;   // consecutive threads read consecutive channels of one row of w
                wsh[cc][mm] = (cc < nc && m0 + mm < Mg) ? w[((i64)g * Mg + m0 + mm) * Cg + c0 + cc] : T(0);
            }
            __syncthreads();
            for (int cc = 0; cc < nc; ++cc) {
                const T xv = xs[cc][tx];
#pragma unroll
                for (int j = 0; j < PER; ++j) acc[j] += wsh[cc][ty * PER + j] * xv;
            }
        }
        m = m0 + ty * PER;
        l = l0 + tx;
        row = (b * M + (i64)g * Mg + m) * L + l;
    }

    // Write the partial sums to part[blockIdx.z] (a (B, M, L) array per slice).
    __device__ void store(T* __restrict__ part, i64 n) const {
        if (l >= L) return;
        T* out = part + (i64)blockIdx.z * n + row;
#pragma unroll
        for (int j = 0; j < PER; ++j)
            if (m + j < Mg) out[(i64)j * L] = acc[j];
    }
};

template <typename T>
__global__ void __launch_bounds__(CS_THREADS) conv2d_pointwise_splitk(const T* __restrict__ x, const T* __restrict__ w,
                                                                     T* __restrict__ part, int B, int C, int L, int M,
                                                                     int Cg, int slice) {
    SplitkTile<T> tile;
    tile.compute(x, w, C, L, M, Cg, slice);
    tile.store(part, (i64)B * M * L);
}

// The split-K product and its fixed-order sum in one launch. Every block
// stores its partial tile, then counts itself in counters[tile] (after a
// fence, so its stores are visible first); the block that arrives last reads
// every slice's partial tile (through L2: ld.cg) and writes y = (sum over
// slices 0, 1, ... in order) + bias, exactly what the reduce kernel computes,
// then sets the counter back to 0 for the next launch on the stream. One
// counter per (pixel tile, channel tile); the counters start at 0 (zeroed once
// when the plan's state is made) and a launch leaves them at 0.
template <typename T, int ACT>
__global__ void __launch_bounds__(CS_THREADS) conv2d_pointwise_splitk_fused(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ part,
    T* __restrict__ y, unsigned int* __restrict__ counters, int B, int C, int L, int M, int Cg, int slice) {
    __shared__ bool last;
    SplitkTile<T> tile;
    tile.compute(x, w, C, L, M, Cg, slice);
    const i64 n = (i64)B * M * L;
    tile.store(part, n);
    __threadfence();   // this block's partial sums reach L2 before it is counted
    __syncthreads();
    const unsigned int slices = gridDim.z, id = blockIdx.x + gridDim.x * blockIdx.y;
    if (threadIdx.x == 0) last = atomicAdd(&counters[id], 1u) == slices - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();   // acquire: every other slice fenced its stores before counting itself
    if (tile.l < L) {
#pragma unroll
        for (int j = 0; j < SplitkTile<T>::PER; ++j) {
            if (tile.m + j >= tile.Mg) continue;
            const i64 i = tile.row + (i64)j * L;
            T s = T(0);
            for (unsigned int k = 0; k < slices; ++k) s += __ldcg(part + (i64)k * n + i);
            y[i] = activate<ACT>(s + bias[(int)((i / L) % M)]);
        }
    }
    if (threadIdx.x == 0) counters[id] = 0u;
}

// y[i] = activation of (bias[m] + sum over slices of part[s][i]), slices in order (deterministic).
template <typename T, int ACT>
__global__ void __launch_bounds__(CS_THREADS) conv2d_pointwise_splitk_reduce(const T* __restrict__ part,
                                                                            const T* __restrict__ bias,
                                                                            T* __restrict__ y, i64 n, int M, int L,
                                                                            int slices) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const int m = (int)((i / L) % M);
        T s = T(0);
        for (int k = 0; k < slices; ++k) s += part[(i64)k * n + i];
        y[i] = activate<ACT>(s + bias[m]);
    }
}
