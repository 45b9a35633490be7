"""One BLAS thread for the duration of a compiled kernel that calls BLAS itself.

The numba ``gemm`` algorithm calls BLAS from every ``prange`` thread, and the
Cython rung (and the joblib rung above it) runs one kernel per core; a BLAS
that then starts its own pool on every call oversubscribes the cores. The
limit comes from ``threadpoolctl`` (the maintained way to steer OpenBLAS, MKL
and BLIS pools) and is lifted when the kernel returns. Without threadpoolctl
the kernels still run, with BLAS at its own setting.

The limit is process-wide while it lasts: NumPy work in another Python
thread during a launch runs its BLAS on one thread too (slower, never wrong).
A child forked while launches were in flight inherits the limit but not the
threads that would lift it: it lifts it itself (:func:`_lift_after_fork`).
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

from .. import _forksafe

__all__ = ["one_blas_thread"]

_controller = None
_lock = _forksafe.lock()
_active = 0  # launches in flight; the limit is set by the first and lifted by the last
_limiter = None  # (library, its thread count before the first launch) while launches are in flight
_libraries = None


def _get_controller():
    """Threadpoolctl's controller, built once after the kernels' BLAS is loaded (None if unavailable)."""
    global _controller
    if _controller is None:
        try:
            import scipy.linalg.cython_blas  # noqa: F401  (loads SciPy's BLAS)
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _controller = False
        else:
            _load_kernel_blas()
            _controller = ThreadpoolController()
    return _controller or None


def _load_kernel_blas() -> None:
    """Load the BLAS the kernels call (``_blas_routines``) so that the controller lists it too."""
    from ._blas_routines import gemm_routines

    try:
        gemm_routines()
    except (ValueError, ImportError):  # a bad CONVSUITE_BLAS: the kernel's own call reports it
        pass


def _blas_libraries(controller) -> list:
    """The BLAS libraries' controllers (threadpoolctl's per-library objects), listed once."""
    global _libraries
    if _libraries is None:
        _libraries = [lib for lib in controller.lib_controllers if lib.user_api == "blas"]
    return _libraries


def _set_threads(lib, n: int) -> None:
    """Set ``lib``'s thread count from whichever Python thread launches.

    threadpoolctl's OpenBLAS ``set_num_threads`` obeys only its "controlling"
    Python thread (a bookkeeping of its own ``threadpool_limits``): from a
    Dask or joblib worker, or when the launch that lifts the limit is not the
    one that set it, the call would be ignored (the limit skipped, or left at
    one thread for the whole process). The library's own setter is
    process-wide and this module's lock already orders the calls, so it is
    called directly where threadpoolctl exposes it.
    """
    setter = getattr(lib, "_real_set_num_threads", None) or lib.set_num_threads
    setter(n)


@contextmanager
def _limited(controller):
    # Each library's own get/set calls (~3 us for both of a NumPy + SciPy
    # install) instead of threadpoolctl's limit/restore (~11 us: it rebuilds
    # its library info each time): at batch 1 a network makes dozens of such
    # launches (MobileNetV2: 35 on the gemm algorithm).
    global _active, _limiter
    with _lock:
        if _active == 0:
            libraries = _blas_libraries(controller)
            _limiter = [(lib, n) for lib in libraries if (n := lib.get_num_threads()) is not None]
            for lib, _ in _limiter:
                _set_threads(lib, 1)
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0:
                for lib, threads in _limiter:
                    _set_threads(lib, threads)
                _limiter = None


@_forksafe.at_fork_in_child
def _lift_after_fork() -> None:
    """In a forked child: the launches that held the limit ran in parent threads the child lacks; lift it."""
    global _active, _limiter
    limiter, _active, _limiter = _limiter, 0, None
    for lib, threads in limiter or ():
        _set_threads(lib, threads)


def one_blas_thread():
    """Context manager: BLAS pools at one thread inside (nested and concurrent uses share one limit)."""
    controller = _get_controller()
    return nullcontext() if controller is None else _limited(controller)
