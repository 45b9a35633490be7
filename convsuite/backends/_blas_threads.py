"""One BLAS thread for the duration of a compiled kernel that calls BLAS itself.

The numba ``gemm`` algorithm calls BLAS from every ``prange`` thread, and the
Cython rung (and the joblib rung above it) runs one kernel per core; a BLAS
that then starts its own pool on every call oversubscribes the cores. The
limit comes from ``threadpoolctl`` (the maintained way to steer OpenBLAS, MKL
and BLIS pools) and is lifted when the kernel returns. Without threadpoolctl
the kernels still run, with BLAS at its own setting.

The limit is process-wide while it lasts: NumPy work in another Python
thread during a launch runs its BLAS on one thread too (slower, never wrong).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext

__all__ = ["one_blas_thread"]

_controller = None
_lock = threading.Lock()
_active = 0  # launches in flight; the limit is set by the first and lifted by the last
_limiter = None


def _get_controller():
    """Threadpoolctl's controller, built once after SciPy's BLAS is loaded (None if unavailable)."""
    global _controller
    if _controller is None:
        try:
            import scipy.linalg.cython_blas  # noqa: F401  (loads the BLAS the kernels call)
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _controller = False
        else:
            _controller = ThreadpoolController()
    return _controller or None


@contextmanager
def _limited(controller):
    global _active, _limiter
    with _lock:
        if _active == 0:
            _limiter = controller.limit(limits=1, user_api="blas")
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                _limiter.restore_original_limits()
                _limiter = None


def one_blas_thread():
    """Context manager: BLAS pools at one thread inside (nested and concurrent uses share one limit)."""
    controller = _get_controller()
    return nullcontext() if controller is None else _limited(controller)
