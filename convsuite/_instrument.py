"""Optional timing of the backend call inside a convsuite call.

Benchmarks open :func:`record_kernel_times`; while it is open, the front end
times each backend launch (validation, allocation and reshaping excluded)
with the backend's own timer (device events on a GPU, ``perf_counter`` on the
CPU) and appends the seconds to the list it yields. Because the kernel
window lies inside the caller's end-to-end window, end to end >= kernel holds
for every single call, not just on average. When no recorder is open the
cost is one context-variable lookup.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator

__all__ = ["record_kernel_times", "run_kernel"]

_RECORDER: ContextVar[list | None] = ContextVar("convsuite_kernel_recorder", default=None)
#: The context variable holding the open recorder's list (None: none open); the front end's per-call
#: path reads it inline.
RECORDER = _RECORDER


@contextmanager
def record_kernel_times() -> Iterator[list[float]]:
    """Collect the duration of every backend call made inside the block."""
    times: list[float] = []
    token = _RECORDER.set(times)
    try:
        yield times
    finally:
        _RECORDER.reset(token)


def run_kernel(backend: Any, launch: Callable[..., None], *operands: Any) -> None:
    """Call ``launch(*operands)``, timed with ``backend.timer()`` if a recorder is open."""
    times = _RECORDER.get()
    if times is None:
        launch(*operands)
        return
    timer = backend.timer()
    timer.start()
    launch(*operands)
    times.append(timer.stop())
