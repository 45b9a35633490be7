"""What a forked child must not inherit as it was: locks, thread pools, cached handles.

``fork`` copies the parent's memory but only the thread that called it. A lock
that another parent thread held stays held in the child, where no thread will
ever release it; a thread pool keeps its queue and its count of idle workers
but not the workers, so work submitted to it waits forever; a handle to a
device context (CUDA) or a thread team (OpenMP) points at state the child does
not have. CPython resets its own such state the same way
(``concurrent.futures``, ``logging``: ``os.register_at_fork``).

One mechanism for the whole package, registered with the interpreter once:

- :func:`lock` and :func:`rlock` make ``threading`` locks that come back
  unlocked in a forked child (``_at_fork_reinit``, what CPython's own modules
  call). They are the plain C locks, so holding one costs nothing extra; the
  registry holds them weakly, so a lock of an object that is collected goes
  with it.
- :func:`at_fork_in_child` registers a callback (drop a pool, forget cached
  handles, mark a device unusable) run in the child right after the fork, in
  the order registered; a bound method is held weakly, a plain function for
  the life of the process.

A callback must not raise and must not wait for anything: it runs before the
child's own code, with only the forking thread alive. An error is reported as
a warning and the other callbacks still run.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from typing import Callable

__all__ = ["at_fork_in_child", "lock", "rlock"]

_locks: weakref.WeakSet = weakref.WeakSet()
_callbacks: list = []  # zero-argument callables, or weak references to bound methods


def lock() -> threading.Lock:
    """A ``threading.Lock`` that is unlocked again in a forked child."""
    made = threading.Lock()
    _locks.add(made)
    return made


def rlock() -> threading.RLock:
    """A ``threading.RLock`` that is unlocked again (owner and depth cleared) in a forked child."""
    made = threading.RLock()
    _locks.add(made)
    return made


def at_fork_in_child(callback: Callable[[], object]) -> Callable[[], object]:
    """Run ``callback()`` in every child forked from now on, right after the fork; returns ``callback``.

    Usable as a decorator on a module-level function. A bound method is held
    through a weak reference, so registering one keeps its object alive no
    longer than it would be otherwise.
    """
    if not callable(callback):
        raise TypeError(f"`callback` must be callable; got {type(callback).__name__}")
    if getattr(callback, "__self__", None) is not None and hasattr(callback, "__func__"):
        _callbacks.append(weakref.WeakMethod(callback))
    else:
        _callbacks.append(callback)
    return callback


def _after_fork_in_child() -> None:
    """Unlock every registered lock, then run the callbacks (the interpreter's after-fork hook)."""
    for held in list(_locks):
        held._at_fork_reinit()
    live = []
    for entry in _callbacks:
        callback = entry() if isinstance(entry, weakref.WeakMethod) else entry
        if callback is None:  # the object of a bound method is gone: forget it
            continue
        live.append(entry)
        try:
            callback()
        except Exception as exc:  # one broken reset must not leave the others undone
            warnings.warn(f"convsuite's reset after fork failed in {callback!r}: {exc!r}", RuntimeWarning, stacklevel=1)
    _callbacks[:] = live


if hasattr(os, "register_at_fork"):  # POSIX; Windows has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
