"""The measuring core: one way to time contenders side by side.

Everything that times convsuite work (measured selection in :mod:`._tuning`,
``convsuite compare``, the target scripts, the crossover map and the asv
helpers) goes through :func:`measure_side_by_side`:

- the first call of each contender (JIT compile, NVRTC build, cache load) is
  timed apart and never mixed into the steady state;
- each contender then runs in blocks of back-to-back calls (warm-up calls
  first, untimed), and the blocks alternate over rounds (A, B, C, A, B, C...)
  so a slow moment of a shared machine hits every contender alike;
- each call is bracketed by the contender's own timer (a backend's
  :meth:`~convsuite.backends.base.Backend.timer`: ``perf_counter`` on the
  CPU, device events on a GPU), so device work is finished inside the window;
- after the first round, a contender whose *fastest* call is more than
  ``abandon_ratio`` times the fastest call of the best one is dropped (it
  cannot win; timing it further only costs time); its figures so far are
  kept and marked. Fastest calls, not medians, decide this because noise on
  a shared machine only ever adds time: one preempted block must not drop a
  contender that would have won;
- the result of each contender is the median of its timed calls with the
  spread (min, max, and the interquartile range relative to the median).

Library functions return :class:`Timing` records; printing is the caller's.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = ["Contender", "Timing", "measure_side_by_side", "wall_timer"]


class _WallTimer:
    """``perf_counter`` between ``start()`` and ``stop()``."""

    __slots__ = ("_t0",)

    def start(self) -> None:
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        return time.perf_counter() - self._t0


def wall_timer() -> _WallTimer:
    """A host wall-clock timer (what CPU backends' ``timer()`` returns)."""
    return _WallTimer()


@dataclass(frozen=True)
class Contender:
    """One thing to time.

    Attributes
    ----------
    run : callable
        Zero-argument callable doing one unit of work.
    timer : callable
        Returns a fresh timer with ``start()`` and ``stop() -> seconds`` that
        brackets the device work of ``run`` (e.g. ``backend.timer``).
    """

    run: Callable[[], Any]
    timer: Callable[[], Any] = wall_timer


@dataclass(frozen=True)
class Timing:
    """Seconds of one contender, measured side by side with the others.

    Attributes
    ----------
    first_call : float
        The first call, alone (compilation and cache loads included).
    median, low, high : float
        Median, fastest and slowest of the timed calls.
    iqr_rel : float
        Interquartile range over the median: the relative spread.
    repeats : int
        Number of timed calls.
    abandoned : bool
        True when the contender was dropped early for being far slower.
    samples : tuple of float
        Every timed call, in order.
    """

    first_call: float
    median: float
    low: float
    high: float
    iqr_rel: float
    repeats: int
    abandoned: bool = False
    samples: tuple[float, ...] = field(default=(), repr=False)


def _summarise(first: float, samples: list[float], abandoned: bool) -> Timing:
    """A Timing from raw samples."""
    median = statistics.median(samples)
    if len(samples) >= 4:
        q1, _, q3 = statistics.quantiles(samples, n=4)
        iqr = (q3 - q1) / median if median > 0 else 0.0
    else:
        iqr = (max(samples) - min(samples)) / median if median > 0 else 0.0
    return Timing(first, median, min(samples), max(samples), iqr, len(samples), abandoned, tuple(samples))


def _as_contender(value: Contender | Callable[[], Any]) -> Contender:
    """Accept a bare callable as a wall-clock contender."""
    return value if isinstance(value, Contender) else Contender(value)


def measure_side_by_side(
    contenders: Mapping[str, Contender | Callable[[], Any]],
    *,
    repeat: int = 5,
    warmup: int = 1,
    rounds: int = 3,
    settle_s: float = 0.0,
    abandon_ratio: float | None = None,
    min_block_s: float = 0.0,
) -> dict[str, Timing]:
    """Time every contender, interleaved, and return their timings by name.

    Parameters
    ----------
    contenders : mapping of name to Contender or zero-argument callable
        A bare callable is timed with the host clock and must finish its
        work before returning.
    repeat : int
        Timed calls per contender in total, spread over ``rounds`` blocks.
    warmup : int
        Untimed calls at the start of every block (after the first call).
    rounds : int
        How many times the contenders take turns.
    settle_s : float
        Pause before each block, so the previous contender's spinning
        thread pools (OpenBLAS, OpenMP) go quiet before the next one runs.
    abandon_ratio : float, optional
        After the first round, drop contenders whose fastest call exceeds
        this multiple of the fastest call of any contender (None: never drop).
    min_block_s : float
        Keep calling within a block until at least this long has passed
        (more samples for very short calls); 0 runs exactly the share of
        ``repeat``.

    Returns
    -------
    dict of str to Timing
    """
    if repeat < 1 or rounds < 1 or warmup < 0:
        raise ValueError(f"repeat and rounds must be >= 1 and warmup >= 0; got {repeat}, {rounds}, {warmup}")
    entries = {name: _as_contender(c) for name, c in contenders.items()}
    first: dict[str, float] = {}
    for name, contender in entries.items():
        if settle_s:
            time.sleep(settle_s)
        timer = contender.timer()
        timer.start()
        contender.run()
        first[name] = timer.stop()
    rounds = min(rounds, repeat)
    samples: dict[str, list[float]] = {name: [] for name in entries}
    live = list(entries)
    dropped: set[str] = set()
    for r in range(rounds):
        calls = repeat // rounds + (1 if r < repeat % rounds else 0)
        for name in live:
            contender = entries[name]
            if settle_s:
                time.sleep(settle_s)
            for _ in range(warmup):
                contender.run()
            block_start = time.perf_counter()
            done = 0
            while done < calls or (min_block_s and time.perf_counter() - block_start < min_block_s):
                timer = contender.timer()
                timer.start()
                contender.run()
                samples[name].append(timer.stop())
                done += 1
        if abandon_ratio is not None and r == 0 and len(live) > 1:
            best = min(min(samples[n]) for n in live)
            keep = [n for n in live if min(samples[n]) <= abandon_ratio * best]
            dropped.update(set(live) - set(keep))
            live = keep
    return {name: _summarise(first[name], samples[name], name in dropped) for name in entries}
