"""Where a 2-GPU call's time goes on the ECE408 layers (issue 14's multi-GPU target).

For each layer at batch B (default 10,000), inputs resident on the GPUs:

- the backend/algorithm the plan picks for B and for B/2 (a different pick
  for the half would change the per-image cost);
- GPU time (CUDA events, median of N) of the whole batch on GPU 0 and of
  each half on its GPU: the best the split can do is whole / max(halves);
- host time of one public call on a half (call to return, no wait);
- a timeline of ``multigpu.conv_shards`` on two GPUs (host stamps: after
  each queue, after each wait), and the wall time of 1 vs 2 GPUs interleaved.

Run on a machine with two GPUs: ``python tools/multigpu_probe.py [--batch B] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import cupy
import numpy as np

import convsuite as cs
from convsuite.bench.scaling import ECE408_LAYERS
from convsuite.bench.timing import cuda_events_median, time_side_by_side
from convsuite.bench.workloads import layer
from convsuite.distributed import multigpu


def gpu_ms(fn, device: int, repeat: int) -> float:
    """Median GPU time of ``fn()`` on ``device`` in ms (the measuring core's CUDA-event timing)."""
    with cupy.cuda.Device(device):
        return cuda_events_median(fn, repeat) * 1e3


def host_us(fn, device: int, repeat: int) -> float:
    """Median host time of ``fn()`` (call to return, the device idle before each call)."""
    with cupy.cuda.Device(device):
        times = []
        for _ in range(repeat):
            cupy.cuda.Device(device).synchronize()
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        cupy.cuda.Device(device).synchronize()
    return statistics.median(times) * 1e6


def timeline(shards, w_on, kw, repeat: int) -> dict[str, float]:
    """Median host stamps (us from the start) of conv_shards' steps, spelled out here."""
    stamps = {k: [] for k in ("queued 0", "queued 1", "waited 0", "waited 1")}
    for _ in range(repeat):
        for s in shards:
            cupy.cuda.Device(s.device).synchronize()
        t0 = time.perf_counter()
        for i, s in enumerate(shards):
            with cupy.cuda.Device(s.device):
                cs.conv2d(s.array, w_on[s.device], **kw)
            stamps[f"queued {i}"].append(time.perf_counter() - t0)
        for i, s in enumerate(shards):
            with cupy.cuda.Device(s.device):
                cupy.cuda.get_current_stream().synchronize()
            stamps[f"waited {i}"].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e6 for k, v in stamps.items()}


def wall_ms(calls: dict, repeat: int) -> dict[str, tuple[float, float, float]]:
    """Interleaved wall times (the measuring core's): median, min, max per contender, in ms."""
    timings = time_side_by_side(calls, repeat=repeat)
    return {k: (t.median * 1e3, t.low * 1e3, t.high * 1e3) for k, t in timings.items()}


def probe_layer(label: str, x, w, kw: dict, gpus: list[int], repeat: int) -> str:
    """Every figure of the module notes for one layer, as lines of text."""
    one = multigpu.scatter(x, gpus[:1])
    two = multigpu.scatter(x, gpus)
    w_on = multigpu.replicate(w, gpus)
    picks = []
    for s in (one[0], two[0]):
        with cupy.cuda.Device(s.device):
            p = cs.plan(s.array, w_on[s.device], **kw)
            picks.append(f"B={s.array.shape[0]}: {p.backend.name}/{p.algorithm}")
    whole = gpu_ms(lambda: cs.conv2d(one[0].array, w_on[gpus[0]], **kw), gpus[0], repeat)
    halves = [gpu_ms(lambda s=s: cs.conv2d(s.array, w_on[s.device], **kw), s.device, repeat) for s in two]
    host = [host_us(lambda s=s: cs.conv2d(s.array, w_on[s.device], **kw), s.device, repeat) for s in two]
    line = timeline(two, w_on, kw, repeat)
    wall = wall_ms(
        {
            "1 GPU": lambda: multigpu.conv_shards(one, w_on, **kw),
            "2 GPUs": lambda: multigpu.conv_shards(two, w_on, **kw),
        },
        repeat,
    )
    walls = ", ".join(f"{k} {m:.3f} ({lo:.3f}-{hi:.3f})" for k, (m, lo, hi) in wall.items())
    return (
        f"{label}: {'; '.join(picks)}\n"
        f"  GPU ms: whole {whole:.3f}, halves {halves[0]:.3f} / {halves[1]:.3f} -> best split "
        f"{whole / max(halves):.2f}x\n"
        f"  host us per call (half): {host[0]:.1f} / {host[1]:.1f}\n"
        "  timeline us: " + ", ".join(f"{k} {v:.0f}" for k, v in line.items()) + "\n"
        f"  wall ms: {walls} -> {wall['1 GPU'][0] / wall['2 GPUs'][0]:.2f}x"
    )


