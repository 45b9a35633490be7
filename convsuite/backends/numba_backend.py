"""The ``numba`` backend: ``prange`` kernels that use every core.

numba is optional: its kernels (``_numba_kernels``, which imports numba) are
imported only when the backend is first asked for, so ``import convsuite``
never does. Kernels are compiled on first use for each dtype and cached on
disk (``cache=True``); :meth:`NumbaBackend.warm_up` does that up front and
returns the seconds it took, which benchmarks report apart from kernel time.
"""

from __future__ import annotations

import numpy as np

from .._spec import ConvSpec
from .._threads import get_num_threads
from ._kernel_module import KernelModuleBackend

__all__ = ["NumbaBackend"]

#: Work chunks per thread: enough to balance uneven items, few enough that the
#: per-chunk accumulator allocation stays negligible.
CHUNKS_PER_THREAD = 16


class NumbaBackend(KernelModuleBackend):
    """Multicore JIT kernels: ``@njit(parallel=True)`` with ``prange`` over owned outputs."""

    name = "numba"
    device = "cpu"
    priority = 30
    algorithms = ("direct",)
    description = "Numba prange over independent output tiles, all cores"
    kernel_module = "convsuite.backends._numba_kernels"
    missing_hint = "numba is not installed; install it with `pip install 'convsuite[numba]'`"

    def warm_up(self, dtype) -> float:
        """Compile or load from cache the kernels for ``dtype``; returns seconds spent."""
        return self.kernels().warm_up(np.dtype(dtype))

    def _launch(self, kernel, *args) -> None:
        import numba

        numba.set_num_threads(get_num_threads())  # numba's setting is per calling thread
        self.kernels().run_serialised(kernel, *args)

    def _forward_extra(self, s: ConvSpec) -> tuple:
        return (CHUNKS_PER_THREAD * get_num_threads(),)
