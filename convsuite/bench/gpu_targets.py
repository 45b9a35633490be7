"""GPU targets and the ablation: every cupy algorithm on every target layer, both directions.

Run on a CUDA machine: ``python -m convsuite.bench.gpu_targets [--out DIR] [--repeat N] [--quick]``.

Method. float32, device-resident random data. For each case the contenders
-- cuDNN through torch (TF32 off; for depthwise layers torch's own FP32
kernel, since cuDNN is not used there), timed twice: with ``cudnn.benchmark``
(``benchmark_limit=0``: every algorithm tried) and with cuDNN's heuristic
pick, the faster median being the anchor (one benchmark pick is a single
noisy trial: on 3x3 C=64 56x56 B=64 it landed at 0.45-0.52 ms in some runs,
0.61-0.62 ms in others), and for every
cupy algorithm that can run the case both its launch alone (the plan's
kernels, validation excluded: "kernel") and the whole public call
(``cs.conv2d``/``cs.conv2d_backward`` with its validation and allocation:
"API") -- are timed in interleaved rounds, each call between two CUDA events,
after warm-up; the table gives medians and the spread (max/min over rounds
of the median algorithm). Every result is checked against the float64
reference first. Ceilings (device-to-device copy, strict-FP32 cuBLAS SGEMM)
are measured in the same run. Targets are judged on the public-API time;
the kernel ratio is shown beside it. Issue 11 sets 3x3 C=64 two goals, one
for SIMT FP32 and one for tf32x3, so that target is judged twice, each on
its own algorithms; every other target counts every algorithm whose result
meets the float32 tolerance, tf32x3 and tf32x3_image included. Writes ``gpu-targets.md``/``.json`` to
DIR and prints the target table last.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

import convsuite as cs
from convsuite.bench.ceilings import measure_gpu_ceilings
from convsuite.testing import forward_tolerance, reference_forward

__all__ = ["TARGETS", "main"]


@dataclass(frozen=True)
class Target:
    """One case of issue 11 and its goal (ratio to cuDNN, or fraction of copy bandwidth for 1-D)."""

    label: str
    x_shape: tuple
    w_shape: tuple
    kw: dict = field(default_factory=dict)
    direction: str = "forward"
    goal: float | None = None
    bias: bool = True
    #: A second goal for the tensor-core algorithms (TENSOR_CORE); with it the
    #: plain ``goal`` is judged on the SIMT FP32 algorithms alone.
    tensor_core_goal: float | None = None

    @property
    def one_d(self) -> bool:
        return len(self.x_shape) == 1


TARGETS = [
    Target("1-D N=1e8 K=3 (fraction of copy)", (10**8,), (3,), dict(padding="same"), goal=0.85, bias=False),
    Target("1-D N=1e8 K=31 (fraction of copy)", (10**8,), (31,), dict(padding="same"), goal=0.70, bias=False),
    Target(
        "3x3 C=M=64 56x56 pad1 B=64", (64, 64, 56, 56), (64, 64, 3, 3), dict(padding=1), goal=1.0, tensor_core_goal=1.5
    ),
    Target("ECE408 fa19 conv2 B=10000", (10000, 12, 22, 22), (24, 12, 5, 5), goal=1.2),
    Target("ECE408 fa21 conv2 B=10000", (10000, 4, 40, 40), (16, 4, 7, 7), goal=1.2),
    Target("ECE408 fa19 conv1 B=10000", (10000, 1, 48, 48), (12, 1, 5, 5)),
    Target("1x1 C=96->24 56x56 B=64", (64, 96, 56, 56), (24, 96, 1, 1), goal=1.0),
    Target("1x1 C=24->144 56x56 B=64", (64, 24, 56, 56), (144, 24, 1, 1)),
    Target(
        "depthwise 3x3 s2 C=144 56x56 B=64",
        (64, 144, 56, 56),
        (144, 1, 3, 3),
        dict(stride=2, padding=1, groups=144),
        goal=1.5,
    ),
    Target("depthwise 3x3 s1 C=384 14x14 B=64", (64, 384, 14, 14), (384, 1, 3, 3), dict(padding=1, groups=384)),
    Target("backward 3x3 C=M=64 56x56 B=64", (64, 64, 56, 56), (64, 64, 3, 3), dict(padding=1), "backward", 0.8),
    Target("backward ECE408 fa21 conv2 B=1000", (1000, 4, 40, 40), (16, 4, 7, 7), {}, "backward", 1.0),
    Target(
        "backward depthwise 3x3 s2 C=144 B=64",
        (64, 144, 56, 56),
        (144, 1, 3, 3),
        dict(stride=2, padding=1, groups=144),
        "backward",
        1.0,
    ),
    Target("backward 1x1 C=128->256 28x28 B=64", (64, 128, 28, 28), (256, 128, 1, 1), {}, "backward"),
]

#: The error-compensated TF32 tensor-core algorithms (issue 11 sets them their own goal on 3x3 C=64).
TENSOR_CORE = ("tf32x3", "tf32x3_image")

SLOW = ("naive", "const_mask", "tiled_halo", "tiled_cached_halo", "direct", "const_weights", "tiled_shared")


def _interleaved(contenders: dict, repeat: int, warmup: int = 2) -> dict:
    """{name: list of seconds}: every contender once per round, CUDA events around each call."""
    import cupy as cp

    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, fn in contenders.items():
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples[name].append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return samples


def _torch_call(t: Target, x, w, b, gy):
    """CuDNN (or torch's depthwise kernel) on the same device buffers."""
    import torch

    spec = cs.explain(x[:1] if not t.one_d else x[:8], w, **t.kw).spec
    tx = torch.from_dlpack(x.reshape(1, 1, -1) if t.one_d else x)
    tw = torch.from_dlpack(w.reshape(spec.w_shape))
    tb = None if b is None else torch.from_dlpack(b)
    pads = spec.padding
    symmetric = all(lo == hi for lo, hi in pads)
    padding = tuple(lo for lo, _ in pads)
    conv = torch.nn.functional.conv1d if spec.ndim == 1 else torch.nn.functional.conv2d
    if t.direction == "forward":
        if symmetric:
            return lambda: conv(
                tx, tw, tb, stride=spec.stride, padding=padding, dilation=spec.dilation, groups=spec.groups
            )
        flat = [p for pair in reversed(pads) for p in pair]
        return lambda: conv(
            torch.nn.functional.pad(tx, flat), tw, tb, stride=spec.stride, dilation=spec.dilation, groups=spec.groups
        )
    assert symmetric, "the backward targets use symmetric padding"
    tgy = torch.from_dlpack(gy)
    M = spec.out_channels
    return lambda: torch.ops.aten.convolution_backward(
        tgy,
        tx,
        tw,
        [M],
        list(spec.stride),
        list(padding),
        list(spec.dilation),
        False,
        [0] * spec.ndim,
        spec.groups,
        [True, True, True],
    )


#: The two ways cuDNN is timed; the anchor is the faster median of the two.
CUDNN_MODES = ("cudnn benchmark", "cudnn heuristic")


def _cudnn_contenders(t: Target, x, w, b, gy) -> dict:
    """CuDNN with ``cudnn.benchmark`` (its pick measured once, at the first call) and with its heuristic pick."""
    import torch

    call = _torch_call(t, x, w, b, gy)

    def heuristic():
        torch.backends.cudnn.benchmark = False
        try:
            return call()
        finally:
            torch.backends.cudnn.benchmark = True

    return dict(zip(CUDNN_MODES, (call, heuristic)))


_BACKWARD_REFERENCES: dict = {}


def _torch_float64_backward(spec, gy, x, w):
    """Reference gradients and their tolerances for a large case, from torch in float64 on the GPU.

    The bounds follow ``convsuite.testing.backward_tolerances`` (reduction
    length times eps times the gradients of the absolute values); torch's
    float64 convolution is an implementation independent of convsuite's, and
    the CPU reference would take minutes at these sizes.
    """
    import torch

    def grads(a, b, c):
        t = [torch.from_dlpack(v).double() for v in (a, b, c)]
        return [
            r.cpu().numpy()
            for r in torch.ops.aten.convolution_backward(
                t[0],
                t[1],
                t[2].reshape(spec.w_shape),
                [spec.out_channels],
                list(spec.stride),
                [lo for lo, _ in spec.padding],
                list(spec.dilation),
                False,
                [0] * spec.ndim,
                spec.groups,
                [True, True, True],
            )
        ]

    refs = grads(gy, x, w)
    mags = grads(abs(gy), abs(x), abs(w))
    eps, tiny = float(np.finfo(np.float32).eps), np.finfo(np.float64).tiny
    n_x = spec.out_channels_per_group * int(np.prod(spec.kernel_size)) + 1
    n_w = spec.batch * int(np.prod(spec.out_size)) + 1
    return refs, (n_x * eps * mags[0] + tiny, n_w * eps * mags[1] + tiny, n_w * eps * mags[2] + tiny)


def _check(t: Target, spec, x, w, b, gy, got) -> tuple[float, bool]:
    """Largest relative error against the float64 reference on the first items (or 10^6 samples)."""
    if t.one_d:
        n = 10**6
        xs, ys = x[:n].get(), got[: n - 2 * w.size].get()
        sub = cs.explain(xs, w.get(), **t.kw).spec
        ref = reference_forward(sub, xs, w.get()).reshape(-1)[: ys.size]
        tol = forward_tolerance(sub, xs, w.get()).reshape(-1)[: ys.size]
        pairs = [(ys, ref, tol)]
    elif t.direction == "forward":
        xs, wh, bh = x[:2].get(), w.get(), None if b is None else b.get()
        sub = cs.explain(xs, wh, bh, **t.kw).spec
        pairs = [(got[:2].get(), reference_forward(sub, xs, wh, bh), forward_tolerance(sub, xs, wh, bh))]
    else:  # the whole batch (the weight gradient sums over all of it), reference computed once per case
        key = (t.label, id(x))
        if key not in _BACKWARD_REFERENCES:
            _BACKWARD_REFERENCES.clear()
            _BACKWARD_REFERENCES[key] = _torch_float64_backward(spec, gy, x, w)
        refs, tols = _BACKWARD_REFERENCES[key]
        pairs = [(g.get(), r, tl) for g, r, tl in zip(got, refs, tols)]
    worst, ok = 0.0, True
    for g, r, tol in pairs:
        r, tol = np.reshape(r, -1), np.reshape(tol, -1)
        err = np.abs(g.astype(np.float64).reshape(-1) - r)
        worst = max(worst, float(err.max() / max(np.abs(r).max(), 1e-30)))
        ok = ok and bool(np.all(err <= tol))
    return worst, ok


def _run_target(t: Target, backend, repeat: int, quick: bool) -> list[dict]:
    import cupy as cp

    rng = cp.random.RandomState(0)
    x = rng.standard_normal(t.x_shape, dtype=cp.float32)
    w = rng.standard_normal(t.w_shape, dtype=cp.float32)
    b = rng.standard_normal(t.w_shape[0], dtype=cp.float32) if t.bias and t.direction == "forward" else None
    spec = cs.explain(x, w, b, **t.kw).spec
    fwd = cs.conv1d if spec.ndim == 1 else cs.conv2d
    bwd = cs.conv1d_backward if spec.ndim == 1 else cs.conv2d_backward
    gy = rng.standard_normal(spec.y_shape, dtype=cp.float32) if t.direction == "backward" else None
    contenders = _cudnn_contenders(t, x, w, b, gy)
    auto = backend.choose_algorithm(spec, t.direction)[0]
    errors = {}
    for name in backend.algorithm_table():
        if backend.can_run(spec, name, t.direction) is not True:
            continue
        if name in SLOW and spec.flops > 4e11:
            continue  # the plain strategies take seconds on the largest layers
        launch = backend.plan(spec, name, t.direction)
        if t.direction == "forward":
            out = cp.empty(spec.y_shape, cp.float32)
            xk, wk = x.reshape(spec.x_shape), w.reshape(spec.w_shape)
            contenders[name] = lambda launch=launch, out=out, xk=xk, wk=wk: launch(xk, wk, b, out)
            contenders[name + " API"] = lambda name=name: fwd(x, w, b, backend="cupy", algorithm=name, **t.kw)
            errors[name] = _check(t, spec, x, w, b, gy, fwd(x, w, b, backend="cupy", algorithm=name, **t.kw))
        else:
            bufs = [cp.empty(s, cp.float32) for s in (spec.x_shape, spec.w_shape, (spec.out_channels,))]
            contenders[name] = lambda launch=launch, bufs=bufs: launch(gy, x, w, *bufs)
            contenders[name + " API"] = lambda name=name: bwd(gy, x, w, backend="cupy", algorithm=name, **t.kw)
            errors[name] = _check(t, spec, x, w, b, gy, bwd(gy, x, w, backend="cupy", algorithm=name, **t.kw))
    samples = _interleaved(contenders, repeat)
    med = {k: statistics.median(v) for k, v in samples.items()}
    anchor = min(med[k] for k in CUDNN_MODES)  # cuDNN's faster mode in this run
    rows = []
    for name, (err, ok) in errors.items():
        kernel_s, api_s = med[name], med[name + " API"]
        rows.append(
            dict(
                target=t.label,
                direction=t.direction,
                algorithm=name,
                auto=name == auto,
                kernel_ms=kernel_s * 1e3,
                api_ms=api_s * 1e3,
                cudnn_ms=anchor * 1e3,
                **{f"{k.replace(' ', '_')}_ms": med[k] * 1e3 for k in CUDNN_MODES},
                spread=max(samples[name]) / min(samples[name]),
                vs_cudnn_kernel=anchor / kernel_s,
                vs_cudnn_api=anchor / api_s,
                tflops=(spec.flops * (2 if t.direction == "backward" else 1)) / kernel_s / 1e12,
                gbs=spec.compulsory_bytes / kernel_s / 1e9,
                gbs_api=spec.compulsory_bytes / api_s / 1e9,
                rel_err=err,
                correct=ok,
            )
        )
        print(
            f"{t.label:40s} {name:18s} kernel {kernel_s * 1e3:8.3f} ms  API {api_s * 1e3:8.3f} ms  "
            f"cuDNN {anchor * 1e3:8.3f} ms  x{anchor / api_s:5.2f}{'' if ok else '  WRONG'}",
            flush=True,
        )
    return rows


def select_targets(only: str) -> list[Target]:
    """The targets whose label holds one of the comma-separated fragments of ``only`` (all when empty).

    Raises ValueError, naming every label, when a fragment matches none: a
    typo must not silently measure less than asked.
    """
    fragments = [f.strip() for f in only.split(",") if f.strip()]
    if not fragments:
        return list(TARGETS)
    unmatched = [f for f in fragments if not any(f in t.label for t in TARGETS)]
    if unmatched:
        labels = "; ".join(t.label for t in TARGETS)
        raise ValueError(f"`--only` fragment(s) {unmatched} match no target; the targets are: {labels}")
    return [t for t in TARGETS if any(f in t.label for f in fragments)]


@dataclass(frozen=True)
class Verdict:
    """One line of the target table: the fastest correct algorithm of a class on a target, against its goal."""

    label: str
    goal: float | None
    best: dict | None
    value: float
    kernel_value: float
    ran: int = 0  # algorithms of the class that ran (correct or not)

    @property
    def met(self) -> bool | None:
        return None if self.goal is None else (self.best is not None and self.value >= self.goal)


def summarise(rows: list[dict], targets: list[Target], copy_gbs: float) -> list[Verdict]:
    """The target table: per target the fastest correct algorithm (by public-API time) and its ratio.

    A target with a ``tensor_core_goal`` gives two lines: its ``goal`` judged on the
    SIMT FP32 algorithms alone and the tensor-core goal on TENSOR_CORE's.
    """
    verdicts = []
    for t in targets:
        ran = [r for r in rows if r["target"] == t.label]
        if t.tensor_core_goal is None:
            classes = [(t.label, t.goal, ran)]
        else:
            classes = [
                (f"{t.label} (SIMT FP32)", t.goal, [r for r in ran if r["algorithm"] not in TENSOR_CORE]),
                (f"{t.label} (tf32x3)", t.tensor_core_goal, [r for r in ran if r["algorithm"] in TENSOR_CORE]),
            ]
        for label, goal, in_class in classes:
            cands = [r for r in in_class if r["correct"]]
            if not cands:
                verdicts.append(Verdict(label, goal, None, float("nan"), float("nan"), len(in_class)))
                continue
            best = min(cands, key=lambda r: r["api_ms"])
            if t.one_d:
                value, kernel_value = best["gbs_api"] / copy_gbs, best["gbs"] / copy_gbs
            else:
                value, kernel_value = best["vs_cudnn_api"], best["vs_cudnn_kernel"]
            verdicts.append(Verdict(label, goal, best, value, kernel_value, len(in_class)))
    return verdicts


def format_markdown(meta: dict, rows: list[dict], targets: list[Target]) -> tuple[list[str], int]:
    """The report's lines (target table, then the ablation) and how many lines the target table takes."""
    ceilings = meta["ceilings"]
    mode_keys = [k.replace(" ", "_") + "_ms" for k in CUDNN_MODES]
    both_modes = bool(rows) and all(k in r for r in rows for k in mode_keys)
    anchor = (
        "the faster of its cudnn.benchmark pick (every algorithm tried) and its heuristic pick (both shown)"
        if both_modes
        else "as that run timed it (before both modes were timed: the cudnn.benchmark pick)"
    )
    lines = [
        f"# GPU targets (issue 11) and ablation, {meta['date']}",
        "",
        f"Device: {meta['device']}, CUDA driver {meta['driver']}; cupy {meta['cupy']}, torch {meta['torch']}. "
        f"Ceilings measured in this run: copy {ceilings['copy_gbs']:.0f} GB/s (read + write), "
        f"cuBLAS SGEMM {ceilings['sgemm_tflops']:.1f} TFLOP/s (strict FP32). float32, device-resident data; "
        f"medians of {meta['repeat']} interleaved rounds, CUDA events; cuDNN "
        f"through torch with TF32 off, {anchor}. Ratio > 1: convsuite faster. 'API' is the whole public "
        "call (validation, allocation, launch); 'kernel' is the algorithm's launch alone.",
        "",
        "## Targets",
        "",
        f"| target | best algorithm | API ms | kernel ms | cuDNN ms{' (benchmark / heuristic)' if both_modes else ''} "
        "| value (API) "
        "| value (kernel) | goal | met |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for v in summarise(rows, targets, ceilings["copy_gbs"]):
        goal = "-" if v.goal is None else f"{v.goal}"
        met = "-" if v.met is None else ("yes" if v.met else "**no**")
        r = v.best
        if r is None:
            why = "none correct" if v.ran else "none ran"
            lines.append(f"| {v.label} | {why} | | | | | | {goal} | {'**no**' if v.goal is not None else '-'} |")
            continue
        modes = f" ({' / '.join(f'{r[k]:.3f}' for k in mode_keys)})" if both_modes else ""
        lines.append(
            f"| {v.label} | {r['algorithm']} | {r['api_ms']:.3f} | {r['kernel_ms']:.3f} | {r['cudnn_ms']:.3f}"
            f"{modes} | {v.value:.2f} | {v.kernel_value:.2f} | {goal} | {met} |"
        )
    head = len(lines)
    lines += [
        "",
        "## Ablation: every algorithm on every target case",
        "",
        "| case | algorithm | auto | kernel ms | API ms | spread | TFLOP/s | GB/s | x cuDNN (kernel) | x cuDNN (API) "
        "| cuDNN ms | rel. error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['target']} | {r['algorithm']} | {'*' if r['auto'] else ''} | {r['kernel_ms']:.3f} | "
            f"{r['api_ms']:.3f} | {r['spread']:.2f} | {r['tflops']:.2f} | {r['gbs']:.0f} | "
            f"{r['vs_cudnn_kernel']:.2f} | {r['vs_cudnn_api']:.2f} | "
            f"{r['cudnn_ms']:.3f} | {r['rel_err']:.1e}{'' if r['correct'] else ' WRONG'} |"
        )
    return lines, head


def _quick(t: Target) -> Target:
    """The smoke-run version of a target: a batch of at most 64, or N=1e7 for 1-D."""
    x_shape = (10**7,) if t.one_d else (min(t.x_shape[0], 64), *t.x_shape[1:])
    return replace(t, label=t.label + " (quick)", x_shape=x_shape)


def _render(path: Path) -> int:
    """Write the .md of an earlier run's JSON beside it (with today's table rules) and print its targets.

    Raises
    ------
    ValueError
        The file is not a gpu_targets JSON of this layout (``meta`` and ``rows`` with a ``target`` each).
    """
    data = json.loads(path.read_text())
    meta, rows = (data.get("meta"), data.get("rows")) if isinstance(data, dict) else (None, None)
    needed = ("target", "algorithm", "correct", "api_ms", "kernel_ms", "cudnn_ms")
    if not isinstance(meta, dict) or not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(f"{path} is not a gpu_targets JSON (a 'meta' object and a 'rows' list)")
    missing = sorted({k for r in rows for k in needed if k not in r})
    if missing:
        raise ValueError(f"{path}: rows without {', '.join(missing)} (an older gpu_targets layout; re-run it)")
    targets = [_quick(t) if meta.get("quick") else t for t in TARGETS]
    labels = {r["target"] for r in rows}
    lines, head = format_markdown(meta, rows, [t for t in targets if t.label in labels])
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:head]))
    return 0


