// tf32x3: float32 implicit GEMM on the tensor cores, error-compensated.
//
// Each float32 operand v is split into two TF32 numbers, big = tf32(v) and
// small = tf32(v - big) (v - big is exact in float32), and every product is
// taken as big*big + big*small + small*big: three m16n8k8 TF32 MMAs, summed
// per k-step into a zeroed tile that the float32 accumulator then takes with
// rounded adds (tx_mma3 in tf32x3.cuh says why: the MMAs' own sums round
// toward zero); small*small, ~2^-22 of the product, is dropped. The result
// carries ~2^-21 relative error per product instead of TF32's 2^-11, so it
// meets the float32 tolerance of the conformance tests for reductions of 32
// products or more (the backend declines shorter ones), while the tensor
// cores do the work: a TF32 MMA issues 8x the multiply-adds of FFMA
// per SM, so three of them still beat the FP32 pipe ~2.7x at peak.
//
// Non-finite and huge operands cannot be split (inf - inf is NaN, and
// big*small can be inf*0): a block that meets any recomputes its whole tile
// with plain float32 FMAs (the IEEE result every other algorithm gives). The
// forward kernel knows it from its sums (any sum such an operand enters is inf
// or NaN; a sum of 2^126 or more is recomputed too, so no overflow depends on
// the split's rounding), the weight gradient from its operands as it loads them
// (|v| >= 2^126, inf or NaN). Finite data never takes that path. The finite outputs
// of such a block are float32 FMA sums, so they may differ in the last bits from
// the same outputs computed elsewhere (another batch size, another Dask chunking);
// the weight gradient's recomputation loops over its split's pixels one by one
// (slow: for a gradient that holds inf or NaN only).
//
// Tiling (conv2d_tf32x3_fwd<float, BM, ACT, CHUNKED>): block tile BM (output channels,
// 64 or 128) x 128 (output pixels), BK = 8 per shared-memory stage (one MMA
// k-step), tx_stages(BM) stages copied by cp.async ahead of the MMAs. The
// weights are split once per call (tf32x3_split_weights, a small launch before
// the forward kernel) into big and small parts laid out stage by stage; the
// inputs are copied raw and split as the fragments are read. 2*BM threads =
// BM/16 warps, each owning a 64 x 32 warp tile: 4 x 4 MMA tiles of 16 x 8, 64
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
// The forward kernel's shared-memory stages (cp.async), S - 1 copies ahead of the MMAs: CS_TX_STAGES
// at BM = 64 (the backend's "stages" tunable), two at BM = 128. The stages are dynamic shared memory
// (the launch passes their size: tf32x3_stage_bytes (implicit_gemm.py), whose TF32X3_A_ROW and
// TF32X3_B_PAD are TX_AROW and TX_PAD below): five or more at BM = 64 pass the 48 KiB a static
// array may take.
__host__ __device__ constexpr int tx_stages(int BM) { return BM >= 128 ? 2 : CS_TX_STAGES; }
// Row stride of the forward kernel's split weights in shared memory, [m][k]: 8 k and 4 words of
// padding, so a row is 16-byte aligned (one cp.async per row half) and a fragment load (8 rows x 4 k)
// hits 32 different banks (12 * row + k mod 32).
#define TX_AROW 12

// A float32 zero in global memory: the weight gradient's register loads read it in place of an element
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
        for (int i = 0; i < MI; ++i) tx_mma3(acc[i][j], a_big[i], a_small[i], b_big, b_small);
    }
}

// The forward kernel's stage: warp tile 64 x 32 at (wm0, wn0), 4 x 4 tiles of
// 16 x 8, three TF32 MMAs each. The weights arrive split (tf32x3_split_weights,
// [m][k] rows of TX_AROW words); the inputs raw ([k][n]), each fragment element
// split in registers as it is read: a warp reads 32 of the block's 128 columns,
// so every input element is split once per block row (four 16-row tiles share
// each B fragment), and the four row tiles' MMAs alternate, so no MMA waits on
// the one just issued.
template <int BM>
__device__ __forceinline__ void tx_stage_mma_fwd(const unsigned (*Ab)[TX_AROW], const unsigned (*As)[TX_AROW],
                                                 const float (*Bm)[TX_BN + TX_PAD], float (&acc)[4][4][4], int wm0,
                                                 int wn0, int gq, int tq, int lane) {
    unsigned a_big[4][4], a_small[4][4];
    // One ldmatrix.x4 per fragment: lane l gives the address of row l % 8 of 8 x 4-word
    // matrix l / 8 (rows +8 for matrices 1 and 3, k +4 for 2 and 3), and receives in
    // register r word tq of row gq of matrix r: the fragment's a[r].
    const int lrow = wm0 + (lane & 7) + ((lane >> 3) & 1) * 8, lk = (lane >> 4) * 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        tx_ldmatrix_x4(a_big[i], &Ab[lrow + i * 16][lk]);
        tx_ldmatrix_x4(a_small[i], &As[lrow + i * 16][lk]);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int col = wn0 + j * 8 + gq;
        unsigned b_big[2], b_small[2];
        tx_split(Bm[tq][col], b_big[0], b_small[0]);
        tx_split(Bm[tq + 4][col], b_big[1], b_small[1]);
#if CS_TX_PROMOTE
        // tx_mma3's promotion, with the four row tiles' MMAs alternating as below.
        float t[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) t[i][e] = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) tx_mma(t[i], a_big[i], b_small);
