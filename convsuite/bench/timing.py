"""Side-by-side timing for the harness, on the measuring core: quiet OpenMP, warm-up, drift.

- :func:`passive_openmp` makes the OpenMP runtimes (torch's, numba's ``omp``
  layer) sleep instead of spinning between calls, so contenders timed in one
  process do not take cores from each other; :func:`openmp_waits` says whether
  that is in force here (a runtime loaded before the variable was set keeps
  spinning). Importing this module calls it: every measuring module of the
  harness (compare, sweep, the network and scaling scripts) imports it, and
  so sets the policy before it imports torch or starts numba's pool.
- :func:`warm_up` calls a contender until its per-call time is stable (JIT
  compilation, on-disk caches, BLAS and thread pools), with a cap, and
  reports what that cost.
- :func:`round_drift` says when a contender's interleaved rounds still trend
  (it was not warm, or the machine changed under it).
- :func:`time_side_by_side` and :func:`events_median` are thin shapes over
  :func:`convsuite._timing.measure_side_by_side`, kept for the scripts that
  call them by these names. New code should call the core directly:

    from convsuite._timing import Contender, measure_side_by_side
    timings = measure_side_by_side({"ours": Contender(run, backend.timer), "torch": run_torch}, repeat=7)
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from .._timing import Contender, Timing, check_settings, measure_side_by_side, wall_timer

__all__ = [
    "SETTLE_S",
    "OpenMPWaits",
    "Timing",
    "WarmUp",
    "cuda_events_median",
    "events_median",
    "openmp_waits",
    "passive_openmp",
    "require_gpu",
    "round_drift",
    "time_side_by_side",
    "warm_up",
]

#: The environment variable OpenMP runtimes read when they load.
WAIT_POLICY = "OMP_WAIT_POLICY"

#: OpenMP runtimes found loaded when :func:`passive_openmp` set the policy (they read it too early).
_LOADED_BEFORE: list[str] = []


def _openmp_runtimes() -> list[str]:
    """Paths of the OpenMP runtimes loaded in this process (threadpoolctl), or a guess from sys.modules."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # the bench extra is optional: torch is the runtime that loads at import
        return ["torch"] if "torch" in sys.modules else []
    return sorted({info["filepath"] for info in threadpool_info() if info.get("user_api") == "openmp"})


def passive_openmp() -> None:
    """OMP_WAIT_POLICY=PASSIVE unless the user chose a policy: call before torch or numba start a pool.

    torch and numba each drive an OpenMP runtime; run side by side in one
    process, a pool that spins after its call takes cores from the other
    side's next call (torch 3-25x slower on 16 cores; a depthwise layer 37x
    slower on 2). A runtime reads the variable once, when it loads, so this
    must come before torch is imported and before numba's first parallel
    call; :func:`openmp_waits` tells whether it did.
    """
    if WAIT_POLICY not in os.environ:
        _LOADED_BEFORE[:] = _openmp_runtimes()
        os.environ[WAIT_POLICY] = "PASSIVE"


@dataclass(frozen=True)
class OpenMPWaits:
    """Whether the OpenMP runtimes of this process wait passively, and a line saying so."""

    passive: bool
    description: str


def openmp_waits() -> OpenMPWaits:
    """What :func:`passive_openmp` achieved in this process (call it first).

    Passive when ``OMP_WAIT_POLICY`` is ``PASSIVE`` and no OpenMP runtime was
    already loaded when it was set here (a runtime loaded before keeps the
    policy it read: the default, which spins).
    """
    policy = os.environ.get(WAIT_POLICY)
    if policy is None or policy.strip().upper() != "PASSIVE":
        return OpenMPWaits(False, f"{WAIT_POLICY}={policy or '(unset)'}: idle OpenMP threads spin between calls")
    if _LOADED_BEFORE:
        return OpenMPWaits(
            False,
            f"{WAIT_POLICY}=PASSIVE was set after an OpenMP runtime had loaded ({', '.join(_LOADED_BEFORE)}): "
            "its idle threads spin between calls",
        )
    return OpenMPWaits(True, f"{WAIT_POLICY}=PASSIVE before any OpenMP runtime loaded: idle OpenMP threads sleep")


