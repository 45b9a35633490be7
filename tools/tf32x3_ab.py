"""tf32x3's (or another cupy algorithm's) forward through the public API against cuDNN-FP32, in one
process: one side of an A/B.

    python3 tools/tf32x3_ab.py [--repeat 21] [--algorithm igemm_big]

Run once per tree in alternating processes (``bash tools/device_run.sh abtx``, the working tree
against ``abtmp/old``): each process prints, per layer, the medians (and min-max) of tf32x3
pinned, of tf32x3 with the fused ReLU and followed by a ReLU pass, and of cuDNN (TF32 off,
``cudnn.benchmark``), CUDA events around each call, interleaved rounds after a warm-up; the
ratio to cuDNN in the same process is the figure to compare between trees (the hosts' speed
moves between processes). The last column checks the result against the float64 reference
(worst error over the tolerance; < 1 passes).
"""

from __future__ import annotations

import argparse

import cupy as cp
import numpy as np
import torch

import convsuite as cs
from convsuite.bench.backward_ladder import _interleaved
from convsuite.testing import forward_tolerance, reference_forward

torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.benchmark = True

LAYERS = [  # name, B, C, M, H, K, stride, pad
    ("cnn c1", 64, 32, 64, 64, 3, 1, 1),
    ("cnn c2", 64, 64, 64, 56, 3, 1, 1),
    ("3x3 C128 28", 64, 128, 128, 28, 3, 1, 1),
    ("3x3 C256 14", 64, 256, 256, 14, 3, 1, 1),
    ("1x1 C96->24 56", 64, 96, 24, 56, 1, 1, 0),
    ("5x5 s2 C20->32 64", 64, 20, 32, 64, 5, 2, 2),  # 20 channels: the table gather
]


def layer_operands(rs, layer) -> tuple:
    """``(x, w, b, kw)`` of one row of :data:`LAYERS`, random normal float32 on the device."""
    _, B, C, M, H, K, stride, pad = layer
    x = rs.standard_normal((B, C, H, H), dtype=cp.float32)
    w = rs.standard_normal((M, C, K, K), dtype=cp.float32)
    b = rs.standard_normal(M, dtype=cp.float32)
    return x, w, b, dict(stride=stride, padding=pad)


def reference(x, w, b, kw) -> tuple:
    """The float64 reference and the float32 tolerance of the first two images (host arrays)."""
    xs, ws, bs = x[:2].get(), w.get(), b.get()
    spec = cs.explain(xs, ws, bs, **kw).spec
    return reference_forward(spec, xs, ws, bs), forward_tolerance(spec, xs, ws, bs)


def worst_error(y, ref, tol) -> float:
    """max |y - ref| / tol: below 1 passes the conformance tests' bound."""
    return float(np.max(np.abs(y.get() - ref) / tol))


def _contenders(x, w, b, kw, algorithm: str = "tf32x3") -> dict:
    """name -> zero-argument call: ``algorithm`` plain, fused with a ReLU and followed by one (under the
    names tf32x3, tf32x3+relu, tf32x3 then relu whatever the algorithm); cuDNN plain and + ReLU."""
    tx, tw, tb = (torch.from_dlpack(a) for a in (x, w, b))

    def conv(**extra):
        return cs.conv2d(x, w, b, backend="cupy", algorithm=algorithm, **kw, **extra)

    def then_relu():
        y = conv()
        return cp.maximum(y, 0, out=y)

    return {
        "tf32x3": conv,
        "tf32x3+relu": lambda: conv(activation="relu"),
        "tf32x3 then relu": then_relu,
        "cudnn": lambda: torch.nn.functional.conv2d(tx, tw, tb, **kw),
        "cudnn+relu": lambda: torch.relu_(torch.nn.functional.conv2d(tx, tw, tb, **kw)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--algorithm", default="tf32x3", help="the cupy algorithm pinned (default tf32x3)")
    args = parser.parse_args()
    rs = cp.random.RandomState(11)
    alg = args.algorithm
    print(f"device: {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; convsuite from {cs.__file__}")
    print(
        f"| layer | {alg} ms | +relu ms | cudnn ms | cudnn / {alg} | cudnn+relu / {alg}+relu "
        "| fused vs unfused | err/tol |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for layer in LAYERS:
        name, B = layer[:2]
        x, w, b, kw = layer_operands(rs, layer)
        calls = _contenders(x, w, b, kw, alg)
        t = _interleaved(calls, args.repeat)
        err = worst_error(cs.conv2d(x[:2], w, b, backend="cupy", algorithm=alg, **kw), *reference(x, w, b, kw))
        med = {k: v[0] * 1e3 for k, v in t.items()}
        spread = {k: f"{v[1] * 1e3:.3f}-{v[2] * 1e3:.3f}" for k, v in t.items()}
        print(
            f"| {name} B={B} | {med['tf32x3']:.3f} ({spread['tf32x3']}) | {med['tf32x3+relu']:.3f} "
            f"({spread['tf32x3+relu']}) | {med['cudnn']:.3f} ({spread['cudnn']}) | "
            f"{med['cudnn'] / med['tf32x3']:.3f} | {med['cudnn+relu'] / med['tf32x3+relu']:.3f} | "
            f"{med['tf32x3 then relu'] / med['tf32x3+relu']:.3f} | {err:.3f} |",
            flush=True,
        )
        x = w = b = calls = None
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
