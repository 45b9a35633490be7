// tf32x3_wgmma: tf32x3's forward product (error-compensated TF32, see
// implicit_gemm_tf32x3.cu) on Hopper's warpgroup MMA, wgmma.mma_async
// (sm_90a; this file is compiled with -arch=sm_90a, its CudaSource's arch).
//
// Why another kernel: mma.sync's warps issue every m16n8k8 MMA (48 a k-step),
// their fragment loads and the splits themselves. A wgmma is one asynchronous
// instruction for a 64 x 64 x 8 product of a whole warpgroup, reading its B
// operand from shared memory by itself; the warps meanwhile load and split the
// next fragments. Once the weights come through L1 (both kernels were bound by
// L2's throughput before, Nsight Compute), this kernel alone ran 1.4-1.7x the
// mma.sync kernel through the API on six layers (H100,
// docs/measurements/tf32x3-wgmma-2026-11-27-h100.md).
//
// The product is taken transposed: D (pixels x channels) = X^T W^T, so the
// operand that must be split as it is read (the gathered input) is wgmma's A,
// which may come from registers (TF32 has no transposed shared-memory A), and
// the weights, split once per call by tf32x3_split_weights (chunked order),
// are B, read by the tensor cores from shared memory in the canonical
// no-swizzle K-major layout: 8 x 16-byte core matrices, the two k halves of a
// row group 128 bytes apart (the descriptor's leading offset) and row groups
// 256 bytes apart (its stride offset) -- the layout tools/wgmma_probe.py (at tag notebook-2026-11-28)
// confirmed on an H100 on 2026-11-27.
//
// Block tile: 128 output pixels (two wgmma row halves of 64) x 64 output
// channels (the wgmma's N), one warpgroup of 128 threads, 64 float32
// accumulators per thread (and, promoted, 64 more for the k-steps' own sums). The reduction runs as
// tf32x3's CHUNKED gather: one
// tap of 8 consecutive channels per k-step, S shared-memory stages filled by
// cp.async S - 2 steps ahead (the stage a wgmma may still be reading is not
// refilled until the wgmma.wait_group of the step after it). Each k-step: 4
// fragment loads and splits per row half, then 6 wgmmas (big*small, small*big,
// big*big per half) in one commit group, at most one group left in flight, so
// the A registers alternate between two sets (the loop is unrolled by two).
//
// Specials (inf, NaN, |v| >= 2^126) are caught in the sums and the block's
// tile recomputed with float32 FMAs, as in tf32x3.
#include "common.cuh"
#include "tf32x3.cuh"

// At run time the backend asks for sm_90a and this check (_sources.arch_options): a compiler
// that took another target fails here, rather than building kernels that trap when launched.
#if defined(CS_REQUIRE_ARCH_FEATURES) && defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "tf32x3_wgmma.cu was compiled for a target without sm_90a's features (wgmma): -arch=sm_90a was not taken"
#endif

#define TW_BN 128   // output pixels of a block tile
#define TW_BM 64    // output channels of a block tile (wgmma N)
#define TW_BK 8     // one chunk of 8 channels at one tap per k-step
#define TW_PAD 8    // input rows of TW_BN + 8 words: a fragment load (4 k x 8 pixels) hits 32 banks
#define TW_THREADS 128

// Words of one shared-memory stage: the split weights (big, then small), TW_BM x 8 each in core
// matrices, then the raw inputs [k][pixel]. 2112 words (8448 bytes, a multiple of 128).
constexpr int TW_W_WORDS = TW_BM * TW_BK;
constexpr int TW_X_WORDS = TW_BK * (TW_BN + TW_PAD);
constexpr int TW_STAGE_WORDS = 2 * TW_W_WORDS + TW_X_WORDS;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The shared-memory descriptor of a K-major no-swizzle operand at shared address `addr`:
// start, leading (k) and stride (row group) byte offsets, each in 16-byte units.
__device__ __forceinline__ unsigned long long tw_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(128 >> 4) << 16) |
           ((unsigned long long)(256 >> 4) << 32);
}

// d = a * B (+ d when `accumulate`) for a 64 x 64 x 8 TF32 product: a from registers (mma.sync's
// m16n8k8 A fragment per warp, rows 16 * warp + ...), B (8 x 64) from shared memory through `desc`.
__device__ __forceinline__ void tw_mma(float (&d)[32], const unsigned (&a)[4], unsigned long long desc,
                                       int accumulate = 1) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(accumulate));
}
__device__ __forceinline__ void tw_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void tw_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void tw_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// This thread's shared-memory writes (its landed cp.async copies), made visible to the tensor
// cores' reads (the async proxy), which a barrier then orders after every thread's.
__device__ __forceinline__ void tw_fence_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
#endif

