"""Per-call time of convsuite against torch: a tiny conv, and MobileNetV2's 52 convolutions.

``python -m convsuite.bench.overhead`` (CPU) or ``--device gpu`` (on a
machine with CuPy, torch and a GPU) prints, side by side in one run:

- the time of one call of a tiny convolution (x 1x4x8x8, w 4x4x3x3,
  padding 1) through ``cs.conv2d`` with a warm plan, per backend, through a
  held ``cs.plan`` object, and through ``torch.nn.functional.conv2d``;
- with ``--network``, the 52 convolutions of MobileNetV2-1.0 at 224x224,
  batch 1, one after another on resident data, through ``cs.conv2d`` (auto
  and each backend) and through torch.

Each sample is a block of back-to-back calls divided by their number; blocks
of the contenders alternate (the measuring core), and the table shows the
median, the spread and the ratio to torch (> 1: slower than torch), and the
fastest block with its ratio (steadier than the median on a loaded machine). torch
runs float32 with TF32 off on the GPU and ``cudnn.benchmark`` on.
"""

from __future__ import annotations

import argparse
import platform
from typing import Callable, Sequence

import numpy as np

import convsuite as cs

from .._timing import Contender, Timing, measure_side_by_side

__all__ = ["main", "mobilenet_v2_convs", "tiny_contenders"]

TINY_X = (1, 4, 8, 8)
TINY_W = (4, 4, 3, 3)


