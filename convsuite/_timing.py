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
- a contender whose *fastest* call is more than ``abandon_ratio`` times the
  fastest call of the best one, in the first round and again in the second,
  is dropped (it cannot win; timing it further only costs time); its
  figures so far are kept and marked. Fastest calls, not medians, decide
  this because noise on a shared machine only ever adds time; and two
  rounds, because a whole block can be slow (the other process on a 2-core
  machine held a core for its duration: numba's time on one problem swung
  from 0.17 to 8 ms between measurements, docs/measurements/regret-cpu.md at tag notebook-2026-11-28),
  and a contender dropped on one disturbed block keeps that block's time;
- the result of each contender is the median of its timed calls with the
  spread (min, max, and the interquartile range relative to the median).

:func:`confirm_close_call` re-times the two fastest when their medians are
within the noise of the measurement, and decides on the samples of both
measurements (used by measured selection, :func:`convsuite._tuning.measure_candidates`).

Library functions return :class:`Timing` records; printing is the caller's.
"""

from __future__ import annotations

import math
import numbers
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ._validation import _show, int_at_least

__all__ = [
    "NOISE_FLOOR",
    "Contender",
    "Timing",
    "check_settings",
    "confirm_close_call",
    "measure_side_by_side",
    "wall_timer",
    "within_noise",
]

#: The smallest relative difference of two medians taken as real: side-by-side
#: medians of identical code differ by about 3% (convsuite/bench/tuned_vs_default.py,
#: docs/asv.rst); 5% leaves a margin over that.
NOISE_FLOOR = 0.05


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
    retimed : bool
        True when the figures pool a second measurement
        (:func:`confirm_close_call`).
    """

    first_call: float
    median: float
    low: float
    high: float
    iqr_rel: float
    repeats: int
    abandoned: bool = False
    samples: tuple[float, ...] = field(default=(), repr=False)
    retimed: bool = False


def _summarise(first: float, samples: list[float], abandoned: bool, retimed: bool = False) -> Timing:
    """A Timing from raw samples."""
    median = statistics.median(samples)
    if len(samples) >= 4:
        q1, _, q3 = statistics.quantiles(samples, n=4)
        iqr = (q3 - q1) / median if median > 0 else 0.0
    else:
        iqr = (max(samples) - min(samples)) / median if median > 0 else 0.0
    return Timing(first, median, min(samples), max(samples), iqr, len(samples), abandoned, tuple(samples), retimed)


def _as_contender(value: Contender | Callable[[], Any]) -> Contender:
    """Accept a bare callable as a wall-clock contender."""
    return value if isinstance(value, Contender) else Contender(value)


