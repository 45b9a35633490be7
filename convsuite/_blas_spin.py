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
"""

from __future__ import annotations

import os
import sys

__all__ = ["SPIN_LOG2_CYCLES", "shorten_openblas_spin"]

SPIN_LOG2_CYCLES = "16"


def shorten_openblas_spin() -> bool:
    """Set ``OPENBLAS_THREAD_TIMEOUT`` unless NumPy is loaded or the user set it; True if set here."""
    if "numpy" in sys.modules or "OPENBLAS_THREAD_TIMEOUT" in os.environ:
        return False
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = SPIN_LOG2_CYCLES
    return True
