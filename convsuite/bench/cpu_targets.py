"""Measure the CPU speed targets of the Cython and Numba backends, side by side.

Run ``python -m convsuite.bench.cpu_targets [--out DIR] [--quick]``. Every
row is a ratio of two medians measured in this one run on this one machine
(``> 1`` means convsuite is faster); every convsuite result is checked against
the float64 reference before it is timed. Writes ``cpu-targets-<date>.md``
and ``.json`` to DIR (default ``docs/measurements``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
from contextlib import nullcontext
from pathlib import Path

import numpy as np

import convsuite as cs
from convsuite.bench.timing import time_side_by_side
from convsuite.bench.workloads import layer
from convsuite.cli import cpu_description
from convsuite.testing import forward_tolerance, reference_forward

__all__ = ["main"]


def _blas_threads(n: int):
    """Limit BLAS/OpenMP pools (NumPy's matmul) to n threads, if threadpoolctl is there."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return nullcontext()
    return threadpool_limits(n)


def _check(x, w, kwargs, y, batch_slice: int = 4) -> float:
    """Max error of y against the float64 reference on the first items; raises if out of bound."""
    xs = x[:batch_slice] if x.ndim > 1 else x
    explanation = cs.explain(xs, w, **kwargs)
    spec = explanation.spec
    ref = reference_forward(spec, xs, w)
    got = (y[:batch_slice] if x.ndim > 1 else y).reshape(spec.y_shape)
    err = np.abs(got - ref)
    if not np.all(err <= forward_tolerance(spec, xs, w)):
        raise AssertionError("result disagrees with the float64 reference")
    return float(err.max() / max(np.abs(ref).max(), 1e-30))


def _layer_arrays(rng, workload, name, batch):
    entry = layer(workload, name)
    x = rng.standard_normal((batch, entry["C"], entry["H"], entry["W"]), dtype=np.float32)
    w = rng.standard_normal((entry["M"], entry["C"], entry["K"], entry["K"]), dtype=np.float32)
    return x, w, dict(stride=entry["stride"], padding=entry["padding"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/measurements", help="folder for the .md and .json record")
    parser.add_argument("--quick", action="store_true", help="smaller batches and fewer repeats (a smoke run)")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args(argv)
    repeat = 3 if args.quick else args.repeat
    batch = 100 if args.quick else layer("ece408-fa19", "conv1")["cpu_batch"]
    signal_n = 10**6 if args.quick else 10**7
    threads = cs.get_num_threads()
    rng = np.random.default_rng(2026)
    rows = []

    def record(issue, what, case, ours, theirs, timings, goal, err=None, note=""):
        a, b = timings[ours], timings[theirs]
        ratio = b.median / a.median
        rows.append(
            dict(
                issue=issue,
                target=what,
                case=case,
                ours=ours,
                ours_ms=a.median * 1e3,
                ours_first_call_ms=a.first_call * 1e3,
                baseline=theirs,
                baseline_ms=b.median * 1e3,
                ratio=ratio,
                goal=goal,
                met=ratio >= goal,
                rel_err=err,
                note=note,
            )
        )
        print(f"{what:48s} {case:34s} {ratio:7.2f}x (goal {goal}) {'met' if ratio >= goal else 'MISSED'}", flush=True)

    backends = {b.name: b.available for b in cs.list_backends()}

    # ---- issue 3: Cython, one thread, float32 --------------------------------
    if backends.get("cython"):
        with _blas_threads(1):
            x = rng.standard_normal((4, 16, 32, 32), dtype=np.float32)
            w = rng.standard_normal((16, 16, 3, 3), dtype=np.float32)
            kw = dict(padding="same")
            y = cs.conv2d(x, w, backend="cython", **kw)
            err = _check(x, w, kw, y)
            t = time_side_by_side(
                {
                    "cython": lambda: cs.conv2d(x, w, backend="cython", **kw),
                    "python": lambda: cs.conv2d(x, w, backend="python", **kw),
                },
                repeat=1 if args.quick else 3,
            )
            record(3, "cython vs python backend", "B4 C16 M16 32x32 K3 same", "cython", "python", t, 300, err)
            for wl in ("ece408-fa19", "ece408-fa21"):
                x, w, kw = _layer_arrays(rng, wl, "conv1", batch)
                err = _check(x, w, kw, cs.conv2d(x, w, backend="cython", **kw))
                t = time_side_by_side(
                    {
                        "cython": lambda: cs.conv2d(x, w, backend="cython", **kw),
                        "numpy (1 BLAS thread)": lambda: cs.conv2d(x, w, backend="numpy", **kw),
                    },
                    repeat=repeat,
                )
                record(3, "cython vs numpy backend", f"{wl} conv1 B={batch}", "cython", "numpy (1 BLAS thread)", t, 1.0, err)
        s = rng.standard_normal(signal_n).astype(np.float32)
        m = rng.standard_normal(31).astype(np.float32)
        err = _check(s, m, dict(padding="same"), cs.conv1d(s, m, padding="same", backend="cython"))
        t = time_side_by_side(
            {
                "cython": lambda: cs.conv1d(s, m, padding="same", backend="cython"),
                "np.convolve": lambda: np.convolve(s, m[::-1], mode="same"),
            },
            repeat=repeat,
        )
        record(3, "cython vs numpy.convolve", f"1-D N={signal_n:.0e} K=31 same", "cython", "np.convolve", t, 3.0, err)

    # ---- issue 4: Numba, all threads, float32 --------------------------------
    if backends.get("numba"):
        try:
            import torch
        except ImportError:
            torch = None
        compile_s = {d: cs._registry.get_backend("numba").warm_up(d) for d in ("float32", "float64")}
        print(f"numba first call (compile or cache load): {compile_s}", flush=True)

        def torch_conv(x, w, kw):
            tx, tw = torch.from_numpy(x), torch.from_numpy(w)
            pad = kw["padding"]

            def run():
                with torch.no_grad():
                    return torch.nn.functional.conv2d(tx, tw, stride=kw["stride"], padding=pad)

            return run

        cases = [(wl, "conv1") for wl in ("ece408-fa19", "ece408-fa21")]
        for wl, name in cases + [("fat", None)]:
            if wl == "fat":
                x = rng.standard_normal((8, 64, 56, 56), dtype=np.float32)
                w = rng.standard_normal((64, 64, 3, 3), dtype=np.float32)
                kw, case, goal = dict(stride=1, padding=1), "3x3 C=M=64 56x56 pad1 B=8", 0.5
            else:
                x, w, kw = _layer_arrays(rng, wl, name, batch)
                case, goal = f"{wl} {name} B={batch}", 3.0
            err = _check(x, w, kw, cs.conv2d(x, w, backend="numba", **kw))
            contenders = {"numba": lambda: cs.conv2d(x, w, backend="numba", **kw)}
            if torch is not None:
                torch.set_num_threads(threads)
                contenders["torch CPU"] = torch_conv(x, w, kw)
            t = time_side_by_side(contenders, repeat=repeat)
            if torch is not None:
                record(4, f"numba ({threads} thr) vs torch CPU ({threads} thr)", case, "numba", "torch CPU", t, goal, err)
            # 1 -> all threads on the same compute-bound case
            cs.set_num_threads(1)
            t1 = time_side_by_side({"numba 1 thread": lambda: cs.conv2d(x, w, backend="numba", **kw)}, repeat=repeat)
            cs.set_num_threads(None)
            t.update(t1)
            record(4, f"numba {threads} threads vs 1 thread", case, "numba", "numba 1 thread", t, 1.7, err)

        s = rng.standard_normal(signal_n).astype(np.float32)
        m31 = rng.standard_normal(31).astype(np.float32)
        err = _check(s, m31, dict(padding="same"), cs.conv1d(s, m31, padding="same", backend="numba"))
        t = time_side_by_side(
            {
                "numba": lambda: cs.conv1d(s, m31, padding="same", backend="numba"),
                "np.convolve": lambda: np.convolve(s, m31[::-1], mode="same"),
            },
            repeat=repeat,
        )
        record(4, "numba vs numpy.convolve", f"1-D N={signal_n:.0e} K=31 same", "numba", "np.convolve", t, 5.0, err)
        cs.set_num_threads(1)
        t.update(
            time_side_by_side({"numba 1 thread": lambda: cs.conv1d(s, m31, padding="same", backend="numba")}, repeat=repeat)
        )
        cs.set_num_threads(None)
        record(4, f"numba {threads} threads vs 1 thread", f"1-D N={signal_n:.0e} K=31", "numba", "numba 1 thread", t, 1.7, err)

        # K = 3 is memory-bound: compare with copying the same bytes. x.copy()
        # allocates its result as conv1d does (the target); np.copyto into an
        # existing buffer skips the page faults of a fresh allocation (shown too).
        m3 = rng.standard_normal(3).astype(np.float32)
        err = _check(s, m3, dict(padding="same"), cs.conv1d(s, m3, padding="same", backend="numba"))
        dst = np.empty_like(s)
        t = time_side_by_side(
            {
                "numba": lambda: cs.conv1d(s, m3, padding="same", backend="numba"),
                "x.copy()": lambda: s.copy(),
                "np.copyto (no allocation)": lambda: np.copyto(dst, s),
            },
            repeat=repeat,
        )
        case = f"1-D N={signal_n:.0e} K=3 same"
        record(4, "numba vs memory copy (goal: within 1.3x)", case, "numba", "x.copy()", t, round(1 / 1.3, 3), err)
        record(4, "numba vs copy into existing buffer (info)", case, "numba", "np.copyto (no allocation)", t, 0, err)

    meta = dict(
        date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        cpu=cpu_description(),
        python=platform.python_version(),
        numpy=np.__version__,
        numba_threads=threads,
        quick=args.quick,
        argv=sys.argv,
    )
    if backends.get("numba"):
        import numba

        from convsuite.backends import _numba_kernels

        meta["numba"] = numba.__version__
        meta["numba_threading_layer"] = _numba_kernels.threading_layer()
    try:
        import torch

        meta["torch"] = torch.__version__
    except ImportError:
        meta["torch"] = "not installed"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"cpu-targets-{meta['date'][:10]}{'-quick' if args.quick else ''}"
    (out / f"{stem}.json").write_text(json.dumps(dict(meta=meta, rows=rows), indent=2))
    lines = [
        f"# CPU targets, {meta['date']}",
        "",
        f"Machine: {meta['cpu']}; Python {meta['python']}, NumPy {meta['numpy']}, numba {meta.get('numba', '-')} "
        f"({meta.get('numba_threading_layer', '-')}), torch {meta['torch']}. float32. Each time is the median of "
        f"{repeat} calls, timed in back-to-back blocks that alternate between contenders over 3 rounds, each block after a "
        f"pause and a warm-up call; ratio = baseline time / convsuite time (> 1: convsuite faster).",
        "",
        "| issue | target | case | convsuite ms | baseline | baseline ms | ratio | goal | met | rel. error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['issue']} | {r['target']} | {r['case']} | {r['ours_ms']:.2f} | {r['baseline']} | "
            f"{r['baseline_ms']:.2f} | {r['ratio']:.2f} | {r['goal']} | {'yes' if r['met'] else '**no**'} | "
            f"{r['rel_err']:.1e} |"
        )
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