def _is_number(value: Any) -> bool:
    """A real number that is not a bool (NumPy's bool is no ``numbers.Real`` to begin with)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_non_negative(value: Any, name: str, what: str = "number of seconds") -> None:
    """A finite number >= 0 (``time.sleep`` names no parameter when it refuses one)."""
    if not _is_number(value):
        raise TypeError(f"`{name}` must be a finite {what} >= 0; got {_show(value)}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"`{name}` must be a finite {what} >= 0; got {_show(value)}")


def check_settings(
    *,
    repeat: Any = 5,
    warmup: Any = 1,
    rounds: Any = 3,
    settle_s: Any = 0.0,
    abandon_ratio: Any = None,
    min_block_s: Any = 0.0,
) -> None:
    """Refuse timing settings that :func:`measure_side_by_side` cannot honour, naming the parameter.

    Called at the entry of the public timing functions, before any contender
    runs (and never inside a timed block). Counts are ints (a bool is not
    one); durations are finite and >= 0; ``abandon_ratio`` is None (never
    drop), or a number > 1 (inf never drops either): at 1 or below even the
    fastest contender would be over the bar.

    Raises
    ------
    TypeError
        A setting of the wrong type (``repeat=2.5``, ``repeat="3"``, ``settle_s=None``).
    ValueError
        A setting out of range (``repeat=0``, ``settle_s=-1``, ``abandon_ratio=0.5``).
    """
    int_at_least(repeat, "repeat", 1)
    int_at_least(rounds, "rounds", 1)
    int_at_least(warmup, "warmup", 0)
    _check_non_negative(settle_s, "settle_s")
    _check_non_negative(min_block_s, "min_block_s")
    if abandon_ratio is None:
        return
    if not _is_number(abandon_ratio):
        raise TypeError(f"`abandon_ratio` must be a number > 1, or None never to drop; got {_show(abandon_ratio)}")
    if not abandon_ratio > 1:  # NaN fails this too
        raise ValueError(
            "`abandon_ratio` must be a number > 1 (a contender is dropped when its fastest call is more than "
            f"this multiple of the best's), or None never to drop; got {_show(abandon_ratio)}"
        )


def _check_contenders(contenders: Any) -> None:
    """A mapping of names to Contenders or zero-argument callables."""
    if not isinstance(contenders, Mapping):
        raise TypeError(f"`contenders` must be a mapping of names to callables or Contenders; got {_show(contenders)}")
    for name, value in contenders.items():
        if not (isinstance(value, Contender) or callable(value)):
            raise TypeError(
                f"`contenders[{name!r}]` must be a Contender or a zero-argument callable; got {_show(value)}"
            )


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
        Drop contenders whose fastest call exceeds this multiple of the
        fastest call of any contender in the first round and again in the
        second (with one round: after it); must be > 1. None (or inf):
        never drop.
    min_block_s : float
        Keep calling within a block until at least this long has passed
        (more samples for very short calls); 0 runs exactly the share of
        ``repeat``.

    Returns
    -------
    dict of str to Timing

    Raises
    ------
    TypeError, ValueError
        A setting :func:`check_settings` refuses, or a contender that is
        not callable; before anything runs.
    """
    check_settings(
        repeat=repeat,
        warmup=warmup,
        rounds=rounds,
        settle_s=settle_s,
        abandon_ratio=abandon_ratio,
        min_block_s=min_block_s,
    )
    _check_contenders(contenders)
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
    suspects: set[str] = set()  # over the ratio in the first round: re-timed in the second before dropping
    for r in range(rounds):
        calls = repeat // rounds + (1 if r < repeat % rounds else 0)
        block_low: dict[str, float] = {}
        for name in live:
            contender = entries[name]
            if settle_s:
                time.sleep(settle_s)
            for _ in range(warmup):
                contender.run()
            block_start = time.perf_counter()
            done = 0
            block: list[float] = []
            while done < calls or (min_block_s and time.perf_counter() - block_start < min_block_s):
                timer = contender.timer()
                timer.start()
                contender.run()
                block.append(timer.stop())
                done += 1
            samples[name] += block
            block_low[name] = min(block)
        if abandon_ratio is None or len(live) < 2 or r > 1:
            continue
        best = min(block_low.values())
        over = {n for n in live if block_low[n] > abandon_ratio * best}
        if r == 0 and rounds > 1:
            suspects = over
            continue
        gone = over & suspects if r == 1 else over
        dropped |= gone
        live = [n for n in live if n not in gone]
    return {name: _summarise(first[name], samples[name], name in dropped) for name in entries}


def within_noise(a: Timing, b: Timing, floor: float = NOISE_FLOOR) -> bool:
    """Whether the medians of ``a`` and ``b`` differ by less than their spread (at least ``floor``).

    The margin is the larger relative interquartile range of the two: on a
    quiet machine a few percent, on a loaded one tens of percent, which is
    exactly when one measurement's order cannot be trusted.
    """
    margin = max(floor, a.iqr_rel, b.iqr_rel)
    low, high = sorted((a.median, b.median))
    return high <= low * (1.0 + margin)


def confirm_close_call(
    timings: Mapping[str, Timing],
    retime: Callable[[list[str]], Mapping[str, Timing]],
    floor: float = NOISE_FLOOR,
) -> dict[str, Timing]:
    """``timings`` with the two fastest re-timed and pooled when they are within noise of each other.

    Measured selection keeps the fastest contender. When the two fastest
    differ by less than the measurement's spread, their order is a coin
    toss that a later measurement may reverse (on the 2-core CPU the tuned
    pick and the evaluation a minute later disagreed, regret-cpu.md at tag notebook-2026-11-28). So
    the two are timed again, side by side on their own (``retime(names)``,
    a second, independent window of time), and each keeps the median of
    both measurements' calls: a disturbance that hit one window counts half
    as much, and the order rests on twice the samples. Contenders further
    apart, abandoned ones and a lone one are returned as they were.

    Parameters
    ----------
    timings : mapping of str to Timing
        One side-by-side measurement (:func:`measure_side_by_side`).
    retime : callable
        ``retime(names) -> {name: Timing}``: a new side-by-side measurement
        of just those contenders.
    floor : float
        The smallest margin taken as noise (see :func:`within_noise`).

    Returns
    -------
    dict of str to Timing
        The same keys; the two re-timed ones have ``retimed=True``.
    """
    _check_non_negative(floor, "floor", "relative margin")
    out = dict(timings)
    ranked = sorted((name for name, t in timings.items() if not t.abandoned), key=lambda n: timings[n].median)
    if len(ranked) < 2 or not within_noise(timings[ranked[0]], timings[ranked[1]], floor):
        return out
    pair = ranked[:2]
    again = retime(pair)
    for name in pair:
        first = timings[name]
        out[name] = _summarise(first.first_call, [*first.samples, *again[name].samples], False, retimed=True)
    return out
