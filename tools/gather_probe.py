"""The big implicit GEMMs' two im2col gathers ('table', 'chunked') against each other and cuDNN-FP32.

For each layer and each of tf32x3 and igemm_big: both gathers checked against the
float64 reference on two images, then timed forward and backward through
``cs.plan`` (CUDA events, warm-up, medians of interleaved rounds, the spread
shown), with cuDNN through torch (TF32 off, ``cudnn.benchmark``) in the same
rounds. Backward, the gather is that of the stride-1 input gradient (a forward
convolution of grad_y), so strided layers time the forward only. Run on the GPU
machine: ``bash tools/device_run.sh gather``.
"""

from __future__ import annotations

import argparse

import cupy as cp
import numpy as np
import torch

import convsuite as cs
from convsuite.bench.gpu_targets import Target, _interleaved, _torch_call
from convsuite.testing import forward_tolerance, reference_forward

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.benchmark_limit = 0  # every cuDNN algorithm tried, as gpu_targets does

LAYERS = [  # name, B, C, M, H, K, stride, pad
    ("3x3 C64 56", 64, 64, 64, 56, 3, 1, 1),
    ("3x3 C32->64 64", 64, 32, 64, 64, 3, 1, 1),
    ("3x3 C128 28", 64, 128, 128, 28, 3, 1, 1),
    ("3x3 C256 14", 64, 256, 256, 14, 3, 1, 1),
    ("3x3 C16->32 32", 64, 16, 32, 32, 3, 1, 1),
    ("5x5 s2 C16->32", 64, 16, 32, 64, 5, 2, 2),
    ("1x1 C96->24", 64, 96, 24, 56, 1, 1, 0),
    ("5x5 C12->24 (fa19 conv2)", 1000, 12, 24, 12, 5, 1, 0),
    ("3x3 C20->36", 64, 20, 36, 32, 3, 1, 1),
]
ALGORITHMS = ("tf32x3", "igemm_big")
GATHERS = ("table", "chunked")


def _params(alg: str, gather: str) -> dict:
    """The gather pinned; tf32x3 on its mma.sync kernel (the wgmma kernel has the chunked gather only)."""
    return {"gather": gather, "mma": "sync"} if alg == "tf32x3" else {"gather": gather}


def check(name, x, w, b, kw):
    """Each algorithm and gather's largest error over the float32 tolerance, on two images."""
    xs, ws, bs = x[:2].get(), w.get(), b.get()
    spec = cs.explain(xs, ws, bs, **kw).spec
    ref, tol = reference_forward(spec, xs, ws, bs), forward_tolerance(spec, xs, ws, bs)
    worst = []
    for alg in ALGORITHMS:
        for gather in GATHERS:
            plan = cs.plan(x[:2], w, b, backend="cupy", algorithm=alg, params=_params(alg, gather), **kw)
            y = plan(x[:2], w, b).get()
            ratio = float(np.max(np.abs(y - ref) / (tol + 1e-30)))
            worst.append(f"{alg}/{gather} {'OK' if ratio <= 1 else 'FAIL'} {ratio:.3f}")
    print(f"  {name}: max err/tol " + ", ".join(worst))


def timed(calls, rounds=11):
    """name -> CUDA-event milliseconds, the contenders interleaved round by round after two warm-up calls
    (gpu_targets' timing loop)."""
    return {k: [t * 1e3 for t in v] for k, v in _interleaved(calls, rounds).items()}


def _cudnn(label, x, w, b, kw, direction, gy=None):
    """cuDNN through torch on the same buffers, as gpu_targets calls it."""
    return _torch_call(Target(label, x.shape, w.shape, kw, direction), x, w, b, gy)


def forward_calls(x, w, b, kw):
    calls = {}
    for alg in ALGORITHMS:
        for gather in GATHERS:
            plan = cs.plan(x, w, b, backend="cupy", algorithm=alg, params=_params(alg, gather), **kw)
            calls[f"{alg}/{gather}"] = lambda plan=plan: plan(x, w, b)
    calls["cudnn"] = _cudnn("forward", x, w, b, kw, "forward")
    return calls


def backward_calls(x, w, kw):
    gy = cp.asarray(np.random.default_rng(1).standard_normal(cs.conv2d(x[:1], w, **kw).shape[1:], dtype=np.float32))
    gy = cp.broadcast_to(gy, (x.shape[0], *gy.shape)).copy()
    calls = {}
    for alg in ALGORITHMS:
        for gather in GATHERS:
            plan = cs.plan(x, w, backend="cupy", algorithm=alg, direction="backward", params={"gather": gather}, **kw)
            calls[f"{alg}/{gather}"] = lambda plan=plan: plan(gy, x, w)
    calls["cudnn"] = _cudnn("backward", x, w, None, kw, "backward", gy)
    return calls


def report(label, times, flops):
    med = {k: float(np.median(v)) for k, v in times.items()}
    cudnn = med["cudnn"]
    for alg in ALGORITHMS:
        parts = []
        for gather in GATHERS:
            t = times[f"{alg}/{gather}"]
            parts.append(
                f"{gather} {med[f'{alg}/{gather}']:.3f} ms [{min(t):.3f}-{max(t):.3f}] "
                f"{flops / med[f'{alg}/{gather}'] / 1e9:.1f} TFLOP/s {cudnn / med[f'{alg}/{gather}']:.2f}x cuDNN"
            )
        gain = med[f"{alg}/table"] / med[f"{alg}/chunked"]
        print(f"    {label} {alg:9s} " + "; ".join(parts) + f"; chunked {gain:.2f}x table")
    c = times["cudnn"]
    print(f"    {label} cuDNN {cudnn:.3f} ms [{min(c):.3f}-{max(c):.3f}]")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="", help="comma-separated name prefixes of the layers to run (default all)")
    prefixes = tuple(p for p in parser.parse_args(argv).layers.split(",") if p)
    rng = np.random.default_rng(0)
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode())
    for name, B, C, M, H, K, s, p in LAYERS:
        if prefixes and not name.startswith(prefixes):
            continue
        x = cp.asarray(rng.standard_normal((B, C, H, H), dtype=np.float32))
        w = cp.asarray(rng.standard_normal((M, C, K, K), dtype=np.float32))
        b = cp.asarray(rng.standard_normal(M, dtype=np.float32))
        kw = dict(stride=s, padding=p)
        flops = 2 * B * M * C * K * K * ((H + 2 * p - K) // s + 1) ** 2
        print(f"== {name}: B={B} C={C} M={M} {H}x{H} K={K} stride {s} pad {p}")
        check(name, x, w, b, kw)
        report("fwd", timed(forward_calls(x, w, b, kw)), flops)
        if s == 1:
            report("bwd", timed(backward_calls(x, w, kw)), 3 * flops)


if __name__ == "__main__":
    main()