def mobilenet_v2_convs(size: int = 224) -> list[tuple[int, int, int, int, int, int]]:
    """MobileNetV2-1.0's convolutions in order: ``(C, M, H_in, kernel, stride, groups)``."""
    layers = [(3, 32, size, 3, 2, 1)]
    h, c = size // 2, 32
    # (expansion t, output channels, repeats n, first stride s), from the paper's Table 2.
    for t, out, n, s in (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c * t
            if t != 1:
                layers.append((c, hidden, h, 1, 1, 1))
            layers.append((hidden, hidden, h, 3, stride, hidden))
            h = -(-h // stride)
            layers.append((hidden, out, h, 1, 1, 1))
            c = out
    layers.append((c, 1280, h, 1, 1, 1))
    return layers


class _Block:
    """Calls ``fn`` ``n`` times per run; the timing is divided by ``n`` afterwards."""

    def __init__(self, fn: Callable[[], object], n: int, sync: Callable[[], None]) -> None:
        self.fn, self.n, self.sync = fn, n, sync

    def __call__(self) -> None:
        fn = self.fn
        for _ in range(self.n):
            fn()
        self.sync()


def _torch(device: str):
    """The torch module and its functional module, set up for a fair comparison, or None."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    if device == "gpu":
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    return torch, F


def tiny_contenders(device: str, calls: int) -> dict[str, Contender]:
    """The tiny conv through every available backend of ``device``, a held plan, and torch."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(TINY_X).astype(np.float32)
    w = rng.standard_normal(TINY_W).astype(np.float32)
    contenders: dict[str, Contender] = {}
    names = [i.name for i in cs.list_backends() if i.available and i.device == device and i.name != "python"]
    for name in names:
        backend = cs.get_backend(name)
        xd, wd = backend.to_device(x), backend.to_device(w)
        sync = backend.synchronize

        def call(xd=xd, wd=wd, name=name):
            return cs.conv2d(xd, wd, padding=1, backend=name)

        contenders[f"cs.conv2d backend={name}"] = Contender(_Block(call, calls, sync), backend.timer)
        held = cs.plan(xd, wd, padding=1, backend=name)
        contenders[f"cs.plan held ({name})"] = Contender(
            _Block(lambda p=held, a=xd, b=wd: p(a, b), calls, sync), backend.timer
        )
    home = cs.get_backend(names[0]) if names else None
    if home is not None:
        xa, wa = home.to_device(x), home.to_device(w)
        contenders["cs.conv2d auto"] = Contender(
            _Block(lambda: cs.conv2d(xa, wa, padding=1), calls, home.synchronize), home.timer
        )
    found = _torch(device)
    if found is not None:
        torch, F = found
        dev = "cuda" if device == "gpu" else "cpu"
        tx, tw = torch.from_numpy(x).to(dev), torch.from_numpy(w).to(dev)
        sync = torch.cuda.synchronize if device == "gpu" else (lambda: None)
        contenders["torch F.conv2d"] = Contender(
            _Block(lambda: F.conv2d(tx, tw, padding=1), calls, sync),
            home.timer if home else cs.get_backend("numpy").timer,
        )
    return contenders


def network_contenders(device: str) -> dict[str, Contender]:
    """MobileNetV2's 52 convolutions in sequence, per backend (and auto) and through torch."""
    rng = np.random.default_rng(0)
    layers = mobilenet_v2_convs()
    arrays = []
    for c, m, h, k, s, g in layers:
        x = rng.standard_normal((1, c, h, h)).astype(np.float32)
        w = (rng.standard_normal((m, c // g, k, k)) * 0.1).astype(np.float32)
        arrays.append((x, w, k // 2, s, g))
    contenders: dict[str, Contender] = {}
    names = [i.name for i in cs.list_backends() if i.available and i.device == device and i.name != "python"]
    for name in [*names, "auto"]:
        backend = cs.get_backend(names[0] if name == "auto" else name)
        resident = [(backend.to_device(x), backend.to_device(w), p, s, g) for x, w, p, s, g in arrays]

        def run(resident=resident, name=name):
            for x, w, p, s, g in resident:
                cs.conv2d(x, w, padding=p, stride=s, groups=g, backend=name)

        contenders[f"52 convs, cs.conv2d backend={name}"] = Contender(
            _Block(run, 1, backend.synchronize), backend.timer
        )
    found = _torch(device)
    if found is not None:
        torch, F = found
        dev = "cuda" if device == "gpu" else "cpu"
        resident_t = [(torch.from_numpy(x).to(dev), torch.from_numpy(w).to(dev), p, s, g) for x, w, p, s, g in arrays]
        sync = torch.cuda.synchronize if device == "gpu" else (lambda: None)

        def run_torch():
            for x, w, p, s, g in resident_t:
                F.conv2d(x, w, padding=p, stride=s, groups=g)

        contenders["52 convs, torch"] = Contender(_Block(run_torch, 1, sync), cs.get_backend(names[0]).timer)
    return contenders


def _table(timings: dict[str, Timing], per: int, reference: str | None) -> str:
    """Median and fastest block per contender, each also as a ratio to the reference."""
    ref = timings.get(reference)
    lines = [f"{'contender':44s} {'median us':>10s} {'spread':>7s} {'x torch':>8s} {'best us':>9s} {'x torch':>8s}"]
    for name, t in sorted(timings.items(), key=lambda kv: kv[1].median):
        median, low = t.median / per, t.low / per
        ratios = (f"{t.median / ref.median:8.2f}", f"{t.low / ref.low:8.2f}") if ref else ("       -",) * 2
        lines.append(f"{name:44s} {median * 1e6:10.1f} {t.iqr_rel:7.0%} {ratios[0]} {low * 1e6:9.1f} {ratios[1]}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the per-call table (and, with --network, the MobileNetV2 table)."""
    from ._arguments import positive

    parser = argparse.ArgumentParser(
        prog="python -m convsuite.bench.overhead", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--calls", type=positive, default=200, help="calls per timed block of the tiny conv")
    parser.add_argument("--repeat", type=positive, default=15, help="timed blocks per contender")
    parser.add_argument("--network", action="store_true", help="also time MobileNetV2's 52 convolutions")
    parser.add_argument("--threads", type=positive, default=None, help="torch and numba threads (default: all)")
    args = parser.parse_args(argv)
    found = _torch(args.device)
    if found is not None and args.threads:
        found[0].set_num_threads(args.threads)
    if args.threads:
        cs.set_num_threads(args.threads)
    print(
        f"device: {args.device}; {platform.processor() or platform.machine()}; torch "
        f"{found[0].__version__ if found else 'not installed'}; float32"
    )
    tiny = measure_side_by_side(
        tiny_contenders(args.device, args.calls), repeat=args.repeat, rounds=5, warmup=1, settle_s=0.05
    )
    print(f"\nper call, tiny conv x{TINY_X} w{TINY_W} padding 1 ({args.calls} calls per sample):")
    print(_table(tiny, args.calls, "torch F.conv2d"))
    if args.network:
        net = measure_side_by_side(
            network_contenders(args.device), repeat=max(args.repeat // 3, 3), rounds=3, warmup=1, settle_s=0.05
        )
        print("\nMobileNetV2-1.0 224x224 batch 1, the 52 convolutions in sequence (per network pass):")
        print(_table(net, 1, "52 convs, torch"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
