"""Where the per-call time of the cupy backend goes, and what the packed launch saves.

``python tools/launch_probe.py`` (on a machine with a GPU, CuPy and torch)
prints, side by side in one run (blocks of back-to-back calls, interleaved,
medians with the interquartile spread):

- a tiny conv (x 1x4x8x8, w 4x4x3x3, padding 1) through ``cs.conv2d``, a
  held plan, the plan's unchecked ``_run_forward``, a bare ``cupy.empty`` of
  its output, and torch's ``F.conv2d`` (cuDNN, TF32 off);
- MobileNetV2-1.0's 52 convolutions at batch 1 (``convsuite.bench.overhead``)
  through ``cs.conv2d``, and through torch;

each convsuite row twice: with kernels launched by
:class:`convsuite.backends._cupy_runtime.PackedLaunch` (the default) and
through CuPy's ``RawKernel.__call__`` (what every launch did before; the probe
switches the class's call, nothing else changes). It then checks that both
paths give bit-identical outputs on every layer, and profiles the 52
convolutions with cProfile (functions by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

import convsuite as cs
from convsuite.backends import _cupy_runtime as rt
from convsuite.bench.overhead import TINY_W, TINY_X, mobilenet_v2_convs

PACKED_CALL = rt.PackedLaunch.__call__


def legacy_call(self, *arrays, stream=None):
    """The launch through CuPy's RawKernel.__call__ (the path before PackedLaunch; on the current stream)."""
    return self._cupy_call(arrays)


def use_packed(on: bool) -> None:
    """Launch through the packed block (True) or CuPy's RawKernel call (False)."""
    rt.PackedLaunch.__call__ = PACKED_CALL if on else legacy_call


def measure(contenders: dict, per: int, repeat: int, sync) -> dict:
    """Per-call seconds of each contender: ``repeat`` interleaved blocks of ``per`` calls; median, quartiles."""
    samples = {name: [] for name in contenders}
    for setup, fn in contenders.values():  # warm-up
        setup()
        for _ in range(per):
            fn()
        sync()
    for _ in range(repeat):
        for name, (setup, fn) in contenders.items():
            setup()
            sync()
            t0 = time.perf_counter()
            for _ in range(per):
                fn()
            sync()
            samples[name].append((time.perf_counter() - t0) / per)
    out = {}
    for name, values in samples.items():
        q1, med, q3 = np.percentile(values, [25, 50, 75])
        out[name] = (med, (q3 - q1) / med, min(values))
    return out


def table(results: dict, ref: str) -> str:
    lines = [f"{'contender':46s} {'median us':>10s} {'iqr':>6s} {'x ref':>7s} {'best us':>9s}"]
    base = results[ref][0]
    for name, (med, iqr, low) in sorted(results.items(), key=lambda kv: kv[1][0]):
        lines.append(f"{name:46s} {med * 1e6:10.2f} {iqr:6.0%} {med / base:7.2f} {low * 1e6:9.2f}")
    return "\n".join(lines)


