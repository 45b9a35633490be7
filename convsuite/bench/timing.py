"""Side-by-side timing: blocks of back-to-back calls, alternated over rounds.

Each contender is timed in blocks of consecutive calls (its steady state,
with only its own thread pool awake), after a pause that lets the previous
contender's spinning threads (OpenBLAS, OpenMP) go to sleep. Blocks alternate
over several rounds (A, B, A, B, ...) so a slow moment of a shared, noisy
machine hits every contender alike; each figure is the median of all its
timed calls, and ratios are only ever formed within one run.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

__all__ = ["Timing", "time_side_by_side", "SETTLE_S", "cuda_events_median"]

#: Pause whenever the contender changes: thread pools of the previous one
#: (OpenBLAS, OpenMP in torch and numba) spin-wait after their last call and
#: would steal cores from the next one.
SETTLE_S = 0.25


@dataclass(frozen=True)
class Timing:
    """Seconds of one contender: first call, then the median of warm repeats."""

    first_call: float
    median: float
    low: float
    high: float
    repeats: int


def time_side_by_side(
    contenders: dict[str, Callable[[], object]], repeat: int = 7, warmup: int = 1, rounds: int = 3
) -> dict[str, Timing]:
    """Time every callable; the first call (compile, cache load) is kept apart.

    Parameters
    ----------
    contenders : dict of name -> zero-argument callable
        Each callable must finish its work before returning (synchronise GPUs).
    repeat : int
        Timed calls per contender, spread over ``rounds`` blocks.
    warmup : int
        Untimed calls at the start of every block.
    rounds : int
        How many times the contenders take turns.
    """
    first = {}
    for name, fn in contenders.items():
        time.sleep(SETTLE_S)
        start = time.perf_counter()
        fn()
        first[name] = time.perf_counter() - start
    rounds = max(1, min(rounds, repeat))
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        calls = repeat // rounds + (1 if r < repeat % rounds else 0)
        for name, fn in contenders.items():
            time.sleep(SETTLE_S)
            for _ in range(warmup):
                fn()
            for _ in range(calls):
                start = time.perf_counter()
                fn()
                samples[name].append(time.perf_counter() - start)
    return {
        name: Timing(first[name], statistics.median(s), min(s), max(s), len(s)) for name, s in samples.items()
    }


def cuda_events_median(fn: Callable[[], object], repeat: int, warmup: int = 2) -> float:
    """Median seconds of ``fn`` on the GPU, each call between two CUDA events."""
    import cupy as cp

    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeat):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(samples)