#pragma unroll
        for (int i = 0; i < 4; ++i) tx_mma(t[i], a_small[i], b_big);
#pragma unroll
        for (int i = 0; i < 4; ++i) tx_mma(t[i], a_big[i], b_big);
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] += t[i][e];
#else
#pragma unroll
        for (int i = 0; i < 4; ++i) tx_mma(acc[i][j], a_big[i], b_small);
#pragma unroll
        for (int i = 0; i < 4; ++i) tx_mma(acc[i][j], a_small[i], b_big);
#pragma unroll
        for (int i = 0; i < 4; ++i) tx_mma(acc[i][j], a_big[i], b_big);
#endif
    }
}

// tf32x3_split_weights<float, CHUNKED>: the forward kernel's weights, split once
// per call into big and small parts and laid out stage by stage, so a block
// copies its stage's rows with one 16-byte cp.async per thread and part:
// ws[part][g][step][m][8] (part 0 big, 1 small) holds the weight the forward
// kernel's reduction step `step` multiplies in its lane j < 8: k = step*8 + j
// in the weights' order (c, p, q) (CHUNKED = 0), channel (step / taps)*8 + j
// at tap step % taps (CHUNKED = 1); zeros past the channels. grid-stride over
// the G*steps*Mg*8 elements. Specials split like any value (inf -> inf and
// NaN), and the forward kernel finds them in its sums.
template <typename T, int CHUNKED>
__global__ void tf32x3_split_weights(const T* __restrict__ w, unsigned* __restrict__ ws, int G, int Mg, int Cg,
                                     int taps, int steps) {
    if constexpr (sizeof(T) != 4) {
        __trap();
    } else {
        const int Kd = Cg * taps;
        const i64 part = (i64)G * steps * Mg * TX_BK;
        for (i64 e = blockIdx.x * (i64)blockDim.x + threadIdx.x; e < part; e += (i64)gridDim.x * blockDim.x) {
            const int lane = (int)(e % TX_BK), m = (int)(e / TX_BK % Mg);
            const i64 gs = e / ((i64)TX_BK * Mg);
            const int step = (int)(gs % steps), g = (int)(gs / steps);
            int k;
            bool ok;
            if (CHUNKED) {
                const int c = step / taps * TX_BK + lane;
                ok = c < Cg, k = c * taps + step % taps;
            } else {
                k = step * TX_BK + lane, ok = k < Kd;
            }
            const float v = ok ? w[((i64)g * Mg + m) * Kd + k] : 0.0f;
            tx_split(v, ws[e], ws[part + e]);
        }
    }
}

// Threads of a weight-gradient block of BM rows: two warps along the 128
// columns, each warp 32 rows (16 where BM = 16).
__host__ __device__ constexpr int tx_wgrad_threads(int BM) { return BM >= 32 ? 2 * BM : 64; }

// Minimum resident blocks the forward kernel's registers must allow: CS_TX_BLOCKS
// blocks of 128 threads (BM = 64), half as many of 256 (BM = 128), at least one; 0
// gives no minimum. Occupancy, not code, changes: 4 (the default module) caps the
// kernel at 128 registers, 3 at 168. The backend's rule (_default_blocks_tf32x3)
// takes 3 from 768 products per output, where it measured faster, 4 below.
__host__ __device__ constexpr int tx_fwd_min_blocks(int BM) { return CS_TX_BLOCKS * 64 / BM > 0 ? CS_TX_BLOCKS * 64 / BM : 1; }
#if !defined(CS_TX_BLOCKS) || !defined(CS_TX_STAGES)
#error "compile with the -D options of convsuite.backends.cupy._sources.compile_options() (CS_TX_BLOCKS, CS_TX_STAGES)"
#endif
#if CS_TX_BLOCKS > 0
#define TX_FWD_BOUNDS(BM) __launch_bounds__(2 * (BM), tx_fwd_min_blocks(BM))
#else
#define TX_FWD_BOUNDS(BM) __launch_bounds__(2 * (BM))
#endif

