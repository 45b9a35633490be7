"""What the reliability guards cost per call: ``python -m convsuite.bench.guards``.

Issue 9 added front-end work to every call: the index bound in validation,
the memory reservation (every copy, output and workspace against available
memory), the array-kind checks and the non-finite gate (one ``sum`` over the
weights, or over ``grad_b`` in backward). This prints, side by side in one run
on this machine, the median time of each guard and of the whole call it
guards, with the spread (interquartile range) over interleaved repeats, so a
reader sees the guards' share of a call. The fix-up that runs only when a
weight is NaN or infinite is timed too.

Usage: ``python -m convsuite.bench.guards [--backends numba numpy] [--repeats 15]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

import convsuite as cs

from .. import _nonfinite
from .._registry import get_backend
from .._validation import as_real_array, prepare_forward, reserve_memory

#: (name, x shape, w shape, keywords): a small layer where per-call overhead
#: matters most, and a MobileNetV2-sized one.
CASES = [
    ("lenet-c1 1x1x32x32 * 6x1x5x5", (1, 1, 32, 32), (6, 1, 5, 5), dict(padding=2)),
    ("mbv2 8x32x56x56 * 32x32x3x3", (8, 32, 56, 56), (32, 32, 3, 3), dict(padding=1)),
]


def _per_call(function, inner: int) -> float:
    """Seconds per call of ``function`` over ``inner`` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(inner):
        function()
    return (time.perf_counter() - start) / inner


def _variants(backend: str, x, w, keywords):
    """The guards and the call they guard, as zero-argument callables."""

    def validate():
        return prepare_forward("conv2d", 2, x, w, None, 1, keywords["padding"], 1, 1, convert=False)

    call = validate()
    spec = call.spec
    chosen = get_backend(backend)
    out = np.empty(spec.y_shape, dtype=spec.dtype)
    w_bad = w.copy()
    w_bad[0, 0, 0, 0] = np.nan
    return {
        "whole call (conv2d)": lambda: cs.conv2d(x, w, backend=backend, **keywords),
        "validation + spec": validate,
        "array-kind checks (x, w)": lambda: (as_real_array(x, "x"), as_real_array(w, "w")),
        "memory reservation": lambda: reserve_memory(call, chosen, chosen.algorithms[0], "forward"),
        "non-finite gate, finite w": lambda: _nonfinite.fix_forward(spec, w, out),
        "non-finite fix-up, NaN in w": lambda: _nonfinite.fix_forward(spec, w_bad, out),
    }


def measure(backends, repeats: int) -> list[tuple]:
    """Rows ``(case, backend, guard, median s, IQR s, share of the call)``."""
    rows = []
    rng = np.random.default_rng(0)
    for name, x_shape, w_shape, keywords in CASES:
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        for backend in backends:
            variants = _variants(backend, x, w, keywords)
            call_time = _per_call(variants["whole call (conv2d)"], 3)  # warm-up, and sizing
            inner = {label: max(1, min(2000, int(0.02 / max(_per_call(f, 1), 1e-7)))) for label, f in variants.items()}
            samples = {label: [] for label in variants}
            for _ in range(repeats):  # interleaved: every variant once per round
                for label, function in variants.items():
                    samples[label].append(_per_call(function, inner[label]))
            call_time = statistics.median(samples["whole call (conv2d)"])
            for label, values in samples.items():
                q1, _, q3 = statistics.quantiles(values, n=4)
                median = statistics.median(values)
                rows.append((name, backend, label, median, q3 - q1, median / call_time))
    return rows


def main(argv=None) -> None:
    """Command line: print the median cost of each guard per case and backend, and its share of the call."""
    from ._arguments import backend_name, positive

    parser = argparse.ArgumentParser(
        prog="python -m convsuite.bench.guards", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--backends", nargs="+", type=backend_name, default=["numba", "numpy"])
    parser.add_argument("--repeats", type=positive, default=15)
    args = parser.parse_args(argv)
    backends = [b for b in args.backends if get_backend(b).available() is True]
    print(
        f"machine: {platform.machine()} {platform.processor() or ''}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}; numpy {np.__version__}; float32; "
        f"median of {args.repeats} interleaved rounds, spread = interquartile range"
    )
    print(f"{'case':32} {'backend':8} {'what':30} {'median':>11} {'spread':>10} {'of call':>8}")
    for case, backend, label, median, spread, share in measure(backends, args.repeats):
        print(f"{case:32} {backend:8} {label:30} {median * 1e6:9.1f}us {spread * 1e6:8.1f}us {share:8.1%}")


if __name__ == "__main__":
    main()
