"""Thread count of the multicore backends, set without importing them."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

from ._environ import environment_reader
from ._validation import positive_int

__all__ = ["get_num_threads", "max_threads", "set_num_threads", "task_threads", "usable_cpus", "user_set"]

_requested: int | None = None


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
    """Most threads a parallel backend may use: ``NUMBA_NUM_THREADS`` or the CPUs this process may run on."""
    env = (_read_numba_threads() or "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    return _CPU_COUNT


def set_num_threads(n: int | None) -> None:
    """Set how many threads the ``numba`` backend uses (``None``: all of them).

    Applies process-wide to later calls, from any thread; the Cython and
    Python backends are single-threaded and NumPy's BLAS keeps its own setting.

    Parameters
    ----------
    n : int or None
        Between 1 and :func:`max_threads` (``NUMBA_NUM_THREADS`` if set,
        else the number of logical CPUs).
    """
    global _requested
    if n is None:
        _requested = None
        return
    n = positive_int(n, "n")
    limit = max_threads()
    if n > limit:
        raise ValueError(f"`n` must be between 1 and {limit} (NUMBA_NUM_THREADS or the CPU count); got {n}")
    _requested = n


def get_num_threads() -> int:
    """The thread count the ``numba`` backend will use for the next call."""
    local = _local.n
    if local is not None:
        return local
    return _requested if _requested is not None else max_threads()


def user_set() -> bool:
    """Whether this process chose its thread count (``set_num_threads`` or ``NUMBA_NUM_THREADS``)."""
    return _requested is not None or os.environ.get("NUMBA_NUM_THREADS", "").strip() != ""


@contextmanager
def task_threads(n: int):
    """Inside: :func:`get_num_threads` answers ``n`` (capped at :func:`max_threads`) in the calling thread only."""
    previous = _local.n
    _local.n = max(1, min(int(n), max_threads()))
    try:
        yield
    finally:
        _local.n = previous