def micro(x, held, F, tx, tw, repeat: int) -> None:
    """The steps of one call on their own, each timed over blocks of 20,000 (host time, no sync)."""
    import cupy as cp

    from convsuite import _api, _plans

    launch = held._launch
    out = cp.empty((1, 4, 8, 8), dtype=cp.float32)
    zero = cp.zeros(4, dtype=cp.float32)
    from convsuite.backends import _cupy_runtime as rt_

    per_stream = rt_.PerStream(lambda: None)
    held_pointer = cp.cuda.alloc(1024)
    stream = cp.cuda.get_current_stream()
    key = _api._plan_key(2, "forward", x, x, None, 1, 1, 1, 1, "cupy", "the backend= argument", "auto")
    steps = {
        "x.flags.c_contiguous": lambda: x.flags.c_contiguous,
        "x._c_contiguous": lambda: x._c_contiguous,
        "x.dtype == float32": lambda: x.dtype == np.float32,
        "x.data.ptr": lambda: x.data.ptr,
        "cp.cuda.runtime.getDevice()": cp.cuda.runtime.getDevice,
        "cp.cuda.get_current_stream().ptr": lambda: cp.cuda.get_current_stream().ptr,
        "cp.empty((1, 4, 8, 8))": lambda: cp.empty((1, 4, 8, 8), dtype=cp.float32),
        "cp.ndarray((1, 4, 8, 8), float32)": lambda: cp.ndarray((1, 4, 8, 8), np.float32),
        "cp.cuda.alloc(1024) (the pool alone)": lambda: cp.cuda.alloc(1024),
        "cp.ndarray(..., memptr=held pointer)": lambda: cp.ndarray((1, 4, 8, 8), np.float32, memptr=held_pointer),
        "x.device.id": lambda: x.device.id,
        "x.data.device_id": lambda: x.data.device_id,
        "PerStream.get (same stream)": per_stream.get,
        "stream.is_capturing()": stream.is_capturing,
        "_plan_key": lambda: _api._plan_key(
            2, "forward", x, x, None, 1, 1, 1, 1, "cupy", "the backend= argument", "auto"
        ),
        "plan cache get": lambda: _plans.cache().get(key),
        "the plan's launch (packed, no alloc)": lambda: launch(x, x, zero, out),
        "torch F.conv2d": lambda: F.conv2d(tx, tw, padding=1),
    }
    n = 20000
    print("\nsteps of a call, host time per call (median of blocks of 20,000; no sync inside a block):")
    for name, fn in steps.items():
        times = []
        for _ in range(max(3, repeat // 3)):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            times.append((time.perf_counter() - t0) / n)
            cp.cuda.get_current_stream().synchronize()
        print(f"  {name:40s} {np.median(times) * 1e6:8.3f} us")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--net-only", action="store_true", help="only MobileNetV2's 52 convolutions against torch (for A/B runs)"
    )
    args = parser.parse_args()
    import cupy as cp
    import torch
    import torch.nn.functional as F

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    sync = cp.cuda.get_current_stream().synchronize
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"device: {name}; cupy {cp.__version__}; torch {torch.__version__}; convsuite from {cs.__file__}")

    rng = np.random.default_rng(0)
    x = cp.asarray(rng.standard_normal(TINY_X, dtype=np.float32))
    w = cp.asarray(rng.standard_normal(TINY_W, dtype=np.float32))
    tx, tw = torch.as_tensor(x.get()).cuda(), torch.as_tensor(w.get()).cuda()
    held = cs.plan(x, w, padding=1, backend="cupy")
    print(f"tiny plan: {held}")
    packed, legacy = (lambda: use_packed(True)), (lambda: use_packed(False))
    nothing = lambda: None  # noqa: E731
    tiny = {
        "torch F.conv2d": (nothing, lambda: F.conv2d(tx, tw, padding=1)),
        "cupy.empty of the output": (nothing, lambda: cp.empty((1, 4, 8, 8), dtype=cp.float32)),
        "cs.conv2d cupy, packed": (packed, lambda: cs.conv2d(x, w, padding=1, backend="cupy")),
        "cs.conv2d cupy, RawKernel call": (legacy, lambda: cs.conv2d(x, w, padding=1, backend="cupy")),
        "held plan, packed": (packed, lambda: held(x, w)),
        "held plan, RawKernel call": (legacy, lambda: held(x, w)),
        "plan._run_forward, packed": (packed, lambda: held._run_forward(x, w, None)),
        "plan._run_forward, RawKernel call": (legacy, lambda: held._run_forward(x, w, None)),
        "cs.conv2d auto, packed": (packed, lambda: cs.conv2d(x, w, padding=1)),
    }
    if not args.net_only:
        micro(x, held, F, tx, tw, args.repeat)
        blocks = f"{args.calls} calls per block, {args.repeat} blocks"
        print(f"\nper call, tiny conv x{TINY_X} w{TINY_W} padding 1 ({blocks}):")
        print(table(measure(tiny, args.calls, args.repeat, sync), "torch F.conv2d"))

    layers = []
    for c, m, h, k, s, g in mobilenet_v2_convs():
        xl = cp.asarray(rng.standard_normal((1, c, h, h), dtype=np.float32))
        wl = cp.asarray((rng.standard_normal((m, c // g, k, k)) * 0.1).astype(np.float32))
        layers.append((xl, wl, k // 2, s, g))
    layers_t = [(torch.as_tensor(a.get()).cuda(), torch.as_tensor(b.get()).cuda(), p, s, g) for a, b, p, s, g in layers]

    def run_cs():
        for xl, wl, p, s, g in layers:
            cs.conv2d(xl, wl, padding=p, stride=s, groups=g, backend="cupy")

    def run_cs_auto():
        for xl, wl, p, s, g in layers:
            cs.conv2d(xl, wl, padding=p, stride=s, groups=g)

    def run_torch():
        for xl, wl, p, s, g in layers_t:
            F.conv2d(xl, wl, padding=p, stride=s, groups=g)

    picks: dict = {}
    for xl, wl, p, s, g in layers:
        a = cs.plan(xl, wl, padding=p, stride=s, groups=g, backend="cupy").algorithm
        picks[a] = picks.get(a, 0) + 1
    print(f"\nMobileNetV2 52 convolutions: algorithms {picks}")
    net = {
        "52 convs, torch": (nothing, run_torch),
        "52 convs, cs.conv2d cupy, packed": (packed, run_cs),
        "52 convs, cs.conv2d auto, packed": (packed, run_cs_auto),
    }
    if not args.net_only:
        net["52 convs, cs.conv2d cupy, RawKernel call"] = (legacy, run_cs)
    print(table(measure(net, 20, args.repeat, sync), "52 convs, torch"))

    # Host time alone: the 52 calls without waiting for the GPU at the end (what the GPU can hide behind).
    use_packed(True)
    sync()
    t0 = time.perf_counter()
    for _ in range(20):
        run_cs()
    host = (time.perf_counter() - t0) / 20
    sync()
    print(f"host time of one pass (packed, no sync): {host * 1e6:.1f} us")
    if args.net_only:
        return 0

    wrong = 0
    for xl, wl, p, s, g in layers:
        use_packed(True)
        a = cs.conv2d(xl, wl, padding=p, stride=s, groups=g, backend="cupy")
        use_packed(False)
        b = cs.conv2d(xl, wl, padding=p, stride=s, groups=g, backend="cupy")
        wrong += int(not bool(cp.array_equal(a, b)))
    use_packed(True)
    print(f"packed vs RawKernel call: {len(layers) - wrong} of {len(layers)} layers bit-identical")

    profile = cProfile.Profile()
    profile.enable()
    for _ in range(50):
        run_cs()
    profile.disable()
    sync()
    print("\ncProfile, 50 passes of the 52 convolutions (packed), by own time:")
    pstats.Stats(profile).sort_stats("tottime").print_stats(22)
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
