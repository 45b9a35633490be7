"""Output buffers handed to backends, and the poisoning switch tests use.

The front end allocates every buffer a backend writes. Under
:func:`poisoned_outputs` those buffers start as NaN instead of whatever
``empty`` returns, so an element a backend forgets to write shows up as NaN
in the comparison with the reference instead of passing by luck.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator

__all__ = ["allocator", "empty", "poisoned_outputs", "poisoning"]

_POISON: ContextVar[bool] = ContextVar("convsuite_poison_outputs", default=False)

#: Whether output buffers are to be poisoned here (a C-level call, for the per-call path of plans).
poisoning = _POISON.get


def allocator(xp: Any) -> Callable[[tuple[int, ...], Any], Any]:
    """``xp``'s uninitialised C-order allocation, called as ``alloc(shape, dtype)``.

    For CuPy its array constructor itself: ``cupy.empty`` is a Python function
    that only forwards to ``cupy.ndarray(shape, dtype, order="C")``, a frame
    a plan's call need not pay. Poisoning is the caller's (:func:`poisoning`).
    """
    if getattr(xp, "__name__", "") == "cupy":
        return xp.ndarray
    return xp.empty


def empty(shape: tuple[int, ...], dtype: Any, xp: Any) -> Any:
    """An uninitialised buffer, or one full of NaN while poisoning is on."""
    buffer = allocator(xp)(shape, dtype)
    if _POISON.get():
        buffer.fill(float("nan"))
    return buffer


@contextmanager
def poisoned_outputs() -> Iterator[None]:
    """Fill every output buffer with NaN before the backend runs (for tests)."""
    token = _POISON.set(True)
    try:
        yield
    finally:
        _POISON.reset(token)