def main(argv=None) -> int:
    """Measure every target and the ablation; write the tables to ``--out``; print the targets."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--out", default="docs/measurements")
    parser.add_argument("--quick", action="store_true", help="batches of at most 64, N=1e7 (smoke run)")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--only", default="", help="comma-separated label fragments: the targets whose label holds one (default: all)"
    )
    parser.add_argument(
        "--from-json",
        metavar="PATH",
        help="re-render an earlier run's gpu-targets.json (nothing is timed)",
    )
    args = parser.parse_args(argv)
    try:
        selected = select_targets(args.only)
    except ValueError as error:
        parser.error(str(error))
    if args.from_json:
        if args.only.strip(" ,") or args.quick:
            parser.error("--from-json re-renders a whole earlier run: it takes no --only or --quick")
        try:
            return _render(Path(args.from_json))
        except (OSError, ValueError) as error:
            parser.error(str(error))

    import cupy as cp
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    if hasattr(torch.backends.cudnn, "benchmark_limit"):
        torch.backends.cudnn.benchmark_limit = 0  # try every cuDNN algorithm, not the heuristic's first 10
    props = cp.cuda.runtime.getDeviceProperties(0)
    device = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    driver = cp.cuda.runtime.driverGetVersion()
    c = measure_gpu_ceilings(repeat=args.repeat)
    ceilings = dict(copy_gbs=c.copy_gbs, sgemm_tflops=c.gemm_gflops / 1e3)
    print(f"{device}: copy {ceilings['copy_gbs']:.0f} GB/s, SGEMM {ceilings['sgemm_tflops']:.1f} TFLOP/s", flush=True)
    backend = cs._registry.get_backend("cupy")
    backend.warm_up()
    rows, targets = [], selected
    if args.quick:
        targets = [_quick(t) for t in targets]
    for t in targets:
        rows += _run_target(t, backend, args.repeat, args.quick)
        cp.get_default_memory_pool().free_all_blocks()  # this case's buffers, before the next allocates

    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = dict(
        date=date,
        device=device,
        driver=driver,
        ceilings=ceilings,
        cupy=cp.__version__,
        torch=torch.__version__,
        quick=args.quick,
        repeat=args.repeat,
        only=args.only,
    )
    stem = "gpu-targets" + ("-quick" if args.quick else "") + ("-only" if args.only.strip(" ,") else "")
    (out / f"{stem}.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=2))
    lines, head = format_markdown(meta, rows, targets)
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:head]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