// Stages of the cp.async pipeline (S - 2 copied ahead): CS_TW_STAGES, one value with the launch,
// which sizes the dynamic shared memory from it (its CudaSource's defines); and the blocks per
// multiprocessor the registers must allow (128 registers). H100, 2026-11-27, against S = 4 and 3 blocks, stages of
// two k-steps, and the weights copied through L2 only (docs/measurements/tf32x3-wgmma-2026-11-27-h100.md):
// the weights through L1 made the kernel 1.4-1.8x faster on every layer measured, S = 5 and 4 blocks
// 1.00-1.02x on the 3x3 layers and 1.05-1.40x on the 1x1 and the strided 5x5.
// Promoted accumulation (CS_TX_PROMOTE, tx_mma3 in tf32x3.cuh says why) holds a second tile of 64
// accumulators per thread, the k-steps' own sums: two blocks per multiprocessor then fit its registers.
#if CS_TX_PROMOTE
#define TW_MIN_BLOCKS 2
#else
#define TW_MIN_BLOCKS 4
#endif
// K-steps whose wgmma sums collect in the zeroed tile before the float32 accumulator takes them: the
// tile is read after a wait for every group in flight, so fewer, longer chunks keep the pipeline full.
#define TW_CHUNK 4

template <typename T, int ACT>
__global__ void __launch_bounds__(TW_THREADS, TW_MIN_BLOCKS)
    conv2d_tf32x3_wgmma(const T* __restrict__ x, const T* __restrict__ w, const unsigned* __restrict__ ws,
                        const T* __restrict__ bias, T* __restrict__ y, const int4* __restrict__ koff, CONV_PARAMS) {
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
    __trap();   // sm_90a only: the backend offers this kernel on compute capability 9.0 alone
#else
    if constexpr (sizeof(T) != 4) {
        __trap();   // float32 only
    } else {
        constexpr int S = CS_TW_STAGES, P = S - 2;   // P stages copied ahead
        static_assert(S >= 3, "a stage in flight, one being read, one a wgmma may still read");
        extern __shared__ __align__(128) unsigned tw_stage_words[];
        const int G = C / Cg, Mg = M / G, g = blockIdx.z;
        const i64 HoWo = (i64)Ho * Wo, N = (i64)B * HoWo;
        const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
        const int gq = lane >> 2, tq = lane & 3;
        const int m0 = blockIdx.y * TW_BM;
        const i64 n0 = (i64)blockIdx.x * TW_BN;
        const int taps = KH * KW;
        const int steps = (Cg + TW_BK - 1) / TW_BK * taps;   // k-steps, one stage each

        // Weight copies: thread t copies half t % 2 (four k) of row t / 2, big and small, into
        // its core matrix: row group (t / 2) / 8, k half t % 2, row (t / 2) % 8.
        const int arow = tid / 2, ahalf = tid % 2;
        const bool a_ok = m0 + arow < Mg;
        const int a_dst = ((arow >> 3) * 2 + ahalf) * 32 + (arow & 7) * 4;
        const i64 a_part = (i64)G * steps * Mg * TW_BK;
        const unsigned* wsa = ws + ((i64)g * steps * Mg + min(m0 + arow, Mg - 1)) * TW_BK + ahalf * 4;
        const i64 a_step = (i64)Mg * TW_BK;
        // Input copies: pixel column tid of the tile, the 8 channels of the chunk at the step's tap.
        const int bn = tid;
        const i64 n_load = n0 + bn;
        const bool n_ok = n_load < N;   // a column past N gathers output 0's windows, never stored
        const i64 b_load = n_ok ? n_load / HoWo : 0;
        const int r_load = n_ok ? (int)(n_load % HoWo) : 0;
        const int ih0 = (r_load / Wo) * sh - ph, iw0 = (r_load % Wo) * sw - pw;
        const float* xb = x + (b_load * C + (i64)g * Cg) * H * W;
        const int HW = H * W;
        int lc = 0, lp = 0, lq = 0;   // the chunk's first channel and the tap the next load() reads

        auto stage = [&](int j) { return tw_stage_words + j * TW_STAGE_WORDS; };
        // The next k-step's copies into stage j (k-steps in order: it advances the counters). The
        // weights through L1: every block of the multiprocessor copies the same rows at about the
        // same time (through L2 only, the kernel was bound by L2's throughput).
        auto load = [&](int j) {
            unsigned* st = stage(j);
            cp_async_16_l1(st + a_dst, wsa, a_ok);
            cp_async_16_l1(st + TW_W_WORDS + a_dst, wsa + a_part, a_ok);
            wsa += a_step;
            const int ih = ih0 + lp * dh, iw = iw0 + lq * dw;
            const int live = (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W ? Cg - lc : 0;
            const int first = (int)((unsigned)lc * (unsigned)HW + (unsigned)(ih * W + iw));
            const float* xp = opaque_pointer(xb + first);
            float* xs = reinterpret_cast<float*>(st + 2 * TW_W_WORDS);
#pragma unroll
            for (int r = 0; r < TW_BK; ++r, xp += HW) cp_async_element(&xs[r * (TW_BN + TW_PAD) + bn], xp, r < live);
            if (++lq == KW) {
                lq = 0;
                if (++lp == KH) lp = 0, lc += TW_BK;
            }
        };

        float acc[2][32];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 32; ++e) acc[h][e] = 0.0f;
#if CS_TX_PROMOTE
        float part[2][32] = {};   // this chunk's wgmma sums, started afresh by its first k-step (scale-d 0)
        auto promote = [&]() {
            tw_wait<0>();
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 32; ++e) acc[h][e] += part[h][e];
        };
#else
        float (&part)[2][32] = acc;
#endif
        const unsigned long long desc0 = tw_desc((unsigned)__cvta_generic_to_shared(tw_stage_words));

        // One k-step from stage j on the A registers (xbig, xsmall): load and split the
        // fragments, issue the six wgmmas as one group, and leave at most one group in flight
        // (so the other register set, read by the group before, is free again).
        auto kstep = [&](int j, unsigned (&xbig)[2][4], unsigned (&xsmall)[2][4], int accumulate) {
            const float* xs = reinterpret_cast<const float*>(stage(j) + 2 * TW_W_WORDS);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int p = h * 64 + warp * 16 + gq;
                tx_split(xs[tq * (TW_BN + TW_PAD) + p], xbig[h][0], xsmall[h][0]);
                tx_split(xs[tq * (TW_BN + TW_PAD) + p + 8], xbig[h][1], xsmall[h][1]);
                tx_split(xs[(tq + 4) * (TW_BN + TW_PAD) + p], xbig[h][2], xsmall[h][2]);
                tx_split(xs[(tq + 4) * (TW_BN + TW_PAD) + p + 8], xbig[h][3], xsmall[h][3]);
            }
            const unsigned long long big = desc0 + (unsigned long long)(j * TW_STAGE_WORDS * 4 >> 4);
            const unsigned long long small = big + (TW_W_WORDS * 4 >> 4);
            tw_fence();
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                tw_mma(part[h], xbig[h], small, accumulate);
                tw_mma(part[h], xsmall[h], big);
                tw_mma(part[h], xbig[h], big);
            }
            tw_commit();
            tw_wait<1>();
        };
        // K-step t: wait for its copies, refill the stage read two steps ago (P = S - 2 ahead).
        auto arrive = [&](int t) {
            cp_async_wait<P - 1>();
            tw_fence_proxy();
            // Every thread's copies of stage t have landed, and every warp has passed the
            // wgmma.wait_group after its last k-step, so no wgmma still reads stage t - 2.
            __syncthreads();
            if (t + P < steps) load((t + P) % S);
            cp_async_commit();
        };

