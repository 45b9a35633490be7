// tf32x3: float32 implicit GEMM on the tensor cores, error-compensated.
//
// Each float32 operand v is split into two TF32 numbers, big = tf32(v) and
// small = tf32(v - big) (v - big is exact in float32), and every product is
// taken as big*big + big*small + small*big: three m16n8k8 TF32 MMAs with a
// float32 accumulator (small*small, ~2^-22 of the product, is dropped). The
// result carries ~2^-21 relative error per product instead of TF32's 2^-11,
// so it meets the float32 tolerance of the conformance tests for reductions
// of 32 products or more (the backend declines shorter ones), while the
// tensor cores do the work: a TF32 MMA issues 8x the multiply-adds of FFMA
// per SM, so three of them still beat the FP32 pipe ~2.7x at peak.
//
// Non-finite and huge operands cannot be split (inf - inf is NaN, and
// big*small can be inf*0): a block that loads any |v| >= 2^126, inf or NaN
// recomputes its whole tile with plain float32 FMAs (the IEEE result every
// other algorithm gives). Finite data never takes that path. The finite outputs
// of such a block are float32 FMA sums, so they may differ in the last bits from
// the same outputs computed elsewhere (another batch size, another Dask chunking);
// the weight gradient's recomputation loops over its split's pixels one by one
// (slow: for a gradient that holds inf or NaN only).
//
// Tiling (conv2d_tf32x3_fwd<float, BM, ACT, CHUNKED>): block tile BM (output channels,
// 64 or 128) x 128 (output pixels), BK = 8 per shared-memory stage (one MMA
// k-step), two stages with the next slice's global loads issued into
// registers before the current one is multiplied. 2*BM threads = BM/16
// warps, each owning a 32 x 64 warp tile: 2 x 8 MMA tiles of 16 x 8, 64
// accumulators per thread. The im2col gather (template switch CHUNKED) either
// reads its taps' offsets from a small per-stage table in shared memory
// (decoded by eight threads), or runs over chunks of 8 channels tap by tap
// with no table (see load() below); the filter-offset table koff (as
// igemm_big's) serves only the float32 recomputation of blocks with special values.
//
// Y_g (Mg x N) = W_g (Mg x Kd) X_g (Kd x N), N = B*Ho*Wo; grid = (ceil(N/128),
// ceil(Mg/BM), groups). ACT fuses ReLU (1) or ReLU6 (2) into the epilogue. The double
// instantiation exists only so every kernel template has one (the backend
// never launches it): it traps.
#include "common.cuh"
#include "tf32x3.cuh"

#define TX_BN 128
#define TX_BK 8
// Rows of BM+8 (or 136) words: 8 mod 32 for BM = 32, 64, 128, 24 for BM = 16 (the weight gradient's
// thin tiles); either way a fragment load (4 k-rows x 8 columns) hits 32 different banks.
#define TX_PAD 8

// A float32 zero in global memory: the kernels' loads read it in place of an element
// outside the operands (the padding, rows or taps past a tile's edge).
__device__ const float tx_zero = 0.0f;

// The MMAs of one shared-memory stage: warp tile (16 MI) x 64 at (wm0, wn0)
// of the block tile, MI x 8 tiles of 16 x 8, three TF32 MMAs each (small
// corrections first, the big product last). A is [k][m] (BM + pad rows), B is [k][n].
template <int BM, int MI = 2>
__device__ __forceinline__ void tx_stage_mma(const unsigned (*Ab)[BM + TX_PAD], const unsigned (*As)[BM + TX_PAD],
                                             const unsigned (*Bb)[TX_BN + TX_PAD], const unsigned (*Bs)[TX_BN + TX_PAD],
                                             float (&acc)[MI][8][4], int wm0, int wn0, int gq, int tq) {
    unsigned a_big[MI][4], a_small[MI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i) {
        const int row = wm0 + i * 16 + gq;
        a_big[i][0] = Ab[tq][row], a_big[i][1] = Ab[tq][row + 8];
        a_big[i][2] = Ab[tq + 4][row], a_big[i][3] = Ab[tq + 4][row + 8];
        a_small[i][0] = As[tq][row], a_small[i][1] = As[tq][row + 8];
        a_small[i][2] = As[tq + 4][row], a_small[i][3] = As[tq + 4][row + 8];
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int col = wn0 + j * 8 + gq;
        const unsigned b_big[2] = {Bb[tq][col], Bb[tq + 4][col]};
        const unsigned b_small[2] = {Bs[tq][col], Bs[tq + 4][col]};
#pragma unroll
        for (int i = 0; i < MI; ++i) {
            tx_mma(acc[i][j], a_big[i], b_small);
            tx_mma(acc[i][j], a_small[i], b_big);
            tx_mma(acc[i][j], a_big[i], b_big);
        }
    }
}

