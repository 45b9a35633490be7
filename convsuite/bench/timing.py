"""Side-by-side timing: warm-up, interleaved repeats, median and spread.

Contenders are timed round-robin (A, B, C, A, B, C, ...) so that a slow
moment of a shared, noisy machine hits all of them alike; each figure is the
median of its repeats, and ratios are only ever formed within one run.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

__all__ = ["Timing", "time_side_by_side"]


@dataclass(frozen=True)
class Timing:
    """Seconds of one contender: first call, then the median of warm repeats."""

    first_call: float
    median: float
    low: float
    high: float
    repeats: int


def time_side_by_side(contenders: dict[str, Callable[[], object]], repeat: int = 7, warmup: int = 1) -> dict[str, Timing]:
    """Time every callable, interleaved; the first call (compile, cache load) is kept apart.

    Parameters
    ----------
    contenders : dict of name -> zero-argument callable
        Each callable must finish its work before returning (synchronise GPUs).
    repeat : int
        Timed calls per contender after the warm-up.
    warmup : int
        Untimed calls after the first one.
    """
    first = {}
    for name, fn in contenders.items():
        start = time.perf_counter()
        fn()
        first[name] = time.perf_counter() - start
        for _ in range(warmup):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeat):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {
        name: Timing(first[name], statistics.median(s), min(s), max(s), len(s)) for name, s in samples.items()
    }
