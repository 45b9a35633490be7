"""The ``numba`` backend: ``prange`` kernels that use every core.

numba is optional: this module imports it (through ``_numba_kernels``) only
inside ``available()`` and the compute methods, so ``import convsuite`` never
does. Kernels are compiled on first use for each dtype and cached on disk
(``cache=True``); :meth:`NumbaBackend.warm_up` does that up front and returns
the seconds it took, which benchmarks report apart from kernel time.
"""

from __future__ import annotations

import numpy as np

from .._threads import get_num_threads
from .base import Backend, Verdict

__all__ = ["NumbaBackend"]


def _kernels():
    """The compiled-on-demand kernels module (raises ImportError without numba)."""
    from . import _numba_kernels

    return _numba_kernels


class NumbaBackend(Backend):
    """Multicore JIT kernels: ``@njit(parallel=True)`` with ``prange`` over owned outputs."""

    name = "numba"
    device = "cpu"
    priority = 30
    algorithms = ("direct",)
    description = "Numba prange over independent output tiles, all cores"

    def available(self) -> Verdict:
        try:
            _kernels()
        except ImportError as exc:
            return f"numba is not installed ({exc}); install it with `pip install 'convsuite[numba]'`"
        return True

    def warm_up(self, dtype) -> float:
        """Compile or load from cache the kernels for ``dtype``; returns seconds spent."""
        return _kernels().warm_up(np.dtype(dtype))

    @staticmethod
    def _launch(kernel, s, *arrays, extra=()):
        import numba

        numba.set_num_threads(get_num_threads())  # per calling thread in numba
        (sh, sw), (dh, dw) = s.stride, s.dilation
        geometry = (sh, sw, dh, dw, s.padding[0][0], s.padding[1][0], s.groups)
        _kernels().run_serialised(kernel, *arrays, *geometry, *extra)

    def forward(self, spec, x, w, bias, out, algorithm):
        s = spec.as_2d()
        if bias is None:
            bias = np.zeros(s.out_channels, dtype=x.dtype)
        # A few chunks per thread balance the load; each allocates one accumulator.
        chunks = 16 * get_num_threads()
        self._launch(
            _kernels().forward,
            s,
            x.reshape(s.x_shape),
            w.reshape(s.w_shape),
            bias,
            out.reshape(s.y_shape),
            extra=(chunks,),
        )

    def backward(self, spec, grad_y, x, w, grad_x, grad_w, grad_b, algorithm):
        s = spec.as_2d()
        self._launch(
            _kernels().backward,
            s,
            grad_y.reshape(s.y_shape),
            x.reshape(s.x_shape),
            w.reshape(s.w_shape),
            grad_x.reshape(s.x_shape),
            grad_w.reshape(s.w_shape),
            grad_b,
        )
