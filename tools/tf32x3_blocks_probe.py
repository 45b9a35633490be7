"""tf32x3's forward at register budgets 3 and 4 (``blocks``), on layers of growing reduction length.

    python3 tools/tf32x3_blocks_probe.py      (or: bash tools/device_run.sh blocks)

Both budgets planned once per layer and timed in one process, interleaved round by round
(7 rounds, each the median of 15 CUDA-event calls after a warm-up); prints each budget's
median and spread and the time of 4 over 3. The rule of ``_default_blocks_tf32x3`` comes
from this table (docs/measurements/device-2026-11-26i/blocks.log).
"""

import statistics

import cupy as cp

import convsuite as cs
from convsuite.bench.gpu_targets import _interleaved

LAYERS = [  # name, B, C, M, H, K, pad
    ("c1 3x3 C32->64 64", 64, 32, 64, 64, 3, 1),
    ("c2 3x3 C64 56", 64, 64, 64, 56, 3, 1),
    ("3x3 C96 56", 32, 96, 96, 56, 3, 1),
    ("1x1 C1024->256 14", 64, 1024, 256, 14, 1, 0),
    ("3x3 C128 28", 64, 128, 128, 28, 3, 1),
    ("3x3 C192 28", 64, 192, 192, 28, 3, 1),
    ("3x3 C256 14", 64, 256, 256, 14, 3, 1),
    ("3x3 C512 7", 64, 512, 512, 7, 3, 1),
]


def median_ms(f, n=15):
    """Median CUDA-event milliseconds of ``n`` consecutive calls of ``f`` after three warm-up calls
    (gpu_targets' timing loop with one contender)."""
    return statistics.median(_interleaved({"f": f}, n, warmup=3)["f"]) * 1e3


def main() -> None:
    rs = cp.random.RandomState(3)
    for name, B, C, M, H, K, pad in LAYERS:
        x = rs.standard_normal((B, C, H, H), dtype=cp.float32)
        w = rs.standard_normal((M, C, K, K), dtype=cp.float32)
        plans = {
            b: cs.plan(x, w, None, padding=pad, backend="cupy", algorithm="tf32x3", params={"mma": "sync", "blocks": b})
            for b in (3, 4)
        }
        res = {3: [], 4: []}
        for _ in range(7):
            for b, p in plans.items():
                res[b].append(median_ms(lambda p=p, x=x, w=w: p(x, w, None)))
        m3, m4 = statistics.median(res[3]), statistics.median(res[4])
        spread = {b: f"({min(v):.4f}-{max(v):.4f})" for b, v in res.items()}
        print(
            f"{name:22s} Kd={C * K * K:5d} b3 {m3:.4f} {spread[3]} b4 {m4:.4f} {spread[4]} b4/b3 time {m4 / m3:.3f}",
            flush=True,
        )
        del x, w, plans
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
