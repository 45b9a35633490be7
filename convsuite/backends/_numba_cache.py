"""numba's on-disk cache of convsuite's kernels: whether it can be used, and what a broken one costs.

Where the cache can be written. Numba writes a kernel's machine code beside
its source (``__pycache__``), in ``NUMBA_CACHE_DIR``, or in the user's cache
folder, the first of them it can write to. Where none can be written (a
read-only container image whose home is read-only too, a sandbox without a
home), ``njit(cache=True)`` raises ``RuntimeError: cannot cache function ...:
no locator available`` when the module is imported, and every numba call,
``auto``'s included, failed with it. There the kernels are compiled in memory
in each process instead (slower first calls, same code), with a warning that
says how to get the cache back (:data:`CACHE`).

A broken cache. numba reads a kernel's index (``*.nbi``) and code
(``*.nbc``) with ``pickle`` and lets every error but a missing file through:
one truncated index (a full disk, a killed writer) made every process fail
with a raw ``EOFError`` on import, ``list_backends()`` and ``auto``
included, until the file was deleted by hand. :func:`kernel_jit` builds
the kernels with a cache whose faults are misses: on the first fault in a
cache folder, every index and code file there that cannot be read back is
moved aside (renamed ``*.corrupt-<random>``, kept for a bug report) with one
warning naming them, and the kernel is compiled again and saved afresh. Where
nothing can be moved or written (a read-only folder), the kernels of that
folder compile in memory in this process, with one warning. A fault numba's
loader raises all the same (a numba without the hooks used here) makes the
backend unavailable with the reason instead (``NumbaBackend.load_fault``).
"""

from __future__ import annotations

import os
import pickle
import uuid
import warnings

import numba
from numba import njit

from .. import _forksafe

__all__ = ["CACHE", "kernel_jit"]


def _probe() -> int:
    """A function of this folder: numba finds a cache location for it as for every kernel beside it."""
    return 0


def can_cache() -> bool:
    """Whether ``njit(cache=True)`` works for functions of this package's folder."""
    try:
        njit(cache=True)(_probe)
    except RuntimeError as exc:  # numba's "no locator available": no writable cache folder anywhere
        warnings.warn(
            f"numba cannot cache convsuite's kernels on disk ({exc}); they are compiled in every process. "
            "Set NUMBA_CACHE_DIR to a writable folder to keep them.",
            RuntimeWarning,
            stacklevel=2,
        )
        return False
    return True


#: Whether the kernels of the numba backend are kept on disk.
CACHE = can_cache()

_lock = _forksafe.lock()
#: Cache folders searched for unreadable files already (once per folder and process).
_swept: set[str] = set()
#: Cache folders this process no longer reads or writes (nothing there could be repaired).
_off: set[str] = set()


def kernel_jit(**flags):
    """``numba.njit(**flags)`` with :data:`CACHE` and a cache whose read and write faults are misses."""

    def decorate(function):
        dispatcher = njit(**flags)(function)
        if CACHE:
            _enable_cache(dispatcher)
        return dispatcher

    return decorate


def _enable_cache(dispatcher) -> None:
    """Give ``dispatcher`` numba's own disk cache, wrapped by :class:`_RepairingCache` where numba allows."""
    dispatcher.enable_caching()  # what njit(cache=True) does
    cache = getattr(dispatcher, "_cache", None)
    if cache is not None and hasattr(cache, "load_overload") and hasattr(cache, "save_overload"):
        dispatcher._cache = _RepairingCache(cache)


