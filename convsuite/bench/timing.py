"""Side-by-side timing for the target scripts, on the measuring core.

Both functions here are thin shapes over :func:`convsuite._timing.measure_side_by_side`
(first call apart, warm-up, contenders in alternating blocks, medians and
spread, device sync through a backend's timer), kept for the scripts that
call them by these names. New code should call the core directly:

    from convsuite._timing import Contender, measure_side_by_side
    timings = measure_side_by_side({"ours": Contender(run, backend.timer), "torch": run_torch}, repeat=7)
"""

from __future__ import annotations

from typing import Callable

from .._timing import Contender, Timing, check_settings, measure_side_by_side

__all__ = ["SETTLE_S", "Timing", "cuda_events_median", "events_median", "require_gpu", "time_side_by_side"]

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
