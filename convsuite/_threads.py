"""Thread count of the multicore backends, set without importing them."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator

from ._environ import environment_reader
from ._validation import positive_int

__all__ = [
    "get_num_threads",
    "max_threads",
    "numba_pool_started",
    "set_num_threads",
    "task_threads",
    "usable_cpus",
    "user_set",
]

_requested: int | None = None
#: Size of numba's thread pool once convsuite's numba kernels started it (None before). Numba
#: cannot grow a running pool (its ``set_num_threads`` refuses more, whatever ``NUMBA_NUM_THREADS``
#: says now), so from then on it caps the count of every call.
_pool: int | None = None
#: ``(NUMBA_NUM_THREADS as last read, the limit it gives)``: the value is read on every call (by
#: design: a change applies to the next call), but parsed again only when it changed.
_limit_of: tuple[str | None, int] | None = None


class _TaskThreads(threading.local):
    """The calling thread's own count, ``n`` (a Dask task's share of its worker), over the process-wide one.

    ``n`` has a class default (None), so reading it never fails: ``getattr``
    with a default on a missing thread-local attribute raises and catches an
    AttributeError inside (0.36 us against 0.05, 2-core VM), on every call's plan key.
    """

    n: int | None = None


_local = _TaskThreads()
_read_numba_threads = environment_reader("NUMBA_NUM_THREADS")


def usable_cpus() -> int:
    """How many CPUs this process may run on: its affinity mask where the OS keeps one.

    ``taskset``, a container's CPU set or a batch scheduler's allocation give
    a process fewer CPUs than ``os.cpu_count()`` reports. Numba sizes its
    thread pool from the mask and refuses a larger count (``ValueError: The
    number of threads must be between 1 and 2``), so the default count must
    come from the mask too.
    """
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity outside Linux: every CPU
        return os.cpu_count() or 1


#: The usable CPU count, read once (as numba reads it, at import): ``os.cpu_count()``
#: costs ~1.7 us and a numba launch asks for it.
_CPU_COUNT = usable_cpus()


def max_threads() -> int:
    """Most threads a parallel backend may use: ``NUMBA_NUM_THREADS`` or the CPUs this process may run on.

    What the environment allows, read anew on every call. Once numba's thread
    pool runs, the ``numba`` backend also keeps to its size
    (:func:`numba_pool_started`): :func:`get_num_threads` gives at most that
    and :func:`set_num_threads` refuses more.
    """
    raw = _read_numba_threads()
    known = _limit_of
    if known is not None and known[0] == raw:
        return known[1]
    return _remember_limit(raw)


def _remember_limit(raw: str | None) -> int:
    """The limit ``NUMBA_NUM_THREADS`` = ``raw`` gives, cached for :func:`max_threads`."""
    global _limit_of
    limit = _env_threads(raw) or _CPU_COUNT
    _limit_of = (raw, limit)
    return limit


def _env_threads(raw: str | None) -> int | None:
    """``NUMBA_NUM_THREADS`` as a positive count, or None where unset or not one.

    Parsed as numba parses it, with ``int()``: ``str.isdigit()`` also accepts
    characters ``int()`` refuses (``'²'``), and numba warns about such a value
    and ignores it, so it counts as unset here too.
    """
    if raw is None:
        return None
    try:
        n = int(raw)
    except ValueError:
        return None
    return n if n > 0 else None


def numba_pool_started(size: int) -> None:
    """Record that numba's thread pool runs with ``size`` threads (called once it is started).

    From then on :func:`set_num_threads` refuses more, and
    :func:`get_num_threads` gives at most ``size``: a larger count
    (``set_num_threads`` made before the pool started, ``NUMBA_NUM_THREADS``
    raised since) runs on the whole pool, as OpenMP clamps a request above
    its limit, instead of failing in numba on every call.
    """
    global _pool
    _pool = int(size)


def set_num_threads(n: int | None) -> None:
    """Set how many threads the ``numba`` backend uses (``None``: all of them).

    Applies process-wide to later calls, from any thread; the Cython and
    Python backends are single-threaded and NumPy's BLAS keeps its own setting.

    Parameters
    ----------
    n : int or None
        Between 1 and :func:`max_threads` (``NUMBA_NUM_THREADS`` if set,
        else the CPUs this process may run on; once numba's thread pool is
        running, at most its size).

    Raises
    ------
    ValueError
        ``n`` above that limit; the message says what sets it.
    """
    global _requested
    if n is None:
        _requested = None
        return
    n = positive_int(n, "n")
    limit = max_threads()
    if _pool is not None and _pool < limit:
        limit = _pool
    if n > limit:
        raise ValueError(f"`n` must be between 1 and {limit} ({_limit_source(limit)}); got {n}")
    _requested = n


def _limit_source(limit: int) -> str:
    """What sets :func:`set_num_threads`'s ``limit``, for its error message."""
    if _pool is not None and limit == _pool:
        return (
            f"numba's thread pool runs {_pool} threads (NUMBA_NUM_THREADS when it started) and cannot grow; "
            "set NUMBA_NUM_THREADS before the first numba call for more"
        )
    if _env_threads(_read_numba_threads()) == limit:
        return "NUMBA_NUM_THREADS"
    return "the CPUs this process may run on; set NUMBA_NUM_THREADS before the first numba call for more"


def get_num_threads() -> int:
    """The thread count the ``numba`` backend will use for the next call."""
    n = _local.n
    if n is None:
        n = _requested
        if n is None:
            n = max_threads()
    pool = _pool
    # A count chosen before numba's pool started, or NUMBA_NUM_THREADS raised since, may exceed
    # the pool: the whole pool then, not numba's ValueError on every call.
    return n if pool is None or n <= pool else pool


def user_set() -> bool:
    """Whether this process chose its thread count (``set_num_threads`` or ``NUMBA_NUM_THREADS``)."""
    return _requested is not None or _env_threads(_read_numba_threads()) is not None


@contextmanager
def task_threads(n: int) -> Iterator[None]:
    """Inside: :func:`get_num_threads` answers ``n`` (capped at :func:`max_threads`) in the calling thread only."""
    previous = _local.n
    _local.n = max(1, min(int(n), max_threads()))
    try:
        yield
    finally:
        _local.n = previous
