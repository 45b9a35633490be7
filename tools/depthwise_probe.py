"""Depthwise forward on MobileNet-class layers: every px x py of the kernel against torch's FP32 depthwise
kernel (torch's default path: cudnn.benchmark off, TF32 off).

Every configuration is checked against the float64 reference on two images first. Times are CUDA-event
medians of interleaved rounds, timed as ``gpu_targets`` times (each call between two events, after
warm-up): the held plan for every configuration, and the public call ``cs.conv2d`` for the
default one ("API default"). Run on the GPU machine:
``bash tools/device_run.sh depthwise``. Prints one table per layer and a summary last.
"""

import argparse
import itertools
import statistics

import cupy as cp
import numpy as np
import torch

import convsuite as cs
from convsuite.bench.gpu_targets import _interleaved
from convsuite.testing import forward_tolerance, reference_forward

torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = False  # torch's default: its own depthwise kernel or cuDNN's heuristic pick

LAYERS = [  # name, B, C, H, K, stride
    ("s2 C144 56 (target)", 64, 144, 56, 3, 2),
    ("s1 C144 56", 64, 144, 56, 3, 1),
    ("s2 C96 112", 64, 96, 112, 3, 2),
    ("s1 C32 112", 64, 32, 112, 3, 1),
    ("s1 C192 28", 64, 192, 28, 3, 1),
    ("s1 C384 14", 64, 384, 14, 3, 1),
    ("s2 C576 14", 64, 576, 14, 3, 2),
    ("s1 C960 7", 64, 960, 7, 3, 1),
    ("5x5 s1 C240 14", 64, 240, 14, 5, 1),
    ("5x5 s2 C144 56", 64, 144, 56, 5, 2),
    ("7x7 s1 C96 56", 64, 96, 56, 7, 1),
]
PX, PY = (2, 4, 8), (1, 2, 4)


def _timed(calls: dict, repeat: int) -> dict:
    """name -> (median, min, max) milliseconds, timed as gpu_targets times (``_interleaved``: after
    warm-up, one call per contender per round, CUDA events around each, on an idle GPU)."""
    samples = _interleaved(calls, repeat)
    return {k: (statistics.median(v) * 1e3, min(v) * 1e3, max(v) * 1e3) for k, v in samples.items()}


def probe(layer, repeat: int) -> list[tuple]:
    name, B, C, H, K, S = layer
    kw = dict(stride=S, padding=(K - 1) // 2, groups=C)
    rng = cp.random.RandomState(0)
    x = rng.standard_normal((B, C, H, H), dtype=cp.float32)
    w = rng.standard_normal((C, 1, K, K), dtype=cp.float32)
    b = rng.standard_normal(C, dtype=cp.float32)
    spec2 = cs.explain(x[:2], w, b, **kw).spec
    x2, w_h, b_h = cp.asnumpy(x[:2]), cp.asnumpy(w), cp.asnumpy(b)
    want, tol = reference_forward(spec2, x2, w_h, b_h), forward_tolerance(spec2, x2, w_h, b_h)
    calls, wrong = {}, []
    for px, py in itertools.product(PX, PY):
        params = dict(px=px, py=py)
        small = cs.plan(x[:2], w, b, backend="cupy", algorithm="depthwise", params=params, **kw)
        got = cp.asnumpy(small(x[:2], w, b))
        if not (np.abs(got - want) <= tol).all():
            wrong.append(params)
            continue
        plan = cs.plan(x, w, b, backend="cupy", algorithm="depthwise", params=params, **kw)
        calls[f"px={px} py={py}"] = lambda plan=plan: plan(x, w, b)
    calls["API default"] = lambda: cs.conv2d(x, w, b, backend="cupy", algorithm="depthwise", **kw)
    tx, tw, tb = (torch.from_dlpack(a) for a in (x, w, b))
    calls["torch"] = lambda: torch.nn.functional.conv2d(tx, tw, tb, stride=S, padding=(K - 1) // 2, groups=C)
    times = _timed(calls, repeat)
    ho = (H + 2 * ((K - 1) // 2) - K) // S + 1
    bytes_moved = 4 * (B * C * H * H + B * C * ho * ho)
    t_torch = times["torch"][0]
    print(f"== {name}: B={B} {H}x{H} K={K} S={S}  ({bytes_moved / 1e6:.1f} MB compulsory)", flush=True)
    for k, (med, lo, hi) in sorted(times.items(), key=lambda kv: kv[1][0]):
        print(f"  {k:22s} {med * 1e3:8.1f} us ({lo * 1e3:.1f}-{hi * 1e3:.1f})  {bytes_moved / med / 1e6:6.0f} GB/s  "
              f"x torch {t_torch / med:5.2f}")  # fmt: skip
    for params in wrong:
        print(f"  WRONG {params}")
    default = cs.explain(x, w, b, backend="cupy", algorithm="depthwise", **kw).params
    key = f"px={default['px']} py={default['py']}"
    nan = float("nan")
    best = min(((v[0], k) for k, v in times.items() if k.startswith("px=")), default=(nan, "none correct"))
    t_default = times[key][0] if key in times else nan  # the default configuration was WRONG
    return [(name, t_torch, times["API default"][0], t_default, key, best, len(wrong))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--layers", default="", help="comma-separated name fragments (default: all)")
    args = parser.parse_args()
    frags = [f.strip() for f in args.layers.split(",") if f.strip()]
    unmatched = [f for f in frags if not any(f in layer[0] for layer in LAYERS)]
    if unmatched:
        parser.error(f"--layers: {unmatched} match no layer; the layers: {'; '.join(n for n, *_ in LAYERS)}")
    layers = [layer for layer in LAYERS if not frags or any(f in layer[0] for f in frags)]
    print(torch.cuda.get_device_name(), torch.__version__, cp.__version__)
    summary = []
    for layer in layers:
        summary += probe(layer, args.repeat)
        cp.get_default_memory_pool().free_all_blocks()
    print("\n== summary (us; x torch > 1: convsuite faster)")
    print(f"{'layer':22s} {'torch':>7s} {'API':>7s} {'x':>5s} | {'default plan':>22s} | {'best plan':>22s} | wrong")
    for name, tt, api, t_default, key, (t_best, k_best), nw in summary:
        print(f"{name:22s} {tt * 1e3:7.1f} {api * 1e3:7.1f} {tt / api:5.2f} | {t_default * 1e3:6.1f} {key:>15s} | "
              f"{t_best * 1e3:6.1f} {k_best:>15s} | {nw}")  # fmt: skip


if __name__ == "__main__":
    main()
