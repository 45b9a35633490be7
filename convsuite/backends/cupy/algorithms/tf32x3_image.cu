// tf32x3_image: the tf32x3 forward product (error-compensated TF32 on the
// tensor cores, see implicit_gemm_tf32x3.cu) for narrow layers whose whole
// input image fits in shared memory, such as the ECE408 layers (fa19 conv2:
// 12 x 22 x 22 inputs, 24 outputs of 5 x 5).
//
// Why another kernel: tf32x3's block tile puts the output channels on its
// 64 or 128 rows, so a layer of 24 channels leaves most MMAs idle, and every
// element it gathers is split into TF32 parts again for each of its 25 taps.
// Here an image is loaded into shared memory once per block iteration, split
// once (big and small parts in two arrays, zeros in the padding), and the
// weights are split once per block into MMA fragment order and stay resident
// while the block walks over the batch. The GEMM is transposed: rows are the
// image's output pixels (m16 tiles), columns the output channels (NT n8
// tiles, M <= 8*NT), so 24 channels fill three n8 tiles exactly. An A fragment
// element is two shared loads (big, small) at pixel offset + tap offset, the
// tap offsets of a k-step coming from a small table: no division, no bounds
// check and no split in the main loop.
//
// Grid: persistent blocks (as many as fit the GPU, from the occupancy API),
// each taking images b = blockIdx.x, + gridDim.x, ...; block: one warp per
// pair of pixel tiles (warps * 2 >= tiles where 12 warps suffice, else
// several pairs per warp). Dynamic shared memory, 16-byte aligned:
//   wfrag[ksteps][NT][32] uint4  the B fragments {big b0, big b1, small b0, small b1}
//   kt[ksteps][4] int2            tap offsets of k = 8s + tq and 8s + tq + 4 (past Kd: 0, see below)
//   img_big[C*Hp*Wp]              the padded image's big parts
//   img_small[C*Hp*Wp]            its small parts
// where Hp x Wp are the input rows and columns the outputs read, padding
// included. Specials (inf, NaN, |v| >= 2^126) in the weights or an image send
// that image to a float32 recomputation from global memory, as in tf32x3.
// A tap past Kd (the last k-step's tail) reads the pixel's own first element
// (offset 0: in the image whatever the pixel) against a zero weight, which
// gives exactly 0 because an image on the tensor-core path holds only finite
// values (specials take the recomputation).
//
// groups = 1 only (the backend's check). The double instantiation traps.
#include "common.cuh"
#include "tf32x3.cuh"

// One float global -> shared by cp.async (sm_80, as tf32x3 needs), or a zero where !ok
// (source size 0: src is any valid address and is not read).
__device__ __forceinline__ void cp_async_float(unsigned* dst, const float* src, bool ok) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 4 : 0));
}