class _RepairingCache:
    """numba's cache of one kernel (its ``FunctionCache``), whose faults are handled by :func:`_fault`."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        if name == "_inner":  # not set yet (a copy made without __init__): no endless recursion
            raise AttributeError(name)
        return getattr(self._inner, name)

    def load_overload(self, sig, target_context):
        """The cached compile result, or None (compile it): a file that cannot be read is a miss."""
        folder = self._inner.cache_path
        if folder in _off:
            return None
        try:
            return self._inner.load_overload(sig, target_context)
        except Exception as exc:  # any error reading the cache: compiling again is the remedy
            _fault(self._inner, exc, writing=False)
            return None

    def save_overload(self, sig, data) -> None:
        """Save a compile result; a file in the way is moved aside once, else the folder is left alone."""
        folder = self._inner.cache_path
        if folder in _off:
            return
        try:
            self._inner.save_overload(sig, data)
        except Exception as exc:  # the kernel is compiled; a cache it cannot keep must not fail the call
            if _fault(self._inner, exc, writing=True):
                try:
                    self._inner.save_overload(sig, data)
                    return
                except Exception as again:
                    exc = again
            _turn_off(folder, f"could not write to it ({type(exc).__name__}: {exc})")


def _fault(cache, exc: Exception, *, writing: bool) -> bool:
    """Handle a fault of ``cache``'s folder; True when something was moved aside (worth trying again).

    The first fault in a folder moves aside every file there that cannot be
    read back (:func:`_unreadable`); a later one, or a first one that left
    nothing to blame (numba could not rebuild code it read), moves aside the
    kernel's own index, so that numba compiles it and writes both files anew.
    """
    folder = cache.cache_path
    with _lock:
        if folder in _off:
            return False
        broken = []
        if folder not in _swept:
            _swept.add(folder)
            broken = _unreadable(folder)
        if not broken and not writing:
            index = _index_path(cache)
            if index is None or not os.path.lexists(index):
                _turn_off(folder, f"it could not be read ({type(exc).__name__}: {exc})")
                return False
            broken = [(index, exc)]
        if not broken:
            return False
        suffix = f".corrupt-{uuid.uuid4().hex[:8]}"
        failed = []
        for path, _ in broken:
            try:
                os.replace(path, path + suffix)
            except FileNotFoundError:  # another process moved it first
                pass
            except OSError as error:
                failed.append((path, error))
        what = _listing(broken)
        if failed:
            path, error = failed[0]
            _turn_off(folder, f"{what} could not be read, nor {path} be moved aside ({error})")
            return False
    warnings.warn(
        f"numba's on-disk cache of convsuite's kernels had files it could not read: {what}; "
        f"moved them aside (renamed *{suffix}) and compiling the kernels again",
        RuntimeWarning,
        stacklevel=2,
    )
    return True


def _turn_off(folder: str, why: str) -> None:
    """Stop reading and writing ``folder`` in this process (kernels compile in memory), with one warning."""
    if folder in _off:
        return
    _off.add(folder)
    warnings.warn(
        f"numba's on-disk cache of convsuite's kernels in {folder}: {why}; the kernels of that folder are "
        "compiled in memory in this process. Delete the folder (or set NUMBA_CACHE_DIR to a writable one) "
        "to cache them again.",
        RuntimeWarning,
        stacklevel=3,
    )


def _listing(broken: list) -> str:
    """``path (Error: message)``, with a count of the others."""
    path, exc = broken[0]
    more = f", and {len(broken) - 1} more" if len(broken) > 1 else ""
    return f"{path} ({type(exc).__name__}: {exc}){more}"


def _index_path(cache) -> str | None:
    """The index file of one kernel's cache (numba's ``IndexDataCacheFile``), or None if numba hides it."""
    return getattr(getattr(cache, "_cache_file", None), "_index_path", None)


def _unreadable(folder: str) -> list[tuple[str, Exception]]:
    """Every index in ``folder``, and code file an index lists, that numba could not read back, with why.

    Read as numba reads them (``IndexDataCacheFile._load_index`` and
    ``_load_data``): the index is the pickled numba version, then the pickled
    ``(source stamp, {key: code file name})``; an index of another numba
    version is left alone (numba ignores it); a code file is one pickle. A
    path that is not a file, or cannot be opened, counts as unreadable too.
    """
    try:
        names = sorted(os.listdir(folder))
    except OSError:  # numba reaches the folder through other calls; their faults are handled there
        return []
    broken: list[tuple[str, Exception]] = []
    for name in names:
        if not name.endswith(".nbi"):
            continue
        index = os.path.join(folder, name)
        try:
            with open(index, "rb") as f:
                version = pickle.load(f)
                rest = f.read()
            if version != numba.__version__:
                continue
            _, overloads = pickle.loads(rest)
            listed = list(overloads.values())
            if not all(isinstance(data, str) for data in listed):
                raise TypeError("the index lists code files that are not file names")
        except Exception as exc:  # whatever unpickling garbage raises
            broken.append((index, exc))
            continue
        for data in listed:
            path = os.path.join(folder, data)
            try:
                with open(path, "rb") as f:
                    pickle.loads(f.read())
            except FileNotFoundError:  # numba reads a missing code file as a miss
                continue
            except Exception as exc:
                broken.append((path, exc))
    return broken
