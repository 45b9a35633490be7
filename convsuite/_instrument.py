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
def kernel_section(synchronize=None) -> Iterator[None]:
    """Time the enclosed backend call if a recorder is open.

    ``synchronize`` (a callable) is called before reading the clock at both
    ends, so asynchronous device work is inside the window.
    """
    times = _RECORDER.get()
    if times is None:
        yield
        return
    if synchronize is not None:
        synchronize()
    start = time.perf_counter()
    yield
    if synchronize is not None:
        synchronize()
    times.append(time.perf_counter() - start)