// Two blocks of up to 384 threads per multiprocessor (80 registers a thread; with
// one block of 11 warps an SM stalled on the shared-load -> MMA chain, H100,
// Nsight Compute: 57% of cycles with no eligible warp). nvcc 13, sm_90: 72
// registers at NT = 1, 80 at NT = 2-4; NT = 3 and 4 spill 8-16 bytes, outside
// the main loop (whose SASS has no local loads or stores).
template <typename T, int NT, int ACT>
__global__ void __launch_bounds__(384, 2)
    conv2d_tf32x3_image(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                        T* __restrict__ y, const int2* __restrict__ ktab, int Hp, int Wp, int ksteps, CONV_PARAMS) {
    if constexpr (sizeof(T) != 4) {
        __trap();   // float32 only: the backend's check refuses float64 before a launch
    } else {
        extern __shared__ __align__(16) unsigned char smem_raw[];
        uint4* wfrag = reinterpret_cast<uint4*>(smem_raw);
        int2* kt = reinterpret_cast<int2*>(wfrag + ksteps * NT * 32);
        const int IMG = C * Hp * Wp;
        unsigned* img_big = reinterpret_cast<unsigned*>(kt + ksteps * 4);
        unsigned* img_small = img_big + IMG;
        const int Kd = C * KH * KW, P = Ho * Wo;
        const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
        const int gq = lane >> 2, tq = lane & 3;
        const int groups = (P + 31) / 32;               // pairs of 16-pixel tiles

        // Weights, once per block: fragment e = (s * NT + j) * 32 + lane holds
        // W[k][n] = w[n][k] for n = 8j + gq and k = 8s + tq, 8s + tq + 4 (zero past M or Kd).
        bool bad_w = false;
        for (int e = tid; e < ksteps * NT * 32; e += blockDim.x) {
            const int l = e & 31, j = (e >> 5) % NT, s = (e >> 5) / NT;
            const int n = j * 8 + (l >> 2), k0 = s * 8 + (l & 3), k1 = k0 + 4;
            const float v0 = (n < M && k0 < Kd) ? w[(i64)n * Kd + k0] : 0.0f;
            const float v1 = (n < M && k1 < Kd) ? w[(i64)n * Kd + k1] : 0.0f;
            uint4 u;
            tx_split_noting(v0, u.x, u.z, bad_w);
            tx_split_noting(v1, u.y, u.w, bad_w);
            wfrag[e] = u;
        }
        for (int e = tid; e < ksteps * 4; e += blockDim.x) kt[e] = ktab[e];

        for (i64 b = blockIdx.x; b < B; b += gridDim.x) {
            __syncthreads();   // the previous image's MMAs have read img_*; the weights are in
            // The image into img_big as float32, one padded row (c, r) per warp at a
            // time, with cp.async: the copies need no registers, so a warp issues
            // its rows back to back instead of waiting on each load; the padding is
            // zero-filled (source size 0). Then each element is split in place.
            for (int row = warp; row < C * Hp; row += nwarps) {
                const int c = row / Hp, ih = row - c * Hp - ph;
                const bool row_in = (unsigned)ih < (unsigned)H;
                const float* xr = x + ((b * C + c) * H + (row_in ? ih : 0)) * (i64)W;
                for (int col = lane; col < Wp; col += 32) {
                    const int iw = col - pw;
                    const bool ok = row_in && (unsigned)iw < (unsigned)W;
                    cp_async_float(img_big + row * Wp + col, ok ? xr + iw : xr, ok);
                }
            }
            asm volatile("cp.async.commit_group;\n" ::);
            asm volatile("cp.async.wait_group 0;\n" ::);
            __syncthreads();
            bool bad = bad_w;
            for (int e = tid; e < IMG; e += blockDim.x)
                tx_split_noting(__uint_as_float(img_big[e]), img_big[e], img_small[e], bad);
            bad = __syncthreads_or(bad);

            if (!bad) {
                for (int grp = warp; grp < groups; grp += nwarps) {
                    // Pixel offsets of this lane's rows gq and gq + 8 in both tiles; a row
                    // past P reads the image from its start (valid; never stored).
                    int po[2][2];
#pragma unroll
                    for (int i = 0; i < 2; ++i)
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            const int p = grp * 32 + i * 16 + h * 8 + gq;
                            const int oh = p / Wo, ow = p - oh * Wo;
                            po[i][h] = p < P ? oh * sh * Wp + ow * sw : 0;
                        }
                    float acc[2][NT][4];
#pragma unroll
                    for (int i = 0; i < 2; ++i)
#pragma unroll
                        for (int j = 0; j < NT; ++j)
#pragma unroll
                            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
                    for (int s = 0; s < ksteps; ++s) {
                        const int2 ko = kt[s * 4 + tq];
                        uint4 bw[NT];
#pragma unroll
                        for (int j = 0; j < NT; ++j) bw[j] = wfrag[(s * NT + j) * 32 + lane];
#pragma unroll
                        for (int i = 0; i < 2; ++i) {
                            const int a0 = po[i][0] + ko.x, a1 = po[i][1] + ko.x;
                            const int a2 = po[i][0] + ko.y, a3 = po[i][1] + ko.y;
                            const unsigned ab[4] = {img_big[a0], img_big[a1], img_big[a2], img_big[a3]};
                            const unsigned as[4] = {img_small[a0], img_small[a1], img_small[a2], img_small[a3]};
#pragma unroll
                            for (int j = 0; j < NT; ++j) {
                                const unsigned b_big[2] = {bw[j].x, bw[j].y}, b_small[2] = {bw[j].z, bw[j].w};
                                tx_mma3(acc[i][j], ab, as, b_big, b_small);
                            }
                        }
                    }
                    // acc[i][j][e]: pixel 32 grp + 16 i + gq + 8 (e >> 1), channel 8 j + 2 tq + (e & 1).
#pragma unroll
                    for (int i = 0; i < 2; ++i)
#pragma unroll
                        for (int j = 0; j < NT; ++j)
#pragma unroll
                            for (int e = 0; e < 4; ++e) {
                                const int p = grp * 32 + i * 16 + gq + (e >> 1) * 8, n = j * 8 + 2 * tq + (e & 1);
                                if (p < P && n < M) y[(b * M + n) * P + p] = activate<ACT>(acc[i][j][e] + bias[n]);
                            }
                }
            } else {
                // inf, NaN or a huge operand: this image's outputs in float32 FMAs,
                // padding multiplied as zeros (IEEE, as every other algorithm).
                for (int o = tid; o < M * P; o += blockDim.x) {
                    const int n = o / P, p = o - n * P;
                    const int oh0 = (p / Wo) * sh - ph, ow0 = (p % Wo) * sw - pw;
                    const float* wn = w + (i64)n * Kd;
                    float sum = 0.0f;
                    for (int c = 0; c < C; ++c)
                        for (int kh = 0; kh < KH; ++kh)
                            for (int kw = 0; kw < KW; ++kw) {
                                const int ih = oh0 + kh * dh, iw = ow0 + kw * dw;
                                const float v = ((unsigned)ih < (unsigned)H && (unsigned)iw < (unsigned)W)
                                                    ? x[((b * C + c) * H + ih) * (i64)W + iw]
                                                    : 0.0f;
                                sum = fmaf(wn[(c * KH + kh) * KW + kw], v, sum);
                            }
                    y[(b * M + n) * P + p] = activate<ACT>(sum + bias[n]);
                }
            }
        }
    }
}
