// 1-D convolution kernels: the strategies of the 1-D CUDA report, generalised
// to batches, channels, groups, stride, dilation and padding.
//   x (B, C, W), w (M, Cg, K), y (B, M, Wo); one row = one (b, m) pair.
#include "common.cuh"

#define CONV1D_PARAMS int B, int C, int W, int M, int Cg, int K, int Wo, int s, int d, int p

// One thread per output, grid-stride over all B*M*Wo outputs; the weights
// come from `w`, which is global memory (naive) or constant memory
// (const_mask): inlined, the compiler sees which and loads accordingly.
// I is int when every index fits in 31 bits (cheap division), long long otherwise.
template <typename T, typename I>
__device__ __forceinline__ void conv1d_per_output(const T* __restrict__ x, const T* __restrict__ w,
                                                  const T* __restrict__ bias, T* __restrict__ y, CONV1D_PARAMS) {
    const I total = (I)B * M * Wo;
    const int Mg = M / (C / Cg);
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const int o = (int)(i % Wo);
        const I row = i / Wo;
        const int m = (int)(row % M);
        const i64 b = row / M;
        const int c0 = (m / Mg) * Cg;
        T acc = bias[m];
        for (int c = 0; c < Cg; ++c) {
            const T* xr = x + (b * C + c0 + c) * (i64)W;
            const T* wr = w + ((i64)m * Cg + c) * K;
            for (int k = 0; k < K; ++k) {
                const int ix = o * s + k * d - p;
                if (ix >= 0 && ix < W) acc += xr[ix] * wr[k];
            }
        }
        y[i] = acc;
    }
}

// naive: one thread per output, inputs and weights from global memory.
template <typename T, typename I>
__global__ void conv1d_naive(const T* __restrict__ x, const T* __restrict__ w,
                             const T* __restrict__ bias, T* __restrict__ y, CONV1D_PARAMS) {
    conv1d_per_output<T, I>(x, w, bias, y, B, C, W, M, Cg, K, Wo, s, d, p);
}

// const_mask: as naive, the mask (all weights) read from constant memory,
// which broadcasts one value to every thread of a warp in one transaction.
template <typename T, typename I>
__global__ void conv1d_const_mask(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ y,
                                  CONV1D_PARAMS) {
    conv1d_per_output<T, I>(x, const_weights<T>(), bias, y, B, C, W, M, Cg, K, Wo, s, d, p);
}

// tiled_halo (strategy 1): a block owns blockDim.x consecutive outputs of one
// row and loads the inputs they read -- its tile plus the halo cells on both
// sides -- into shared memory, zeros where the halo falls in the padding.
// grid.x = tile of the row (a long signal has millions), grid.y = row (b, m).
template <typename T>
__global__ void conv1d_tiled_halo(const T* __restrict__ x, const T* __restrict__ w,
                                  const T* __restrict__ bias, T* __restrict__ y, CONV1D_PARAMS) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* tile = reinterpret_cast<T*>(smem_raw);
    const i64 row = blockIdx.y;
    const int m = (int)(row % M);
    const i64 b = row / M;
    const int c0 = (m / (M / (C / Cg))) * Cg;
    const int o0 = blockIdx.x * blockDim.x;
    const int o = o0 + threadIdx.x;
    const int base = o0 * s - p;                      // input index of tile[0]
    const int span = (blockDim.x - 1) * s + (K - 1) * d + 1;
    T acc = bias[m];
    for (int c = 0; c < Cg; ++c) {
        const T* xr = x + (b * C + c0 + c) * (i64)W;
        for (int j = threadIdx.x; j < span; j += blockDim.x) {
            const int ix = base + j;
            tile[j] = (ix >= 0 && ix < W) ? xr[ix] : T(0);
        }
        __syncthreads();
        const T* wr = w + ((i64)m * Cg + c) * K;
        for (int k = 0; k < K; ++k) acc += tile[threadIdx.x * s + k * d] * wr[k];
        __syncthreads();
    }
    if (o < Wo) y[row * Wo + o] = acc;
}