#pragma unroll
        for (int p = 0; p < P; ++p) {
            if (p < steps) load(p);
            cp_async_commit();
        }
        unsigned xbig0[2][4], xsmall0[2][4], xbig1[2][4], xsmall1[2][4];
        for (int t = 0; t < steps; t += 2) {   // two k-steps a turn: the register sets alternate
            arrive(t);
            // Promoted, a chunk's first k-step starts its sums afresh; without promotion every wgmma adds.
            kstep(t % S, xbig0, xsmall0, CS_TX_PROMOTE && t % TW_CHUNK == 0 ? 0 : 1);
            if (t + 1 < steps) {
                arrive(t + 1);
                kstep((t + 1) % S, xbig1, xsmall1, 1);
            }
#if CS_TX_PROMOTE
            if ((t + 2) % TW_CHUNK == 0 || t + 2 >= steps) promote();
#endif
        }
        tw_wait<0>();
        cp_async_wait<0>();   // the empty trailing groups, so no copy outlives the block

        // The fragment of row half h, element e of the 32: pixel h*64 + 16*warp + gq + (e/2 % 2)*8,
        // channel 8*(e/4) + 2*tq + e % 2.
        bool special = false;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 32; ++e) special |= tx_unsplittable(acc[h][e]);
        if (__syncthreads_or(special)) {
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
                for (int e = 0; e < 32; ++e) {
                    const int m = m0 + 8 * (e >> 2) + 2 * tq + (e & 1);
                    const i64 n = n0 + h * 64 + warp * 16 + gq + ((e >> 1) & 1) * 8;
                    acc[h][e] = tx_fma_output(x, w, koff, g, m, n, CONV_ARGS);
                }
        }

#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const i64 n = n0 + h * 64 + warp * 16 + gq + half * 8;
                if (n >= N) continue;
                const i64 b = n / HoWo, r = n % HoWo;
#pragma unroll
                for (int j = 0; j < 8; ++j)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int m = m0 + 8 * j + 2 * tq + c;
                        if (m < Mg) {
                            const int mo = g * Mg + m;
                            const float v = acc[h][4 * j + half * 2 + c] + bias[mo];
                            y[(b * M + mo) * HoWo + r] = activate<ACT>(v);
                        }
                    }
            }
    }
#endif
}
