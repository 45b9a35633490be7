"""The sustained issue rate of the MMAs tf32x3 uses, and of FFMA, on this GPU (a device machine).

tf32x3 and tf32x3_image multiply with ``mma.sync.aligned.m16n8k8`` TF32 (three
per product); igemm_big with FFMA. This measures each instruction's ceiling
on the machine at hand: every warp runs a loop of independent MMAs (8
accumulator tiles, no loads), enough warps to fill every scheduler, timed
with CUDA events; the SM clock during the run is measured separately (a
kernel that spins a known number of ``clock64`` cycles). Prints the rate
per SM per clock and in TFLOP/s, to compare with the kernels' own rates
(``docs/measurements/tf32x3-image-2026-11-26.md``).

    python3 tools/mma_rate.py
"""

from __future__ import annotations

import statistics

import cupy as cp

SOURCE = r"""
extern "C" __global__ void mma_tf32(float* out, int iters) {
    unsigned a[4], b[2];
    for (int i = 0; i < 4; ++i) a[i] = __float_as_uint(1.0f + threadIdx.x * 1e-3f + i);
    for (int i = 0; i < 2; ++i) b[i] = __float_as_uint(0.5f + i);
    float d[8][4];
    for (int t = 0; t < 8; ++t) for (int e = 0; e < 4; ++e) d[t][e] = 0.0f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int t = 0; t < 8; ++t)
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                         "{%0,%1,%2,%3};\n"
                         : "+f"(d[t][0]), "+f"(d[t][1]), "+f"(d[t][2]), "+f"(d[t][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    float s = 0.0f;
    for (int t = 0; t < 8; ++t) for (int e = 0; e < 4; ++e) s += d[t][e];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

extern "C" __global__ void ffma(float* out, int iters) {
    float v[16];
    for (int t = 0; t < 16; ++t) v[t] = threadIdx.x * 1e-3f + t;
    const float m = 0.999f, c = 1e-3f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int t = 0; t < 16; ++t) v[t] = fmaf(v[t], m, c);
    }
    float s = 0.0f;
    for (int t = 0; t < 16; ++t) s += v[t];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

extern "C" __global__ void spin(long long cycles, long long* out) {
    const long long start = clock64();
    while (clock64() - start < cycles) {}
    if (threadIdx.x == 0) out[blockIdx.x] = clock64() - start;
}
"""


def _time(fn, repeat=7) -> float:
    fn()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times)


def main() -> int:
    module = cp.RawModule(code=SOURCE)
    props = cp.cuda.runtime.getDeviceProperties(0)
    sms = props["multiProcessorCount"]
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    spin = module.get_function("spin")
    cycles = 200_000_000
    out = cp.zeros(sms, cp.int64)
    seconds = _time(lambda: spin((sms,), (32,), (cp.int64(cycles), out)), repeat=3)
    clock = cycles / seconds
    print(f"{name}: {sms} SMs, SM clock while spinning {clock / 1e9:.2f} GHz")
    threads, blocks = 256, sms * 8
    buf = cp.zeros(threads * blocks, cp.float32)
    # kernel, what one warp instruction is, warp instructions per loop iteration, FLOP each, iterations
    cases = (
        ("mma_tf32", "HMMA.1688 (m16n8k8 TF32)", 8, 16 * 8 * 8 * 2, 4096),
        ("ffma", "FFMA (warp instr)", 16, 32 * 2, 16384),
    )
    for kernel, unit, per_iter, flop, iters in cases:
        fn = module.get_function(kernel)
        seconds = _time(lambda fn=fn, iters=iters: fn((blocks,), (threads,), (buf, cp.int32(iters))))
        insts = per_iter * iters * (threads // 32) * blocks
        rate = insts / seconds / sms / clock
        print(f"{unit:26s} {rate:6.3f} per SM per clock, {insts * flop / seconds / 1e12:7.1f} TFLOP/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