// tiled_cached_halo (strategy 2): shared memory holds only the block's own
// tile of inputs; halo cells are read straight from global memory, where the
// neighbouring block's loads have usually left them in L1/L2.
template <typename T>
__global__ void conv1d_tiled_cached_halo(const T* __restrict__ x, const T* __restrict__ w,
                                         const T* __restrict__ bias, T* __restrict__ y, CONV1D_PARAMS) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* tile = reinterpret_cast<T*>(smem_raw);
    const i64 row = blockIdx.y;
    const int m = (int)(row % M);
    const i64 b = row / M;
    const int c0 = (m / (M / (C / Cg))) * Cg;
    const int o0 = blockIdx.x * blockDim.x;
    const int o = o0 + threadIdx.x;
    const int base = o0 * s;                          // first input of the tile (unpadded index + p)
    const int len = blockDim.x * s;                   // inputs the tile's own outputs start on
    T acc = bias[m];
    for (int c = 0; c < Cg; ++c) {
        const T* xr = x + (b * C + c0 + c) * (i64)W;
        for (int j = threadIdx.x; j < len; j += blockDim.x) {
            const int ix = base + j - p;
            tile[j] = (ix >= 0 && ix < W) ? xr[ix] : T(0);
        }
        __syncthreads();
        const T* wr = w + ((i64)m * Cg + c) * K;
        for (int k = 0; k < K; ++k) {
            const int j = threadIdx.x * s + k * d;      // position relative to the tile
            const int ix = base + j - p;
            T v;
            if (j < len) v = tile[j];
            else v = (ix >= 0 && ix < W) ? xr[ix] : T(0);   // halo: through the cache
            acc += v * wr[k];
        }
        __syncthreads();
    }
    if (o < Wo) y[row * Wo + o] = acc;
}

// The taps of blocked's V consecutive outputs from a window in shared memory
// (win0: the thread's first input; mask: the K weights). With dilation 1 a
// sliding window of V inputs stays in registers: one shared load per tap for V
// FMAs; KT > 0 (a width compiled in) unrolls the tap loop, and the window's
// shifts become register renaming. Dilated, the window is read tap by tap.
template <typename T, int KT>
__device__ __forceinline__ void blocked_taps(T (&acc)[CS_BLOCKED_V], const T* win0, const T* mask, int K, int d) {
    if (d == 1) {
        T win[CS_BLOCKED_V];
#pragma unroll
        for (int j = 0; j < CS_BLOCKED_V; ++j) win[j] = win0[j];
#pragma unroll
        for (int k = 0; k < (KT > 0 ? KT : K); ++k) {
            const T wk = mask[k];
#pragma unroll
            for (int j = 0; j < CS_BLOCKED_V; ++j) acc[j] += wk * win[j];
#pragma unroll
            for (int j = 0; j < CS_BLOCKED_V - 1; ++j) win[j] = win[j + 1];
            if (k + 1 < (KT > 0 ? KT : K)) win[CS_BLOCKED_V - 1] = win0[CS_BLOCKED_V + k];  // index < span
        }
    } else {
        for (int k = 0; k < K; ++k) {
            const T wk = mask[k];
#pragma unroll
            for (int j = 0; j < CS_BLOCKED_V; ++j) acc[j] += wk * win0[j + k * d];
        }
    }
}