@dataclass(frozen=True)
class WarmUp:
    """What warming one contender cost.

    Attributes
    ----------
    first_call_s : float
        The first call alone (compilation, cache loads).
    seconds : float
        The calls after the first, until the time per call was stable.
    calls : int
        How many calls that was (after the first).
    stable : bool
        False when the cap was reached before the time per call settled.
    per_call_s : float
        The time per call at the end of the warm-up.
    """

    first_call_s: float
    seconds: float
    calls: int
    stable: bool
    per_call_s: float

    @property
    def total_s(self) -> float:
        """First call and warm-up together."""
        return self.first_call_s + self.seconds


#: Warm-up defaults: warm once the median time per call of the last ``window`` blocks is no longer
#: below that of the ``window`` before by more than ``tolerance`` (the time stopped falling).
WARM_WINDOW = 3
WARM_TOLERANCE = 0.1
#: Caps: at most this many blocks, and this many seconds after the first call.
WARM_MAX_BLOCKS = 40
WARM_MAX_S = 10.0
#: A block repeats a short call until it lasts this long, so the clock's resolution and one
#: interrupt do not decide stability.
WARM_BLOCK_S = 0.02
#: A block this long compares windows of two blocks instead of ``window``.
LONG_BLOCK_S = 0.1


def warm_up(
    run: Callable[[], Any],
    timer: Callable[[], Any] = wall_timer,
    *,
    window: int = WARM_WINDOW,
    tolerance: float = WARM_TOLERANCE,
    max_blocks: int = WARM_MAX_BLOCKS,
    max_s: float = WARM_MAX_S,
    block_s: float = WARM_BLOCK_S,
) -> WarmUp:
    """Call ``run`` until its time per call is stable, at most ``max_blocks`` blocks or ``max_s`` seconds.

    The first call is timed alone. Then calls are timed in blocks (one call,
    or as many as last ``block_s``). Compilation of further specialisations,
    cold caches and starting thread pools all show as a *falling* time per
    call, so the contender is warm once the median of the last ``window``
    blocks is no more than ``tolerance`` below the median of the ``window``
    blocks before them (two and two for blocks of a tenth of a second or
    more); a rise is the noise of a shared machine, not a contender still
    warming. At a cap the result is marked not stable.
    """
    check_settings(repeat=window, rounds=1, warmup=max_blocks, settle_s=max_s, min_block_s=block_s)
    clock = timer()
    clock.start()
    run()
    first = clock.stop()
    per_call: list[float] = []
    calls, started = 0, time.perf_counter()
    stable = False
    while len(per_call) < max_blocks and time.perf_counter() - started < max_s:
        n, spent = 0, 0.0
        while n == 0 or spent < block_s:
            clock = timer()
            clock.start()
            run()
            spent += clock.stop()
            n += 1
        calls += n
        per_call.append(spent / n)
        # Blocks of long calls (a tenth of a second each) are steady on their own: a window of two.
        size = 2 if spent >= LONG_BLOCK_S else window
        if len(per_call) >= 2 * size:
            recent = statistics.median(per_call[-size:])
            before = statistics.median(per_call[-2 * size : -size])
            if recent >= (1.0 - tolerance) * before:
                stable = True
                break
    return WarmUp(first, time.perf_counter() - started, calls, stable, per_call[-1] if per_call else first)


#: Rounds whose fastest calls fall by more than this ratio, first to last, are said to drift (still warming);
#: a rise must be larger, as noise of a shared machine only adds time and a short call's adds much.
DRIFT_RATIO = 1.3
RISE_RATIO = 2.0


