"""Host time of a public call against its launch alone, on the issue-11 targets' shapes.

    python3 tools/host_time_probe.py [--calls N]

For each case: the host time (perf_counter from the call to its return, the GPU synchronised
before each call, so the device is idle as in gpu_targets' timing) of the public call
(``cs.conv1d``/``cs.conv2d``), a held plan's call, the backend launch alone into a held output, and
``cupy.empty`` of the output; medians and quartiles. Then a cProfile of the public call on the
first case (the functions with most time of their own). gpu_targets' 'API' column minus its
'kernel' column is this host time before the launch (tools/device_run.sh hosttime).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from functools import partial

import cupy as cp

import convsuite as cs

CASES = [  # name, x shape, w shape, keywords
    ("1-D N=1e8 K=31 plain", (10**8,), (31,), dict(padding="same")),
    ("1-D N=1e8 K=31 (1, 1, N)", (1, 1, 10**8), (1, 1, 31), dict(padding="same")),
    ("1-D N=1e6 K=31 plain", (10**6,), (31,), dict(padding="same")),
    ("3x3 C=64 56x56 B=64", (64, 64, 56, 56), (64, 64, 3, 3), dict(padding=1)),
    ("dw 3x3 s2 C=144 56x56 B=64", (64, 144, 56, 56), (144, 1, 3, 3), dict(stride=2, padding=1, groups=144)),
]


def host_us(fn, calls: int) -> list[float]:
    """Microseconds from each call to its return, the device idle before each."""
    out = []
    for _ in range(calls):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e6)
    cp.cuda.Device().synchronize()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    rs = cp.random.RandomState(0)
    first = None
    for name, xs, wsh, kw in CASES:
        x, w = rs.standard_normal(xs, dtype=cp.float32), rs.standard_normal(wsh, dtype=cp.float32)
        conv = cs.conv1d if len(wsh) in (1, 3) else cs.conv2d
        plan = cs.plan(x, w, backend="cupy", **kw)
        spec = plan.spec
        backend = cs.get_backend("cupy")
        launch = backend.plan(spec, plan.algorithm, "forward", dict(plan.params) or None)
        out = cp.empty(spec.y_shape, cp.float32)
        xk, wk = x.reshape(spec.x_shape), w.reshape(spec.w_shape)
        contenders = {
            "public call": partial(conv, x, w, backend="cupy", **kw),
            "held plan": partial(plan, x, w),
            "launch alone": partial(launch, xk, wk, None, out),
            "cupy.empty(y)": partial(cp.empty, spec.y_shape, cp.float32),
        }
        for fn in contenders.values():  # warm
            for _ in range(5):
                fn()
        samples = {k: [] for k in contenders}
        for _ in range(5):  # interleaved blocks
            for k, fn in contenders.items():
                samples[k] += host_us(fn, args.calls // 5)
        print(f"== {name} ({plan.algorithm})")
        for k, s in samples.items():
            q = statistics.quantiles(s, n=4)
            print(f"  {k:16} median {statistics.median(s):7.1f} us  quartiles {q[0]:6.1f}-{q[2]:6.1f}")
        if first is None:
            first = contenders["public call"]
    profile = cProfile.Profile()
    for _ in range(args.calls):
        cp.cuda.Device().synchronize()
        profile.enable()
        first()
        profile.disable()
    cp.cuda.Device().synchronize()
    print(f"== cProfile, {args.calls} public calls of {CASES[0][0]}")
    pstats.Stats(profile).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
