// im2col / col2im for the im2col_gemm algorithm and the backward pass.
// cols (Bc, Cg*KH*KW, Ho*Wo) for one group g of a batch chunk starting at b0.
#include "common.cuh"

// cols[bb, (c*KH + p)*KW + q, oh*Wo + ow] = x[b0 + bb, g*Cg + c, ih, iw] or 0 in the padding.
template <typename T, typename I>
__global__ void im2col(const T* __restrict__ x, T* __restrict__ cols, int b0, int Bc, int g, CONV_PARAMS) {
    // I is int when every index fits in 31 bits (cheap division), long long otherwise.
    const I L = (I)Ho * Wo;
    const I Kd = (I)Cg * KH * KW;
    const I total = (I)Bc * Kd * L;
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        const I l = i % L;
        I t = i / L;
        const int k = (int)(t % Kd);
        const i64 bb = t / Kd;
        const int q = k % KW, p = (k / KW) % KH, c = k / (KH * KW);
        const int oh = (int)(l / Wo), ow = (int)(l % Wo);
        const int ih = oh * sh + p * dh - ph, iw = ow * sw + q * dw - pw;
        cols[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W)
                      ? x[(((b0 + bb) * C + (i64)g * Cg + c) * H + ih) * (i64)W + iw]
                      : T(0);
    }
}

// col2im in gather form (no atomics): every input element sums the column
// entries that were copied from it.  gx (Bc, Cg of group g) += ...; writes
// (not adds) gx[b0 + bb, g*Cg + c, ih, iw].
template <typename T>
__global__ void col2im(const T* __restrict__ cols, T* __restrict__ gx, int b0, int Bc, int g, CONV_PARAMS) {
    const i64 L = (i64)Ho * Wo;
    const i64 Kd = (i64)Cg * KH * KW;
    const i64 total = (i64)Bc * Cg * H * W;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
        const int iw = (int)(i % W);
        i64 t = i / W;
        const int ih = (int)(t % H);
        t /= H;
        const int c = (int)(t % Cg);
        const i64 bb = t / Cg;
        T acc = T(0);
        for (int p = 0; p < KH; ++p) {
            const int hs = ih + ph - p * dh;               // = oh * sh when this tap read (ih, .)
            if (hs < 0 || hs % sh) continue;
            const int oh = hs / sh;
            if (oh >= Ho) continue;
            for (int q = 0; q < KW; ++q) {
                const int ws = iw + pw - q * dw;
                if (ws < 0 || ws % sw) continue;
                const int ow = ws / sw;
                if (ow >= Wo) continue;
                acc += cols[(bb * Kd + (c * KH + p) * KW + q) * L + (i64)oh * Wo + ow];
            }
        }
        gx[(((b0 + bb) * C + (i64)g * Cg + c) * H + ih) * (i64)W + iw] = acc;
    }
}