template <typename T, int BM, int ACT, int CHUNKED>
__global__ void TX_FWD_BOUNDS(BM)
    conv2d_tf32x3_fwd(const T* __restrict__ x, const T* __restrict__ w, const unsigned* __restrict__ ws,
                      const T* __restrict__ bias, T* __restrict__ y, const int4* __restrict__ koff, CONV_PARAMS) {
    if constexpr (sizeof(T) != 4) {
        __trap();   // float32 only: the backend's check refuses float64 before a launch
    } else {
        constexpr int NT = 2 * BM, S = tx_stages(BM);
        static_assert(S >= 2, "the pipeline needs a stage to fill while one is multiplied");
        constexpr int B_PER = TX_BN * TX_BK / NT;    // 8 (BM = 64) or 4 (BM = 128)
        constexpr int WARPS_M = BM / 64;             // warp tiles along the output channels
        // S stages: the split weights [m][k] (big, small) and the raw inputs [k][n],
        // filled by cp.async (no staging registers: the 64 accumulators and the
        // fragments keep the 128-register budget to themselves). Dynamic shared memory
        // of S * (2 * BM * TX_AROW + TX_BK * (TX_BN + TX_PAD)) words (the launch's size).
        extern __shared__ __align__(16) unsigned tx_stage_words[];
        unsigned(*Ab)[BM][TX_AROW] = reinterpret_cast<unsigned(*)[BM][TX_AROW]>(tx_stage_words);
        unsigned(*As)[BM][TX_AROW] = Ab + S;
        float(*Bs)[TX_BK][TX_BN + TX_PAD] = reinterpret_cast<float(*)[TX_BK][TX_BN + TX_PAD]>(As + S);
        const int G = C / Cg, Mg = M / G, g = blockIdx.z;
        const int Kd = Cg * KH * KW;
        const i64 HoWo = (i64)Ho * Wo, N = (i64)B * HoWo;
        const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
        const int gq = lane >> 2, tq = lane & 3;     // the MMA fragments' groupID and thread-in-group
        const int wm0 = (warp % WARPS_M) * 64, wn0 = (warp / WARPS_M) * 32;
        const int m0 = blockIdx.y * BM;
        const i64 n0 = (i64)blockIdx.x * TX_BN;
        const int taps = KH * KW;
        const int steps = CHUNKED ? (Cg + TX_BK - 1) / TX_BK * taps : (Kd + TX_BK - 1) / TX_BK;

        // Weight copies: thread t copies half t % 2 (four k) of row t / 2 of the stage,
        // big and small; a row past Mg is zero-filled.
        const int arow = tid / 2, ahalf = tid % 2;
        const bool a_ok = m0 + arow < Mg;
        const i64 a_part = (i64)G * steps * Mg * TX_BK;
        // The next stage's weight rows: load() reads the steps in order (0, 1, 2 ...), so one
        // pointer stepped by a 64-bit add replaces a multiply-add of step * a_step per call.
        const unsigned* wsa = ws + ((i64)g * steps * Mg + min(m0 + arow, Mg - 1)) * TX_BK + ahalf * 4;
        const i64 a_step = (i64)Mg * TX_BK;   // one reduction step further
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
        // and the tap advances by a counter (no table, no division); the split
        // weights are laid out in the same order. A chunk past Cg is zeros:
        // exact for any Cg, wasteful only where Cg is not a multiple of 8 (the
        // backend's rule takes it where it is).
        int lc = 0, lp = 0, lq = 0;   // CHUNKED: the first channel and the tap the next load() reads
        // The gather's tap table, double-buffered and written one pipeline iteration
        // before the copies of the stage it describes are issued: entry r of tab[t] holds, for
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

        // A stage's loads are copies global -> shared of the values to multiply: an
        // element outside the operands (padding, a row past Mg, a tap past Kd) is a
        // zero-filled copy, so no mask is kept across the MMAs. Its source address is
        // formed as for any element and not read (no select of a stand-in address: 16 of
        // the main loop's 225 instructions, sm_90; the weight pointer's stepping saved 10).
        // load(s, step) must be called for step = 0, 1, 2 ... in order (it advances wsa).
        // The weights through L1 (cp_async_16_l1): every block of the multiprocessor copies the same rows.
        auto load = [&](int s, int step) {
            cp_async_16_l1(&Ab[s][arow][ahalf * 4], wsa, a_ok);
            cp_async_16_l1(&As[s][arow][ahalf * 4], wsa + a_part, a_ok);
            wsa += a_step;
            if constexpr (CHUNKED) {
                const int ih = ih0 + lp * dh, iw = iw0 + lq * dw;
                // Channels of this chunk the thread reads: 0 outside the image, fewer in the last chunk.
                const int live = (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W ? Cg - (lc + bk) : 0;
                // Formed, not read, where live <= 0 (unsigned: a last chunk past a group of
                // nearly 2^31 elements wraps instead of overflowing; exact where read). One
                // 64-bit pointer, stepped by IMAD.WIDE: 32-bit offsets off a per-thread base made
                // the compiler rebuild each address from the kernel parameters.
                const int first = (int)((unsigned)(lc + bk) * (unsigned)HW + (unsigned)(ih * W + iw));
                const float* xp = opaque_pointer(xb + first);
#pragma unroll
                for (int r = 0; r < B_PER; ++r, xp += HW) cp_async_element(&Bs[s][bk + r][bn], xp, r < live);
                if (++lq == KW) {
                    lq = 0;
                    if (++lp == KH) lp = 0, lc += TX_BK;
                }
            } else {
                const int4* t = tab[step & 1];
#pragma unroll
                for (int r = 0; r < B_PER; ++r) {
                    const int4 e = t[bk + r];
                    const int ih = ih0 + e.y, iw = iw0 + e.z;
                    const bool ok = e.w && (unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W;
                    // Unsigned: formed for padding taps too (not read there), where it may pass INT_MAX.
                    cp_async_element(&Bs[s][bk + r][bn], xb + (unsigned)((unsigned)ih0 * W + iw0 + e.x), ok);
                }
            }
        };

        float acc[4][4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

        // The pipeline: stages 0 .. S - 2 in flight before the first MMA; each
        // iteration waits for its own stage, then (after the barrier that ends every
        // warp's reads of the previous stage) issues the copies of the stage S - 1
        // on into that stage's buffer. One commit group per stage, empty past the end,
        // so the count cp_async_wait keeps is the same every iteration. The table
        // gather decodes each stage's taps one iteration before its copies are issued.
#pragma unroll
        for (int p = 0; p < S - 1; ++p) {
            if constexpr (!CHUNKED) {
                decode(p & 1, p * TX_BK);
                __syncthreads();
            }
            if (p < steps) load(p, p);
            cp_async_commit();
        }
        if constexpr (!CHUNKED) decode((S - 1) & 1, (S - 1) * TX_BK);
        for (int step = 0; step < steps; ++step) {
            cp_async_wait<S - 2>();
            __syncthreads();
            const int next = step + S - 1;
            if (next < steps) load(next % S, next);
            cp_async_commit();
            // The table of stage next + 1 replaces that of next - 1, whose copies were
            // issued before this iteration's barrier.
            if (!CHUNKED && next + 1 < steps) decode((next + 1) & 1, (next + 1) * TX_BK);
            const int s = step % S;
            tx_stage_mma_fwd<BM>(Ab[s], As[s], Bs[s], acc, wm0, wn0, gq, tq, lane);
        }
        cp_async_wait<0>();   // the empty trailing groups, so no copy outlives the block

        // Specials are caught in the sums: an operand that cannot be split (inf, NaN,
        // a value whose big part rounds to inf) makes every sum it enters NaN or inf,
        // and a sum of 2^126 or more (a quarter of overflow, where the split's rounding
        // could decide whether it overflows) is recomputed as well.
        bool special = false;
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int e = 0; e < 4; ++e) special |= tx_unsplittable(acc[i][j][e]);
        if (__syncthreads_or(special)) {
            // inf, NaN or a huge operand in this block's tile: every output of the
            // tile again with float32 FMAs, so IEEE specials come out as elsewhere.
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int m = m0 + wm0 + i * 16 + gq + (e >> 1) * 8;
                        const i64 n = n0 + wn0 + j * 8 + 2 * tq + (e & 1);
                        acc[i][j][e] = tx_fma_output(x, w, koff, g, m, n, CONV_ARGS);
                    }
        }

#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const i64 n = n0 + wn0 + j * 8 + 2 * tq + c;
                if (n >= N) continue;
                const i64 b = n / HoWo, r = n % HoWo;
#pragma unroll
                for (int i = 0; i < 4; ++i)
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
