"""Base of backends whose kernels live in a module with one shared signature.

The Cython extension and the numba kernels both export

    forward(x, w, bias, out, sh, sw, dh, dw, pad_top, pad_left, groups, *extra)
    backward(grad_y, x, w, grad_x, grad_w, grad_b, sh, sw, dh, dw, pad_top, pad_left, groups)

on 4-D C-contiguous arrays (1-D problems arrive as 2-D with a unit height).
This class does the lazy import, the availability reason, the reshapes and
the geometry; subclasses name the module and may add launch details.
"""

from __future__ import annotations

import importlib

import numpy as np

from .._spec import ConvSpec
from .base import Backend, Verdict

__all__ = ["KernelModuleBackend"]


class KernelModuleBackend(Backend):
    """A backend that calls ``forward``/``backward`` of a lazily imported module."""

    #: Absolute module path of the kernels, imported on first use.
    kernel_module: str
    #: What to tell the user when that import fails (the error is appended).
    missing_hint: str

    def kernels(self):
        """The kernel module (raises ImportError when it cannot be loaded)."""
        return importlib.import_module(self.kernel_module)

    def available(self) -> Verdict:
        try:
            self.kernels()
        except ImportError as exc:
            return f"{self.missing_hint} ({exc})"
        return True

    def _launch(self, kernel, *args) -> None:
        """Run one kernel call; subclasses add thread settings or locks."""
        kernel(*args)

    def _forward_extra(self, s: ConvSpec) -> tuple:
        """Arguments the module's forward takes after the geometry."""
        return ()

    @staticmethod
    def _geometry(s: ConvSpec) -> tuple:
        (sh, sw), (dh, dw) = s.stride, s.dilation
        return (sh, sw, dh, dw, s.padding[0][0], s.padding[1][0], s.groups)

    def plan(self, spec: ConvSpec, algorithm: str, direction: str):
        """A launch with the module, the geometry and the 4-D shapes resolved once.

        Only :meth:`_launch` runs per call, so subclasses that set threads or
        take locks there keep doing so.
        """
        s = spec.as_2d()
        geometry = self._geometry(s)
        launch = self._launch
        if direction == "forward":
            kernel = self.kernels().forward
            x_shape, w_shape, y_shape = s.x_shape, s.w_shape, s.y_shape
            zero_bias = np.zeros(s.out_channels, dtype=s.dtype)  # read-only to the kernel: shared by calls
            forward_extra = self._forward_extra
            if spec.ndim == 2:  # operands arrive in their 4-D shapes: no reshapes per call

                def run_forward_2d(x, w, bias, out):
                    launch(kernel, x, w, zero_bias if bias is None else bias, out, *geometry, *forward_extra(s))

                return run_forward_2d

            def run_forward(x, w, bias, out):
                launch(
                    kernel,
                    x.reshape(x_shape),
                    w.reshape(w_shape),
                    zero_bias if bias is None else bias,
                    out.reshape(y_shape),
                    *geometry,
                    *forward_extra(s),
                )

            return run_forward
        kernel = self.kernels().backward
        x_shape, w_shape, y_shape = s.x_shape, s.w_shape, s.y_shape

        def run_backward(grad_y, x, w, grad_x, grad_w, grad_b):
            launch(
                kernel,
                grad_y.reshape(y_shape),
                x.reshape(x_shape),
                w.reshape(w_shape),
                grad_x.reshape(x_shape),
                grad_w.reshape(w_shape),
                grad_b,
                *geometry,
            )

        return run_backward

    def forward(self, spec, x, w, bias, out, algorithm):
        s = spec.as_2d()
        if bias is None:
            bias = np.zeros(s.out_channels, dtype=x.dtype)
        arrays = (x.reshape(s.x_shape), w.reshape(s.w_shape), bias, out.reshape(s.y_shape))
        self._launch(self.kernels().forward, *arrays, *self._geometry(s), *self._forward_extra(s))

    def backward(self, spec, grad_y, x, w, grad_x, grad_w, grad_b, algorithm):
        s = spec.as_2d()
        arrays = (
            grad_y.reshape(s.y_shape),
            x.reshape(s.x_shape),
            w.reshape(s.w_shape),
            grad_x.reshape(s.x_shape),
            grad_w.reshape(s.w_shape),
            grad_b,
        )
        self._launch(self.kernels().backward, *arrays, *self._geometry(s))
