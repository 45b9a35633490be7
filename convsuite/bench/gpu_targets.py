"""GPU targets and the ablation: every cupy algorithm on every seed layer.

Run on a CUDA machine: ``python -m convsuite.bench.gpu_targets [--out DIR] [--quick]``.
Times are medians of CUDA-event timings around the backend's kernel call
(validation excluded) after warm-up, on device-resident inputs; cuDNN runs
through torch with TF32 off (``cudnn.benchmark=True``), cupyx through
``cupyx.scipy.ndimage.correlate1d``. Ceilings are measured on the spot: a
device-to-device copy (bytes read + written) and a strict-FP32 cuBLAS SGEMM.
Every convsuite result is checked against the float64 reference first.
Writes ``gpu-targets.md`` / ``.json`` to DIR and prints the target table last.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from pathlib import Path

import numpy as np

import convsuite as cs
from convsuite._instrument import record_kernel_times
from convsuite.backends.cupy_backend import ALGORITHMS
from convsuite.bench.ceilings import measure_gpu_ceilings
from convsuite.bench.timing import cuda_events_median
from convsuite.bench.workloads import get_workload
from convsuite.testing import forward_tolerance, reference_forward

__all__ = ["main"]


def _kernel_median(fn, repeat: int, warmup: int = 2) -> float:
    """Median seconds of the backend call inside ``fn`` (CUDA events, validation excluded)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        with record_kernel_times() as inner:
            fn()
        times.append(sum(inner))
    return statistics.median(times)


def _ceilings(repeat: int) -> dict:
    c = measure_gpu_ceilings(repeat=repeat)
    return dict(copy_gbs=c.copy_gbs, sgemm_tflops=c.gemm_gflops / 1e3)


def _check(case, x_dev, w_dev, b_dev, y_dev) -> float:
    """Relative max error on the first items (or 10^6 samples) against the float64 reference."""
    plain = len(case.x_shape) == 1
    xs = x_dev[: 10**6].get() if plain else x_dev[:2].get()
    w, b = w_dev.get(), None if b_dev is None else b_dev.get()
    spec = cs.explain(xs, w, b, **case.keywords).spec
    ref = reference_forward(spec, xs, w, b).reshape(-1)
    tol = forward_tolerance(spec, xs, w, b).reshape(-1)
    got = (y_dev[: spec.out_size[0]] if plain else y_dev[:2]).get().astype(np.float64).reshape(-1)
    keep = ref.size - 2 * spec.kernel_size[-1] if plain else ref.size  # a cut signal's right edge differs
    err = np.abs(got[:keep] - ref[:keep])
    return float(err.max() / max(np.abs(ref).max(), 1e-30)), bool(np.all(err <= tol[:keep]))