def round_drift(timing: Timing, rounds: int, ratio: float = DRIFT_RATIO, rise: float = RISE_RATIO) -> str | None:
    """A note when a contender's interleaved rounds trend one way by more than ``ratio``; else None.

    ``timing.samples`` holds the timed calls in order, ``rounds`` blocks as
    :func:`~convsuite._timing.measure_side_by_side` spreads them (the first
    ``repeat % rounds`` blocks one call longer). Each round is summed up by
    its fastest call (noise of a shared machine only adds time). A trend is
    every round faster than the one before with the first more than
    ``ratio`` times the last (a contender still warming up), or every round
    slower with the last more than ``rise`` times the first (a machine getting
    busier under it); both make its median a moving target. One slow round in
    the middle is noise.
    """
    samples = list(timing.samples)
    rounds = min(rounds, len(samples))
    if rounds < 2 or timing.abandoned:
        return None
    sizes = [len(samples) // rounds + (1 if r < len(samples) % rounds else 0) for r in range(rounds)]
    fastest, at = [], 0
    for size in sizes:
        fastest.append(min(samples[at : at + size]))
        at += size
    pairs = list(zip(fastest, fastest[1:]))
    falling = all(b < a for a, b in pairs) and fastest[0] > ratio * fastest[-1]
    rising = all(b > a for a, b in pairs) and fastest[-1] > rise * fastest[0]
    if not (falling or rising):
        return None
    trend = " -> ".join(f"{m * 1e3:.3g}" for m in fastest)
    why = "still warming up" if falling else "the machine got busier"
    return f"rounds drift, {why} (fastest call per round {trend} ms): not steady; re-run, or raise --repeat"


#: Pause whenever the contender changes: thread pools of the previous one
#: (OpenBLAS, OpenMP in torch and numba) spin-wait after their last call and
#: would steal cores from the next one.
SETTLE_S = 0.25


def time_side_by_side(
    contenders: dict[str, Callable[[], object]], repeat: int = 7, warmup: int = 1, rounds: int = 3
) -> dict[str, Timing]:
    """Time every callable, interleaved; the first call (compile, cache load) is kept apart.

    Parameters
    ----------
    contenders : dict of name -> zero-argument callable or Contender
        A bare callable must finish its work before returning (synchronise GPUs).
    repeat : int
        Timed calls per contender, spread over ``rounds`` blocks.
    warmup : int
        Untimed calls at the start of every block.
    rounds : int
        How many times the contenders take turns.

    Returns
    -------
    dict of str to Timing
        ``first_call``, ``median``, ``low``, ``high``, ``iqr_rel``, ``repeats``.
    """
    return measure_side_by_side(contenders, repeat=repeat, warmup=warmup, rounds=rounds, settle_s=SETTLE_S)


def events_median(fn: Callable[[], object], timer: Callable[[], object], repeat: int, warmup: int = 2) -> float:
    """Median seconds of ``fn``, each call bracketed by ``timer()`` (a backend's device timer)."""
    timing = measure_side_by_side({"fn": Contender(fn, timer)}, repeat=repeat, warmup=warmup, rounds=1)
    return timing["fn"].median


def require_gpu(what: str) -> None:
    """Raise BackendUnavailableError saying that ``what`` needs CuPy and a CUDA GPU, and why there is none here.

    Without the check, the first CuPy call fails with ``ModuleNotFoundError:
    No module named 'cupy'``, which says nothing of what was asked for.
    """
    from .._errors import BackendUnavailableError
    from ._arguments import gpu_unavailable

    reason = gpu_unavailable()
    if reason is not None:
        raise BackendUnavailableError(f"{what} needs CuPy and a CUDA GPU; here: {reason}")


def cuda_events_median(fn: Callable[[], object], repeat: int, warmup: int = 2) -> float:
    """Median seconds of ``fn`` on the GPU, each call between two device events (the cupy backend's timer).

    Raises
    ------
    BackendUnavailableError
        Without CuPy or a CUDA GPU.
    TypeError, ValueError
        ``repeat`` or ``warmup`` that the measuring core refuses.
    """
    from .._registry import get_backend

    check_settings(repeat=repeat, warmup=warmup, rounds=1)
    require_gpu("cuda_events_median")
    return events_median(fn, get_backend("cupy").timer, repeat, warmup)


# The harness's one switch, thrown when it is imported (see the module's description); a policy the
# user set is kept, and openmp_waits() tells whether it came in time.
passive_openmp()