// blocked: the fast 1-D kernel (stride 1, any dilation). Each thread computes
// V consecutive outputs from a shared-memory tile. With dilation 1 it keeps a
// sliding window of V inputs in registers, so each tap costs one shared load
// per thread for V FMAs (instead of V loads). V is odd, so the 32 lanes of a
// warp, reading tile[lane * V + j], hit 32 different banks. Where the row is
// 16-byte aligned, float32 tiles are loaded and outputs stored as float4
// (16-byte accesses, four values per instruction); the tile then starts at
// the aligned address just before the window, `delta` (0..3) elements early.
// KT > 0 fixes the mask width at compile time (the common widths are
// instantiated): the tap loop then unrolls fully and the sliding window
// becomes register renaming instead of moves. KT = 0 takes K at run time.
template <typename T, int KT>
__global__ void conv1d_blocked(const T* __restrict__ x, const T* __restrict__ w,
                               const T* __restrict__ bias, T* __restrict__ y, CONV1D_PARAMS) {
    if (KT > 0) K = KT;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    const int tile_out = blockDim.x * CS_BLOCKED_V;
    const int span = tile_out + (K - 1) * d;
    T* tile = reinterpret_cast<T*>(smem_raw);
    // The float4 loads fill whole vectors up to the shifted window's end, at
    // most span + 7 elements: the mask starts past them (no overlap, no race).
    T* mask = tile + span + 8;
    const i64 row = blockIdx.y;
    const int m = (int)(row % M);
    const i64 b = row / M;
    const int c0 = (m / (M / (C / Cg))) * Cg;
    const i64 o0 = (i64)blockIdx.x * tile_out;
    const i64 base = o0 - p;                          // input index of the window's first element
    T acc[CS_BLOCKED_V];
#pragma unroll
    for (int j = 0; j < CS_BLOCKED_V; ++j) acc[j] = bias[m];
    const int t0 = threadIdx.x * CS_BLOCKED_V;
    for (int c = 0; c < Cg; ++c) {
        const T* xr = x + (b * C + c0 + c) * (i64)W;
        int delta = 0;
        if constexpr (sizeof(T) == 4) {
            if ((reinterpret_cast<unsigned long long>(xr) & 15) == 0) {
                const i64 a0 = base - (((base % 4) + 4) % 4);   // floor to a multiple of 4
                delta = (int)(base - a0);
                const int nvec = (span + delta + 3) / 4;
                float4* tile4 = reinterpret_cast<float4*>(tile);
                for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
                    const i64 ix = a0 + 4 * (i64)v;
                    float4 val;
                    if (ix >= 0 && ix + 3 < W) {
                        val = *reinterpret_cast<const float4*>(xr + ix);
                    } else {                                      // the row's two ends
                        val.x = (ix >= 0 && ix < W) ? xr[ix] : 0.f;
                        val.y = (ix + 1 >= 0 && ix + 1 < W) ? xr[ix + 1] : 0.f;
                        val.z = (ix + 2 >= 0 && ix + 2 < W) ? xr[ix + 2] : 0.f;
                        val.w = (ix + 3 >= 0 && ix + 3 < W) ? xr[ix + 3] : 0.f;
                    }
                    tile4[v] = val;
                }
            } else {
                for (int j = threadIdx.x; j < span; j += blockDim.x) {
                    const i64 ix = base + j;
                    tile[j] = (ix >= 0 && ix < W) ? xr[ix] : T(0);
                }
            }
        } else {
            for (int j = threadIdx.x; j < span; j += blockDim.x) {
                const i64 ix = base + j;
                tile[j] = (ix >= 0 && ix < W) ? xr[ix] : T(0);
            }
        }
        for (int k = threadIdx.x; k < K; k += blockDim.x) mask[k] = w[((i64)m * Cg + c) * K + k];
        __syncthreads();
        blocked_taps<T, KT>(acc, tile + delta + t0, mask, K, d);
        __syncthreads();
    }
    // Stage the outputs in shared memory (lane stride V is odd: no bank
    // conflicts), then store them coalesced, four at a time where aligned.
#pragma unroll
    for (int j = 0; j < CS_BLOCKED_V; ++j) tile[t0 + j] = acc[j];
    __syncthreads();
    T* yr = y + row * (i64)Wo + o0;
    const int n_out = (int)min((i64)tile_out, (i64)Wo - o0);
    int done = 0;
    if constexpr (sizeof(T) == 4) {
        if ((reinterpret_cast<unsigned long long>(yr) & 15) == 0) {
            const float4* tile4 = reinterpret_cast<const float4*>(tile);
            float4* y4 = reinterpret_cast<float4*>(yr);
            for (int v = threadIdx.x; v < n_out / 4; v += blockDim.x) y4[v] = tile4[v];
            done = (n_out / 4) * 4;
        }
    }
    for (int j = done + threadIdx.x; j < n_out; j += blockDim.x) yr[j] = tile[j];
}

