"""tf32x3 (default register budget) against cuDNN on the 3x3 C=64 targets, cuDNN called three ways.

gpu_targets' own calls (``torch.from_dlpack`` of CuPy RandomState data; its benchmark and
heuristic modes) and tools/tf32x3_probe.py's (``torch.as_tensor``), side by side in one process
in ``_interleaved`` CUDA-event rounds: the two scripts' cuDNN figures for this layer differed
(0.45-0.52 against 0.61-0.62 ms), and this shows whether the call or the algorithm cuDNN's
benchmark picked is the cause. Run on the GPU machine (``tools/device_run.sh harness``).
"""

import statistics

import cupy as cp
import torch

import convsuite as cs
from convsuite.bench.gpu_targets import CUDNN_MODES, _cudnn_contenders, _interleaved, select_targets

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.benchmark_limit = 0


def main():
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode())
    for t in select_targets("3x3 C=M=64"):
        compare(t)


def compare(t):
    """Print tf32x3 and both cuDNN calls on target ``t`` (medians and spreads of interleaved rounds)."""
    rng = cp.random.RandomState(0)
    x = rng.standard_normal(t.x_shape, dtype=cp.float32)
    w = rng.standard_normal(t.w_shape, dtype=cp.float32)
    b = rng.standard_normal(t.w_shape[0], dtype=cp.float32) if t.direction == "forward" else None
    spec = cs.explain(x, w, b, **t.kw).spec
    xt, wt = torch.as_tensor(x, device="cuda"), torch.as_tensor(w, device="cuda")
    pad = t.kw["padding"]  # these targets: stride 1, one symmetric padding
    if t.direction == "forward":
        bt = torch.as_tensor(b, device="cuda")
        calls = {
            "tf32x3 API": lambda: cs.conv2d(x, w, b, backend="cupy", algorithm="tf32x3", **t.kw),
            **_cudnn_contenders(t, x, w, b, None),
            "cudnn (probe)": lambda: torch.nn.functional.conv2d(xt, wt, bt, padding=pad),
        }
    else:
        gy = rng.standard_normal(spec.y_shape, dtype=cp.float32)
        gyt = torch.as_tensor(gy, device="cuda")
        calls = {
            "tf32x3 API": lambda: cs.conv2d_backward(gy, x, w, backend="cupy", algorithm="tf32x3", **t.kw),
            **_cudnn_contenders(t, x, w, None, gy),
            "cudnn (probe)": lambda: torch.ops.aten.convolution_backward(
                gyt, xt, wt, [t.w_shape[0]], [1, 1], [pad, pad], [1, 1], False, [0, 0], 1, [True, True, True]
            ),
        }
    samples = _interleaved(calls, 15)
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    spread = {k: (min(v) * 1e3, max(v) * 1e3) for k, v in samples.items()}
    print(t.label)
    for k in calls:
        print(f"  {k:16s} {med[k]:.3f} ms ({spread[k][0]:.3f}-{spread[k][1]:.3f})")
    for k in (*CUDNN_MODES, "cudnn (probe)"):
        print(f"  tf32x3 API vs {k}: {med[k] / med['tf32x3 API']:.2f}x")


if __name__ == "__main__":
    main()
