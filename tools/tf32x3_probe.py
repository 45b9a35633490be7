"""tf32x3 vs igemm_big vs cuDNN-FP32 (TF32 off) on fat layers, and the fused-ReLU gain.

Correctness on two images against the float64 reference first, then CUDA-event
medians of interleaved rounds through the public API. Run on the GPU machine:
``bash tools/device_run.sh tc``.
"""

import argparse

import cupy as cp
import numpy as np
import torch

import convsuite as cs
from convsuite.backends._cuda_sources import OVERRIDABLE
from convsuite.testing import forward_tolerance, reference_forward

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.benchmark_limit = 0  # every cuDNN algorithm tried, as gpu_targets does
LAYERS = [  # name, B, C, M, H, K, stride, pad
    ("cnn c1", 64, 32, 64, 64, 3, 1, 1),
    ("cnn c2", 64, 64, 64, 56, 3, 1, 1),
    ("3x3 C128 28", 64, 128, 128, 28, 3, 1, 1),
    ("3x3 C256 14", 64, 256, 256, 14, 3, 1, 1),
    ("fa19 conv2", 10000, 12, 24, 36, 5, 1, 0),
    ("fa21 conv2", 10000, 4, 16, 40, 7, 1, 0),
    ("5x5 s2 C16->32", 64, 16, 32, 64, 5, 2, 2),
]
ALGORITHMS = ("tf32x3", "igemm_big")
# tf32x3's "blocks" tunable: every value, each compared with the rule's pick (the plain "tf32x3" call).
BLOCKS = OVERRIDABLE["CS_TX_BLOCKS"][1]


def contenders(x, w, b, kw):
    """name -> zero-argument call, every algorithm plain, fused with ReLU and followed by a ReLU pass."""

    def conv(alg, **extra):
        return lambda: cs.conv2d(x, w, b, backend="cupy", algorithm=alg, **kw, **extra)

    calls = {}
    for alg in ALGORITHMS:
        calls[alg] = conv(alg)
        calls[f"{alg}+relu"] = conv(alg, activation="relu")
        plain = conv(alg)
        calls[f"{alg} then relu"] = lambda plain=plain: cp.maximum(plain(), 0)
    for blocks in BLOCKS:  # the register budget of the forward kernel (-D CS_TX_BLOCKS)
        budget = cs.plan(x, w, b, backend="cupy", algorithm="tf32x3", params={"mma": "sync", "blocks": blocks}, **kw)
        calls[f"tf32x3 blocks={blocks}"] = lambda budget=budget: budget(x, w, b)
    if w.shape[0] > 64:  # the default block tile is 128 rows here: time 64 too
        small = cs.plan(x, w, b, backend="cupy", algorithm="tf32x3", params={"mma": "sync", "bm": 64}, **kw)
        calls["tf32x3 bm=64"] = lambda: small(x, w, b)
    xt, wt, bt = (torch.as_tensor(a, device="cuda") for a in (x, w, b))
    calls["cudnn"] = lambda: torch.nn.functional.conv2d(xt, wt, bt, **kw)
    return calls


def backward_contenders(x, w, kw):
    """Backward (dX, dW, db) of tf32x3 and igemm_big against cuDNN through torch."""
    gy = cp.ones(cs.conv2d(x[:1], w, **kw).shape[1:], dtype=cp.float32)
    gy = cp.broadcast_to(gy, (x.shape[0], *gy.shape)).copy()
    calls = {
        f"bwd {alg}": (lambda alg=alg: cs.conv2d_backward(gy, x, w, backend="cupy", algorithm=alg, **kw))
        for alg in ALGORITHMS
    }
    for blocks in BLOCKS:
        budget = cs.plan(
            x, w, backend="cupy", algorithm="tf32x3", direction="backward", params={"blocks": blocks}, **kw
        )
        calls[f"bwd tf32x3 blocks={blocks}"] = lambda budget=budget: budget(gy, x, w)
    xt, wt, gyt = (torch.as_tensor(a, device="cuda") for a in (x, w, gy))
    stride, padding = [kw["stride"]] * 2, [kw["padding"]] * 2

    def cudnn():
        return torch.ops.aten.convolution_backward(
            gyt, xt, wt, [w.shape[0]], stride, padding, [1, 1], False, [0, 0], 1, [True, True, True]
        )

    calls["bwd cudnn"] = cudnn
    return calls