// blocked_pipelined: blocked's arithmetic (V consecutive outputs per thread, a
// sliding register window, KT fixed at compile time for the common widths) on a
// persistent grid. Block b owns a contiguous run of the (row, tile) items, and a
// stage is one input channel of one item: its window of inputs and its K weights.
// The stages are copied by cp.async, the next one while the current one is
// computed (two buffers), so every block keeps loads in flight through its
// arithmetic, where one tile per block loads, then computes. It pays where a
// stage has arithmetic to hide the next copy behind (H100, N=1e8 K=31: 0.365 ms
// against 0.391 one tile per block; float64 0.354 against 0.468; K=5 0.363 against
// 0.328): the rule of blocked's `persistent` tunable chooses. Any row, aligned or not, is copied in 16-byte
// pieces from the aligned address at or before its window (`delta` elements early);
// a piece that is not wholly inside the row goes element by element, zeros outside
// it. The outputs are staged in the stage's buffer once it is read, then stored
// coalesced. A launch with shared memory for one stage only (a long halo) loads,
// then computes. The stage layout must match _blocked_stage_elements (conv1d.py).
// Register budget by the bytes of accumulators: float at V <= 9 in 32 registers, 8 blocks of
// 256 (no spills at any width; unbounded, ptxas took 56 at K=31: 4 blocks' loads in flight
// instead of 8); double at V <= 9 and float above in 64; double above in 128 (sm_90, nvcc 13).
#define CS_BLOCKED_MIN_BLOCKS(T) (sizeof(T) * CS_BLOCKED_V <= 36 ? 8 : sizeof(T) * CS_BLOCKED_V <= 72 ? 4 : 2)
template <typename T, int KT>
__global__ void __launch_bounds__(CS_THREADS, CS_BLOCKED_MIN_BLOCKS(T)) conv1d_blocked_pipelined(const T* __restrict__ x, const T* __restrict__ w,
                                         const T* __restrict__ bias, T* __restrict__ y, CONV1D_PARAMS) {
    if (KT > 0) K = KT;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* const buf = reinterpret_cast<T*>(smem_raw);
    constexpr int EPV = 16 / (int)sizeof(T);          // elements per 16-byte piece
    const int tile_out = blockDim.x * CS_BLOCKED_V;
    const int span = tile_out + (K - 1) * d;
    const int win_len = (span + 2 * EPV - 1) / EPV * EPV;  // window, shift and slack; then the mask
    const int stage_len = win_len + (K + EPV - 1) / EPV * EPV;
    unsigned dyn_smem;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_smem));
    const bool two = dyn_smem >= 2u * stage_len * sizeof(T);

    const int Mg = M / (C / Cg);
    const int tiles_x = (int)(((i64)Wo + tile_out - 1) / tile_out);  // Wo + tile_out may pass 2^31
    const i64 items = (i64)B * M * tiles_x;
    const i64 per_block = (items + gridDim.x - 1) / gridDim.x;
    const i64 first = (i64)blockIdx.x * per_block;
    if (first >= items) return;
    const i64 n_stages = (min(items, first + per_block) - first) * Cg;

    // A stage: image b, output channel m (group g, place mg in it), tile tx, input
    // channel c; stepped one stage at a time (no division in the loop).
    struct Pos {
        int b, m, g, mg, tx, c;
        __device__ void next(int Cg_, int M_, int Mg_, int tiles) {
            if (++c < Cg_) return;
            c = 0;
            if (++tx < tiles) return;
            tx = 0;
            if (++m < M_) {
                if (++mg == Mg_) mg = 0, ++g;
                return;
            }
            m = g = mg = 0;
            ++b;
        }
    };
    const i64 row0 = first / tiles_x;
    const int m0 = (int)(row0 % M);
    Pos q{(int)(row0 / M), m0, m0 / Mg, m0 % Mg, (int)(first - row0 * tiles_x), 0};

    auto row_of = [&](const Pos& at) { return x + ((i64)at.b * C + (i64)at.g * Cg + at.c) * W; };
    auto shift_of = [&](const T* xr, i64 base) {     // elements from the 16-byte boundary to the window
        return (int)((((unsigned long long)xr + (unsigned long long)(base * (i64)sizeof(T))) & 15) / sizeof(T));
    };
    auto load = [&](const Pos& at, T* dst) {
        const T* xr = row_of(at);
        const i64 base = (i64)at.tx * tile_out - p;  // input index of the window's first element
        const i64 a0 = base - shift_of(xr, base);
        const int nvec = (int)((base + span - a0 + EPV - 1) / EPV);
        for (int v = threadIdx.x; v < nvec; v += blockDim.x) {
            const i64 ix = a0 + (i64)EPV * v;
            if (ix >= 0 && ix + EPV <= W) {
                cp_async_16(dst + EPV * v, xr + ix, true);
            } else {
#pragma unroll
                for (int e = 0; e < EPV; ++e) {
                    const bool in = ix + e >= 0 && ix + e < W;
                    cp_async_element(dst + EPV * v + e, in ? xr + ix + e : xr, in);
                }
            }
        }
        const T* wr = w + ((i64)at.m * Cg + at.c) * K;
        for (int k = threadIdx.x; k < K; k += blockDim.x) cp_async_element(dst + win_len + k, wr + k, true);
        cp_async_commit();
    };

    const int t0 = threadIdx.x * CS_BLOCKED_V;
    T acc[CS_BLOCKED_V];
    if (two) load(q, buf);
    for (i64 s = 0; s < n_stages; ++s) {
        T* const cur = buf + (two ? (int)(s & 1) * stage_len : 0);
        if (!two) load(q, cur);
        cp_async_wait<0>();
        __syncthreads();                              // stage s landed; the other buffer is free
        if (two && s + 1 < n_stages) {
            Pos nx = q;
            nx.next(Cg, M, Mg, tiles_x);
            load(nx, buf + (int)((s + 1) & 1) * stage_len);
        }
        if (q.c == 0) {
#pragma unroll
            for (int j = 0; j < CS_BLOCKED_V; ++j) acc[j] = bias[q.m];
        }
        const i64 base = (i64)q.tx * tile_out - p;
        blocked_taps<T, KT>(acc, cur + shift_of(row_of(q), base) + t0, cur + win_len, K, d);
        if (q.c == Cg - 1) {
            // Stage the outputs in this stage's buffer (lane stride V is odd: no bank
            // conflicts), then store them coalesced, 16 bytes at a time where aligned.
            __syncthreads();                          // every thread has read the window
#pragma unroll
            for (int j = 0; j < CS_BLOCKED_V; ++j) cur[t0 + j] = acc[j];
            __syncthreads();
            const i64 o0 = (i64)q.tx * tile_out;
            T* yr = y + ((i64)q.b * M + q.m) * Wo + o0;
            const int n_out = (int)min((i64)tile_out, (i64)Wo - o0);
            int done = 0;
            if ((reinterpret_cast<unsigned long long>(yr) & 15) == 0) {
                const uint4* src4 = reinterpret_cast<const uint4*>(cur);
                uint4* y4 = reinterpret_cast<uint4*>(yr);
                for (int v = threadIdx.x; v < n_out / EPV; v += blockDim.x) y4[v] = src4[v];
                done = (n_out / EPV) * EPV;
            }
            for (int j = done + threadIdx.x; j < n_out; j += blockDim.x) yr[j] = cur[j];
        }
        // One buffer: the next stage's copy overwrites this one. Two: the copy into
        // this buffer is issued after the next iteration's barrier.
        if (!two) __syncthreads();
        q.next(Cg, M, Mg, tiles_x);
    }
}
