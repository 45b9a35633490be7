// Shared by every convsuite kernel. Compiled by NVRTC (cupy.RawModule) at run
// time and by nvcc -ptx in CI, so it includes no system header.
#pragma once

// Canonical 2-D geometry (1-D problems arrive with H = KH = Ho = 1):
// x (B, C, H, W), w (M, Cg, KH, KW), y (B, M, Ho, Wo); groups = C / Cg.
// Every dimension fits in an int; every linear index or product of more than
// two dimensions is computed in 64 bits, so tensors of more than 2^31
// elements index correctly.
#define CONV_PARAMS                                                        \
    int B, int C, int H, int W, int M, int Cg, int KH, int KW, int Ho,     \
    int Wo, int sh, int sw, int dh, int dw, int ph, int pw

typedef long long i64;

// Constant memory for the *_const algorithms: 64 KiB, the hardware limit,
// reinterpreted as float or double by the kernel template.
__constant__ unsigned char c_weights[65536];

template <typename T>
__device__ __forceinline__ const T* const_weights() {
    return reinterpret_cast<const T*>(c_weights);
}
