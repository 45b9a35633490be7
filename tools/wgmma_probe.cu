
// Hypothesis test for wgmma.m64n64k8.f32.tf32.tf32 with A in registers and B in shared memory.
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo & 0x3FFFF) >> 4) << 16) |
           ((unsigned long long)((sbo & 0x3FFFF) >> 4) << 32);
}
__device__ __forceinline__ void wg_mma_64x64(float (&d)[32], const unsigned (&a)[4], unsigned long long desc, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "n"(0), "r"(scale_d));
}
extern "C" __global__ void probe(const float* A, const float* B, float* D, int layout, int lbo, int sbo) {
    __shared__ __align__(128) float Bs[64 * 8];
    const int tid = threadIdx.x;
    for (int e = tid; e < 512; e += 128) {
        const int n = e / 8, k = e % 8, g = n / 8, r = n % 8, kc = k / 4, kk = k % 4;
        const int off = layout == 0 ? ((g * 2 + kc) * 32 + r * 4 + kk) : ((kc * 8 + g) * 32 + r * 4 + kk);
        Bs[off] = B[n * 8 + k];
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const int warp = tid / 32, lane = tid % 32, gq = lane / 4, tq = lane % 4, row = warp * 16 + gq;
    unsigned a[4];
    a[0] = __float_as_uint(A[row * 8 + tq]);
    a[1] = __float_as_uint(A[(row + 8) * 8 + tq]);
    a[2] = __float_as_uint(A[row * 8 + tq + 4]);
    a[3] = __float_as_uint(A[(row + 8) * 8 + tq + 4]);
    float d[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) d[i] = 0.0f;
    const unsigned long long desc = wg_desc((unsigned)__cvta_generic_to_shared(Bs), lbo, sbo);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    wg_mma_64x64(d, a, desc, 0);
    wg_mma_64x64(d, a, desc, 1);   // twice: D = 2 A B^T (scale-d = 1 accumulates)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int col = 8 * j + 2 * tq;
        D[row * 64 + col] = d[4 * j];
        D[row * 64 + col + 1] = d[4 * j + 1];
        D[(row + 8) * 64 + col] = d[4 * j + 2];
        D[(row + 8) * 64 + col + 1] = d[4 * j + 3];
    }
}