def check(name, x, w, b, kw):
    """Print each algorithm's largest error as a fraction of the float32 tolerance, on two images."""
    xs, ws, bs = x[:2].get(), w.get(), b.get()
    spec = cs.explain(xs, ws, bs, **kw).spec
    ref, tol = reference_forward(spec, xs, ws, bs), forward_tolerance(spec, xs, ws, bs)
    for alg in ALGORITHMS:
        y = cs.conv2d(x[:2], w, b, backend="cupy", algorithm=alg, **kw).get()
        ratio = float(np.max(np.abs(y - ref) / (tol + 1e-30)))
        print(f"  {name} {alg}: {'OK' if ratio <= 1 else 'FAIL'} max err/tol {ratio:.3f}")


def timed(calls, rounds=9):
    """name -> list of CUDA-event milliseconds, the contenders interleaved round by round."""
    for f in calls.values():
        f()
        f()
    torch.cuda.synchronize()
    times = {k: [] for k in calls}
    for _ in range(rounds):
        for k, f in calls.items():
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            f()
            stop.record()
            stop.synchronize()
            times[k].append(cp.cuda.get_elapsed_time(start, stop))
    return times


def register_budgets(times, default, prefix):
    """One line: the rule's time (``default``), then each register budget's time relative to it."""
    base = float(np.median(times[default]))
    parts = [f"rule {base:.3f} ms ({min(times[default]):.3f}-{max(times[default]):.3f})"]
    for blocks in BLOCKS:
        t = times[f"{prefix}{blocks}"]
        parts.append(f"blocks={blocks} {base / float(np.median(t)):.3f}x of the rule ({min(t):.3f}-{max(t):.3f} ms)")
    return "; ".join(parts)


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
        check(name, x, w, b, kw)
        times = timed(contenders(x, w, b, kw))
        med = {k: float(np.median(v)) for k, v in times.items()}
        flops = 2 * B * M * C * K * K * ((H + 2 * p - K) // s + 1) ** 2
        print(f"{name:16s} " + "  ".join(f"{k} {v:.3f}ms" for k, v in med.items()))
        rates = "; ".join(f"{k} {flops / med[k] / 1e9:.1f} TFLOP/s" for k in (*ALGORITHMS, "cudnn"))
        versus = ", ".join(f"{a} vs cudnn {med['cudnn'] / med[a]:.2f}x" for a in ALGORITHMS)
        relu = " ".join(f"{a} {med[f'{a} then relu'] / med[f'{a}+relu']:.2f}x" for a in ALGORITHMS)
        spread = f"{min(times['tf32x3']):.3f}-{max(times['tf32x3']):.3f}"
        print(f"    {rates}; {versus}; fused relu gain {relu}; tf32x3 spread {spread} ms")
        print("    " + register_budgets(times, "tf32x3", "tf32x3 blocks="))
        if name.startswith(("cnn", "3x3")):
            times = timed(backward_contenders(x, w, kw))
            med = {k: float(np.median(v)) for k, v in times.items()}
            ratios = ", ".join(f"{a} vs cudnn {med['bwd cudnn'] / med[f'bwd {a}']:.2f}x" for a in ALGORITHMS)
            print("    backward " + "  ".join(f"{k} {v:.3f}ms" for k, v in med.items()) + f"; {ratios}")
            print("    backward " + register_budgets(times, "bwd tf32x3", "bwd tf32x3 blocks="))


if __name__ == "__main__":
    main()
