"""Per-call wall time, CPU time and page faults of a numba kernel interleaved with the numpy backend.

Usage: ``[GOMP_SPINCOUNT=N] .venv/bin/python tools/omp_wake_probe.py``. Runs
``time_side_by_side`` (numba and the numpy backend, a depthwise 3x3 layer of
MobileNetV2's size) three times and prints every numba call as ``(wall ms,
minor faults, user ms, system ms)``. On the 2-core VM (2026-11-24) numba's
calls were either ~0.6 ms or ~7.8 ms; a slow call used one thread's user time
for its whole wall time, with no page faults and no steal time: a thread of
the OpenMP team waiting for another to wake. ``GOMP_SPINCOUNT=3000000``
removed the slow calls here (see docs/measurements/cpu-targets-2026-11-24b*.md).
"""

from __future__ import annotations

import resource
import time

import numpy as np

import convsuite as cs
from convsuite.bench.timing import time_side_by_side


def main() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 96, 56, 56)).astype(np.float32)
    w = rng.standard_normal((96, 1, 3, 3)).astype(np.float32)
    kw = dict(padding=1, groups=96)
    calls: list[tuple[float, int, float, float]] = []

    def numba_call():
        start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        cs.conv2d(x, w, backend="numba", **kw)
        wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
        calls.append(
            (
                round(wall * 1e3, 1),
                after.ru_minflt - before.ru_minflt,
                round((after.ru_utime - before.ru_utime) * 1e3, 1),
                round((after.ru_stime - before.ru_stime) * 1e3, 1),
            )
        )

    def numpy_call():
        cs.conv2d(x, w, backend="numpy", **kw)

    for _ in range(3):
        calls.clear()
        time_side_by_side({"numba": numba_call, "numpy backend": numpy_call}, repeat=7)
        print(calls, flush=True)


if __name__ == "__main__":
    main()
