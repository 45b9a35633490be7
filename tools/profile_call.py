"""Where the per-call time of a small convolution goes: cProfile over many warm calls.

``python tools/profile_call.py --device gpu`` profiles ``cs.conv2d`` on the
tiny case of ``convsuite.bench.overhead`` (device-resident data, a warm
plan) and prints the functions with the most time of their own. It shows
which Python steps of the public path (plan lookup, checks, allocation,
launch, epilogue) cost what, the input to issue 10's overhead work.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats

import numpy as np

import convsuite as cs
from convsuite.bench.overhead import TINY_W, TINY_X


def main() -> int:
    """Profile ``--calls`` warm calls and print the top functions."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    parser.add_argument("--backend", default=None)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal(TINY_X).astype(np.float32)
    w = rng.standard_normal(TINY_W).astype(np.float32)
    backend = args.backend or ("cupy" if args.device == "gpu" else "cython")
    if args.device == "gpu":
        import cupy as cp

        x, w = cp.asarray(x), cp.asarray(w)
    for _ in range(100):  # warm: plan built, kernels loaded
        cs.conv2d(x, w, padding=1, backend=backend)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.calls):
        cs.conv2d(x, w, padding=1, backend=backend)
    profile.disable()
    print(f"{args.calls} calls of cs.conv2d(x{TINY_X}, w{TINY_W}, padding=1, backend={backend!r})")
    pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