def _torch_conv(case, x_dev, w_dev, b_dev):
    import torch

    spec = cs.explain(x_dev[:1], w_dev, b_dev, **case.keywords).spec
    tx = torch.from_dlpack(x_dev.reshape((-1, *spec.x_shape[1:])) if len(case.x_shape) > 1 else x_dev.reshape(1, 1, -1))
    tw = torch.from_dlpack(w_dev.reshape(spec.w_shape))
    tb = None if b_dev is None else torch.from_dlpack(b_dev)
    pads = spec.padding
    conv = torch.nn.functional.conv1d if spec.ndim == 1 else torch.nn.functional.conv2d
    if all(lo == hi for lo, hi in pads):
        padding = tuple(lo for lo, _ in pads)
        return lambda: conv(tx, tw, tb, stride=spec.stride, padding=padding, dilation=spec.dilation, groups=spec.groups)
    flat = [p for pair in reversed(pads) for p in pair]
    return lambda: conv(torch.nn.functional.pad(tx, flat), tw, tb, stride=spec.stride, dilation=spec.dilation, groups=spec.groups)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/measurements")
    parser.add_argument("--quick", action="store_true", help="smaller signals and batches (smoke run)")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)

    import cupy as cp
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    props = cp.cuda.runtime.getDeviceProperties(0)
    device = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    ceilings = _ceilings(args.repeat)
    print(f"{device}: copy {ceilings['copy_gbs']:.0f} GB/s, SGEMM {ceilings['sgemm_tflops']:.1f} TFLOP/s", flush=True)
    backend = cs._registry.get_backend("cupy")
    rng = cp.random.RandomState(0)
    rows = []

    signal_lengths = (10**7,) if args.quick else (10**7, 10**9)
    signal_cases = [c for c in get_workload("conv1d-signal", "gpu") if c.x_shape[0] in signal_lengths]
    layer_cases = []
    for name in ("ece408-fa19", "ece408-fa21", "mobilenetv2", "cnn-train-3x3"):
        for case in get_workload(name, "gpu"):
            if case.direction != "forward":
                continue
            if args.quick and case.batch > 64:
                case = case.with_batch(64, "quick")
            layer_cases.append(case)
    extra = [
        ("targets", "depthwise 3x3 s2 C144 56x56 B=64", (64, 144, 56, 56), (144, 1, 3, 3), dict(stride=2, padding=1, groups=144)),
        ("targets", "3x3 C=M=64 56x56 pad1 B=64", (64, 64, 56, 56), (64, 64, 3, 3), dict(padding=1)),
    ]
    from convsuite.bench.workloads import Case

    for workload, name, xs, ws, kw in extra:
        layer_cases.append(Case(workload, name, "conv2d", xs, ws, **kw))

    for case in signal_cases + layer_cases:
        x = rng.standard_normal(case.x_shape, dtype=cp.float32)
        w = rng.standard_normal(case.w_shape, dtype=cp.float32)
        b = rng.standard_normal(case.w_shape[0], dtype=cp.float32) if case.bias and len(case.w_shape) > 2 else None
        spec = cs.explain(x, w, b, **case.keywords).spec
        fn = cs.conv1d if case.op == "conv1d" else cs.conv2d
        flops, traffic = spec.flops, spec.compulsory_bytes
        cudnn_s = cuda_events_median(_torch_conv(case, x, w, b), args.repeat)
        row_base = dict(workload=case.workload, case=case.name, flops=flops, bytes=traffic, cudnn_ms=cudnn_s * 1e3)
        if case.op == "conv1d":
            from cupyx.scipy.ndimage import correlate1d

            row_base["cupyx_ms"] = cuda_events_median(lambda: correlate1d(x, w, mode="constant"), args.repeat) * 1e3
        auto = backend.choose_algorithm(spec, "forward")[0]
        for algorithm in ALGORITHMS:
            if backend.can_run(spec, algorithm, "forward") is not True:
                continue
            if algorithm in ("naive", "const_mask", "tiled_halo", "tiled_cached_halo", "direct", "const_weights", "tiled_shared") and flops > 4e11:
                continue  # the plain strategies take seconds on the largest layers: ablation on the rest
            call = lambda: fn(x, w, b, backend="cupy", algorithm=algorithm, **case.keywords)  # noqa: E731
            err, ok = _check(case, x, w, b, call())
            if not ok:
                print(f"WRONG: {algorithm} on {case.workload} {case.name} (rel. error {err:.1e})", flush=True)
            t = _kernel_median(call, args.repeat)
            rows.append(
                dict(
                    row_base,
                    algorithm=algorithm,
                    auto=algorithm == auto,
                    ms=t * 1e3,
                    tflops=flops / t / 1e12,
                    gbs=traffic / t / 1e9,
                    frac_copy=traffic / t / 1e9 / ceilings["copy_gbs"],
                    vs_cudnn=cudnn_s / t,
                    rel_err=err,
                    correct=ok,
                )
            )
            print(f"{case.workload:14s} {case.name:34s} {algorithm:18s} {t * 1e3:9.3f} ms  x{cudnn_s / t:6.2f} vs cuDNN", flush=True)
        x = w = b = None  # release this case's buffers before the next allocates
        cp.get_default_memory_pool().free_all_blocks()

    # Targets of issue 5: best algorithm per row against cuDNN / copy bandwidth.
    def best(workload, case_name):
        cands = [r for r in rows if r["workload"] == workload and r["case"] == case_name and r["correct"]]
        return min(cands, key=lambda r: r["ms"]) if cands else None

    targets = []
    for c in signal_cases:
        r = best(c.workload, c.name)
        k = c.w_shape[0]
        goal = 0.85 if k <= 7 else 0.70
        targets.append(("1-D " + c.name, r, "fraction of copy bandwidth", r["frac_copy"], goal))
    for wl, nm, goal in [
        ("ece408-fa19", "conv1", 3.0), ("ece408-fa21", "conv1", 3.0),
        ("ece408-fa19", "conv2", 1.0), ("ece408-fa21", "conv2", 1.0),
    ]:
        name = next(c.name for c in layer_cases if c.workload == wl and c.name.startswith(nm))
        r = best(wl, name)
        targets.append((f"{wl} {name}", r, "x cuDNN-FP32", r["vs_cudnn"], goal))
    for wl, nm, goal in [("targets", extra[0][1], 1.5), ("targets", extra[1][1], 0.8)]:
        r = best(wl, nm)
        targets.append((nm, r, "x cuDNN-FP32", r["vs_cudnn"], goal))

    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(date=date, device=device, ceilings=ceilings, cupy=cp.__version__, torch=torch.__version__, quick=args.quick)
    stem = "gpu-targets" + ("-quick" if args.quick else "")
    (out / f"{stem}.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=2))
    lines = [
        f"# GPU targets and ablation, {date}",
        "",
        f"Device: {device}. Ceilings measured in this run: copy {ceilings['copy_gbs']:.0f} GB/s (read + write), "
        f"cuBLAS SGEMM {ceilings['sgemm_tflops']:.1f} TFLOP/s (strict FP32). float32. Times: median of "
        f"{args.repeat} CUDA-event timings of the kernel call after warm-up; cuDNN through torch {torch.__version__} "
        "with TF32 off and cudnn.benchmark; ratio > 1 means convsuite is faster.",
        "",
        "## Targets",
        "",
        "| target | best algorithm | ms | cuDNN ms | measure | value | goal | met |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, r, measure, value, goal in targets:
        lines.append(
            f"| {label} | {r['algorithm']} | {r['ms']:.3f} | {r['cudnn_ms']:.3f} | {measure} | {value:.2f} | {goal} | "
            f"{'yes' if value >= goal else '**no**'} |"
        )
    lines += [
        "",
        "## Ablation: every algorithm on every seed layer",
        "",
        "| workload | layer | algorithm | auto | ms | TFLOP/s | GB/s | x cuDNN | cuDNN ms | cupyx ms | rel. error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['workload']} | {r['case']} | {r['algorithm']} | {'*' if r['auto'] else ''} | {r['ms']:.3f} | "
            f"{r['tflops']:.2f} | {r['gbs']:.0f} | {r['vs_cudnn']:.2f} | {r['cudnn_ms']:.3f} | "
            f"{r.get('cupyx_ms', float('nan')):.3f} | {r['rel_err']:.1e}{'' if r['correct'] else ' WRONG'} |"
        )
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[: 10 + len(targets)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
