"""The ``cython`` backend: compiled single-core kernels from ``cython_src/``.

The kernels live in the extension module ``convsuite._cython._conv_cy``,
built by ``pip install .``. This module imports it only inside
``available()``, so a missing build is reported with its reason instead of
breaking ``import convsuite``; there is no pure-Python stand-in.
"""

from __future__ import annotations

import numpy as np

from .base import Backend, Verdict

__all__ = ["CythonBackend"]


def _kernels():
    """The compiled module (raises ImportError when the extension is not built)."""
    from .._cython import _conv_cy

    return _conv_cy


class CythonBackend(Backend):
    """Single-core compiled loops (typed memoryviews, GIL released, no OpenMP)."""

    name = "cython"
    device = "cpu"
    priority = 20
    algorithms = ("direct",)
    description = "Cython, one core: tiled AXPY loops gcc vectorises, GIL released"

    def available(self) -> Verdict:
        try:
            _kernels()
        except ImportError as exc:
            return (
                f"extension not built ({exc}); reinstall with `pip install .` on a machine "
                "with a C compiler (set CONVSUITE_REQUIRE_EXTENSION=1 to see the build error)"
            )
        return True

    @staticmethod
    def _geometry(s):
        (sh, sw), (dh, dw) = s.stride, s.dilation
        return sh, sw, dh, dw, s.padding[0][0], s.padding[1][0], s.groups

    def forward(self, spec, x, w, bias, out, algorithm):
        s = spec.as_2d()
        if bias is None:
            bias = np.zeros(s.out_channels, dtype=x.dtype)
        _kernels().forward(
            x.reshape(s.x_shape), w.reshape(s.w_shape), bias, out.reshape(s.y_shape), *self._geometry(s)
        )

    def backward(self, spec, grad_y, x, w, grad_x, grad_w, grad_b, algorithm):
        s = spec.as_2d()
        _kernels().backward(
            grad_y.reshape(s.y_shape),
            x.reshape(s.x_shape),
            w.reshape(s.w_shape),
            grad_x.reshape(s.x_shape),
            grad_w.reshape(s.w_shape),
            grad_b,
            *self._geometry(s),
        )
