"""Optional timing of the backend call inside a convsuite call.

Benchmarks open :func:`record_kernel_times`; while it is open, the front end
times each backend ``forward``/``backward`` call (validation, allocation and
reshaping excluded) and appends the seconds to the list it yields. Because
the kernel window lies inside the caller's end-to-end window, end to end >=
kernel holds for every single call, not just on average. When no recorder is
open the cost is one context-variable lookup.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

__all__ = ["kernel_section", "record_kernel_times"]

_RECORDER: ContextVar[list | None] = ContextVar("convsuite_kernel_recorder", default=None)


@contextmanager
def record_kernel_times() -> Iterator[list[float]]:
    """Collect the duration of every backend call made inside the block."""
    times: list[float] = []
    token = _RECORDER.set(times)
    try:
        yield times
    finally:
        _RECORDER.reset(token)


@contextmanager
def kernel_section(device: str = "cpu") -> Iterator[None]:
    """Time the enclosed backend call if a recorder is open.

    On a GPU the window is a pair of CUDA events on the current stream,
    synchronised at its end, so it covers the device work, not just the launch.
    """
    times = _RECORDER.get()
    if times is None:
        yield
        return
    if device == "gpu":
        import cupy

        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        yield
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
        return
    start_s = time.perf_counter()
    yield
    times.append(time.perf_counter() - start_s)
