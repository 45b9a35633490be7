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

// The CONV_PARAMS of a kernel, passed on to the device function that does its work.
#define CONV_ARGS B, C, H, W, M, Cg, KH, KW, Ho, Wo, sh, sw, dh, dw, ph, pw

// The gradient through a ReLU, read where it is loaded: gy[i], or 0 where the
// ReLU output yr[i] is <= 0 (a NaN output passes the gradient, as
// torch.threshold_backward). MASK = 0 compiles to the plain load and never
// reads yr, so the backward kernels take the mask as a compile-time switch
// (the "_masked" kernels) instead of a masked copy of grad_y made beforehand.
template <int MASK, typename T>
__device__ __forceinline__ T relu_masked(const T* __restrict__ gy, const T* __restrict__ yr, i64 i) {
    return (MASK && yr[i] <= T(0)) ? T(0) : gy[i];
}

// The activation epilogue of a forward kernel, a compile-time switch (the
// codes of convsuite._epilogue.ACTIVATION_CODES): 0 none, 1 ReLU
// (v < 0 ? 0 : v), 2 ReLU6 (ReLU, then v > 6 ? 6 : v). Both keep NaN, as
// torch.relu and torch.nn.functional.relu6 do; ACT = 0 compiles to nothing.
template <int ACT, typename T>
__device__ __forceinline__ T activate(T v) {
    static_assert(ACT >= 0 && ACT <= 2, "activation codes: 0 none, 1 relu, 2 relu6");
    if constexpr (ACT >= 1) v = v < T(0) ? T(0) : v;
    if constexpr (ACT == 2) v = v > T(6) ? T(6) : v;
    return v;
}

// p, hidden from the optimiser: addresses derived from it are stepped from this
// register instead of rebuilt from the kernel parameters, which ptxas does under a
// tight register budget (a constant-bank load, a sign extension and two LEAs per
// load in the implicit GEMMs' gathers). Read through __ldg: the pointer no longer
// carries the __restrict__ that makes a load LDG.CONSTANT.
template <typename P>
__device__ __forceinline__ P* opaque_pointer(P* p) {
    asm("" : "+l"(p));
    return p;
}

// One element global -> shared without passing through registers (sm_80 cp.async), or a
// zero where !ok (a source size of 0 fills the destination with zeros and reads nothing:
// src may then be any address, even one outside every allocation, as CUTLASS's zero-fill
// copies pass theirs; compute-sanitizer's memcheck agrees). The copies of a commit group
// land by cp_async_wait.
// Below sm_80 (Turing: CUDA 13's oldest target) the copy is an ordinary load and store,
// complete when it returns, and commit and wait do nothing.
template <typename T>
__device__ __forceinline__ void cp_async_element(T* dst, const T* src, bool ok) {
#if __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(d), "l"(src), "n"(sizeof(T)),
                 "r"(ok ? (int)sizeof(T) : 0));
#else
    *dst = ok ? *src : T(0);
#endif
}
// 16 bytes global -> shared (both 16-byte aligned) without passing through registers, or
// zeros where !ok (src then any valid address, not read); .cg: through L2 only.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool ok) {
#if __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(ok ? 16 : 0));
#else
    const uint4 v = ok ? *static_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
    *static_cast<uint4*>(dst) = v;
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Wait until at most N of this thread's commit groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

// Constants shared with the launch code arrive as -D options, each from the one
// record that defines it (convsuite/backends/cupy/_sources.py, SHARED_DEFINES, and
// each source's CudaSource beside its algorithm module); never define them here.
#if !defined(CS_THREADS) || !defined(CS_CONST_BYTES)
#error "compile with the -D options of convsuite.backends.cupy._sources.compile_options()"
#endif

// Constant memory for the *_const algorithms (CS_CONST_BYTES, the hardware
// limit), reinterpreted as float or double by the kernel template.
__constant__ unsigned char c_weights[CS_CONST_BYTES];

template <typename T>
__device__ __forceinline__ const T* const_weights() {
    return reinterpret_cast<const T*>(c_weights);
}
