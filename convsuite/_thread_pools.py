"""Long-lived host thread pools shared by the modules that fan work out over threads.

Starting threads on every call costs about 0.1 ms each, which matters for
calls of a few milliseconds (the joblib rung's pieces, one host thread per GPU
in :mod:`convsuite.distributed.multigpu`). A pool is kept per (purpose,
worker count) for the life of the process.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["shared_pool"]

_pools: dict[tuple[str, int], ThreadPoolExecutor] = {}
_lock = threading.Lock()


def shared_pool(purpose: str, workers: int) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` threads for ``purpose`` (its threads' name prefix), started on first use."""
    with _lock:
        pool = _pools.get((purpose, workers))
        if pool is None:
            pool = _pools[purpose, workers] = ThreadPoolExecutor(workers, thread_name_prefix=f"convsuite-{purpose}")
        return pool
