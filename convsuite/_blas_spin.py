"""Shorten how long idle OpenBLAS threads spin, before NumPy loads OpenBLAS.

After every multithreaded call, OpenBLAS keeps its worker threads spinning
(``sched_yield`` in a loop) for ``2**28`` CPU cycles, about 0.1 s, before
they sleep. Numba's OpenMP workers that start in that window share the cores
with the spinners: measured on the 2-core CI machine (2026-11-22), a numba
1x1 convolution (C 96 -> 24, 56x56) took 0.69 ms alone and 8.0 ms right
after a 1x1280 @ 1280x1000 NumPy product (0.81 ms with the spin at 2**4
cycles, 0.83 ms at 2**16); MobileNetV2 batch 1 on the numba backend, whose
classifier is a NumPy product, went from 120 ms to 54 ms (median of 15,
spin at 2**4 cycles).

OpenBLAS reads ``OPENBLAS_THREAD_TIMEOUT`` (log2 of the spin, in cycles;
4 to 30) once, when it is loaded, so the setting only helps if it is made
before NumPy or SciPy are imported; ``import convsuite`` does it then, and
never overrides a value the user set. ``2**16`` cycles (~30 us) still keeps
back-to-back BLAS calls on warm threads: the numpy backend's MobileNetV2
was 45.1 vs 46.9 ms (default vs shortened, three alternating processes each,
within the run-to-run spread). When NumPy is already loaded nothing changes;
set the variable in the environment to get the same effect.

That usual case (``import numpy`` before ``import convsuite``) is recorded:
:func:`numpy_blas_spins_long` tells the layers of ``convsuite.nn`` to run
their own NumPy products on one BLAS thread, which wakes no OpenBLAS worker
and so leaves no spinner behind. Measured on the 2-core VM (2026-11-24), a
LeNet-5 training step at batch 64 on the numba backend, NumPy imported
first: 65 ms median (11-75 ms) with the fully-connected products on two BLAS
threads, 7.7 ms (7.6-8.5) on one, 7.7 ms with the spin shortened.
"""

from __future__ import annotations

import os
import sys

__all__ = ["SPIN_LOG2_CYCLES", "numpy_blas_spins_long", "shorten_openblas_spin"]

SPIN_LOG2_CYCLES = "16"

#: Whether NumPy's OpenBLAS keeps its idle threads spinning for the default
#: ~0.1 s; decided by the first :func:`shorten_openblas_spin` (at import).
_spins_long: bool | None = None


def shorten_openblas_spin() -> bool:
    """Set ``OPENBLAS_THREAD_TIMEOUT`` unless NumPy is loaded or the user set it; True if set here."""
    global _spins_long
    user_value = os.environ.get("OPENBLAS_THREAD_TIMEOUT")
    if user_value is not None:
        if _spins_long is None:
            _spins_long = not _is_short(user_value)
        return False
    if "numpy" in sys.modules:
        if _spins_long is None:
            _spins_long = True
        return False
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = SPIN_LOG2_CYCLES
    _spins_long = False
    return True


def _is_short(value: str) -> bool:
    """Whether an ``OPENBLAS_THREAD_TIMEOUT`` value spins no longer than ours (OpenBLAS clamps to 4-30)."""
    try:
        return 0 < int(value) <= int(SPIN_LOG2_CYCLES)
    except ValueError:
        return False  # OpenBLAS's atoi reads 0 from it, which keeps the default spin


def numpy_blas_spins_long() -> bool:
    """True when NumPy's OpenBLAS was loaded with its default (~0.1 s) idle spin."""
    return bool(_spins_long)
