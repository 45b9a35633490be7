"""Whether this thread is capturing a CUDA graph, and what that changes.

:class:`convsuite.nn.CapturedNetwork` records a network pass with CUDA stream
capture. CuPy refuses library calls during capture ("calling cuBLAS API during
stream capture is currently unsupported"), and its CUB-accelerated reductions
allocate scratch memory as they go. While :func:`graph_capture` is open (the
warm-up passes and the capture itself, so both choose the same plans):

- the plan cache keys include the flag, so plans are chosen afresh;
- the cupy backend declines its algorithms that call cuBLAS, with that reason,
  so ``auto`` picks one of convsuite's own kernels;
- layers that would multiply through cuBLAS (``nn.Linear``) use a kernel of
  their own;
- CuPy's CUB accelerators are switched off, so reductions (pooling) are plain
  CuPy reduction kernels.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Iterator

__all__ = ["capturing", "graph_capture"]

_CAPTURING: ContextVar[bool] = ContextVar("convsuite_graph_capture", default=False)


def capturing() -> bool:
    """True inside :func:`graph_capture` (this thread or task only)."""
    return _CAPTURING.get()


def _accelerators() -> Any:
    """CuPy's accelerator switches (private API; None where this CuPy lacks them)."""
    try:
        from cupy._core import _accelerator
    except ImportError:
        return None
    return _accelerator


@contextmanager
def graph_capture() -> Iterator[None]:
    """Plans and layers that CUDA stream capture accepts, for the block's duration."""
    token = _CAPTURING.set(True)
    acc = _accelerators()
    saved = None
    if acc is not None:
        saved = (acc.get_routine_accelerators(), acc.get_reduction_accelerators())
        acc.set_routine_accelerators([])
        acc.set_reduction_accelerators([])
    try:
        yield
    finally:
        if saved is not None:
            acc.set_routine_accelerators(saved[0])
            acc.set_reduction_accelerators(saved[1])
        _CAPTURING.reset(token)
