"""Whether numba can keep convsuite's compiled kernels on disk (``cache=True``).

Numba writes a kernel's machine code beside its source (``__pycache__``) or,
where that folder is read-only, in the user's cache folder. Where neither
can be written (a read-only container image whose home is read-only too, a
sandbox without a home), ``njit(cache=True)`` raises ``RuntimeError: cannot
cache function ...: no locator available`` when the module is imported,
and every numba call, ``auto``'s included, failed with it. There the
kernels are compiled in memory in each process instead (slower first calls,
same code), with a warning that says how to get the cache back.
"""

from __future__ import annotations

import warnings

from numba import njit

__all__ = ["CACHE"]


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


#: ``cache=`` of every ``njit`` kernel of the numba backend.
CACHE = can_cache()
