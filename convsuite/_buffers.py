"""Output buffers handed to backends, and the poisoning switch tests use.

The front end allocates every buffer a backend writes. Under
:func:`poisoned_outputs` those buffers start as NaN instead of whatever
``empty`` returns, so an element a backend forgets to write shows up as NaN
in the comparison with the reference instead of passing by luck.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

__all__ = ["empty", "poisoned_outputs"]

_POISON: ContextVar[bool] = ContextVar("convsuite_poison_outputs", default=False)


def empty(shape: tuple[int, ...], dtype, xp):
    """An uninitialised buffer, or one full of NaN while poisoning is on."""
    buffer = xp.empty(shape, dtype=dtype)
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
