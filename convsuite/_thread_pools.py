"""Long-lived host thread pools shared by the modules that fan work out over threads.

Starting threads on every call costs about 0.1 ms each, which matters for
calls of a few milliseconds (the joblib rung's pieces, one host thread per GPU
in :mod:`convsuite.distributed.multigpu`). A pool is kept per (purpose,
worker count) for the life of the process.

A forked child inherits the pools without their threads: an executor whose
parent had idle workers counts them as idle still, starts none, and work
submitted to it waits forever. The child therefore forgets every pool (its
first call starts new ones); the parent's executors are dropped, not shut
down, since shutting one down could wait on a lock a parent thread held.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from . import _forksafe

__all__ = ["shared_pool"]

_pools: dict[tuple[str, int], ThreadPoolExecutor] = {}
_lock = _forksafe.lock()


def shared_pool(purpose: str, workers: int) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` threads for ``purpose`` (its threads' name prefix), started on first use."""
    with _lock:
        pool = _pools.get((purpose, workers))
        if pool is None:
            pool = _pools[purpose, workers] = ThreadPoolExecutor(workers, thread_name_prefix=f"convsuite-{purpose}")
        return pool


@_forksafe.at_fork_in_child
def _forget_pools() -> None:
    """In a forked child: the inherited pools have no threads; the next call starts its own."""
    _pools.clear()
