"""Where a backward pass's time goes: every kernel of ``cs.conv2d_backward`` per algorithm, from CUPTI.

For each layer and algorithm, the backward (dX, dW, db) runs a few times after a
warm-up under ``torch.profiler`` (CUPTI sees CuPy's launches as well as torch's),
and the kernels' device times are summed per launch name and divided by the
number of calls: which of dX, dW, the split-K sum, db and the weight flip
dominates. cuDNN's own backward (through torch, TF32 off) is listed the same way.
Run on the GPU machine: ``python3 tools/backward_phases.py`` (``--once``: one tf32x3 backward
of the first layer, for Nsight Compute).
"""

import sys
from collections import defaultdict

import cupy as cp
import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

import convsuite as cs

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.benchmark = True
LAYERS = [  # name, x shape, w shape, padding
    ("3x3 C64 56 B64", (64, 64, 56, 56), (64, 64, 3, 3), 1),
    ("fa21 conv2 B1000", (1000, 4, 40, 40), (16, 4, 7, 7), 0),
    ("cnn c1 B64", (64, 32, 64, 64), (64, 32, 3, 3), 1),
]
ALGORITHMS = ("tf32x3", "igemm_big", "wgrad_padded")
CALLS = 5


def phases(call) -> dict[str, float]:
    """Mean device ms per call of each kernel name launched by ``call``."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            call()
        torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name[:70]] += event.device_time / 1e3 / CALLS
    return dict(totals)


def contenders(rng, xs, ws, pad) -> dict:
    """algorithm name -> zero-argument backward call on one layer (cuDNN through torch last)."""
    x = cp.asarray(rng.standard_normal(xs, dtype=np.float32))
    w = cp.asarray(rng.standard_normal(ws, dtype=np.float32))
    gy = cp.asarray(rng.standard_normal(cs.conv2d(x[:1], w, padding=pad).shape[1:], dtype=np.float32))
    gy = cp.ascontiguousarray(cp.broadcast_to(gy, (xs[0], *gy.shape)))
    calls = {
        alg: (lambda alg=alg: cs.conv2d_backward(gy, x, w, padding=pad, backend="cupy", algorithm=alg))
        for alg in ALGORITHMS
    }
    xt, wt, gyt = (torch.as_tensor(a, device="cuda") for a in (x, w, gy))
    calls["cudnn"] = lambda: torch.ops.aten.convolution_backward(
        gyt, xt, wt, [ws[0]], [1, 1], [pad, pad], [1, 1], False, [0, 0], 1, [True, True, True]
    )
    return calls


def main() -> int:
    rng = np.random.default_rng(0)
    if "--once" in sys.argv:  # one tf32x3 backward of the first layer, for Nsight Compute
        contenders(rng, *LAYERS[0][1:])["tf32x3"]()
        cp.cuda.Device().synchronize()
        return 0
    for name, xs, ws, pad in LAYERS:
        print(f"== {name}")
        for alg, call in contenders(rng, xs, ws, pad).items():
            try:
                times = phases(call)
            except Exception as exc:  # an algorithm that declines the layer
                print(f"  {alg}: {type(exc).__name__}: {str(exc)[:100]}")
                continue
            print(f"  {alg}: total {sum(times.values()):.3f} ms")
            for kernel, ms in sorted(times.items(), key=lambda kv: -kv[1]):
                print(f"      {ms:8.3f}  {kernel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