def host_paths(x, w, kw: dict, gpus: list[int], repeat: int) -> str:
    """Host time of one call on a half, by path, on one device and alternating between two; a profile."""
    import cProfile
    import io
    import pstats

    two = multigpu.scatter(x, gpus)
    w_on = multigpu.replicate(w, gpus)
    plans = {}
    for s in two:
        with cupy.cuda.Device(s.device):
            plans[s.device] = cs.plan(s.array, w_on[s.device], **kw)

    def api(s):
        cs.conv2d(s.array, w_on[s.device], **kw)

    def planned(s):
        plans[s.device](s.array, w_on[s.device])

    def unchecked(s):
        plans[s.device]._run_forward(s.array, w_on[s.device], None)

    def timed(fn, order):
        times = []
        for i in range(repeat * len(order)):
            s = order[i % len(order)]
            for d in gpus:
                cupy.cuda.Device(d).synchronize()
            with cupy.cuda.Device(s.device):
                t = time.perf_counter()
                fn(s)
                times.append(time.perf_counter() - t)
        for d in gpus:
            cupy.cuda.Device(d).synchronize()
        return statistics.median(times) * 1e6

    lines = []
    for label, fn in (("cs.conv2d", api), ("plan(x, w)", planned), ("plan._run_forward", unchecked)):
        same = timed(fn, [two[0]])
        alternating = timed(fn, two)
        lines.append(f"  {label:18s} one device {same:6.1f} us, alternating devices {alternating:6.1f} us")
    profile = cProfile.Profile()
    profile.enable()
    timed(api, two)
    profile.disable()
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(22)
    return "\n".join(lines) + "\n" + text.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=31)
    parser.add_argument("--host", action="store_true", help="host time of a call by path on fa19 conv2 (and a profile)")
    args = parser.parse_args()
    gpus = multigpu.visible_gpus()[:2]
    assert len(gpus) == 2, f"needs two GPUs, sees {gpus}"
    rng = np.random.default_rng(408)
    rows = []
    if args.host:
        e = layer("ece408-fa19", "conv2")
        x = rng.standard_normal((args.batch, e["C"], e["H"], e["W"]), dtype=np.float32)
        w = rng.standard_normal((e["M"], e["C"], e["K"], e["K"]), dtype=np.float32)
        print(host_paths(x, w, dict(stride=e["stride"], padding=e["padding"]), gpus, args.repeat * 3), flush=True)
    for workload, name in ECE408_LAYERS:
        e = layer(workload, name)
        x = rng.standard_normal((args.batch, e["C"], e["H"], e["W"]), dtype=np.float32)
        w = rng.standard_normal((e["M"], e["C"], e["K"], e["K"]), dtype=np.float32)
        kw = dict(stride=e["stride"], padding=e["padding"])
        row = probe_layer(f"{workload} {name}", x, w, kw, gpus, args.repeat)
        print(row, flush=True)
        rows.append(row)
    print("\n=== summary ===")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