// Threads of a weight-gradient block of BM rows: two warps along the 128
// columns, each warp 32 rows (16 where BM = 16).
__host__ __device__ constexpr int tx_wgrad_threads(int BM) { return BM >= 32 ? 2 * BM : 64; }

// Minimum resident blocks the forward kernel's registers must allow: CS_TX_BLOCKS
// blocks of 128 threads (BM = 64), half as many of 256 (BM = 128), at least one; 0
// (the default) gives no minimum. Occupancy, not code, changes: with no minimum
// ptxas takes 166 registers (three 128-thread blocks per multiprocessor; a minimum
// of one would take 174, two blocks), 4 caps it at 128 without spills (H100, 3x3
// C=64 56x56 B=64: forward 1.04-1.05x faster than 3 blocks).
__host__ __device__ constexpr int tx_fwd_min_blocks(int BM) { return CS_TX_BLOCKS * 64 / BM > 0 ? CS_TX_BLOCKS * 64 / BM : 1; }
#if CS_TX_BLOCKS > 0
#define TX_FWD_BOUNDS(BM) __launch_bounds__(2 * (BM), tx_fwd_min_blocks(BM))
#else
#define TX_FWD_BOUNDS(BM) __launch_bounds__(2 * (BM))
#endif

template <typename T, int BM, int ACT, int CHUNKED>
__global__ void TX_FWD_BOUNDS(BM)
    conv2d_tf32x3_fwd(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ y,
                      const int4* __restrict__ koff, CONV_PARAMS) {
    if constexpr (sizeof(T) != 4) {
        __trap();   // float32 only: the backend's check refuses float64 before a launch
    } else {
        constexpr int NT = 2 * BM;
        constexpr int A_PER = BM * TX_BK / NT;       // 4
        constexpr int B_PER = TX_BN * TX_BK / NT;    // 8 (BM = 64) or 4 (BM = 128)
        constexpr int WARPS_M = BM / 32;             // warp tiles along the output channels
        // Each operand is split once, when a stage is stored, into its big and
        // small TF32 bit patterns, kept in two arrays: each fragment element is
        // one 32-bit shared load straight into the register the MMA reads
        // (interleaved {big, small} pairs cost four register moves per MMA).
        __shared__ __align__(16) unsigned Ab[2][TX_BK][BM + TX_PAD], As[2][TX_BK][BM + TX_PAD];    // weights [k][m]
        __shared__ __align__(16) unsigned Bb[2][TX_BK][TX_BN + TX_PAD], Bs[2][TX_BK][TX_BN + TX_PAD]; // input [k][n]
        const int G = C / Cg, Mg = M / G, g = blockIdx.z;
        const int Kd = Cg * KH * KW;
        const i64 HoWo = (i64)Ho * Wo, N = (i64)B * HoWo;
        const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
        const int gq = lane >> 2, tq = lane & 3;     // the MMA fragments' groupID and thread-in-group
        const int wm0 = (warp % WARPS_M) * 32, wn0 = (warp / WARPS_M) * 64;
        const int m0 = blockIdx.y * BM;
        const i64 n0 = (i64)blockIdx.x * TX_BN;

        // Weight loads, coalesced: thread t reads k = k0 + t % 8 of rows
        // t / 8 + r * NT / 8 (r < A_PER), so a warp instruction covers four
        // rows' 8 consecutive k instead of 32 rows' one k.
        const int akq = tid % TX_BK, arow = tid / TX_BK;
        const float* wg = w + (i64)g * Mg * Kd;
        // CHUNKED: the first of the thread's A_PER weight rows, and which of them exist (bit r).
        const float* wa = wg + (i64)min(m0 + arow, Mg - 1) * Kd;
        unsigned a_rows = 0;
#pragma unroll
        for (int r = 0; r < A_PER; ++r) a_rows |= unsigned(m0 + arow + r * (NT / TX_BK) < Mg) << r;
        // Input loads: output column bn of the tile (decoded once), B_PER consecutive k.
        const int bn = tid % TX_BN, bk = (tid / TX_BN) * B_PER;
        const i64 n_load = n0 + bn;
        // A column past N (the last tile) gathers the windows of output 0 instead: valid
        // addresses, no branch in the loads, and its outputs are never stored.
        const bool n_ok = n_load < N;
        const i64 b_load = n_ok ? n_load / HoWo : 0;
        const int r_load = n_ok ? (int)(n_load % HoWo) : 0;
        const int ih0 = (r_load / Wo) * sh - ph, iw0 = (r_load % Wo) * sw - pw;
        const float* xb = x + (b_load * C + (i64)g * Cg) * H * W;
        const int HW = H * W;   // one group's input fits in an int (the backend's check)
        // CHUNKED = 0: the reduction runs in the weights' order, k = (c, p, q),
        // and the gather reads each element's offset from a tap table (below).
        // CHUNKED = 1: it runs over channel chunks of 8, and within a chunk
        // over the taps (p, q): a stage is one tap of 8 consecutive channels,
        // so a thread's 8 elements share one bounds check and lie H*W apart,
        // and the tap advances by a counter (no table, no division). The weights
        // are read in that order from their own layout (L1 holds a chunk's
        // 8*KH*KW words a row across its KH*KW stages). A chunk past Cg is zeros:
        // exact for any Cg, wasteful only where Cg is not a multiple of 8 (the
        // backend's rule takes it where it is).
        const int taps = KH * KW;
        const int steps = CHUNKED ? (Cg + TX_BK - 1) / TX_BK * taps : (Kd + TX_BK - 1) / TX_BK;
        int lc = 0, lp = 0, lq = 0;   // CHUNKED: the first channel and the tap the next load() reads
        // The gather's tap table, double-buffered and written two stages before the
        // MMAs of the stage it describes (one before that stage's loads): entry r of tab[t] holds, for
        // k = (first k of that stage) + r, the input offset c*H*W + p*dh*W + q*dw,
        // the row and column steps p*dh and q*dw, and whether k < Kd. Eight
        // threads decode it (two divisions each) for the whole block, so a
        // gathered element costs one broadcast shared load and a bounds check
        // instead of stepping (c, p, q) with carries in every thread.
        __shared__ int4 tab[2][TX_BK];
        auto decode = [&](int t, int k0) {
            if (tid < TX_BK) {
                const int k = k0 + tid, kk = min(k, Kd - 1);
                const int c = kk / taps, pq = kk - c * taps, p = pq / KW, q = pq - p * KW;
                tab[t][tid] = make_int4(c * HW + p * dh * W + q * dw, p * dh, q * dw, k < Kd);
            }
        };

        // A stage's loads land in ra/rb as the values to multiply: an element
        // outside the operands (padding, a row past Mg, a tap past Kd) is read
        // from tx_zero, so there is no branch around a load and no mask to keep
        // across the MMAs. The split and the special-value check wait for
        // store(), after the MMAs: nothing reads a loaded value while its load
        // may still be in flight.
        float ra[A_PER], rb[B_PER];
        bool unsplittable = false;
        auto load = [&](int step) {
            if constexpr (CHUNKED) {
                // One 64-bit pointer per operand and stage, stepped by IMAD.WIDE: 32-bit
                // offsets off a per-thread base made the compiler rebuild each address from
                // the kernel parameters (sign extensions, a constant-bank load) under the
                // 128-register budget.
                const int ca = lc + akq;
                const float* wp = opaque_pointer(wa + (ca * taps + lp * KW + lq));
#pragma unroll
                for (int r = 0; r < A_PER; ++r)
                    ra[r] = (a_rows >> r & 1) && ca < Cg ? __ldg(wp + (i64)r * (NT / TX_BK) * Kd) : 0.0f;
                const int ih = ih0 + lp * dh, iw = iw0 + lq * dw;
                // Channels of this chunk the thread reads: 0 outside the image, fewer in the last chunk.
                const int live = (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W ? Cg - (lc + bk) : 0;
                // Formed, not read, where live <= 0 (unsigned: a last chunk past a group of
                // nearly 2^31 elements wraps instead of overflowing; exact where read).
                const int first = (int)((unsigned)(lc + bk) * (unsigned)HW + (unsigned)(ih * W + iw));
                const float* xp = opaque_pointer(xb + first);
#pragma unroll
                for (int r = 0; r < B_PER; ++r, xp += HW) rb[r] = r < live ? __ldg(xp) : 0.0f;
                if (++lq == KW) {
                    lq = 0;
                    if (++lp == KH) lp = 0, lc += TX_BK;
                }
            } else {
                const int ka = step * TX_BK + akq;
#pragma unroll
                for (int r = 0; r < A_PER; ++r) {
                    const int m = m0 + arow + r * (NT / TX_BK);
                    ra[r] = *(m < Mg && ka < Kd ? wg + (i64)m * Kd + ka : &tx_zero);
                }
                const int4* t = tab[step & 1];
#pragma unroll
                for (int r = 0; r < B_PER; ++r) {
                    const int4 e = t[bk + r];
                    const int ih = ih0 + e.y, iw = iw0 + e.z;
                    const bool ok = e.w && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
                    rb[r] = *(ok ? xb + (ih0 * W + iw0 + e.x) : &tx_zero);
                }
            }
        };
        auto store = [&](int s) {
#pragma unroll
            for (int r = 0; r < A_PER; ++r) {
                const int m = arow + r * (NT / TX_BK);
                tx_split_noting(ra[r], Ab[s][akq][m], As[s][akq][m], unsplittable);
            }
#pragma unroll
            for (int r = 0; r < B_PER; ++r)
                tx_split_noting(rb[r], Bb[s][bk + r][bn], Bs[s][bk + r][bn], unsplittable);
        };

        float acc[2][8][4];
#pragma unroll
        for (int i = 0; i < 2; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

        if constexpr (!CHUNKED) {
            decode(0, 0);
            decode(1, TX_BK);
            __syncthreads();
        }
        load(0);
        store(0);
        __syncthreads();
        int s = 0;
        for (int step = 0; step < steps; ++step) {
            const bool more = step + 1 < steps;
            if (more) load(step + 1);   // in flight while this slice is multiplied
            // The table two stages on replaces the one the previous iteration's
            // load read (before the barrier that ended it).
            if (!CHUNKED && step + 2 < steps) decode(s, (step + 2) * TX_BK);
            tx_stage_mma<BM>(Ab[s], As[s], Bb[s], Bs[s], acc, wm0, wn0, gq, tq);
            if (more) store(s ^ 1);   // stage s^1 was last read before the previous barrier
            __syncthreads();
            s ^= 1;
        }

        if (__syncthreads_or(unsplittable)) {
            // inf, NaN or a huge operand in this block's tile: every output of the
            // tile again with float32 FMAs, so IEEE specials come out as elsewhere.
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int m = m0 + wm0 + i * 16 + gq + (e >> 1) * 8;
                        const i64 n = n0 + wn0 + j * 8 + 2 * tq + (e & 1);
                        float sum = 0.0f;
                        if (m < Mg && n < N) {
                            const i64 b = n / HoWo;
                            const int r = (int)(n % HoWo);
                            const int oh0 = (r / Wo) * sh - ph, ow0 = (r % Wo) * sw - pw;
                            const float* xs = x + (b * C + (i64)g * Cg) * H * W;
                            const float* ws = w + ((i64)g * Mg + m) * Kd;
                            for (int k = 0; k < Kd; ++k) {
                                const int4 o = koff[k];
                                const int ih = oh0 + o.y, iw = ow0 + o.z;
                                const float v = ((unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
                                                    ? xs[(i64)oh0 * W + ow0 + o.x]
                                                    : 0.0f;
                                sum = fmaf(ws[k], v, sum);
                            }
                        }
                        acc[i][j][e] = sum;
                    }
        }

#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const i64 n = n0 + wn0 + j * 8 + 2 * tq + c;
                if (n >= N) continue;
                const i64 b = n / HoWo, r = n % HoWo;
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int m = m0 + wm0 + i * 16 + gq + h * 8;
                        if (m < Mg) {
                            const int mo = g * Mg + m;
                            const float v = acc[i][j][h * 2 + c] + bias[mo];
                            y[(b * M + mo) * HoWo + r] = activate<ACT>(v);
                        }
                    }
            }
    }
}

// conv2d_tf32x3_wgrad<float, BM>: the weight gradient on the tensor cores,
// gW_g (Mg x Kd) = gY_g (Mg x N) X_g^T (N x Kd), split-K over N as igemm_big's:
// blockIdx.z = split * groups + g writes partial[split, g*Mg + m, k] and the
// splits are summed in a fixed order afterwards (deterministic, no atomics).
// grid = (ceil(Kd/128), ceil(Mg/BM), splits * groups). The reduction runs
// over pixels in slices of 8; per slice, eight threads decode each pixel n
// into the address of its window in x (with its first input row and column)
// and its offset in gY for the whole block, two slices ahead of the MMAs
// (one ahead of the loads), and each thread keeps its own columns' filter
// offsets koff[k] in registers. Specials (inf, NaN, |v| >= 2^126) send the block's tile to
// a float32 recomputation, as in the forward kernel.
//
// BM (the output channels a block covers) is 16, 32, 64 or 128: a layer of
// Mg = 16 output channels in a 64-row tile would spend three quarters of its
// MMAs on zero rows (the ECE408 layers have 12 to 24). Warps are 32 rows (16
// at BM = 16) by 64 columns, two along the columns: 64 threads below BM = 64,
// each gathering two columns of X.
template <typename T, int BM>
__global__ void __launch_bounds__(tx_wgrad_threads(BM))
    conv2d_tf32x3_wgrad(const T* __restrict__ gy, const T* __restrict__ x, T* __restrict__ partial,
                        const int4* __restrict__ koff, int splits, CONV_PARAMS) {
    if constexpr (sizeof(T) != 4) {
        __trap();   // float32 only: the backend's check refuses float64 before a launch
    } else {
        constexpr int NT = tx_wgrad_threads(BM);
        constexpr int WM = BM >= 32 ? 32 : 16, MI = WM / 16;   // a warp's rows, and its 16-row MMA tiles
        constexpr int WARPS_M = BM / WM;
        constexpr int A_PER = BM * TX_BK / NT;       // 4 (2 at BM = 16)
        // X: a thread gathers CPT columns of PIX pixels each (NT >= 128: one column, 8 or 4 pixels).
        constexpr int CPT = NT >= TX_BN ? 1 : TX_BN / NT, PIX = NT >= TX_BN ? TX_BN * TX_BK / NT : TX_BK;
        static_assert(BM == 16 || BM == 32 || BM == 64 || BM == 128, "tf32x3 wgrad: BM is 16, 32, 64 or 128");
        __shared__ __align__(16) unsigned Ab[2][TX_BK][BM + TX_PAD], As[2][TX_BK][BM + TX_PAD];    // gY [n][m]
        __shared__ __align__(16) unsigned Bb[2][TX_BK][TX_BN + TX_PAD], Bs[2][TX_BK][TX_BN + TX_PAD]; // X^T [n][k]
        // Per pixel of a slice, decoded two slices ahead by eight threads for the whole block:
        // tabx holds the address of its window's first element in the group's x (image, first
        // row and column; rows and columns may be negative, into the padding: only an address
        // whose bounds check passes is read) and that row and column, so a gathered element
        // costs one shared load, two adds, a bounds check and an address select; taby holds
        // its offset in gY (image and pixel), -1 past the split's end.
        struct __align__(16) PixelWindow {
            const float* x;
            int ih0, iw0;
        };
        __shared__ PixelWindow tabx[2][TX_BK];
        __shared__ i64 taby[2][TX_BK];
        const int G = C / Cg, Mg = M / G;
        const int g = blockIdx.z % G, split = blockIdx.z / G;
        const int Kd = Cg * KH * KW;
        const int HoWo = Ho * Wo;   // one image's output plane fits in an int (the backend's check)
        const i64 N = (i64)B * HoWo;
        const i64 steps = (N + TX_BK - 1) / TX_BK;
        const i64 n_begin = steps * split / splits * TX_BK;
        const i64 n_end = min(N, steps * (split + 1) / splits * TX_BK);
        const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
        const int gq = lane >> 2, tq = lane & 3;
        const int wm0 = (warp % WARPS_M) * WM, wn0 = (warp / WARPS_M) * 64;
        const int m0 = blockIdx.y * BM;
        const int kc0 = blockIdx.x * TX_BN;

        // gY loads: pixel an of the slice (eight consecutive pixels per row) for rows arow + r * NT / 8.
        const int an = tid % TX_BK, arow = tid / TX_BK;
        // X loads: tap columns bkc + c * NT of the tile (their offsets read once), PIX consecutive pixels.
        const int bkc = tid % TX_BN, bn = (tid / TX_BN) * PIX;
        bool k_ok[CPT];
        int4 o[CPT];
#pragma unroll
        for (int c = 0; c < CPT; ++c) {
            const int k = kc0 + bkc + c * NT;
            k_ok[c] = k < Kd;
            o[c] = koff[min(k, Kd - 1)];
        }
        const float* xgroup = x + (i64)g * Cg * H * W;

        // The decoding threads step their pixel (image, pixel in the image) by a slice per
        // decode, from one 64-bit division here: the slices are decoded in order.
        int dec_b = 0, dec_pix = 0;
        if (tid < TX_BK) {
            const i64 n = n_begin + tid;
            dec_b = (int)(n / HoWo);
            dec_pix = (int)(n - (i64)dec_b * HoWo);
        }
        auto decode = [&](int t, i64 nb) {   // nb: the slice after the last one decoded
            if (tid < TX_BK) {
                const bool real = nb + tid < n_end;
                const int oh = dec_pix / Wo, ih0 = oh * sh - ph, iw0 = (dec_pix - oh * Wo) * sw - pw;
                // A pixel past the end gets a row no tap reaches (every bounds check fails).
                PixelWindow e;
                e.x = xgroup + (real ? (i64)dec_b * C * H * W + (i64)ih0 * W + iw0 : 0);
                e.ih0 = real ? ih0 : -(1 << 29);
                e.iw0 = iw0;
                tabx[t][tid] = e;
                taby[t][tid] = real ? (i64)dec_b * M * HoWo + dec_pix : -1;
                dec_pix += TX_BK;
                while (dec_pix >= HoWo) dec_pix -= HoWo, ++dec_b;
            }
        };

        // An element outside the operands (padding, a row past Mg, a tap past Kd, a pixel past
        // the split) is read from tx_zero: what lands in a register is the value to multiply,
        // with no mask to keep across the MMAs and apply at the store.
        float ra[A_PER], rb[CPT][PIX];
        bool unsplittable = false;
        auto load = [&](int t) {
            const i64 ya = taby[t][an];
            const float* gyp = gy + (i64)g * Mg * HoWo + max(ya, (i64)0);
#pragma unroll
            for (int r = 0; r < A_PER; ++r) {
                const int m = m0 + arow + r * (NT / TX_BK);
                ra[r] = *(ya >= 0 && m < Mg ? gyp + (i64)min(m, Mg - 1) * HoWo : &tx_zero);
            }
#pragma unroll
            for (int r = 0; r < PIX; ++r) {
                const PixelWindow e = tabx[t][bn + r];
#pragma unroll
                for (int c = 0; c < CPT; ++c) {
                    const int ih = e.ih0 + o[c].y, iw = e.iw0 + o[c].z;
                    const bool ok = k_ok[c] && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
                    rb[c][r] = *(ok ? e.x + o[c].x : &tx_zero);
                }
            }
        };
        auto store = [&](int s) {
#pragma unroll
            for (int r = 0; r < A_PER; ++r) {
                const int m = arow + r * (NT / TX_BK);
                tx_split_noting(ra[r], Ab[s][an][m], As[s][an][m], unsplittable);
            }
#pragma unroll
            for (int c = 0; c < CPT; ++c)
#pragma unroll
                for (int r = 0; r < PIX; ++r)
                    tx_split_noting(rb[c][r], Bb[s][bn + r][bkc + c * NT], Bs[s][bn + r][bkc + c * NT],
                                    unsplittable);
        };

        float acc[MI][8][4];
#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

        if (n_begin < n_end) {
            decode(0, n_begin);
            decode(1, n_begin + TX_BK);
            __syncthreads();
            load(0);
            store(0);
        }
        __syncthreads();
        int s = 0;
        for (i64 nb = n_begin; nb < n_end; nb += TX_BK) {
            const bool more = nb + TX_BK < n_end;
            if (more) load(s ^ 1);   // the tables of slice nb + 8 sit in tabx[s ^ 1], taby[s ^ 1]
            // The table two slices on replaces the one the previous iteration's load read.
            if (nb + 2 * TX_BK < n_end) decode(s, nb + 2 * TX_BK);
            tx_stage_mma<BM, MI>(Ab[s], As[s], Bb[s], Bs[s], acc, wm0, wn0, gq, tq);
            if (more) store(s ^ 1);
            __syncthreads();
            s ^= 1;
        }

        if (__syncthreads_or(unsplittable)) {
            // inf, NaN or a huge operand in this block's slices: the tile again in float32.
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < 8; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int m = m0 + wm0 + i * 16 + gq + (e >> 1) * 8;
                        const int k = kc0 + wn0 + j * 8 + 2 * tq + (e & 1);
                        float sum = 0.0f;
                        if (m < Mg && k < Kd) {
                            const int4 ok4 = koff[k];
                            for (i64 n = n_begin; n < n_end; ++n) {
                                const int b = (int)(n / HoWo), pix = (int)(n - (i64)b * HoWo);
                                const int ih = (pix / Wo) * sh - ph + ok4.y, iw = (pix % Wo) * sw - pw + ok4.z;
                                const float v = ((unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
                                                    ? x[((i64)b * C + (i64)g * Cg) * H * W + ok4.x +
                                                        (i64)((pix / Wo) * sh - ph) * W + ((pix % Wo) * sw - pw)]
                                                    : 0.0f;
                                sum = fmaf(gy[((i64)b * M + (i64)g * Mg + m) * HoWo + pix], v, sum);
                            }
                        }
                        acc[i][j][e] = sum;
                    }
        }

#pragma unroll
        for (int i = 0; i < MI; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = m0 + wm0 + i * 16 + gq + h * 8;
                if (m >= Mg) continue;
                T* out = partial + ((i64)split * M + (i64)g * Mg + m) * Kd;
#pragma unroll
                for (int j = 0; j < 8; ++j)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int k = kc0 + wn0 + j * 8 + 2 * tq + c;
                        if (k < Kd) out[k] = acc[i][j][h * 2 + c];
                    }
            }
    }
}
