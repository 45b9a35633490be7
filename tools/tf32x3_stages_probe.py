"""tf32x3's forward pipeline depth (the ``stages`` tunable) against cuDNN-FP32, in one process.

    python3 tools/tf32x3_stages_probe.py [--repeat 21] [--stages 3,4,5,6]

Per layer (those of ``tools/tf32x3_ab.py``, with its operands and checks): every stage count
(64-row tiles, so the layers of 128 and 256 channels are pinned to ``bm=64``) checked against
the float64 reference on two images (worst error over the float32 tolerance), then timed
through the public plan with cuDNN (TF32 off, ``cudnn.benchmark``) in interleaved rounds, CUDA
events around each call; medians (min-max) and the ratio to cuDNN.
Run on the GPU machine (``bash tools/device_run.sh stages``).
"""

from __future__ import annotations

import argparse

import cupy as cp
import torch
from tf32x3_ab import LAYERS, layer_operands, reference, worst_error  # this folder's A/B script

import convsuite as cs
from convsuite.bench.backward_ladder import _interleaved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--stages", default="3,4,5,6")
    args = parser.parse_args()
    counts = [int(v) for v in args.stages.split(",")]
    rs = cp.random.RandomState(5)
    print(f"device: {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; convsuite from {cs.__file__}")
    print("| layer | stages | ms (min-max) | cudnn / tf32x3 | err/tol |")
    print("|---|---|---|---|---|")
    for layer in LAYERS:
        name, B = layer[:2]
        x, w, b, kw = layer_operands(rs, layer)
        ref, tol = reference(x, w, b, kw)
        calls, errors = {}, {}
        for count in counts:
            params = {"mma": "sync", "stages": count, "bm": 64}
            small = cs.plan(x[:2], w, b, backend="cupy", algorithm="tf32x3", params=params, **kw)
            errors[count] = worst_error(small(x[:2], w, b), ref, tol)
            full = cs.plan(x, w, b, backend="cupy", algorithm="tf32x3", params=params, **kw)
            calls[count] = lambda full=full, x=x, w=w, b=b: full(x, w, b)
        tx, tw, tb = (torch.from_dlpack(a) for a in (x, w, b))
        calls["cudnn"] = lambda tx=tx, tw=tw, tb=tb, kw=kw: torch.nn.functional.conv2d(tx, tw, tb, **kw)
        t = _interleaved(calls, args.repeat)
        for count in counts:
            med, lo, hi = (v * 1e3 for v in t[count])
            print(
                f"| {name} B={B} | {count} | {med:.3f} ({lo:.3f}-{hi:.3f}) | {t['cudnn'][0] * 1e3 / med:.3f} "
                f"| {errors[count]:.3f} |",
                flush=True,
            )
        print(f"| {name} B={B} | cudnn | {t['cudnn'][0] * 1e3:.3f} | 1 | - |", flush=True)
        x = w = b = tx = tw = tb = calls = None
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
