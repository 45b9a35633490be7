"""One call of each kernel behind a missed issue-11 target, for Nsight Compute.

    ncu --clock-control none --csv --metrics <list> python3 tools/gpu_profile.py

Each case runs once on device-resident random float32 data through the
algorithm ``auto`` picks (or the one named), so the profile shows where that
kernel's time goes: FMA pipe, shared memory, DRAM, occupancy.
"""

import cupy as cp

import convsuite as cs

CASES = [
    ("3x3 C64 B64 forward", (64, 64, 56, 56), (64, 64, 3, 3), dict(padding=1), "forward", "igemm_big"),
    ("fa19 conv2 forward", (10000, 12, 22, 22), (24, 12, 5, 5), {}, "forward", "register_tiled"),
    ("fa19 conv2 forward", (10000, 12, 22, 22), (24, 12, 5, 5), {}, "forward", "igemm_big"),
    ("1-D K=31", (1, 1, 10**8), (1, 1, 31), dict(padding="same"), "forward", "blocked"),
    ("3x3 C64 B64 backward", (64, 64, 56, 56), (64, 64, 3, 3), dict(padding=1), "backward", "igemm_big"),
    ("fa21 conv2 backward", (1000, 4, 40, 40), (16, 4, 7, 7), {}, "backward", "igemm_big"),
]
rng = cp.random.RandomState(0)
for label, xs, ws, kw, direction, algorithm in CASES:
    x, w = rng.standard_normal(xs, dtype=cp.float32), rng.standard_normal(ws, dtype=cp.float32)
    fwd, bwd = (cs.conv1d, cs.conv1d_backward) if len(xs) == 3 else (cs.conv2d, cs.conv2d_backward)
    if direction == "forward":
        fwd(x, w, backend="cupy", algorithm=algorithm, **kw)
    else:
        gy = rng.standard_normal(
            fwd(x, w, backend="cupy", algorithm="fused_gemm" if len(xs) == 4 else "naive", **kw).shape, dtype=cp.float32
        )
        bwd(gy, x, w, backend="cupy", algorithm=algorithm, **kw)
    cp.cuda.get_current_stream().synchronize()
    print("profiled:", label, algorithm, flush=True)
