"""The ``numba`` backend: ``prange`` kernels that use every core.

numba is optional: its kernels (``_numba_kernels`` and the other
``_numba_*`` modules, which import numba) are imported only when the backend
is first asked for, so ``import convsuite`` never does. Kernels are compiled
on first use for each dtype and cached on disk (``cache=True``);
:meth:`NumbaBackend.warm_up` does that up front and returns the seconds it
took, which benchmarks report apart from kernel time.

Algorithms (``algorithm=``; ``"auto"`` follows :meth:`NumbaBackend.choose_algorithm`):

- ``direct``: AXPY tiles over output columns, accumulators in L1; chosen
  where the product is too thin for BLAS (fewer than 8 output channels per
  group, e.g. depthwise layers) or the reduction is short.
- ``gemm``: im2col tiles and ``np.dot`` (BLAS) per work item; the fastest
  wherever the reduction ``C/g * KH * KW`` is long, pointwise (1x1) included,
  and the basis of the backward pass.
- ``blocked``: register-blocked direct convolution (4 output channels x a
  vector of columns in registers, a kernel row per pass); faster than
  ``direct``, slower than ``gemm`` on long reductions; left to the tuner.
- ``line1d``: one-pass 1-D kernel for single-channel signals, taps in
  registers; a long signal at memory speed.
"""

from __future__ import annotations

import numpy as np

from .._spec import ConvSpec
from .._threads import get_num_threads
from ._kernel_module import KernelModuleBackend, KernelSpec
from ._tiles import gemm_check, prefer_gemm

__all__ = ["NumbaBackend"]

#: Work chunks per thread: enough to balance uneven items, few enough that the
#: per-chunk accumulator allocation stays negligible.
CHUNKS_PER_THREAD = 16

#: Partial sums of dW per backward launch at most (fixed by the problem, not
#: by the thread count, so the reduction order, hence the bits, never change).
MAX_PARTIALS = 32
#: Bytes all dW partials together may take.
PARTIALS_BYTES = 64 * 2**20

_DIRECT = "convsuite.backends._numba_kernels"
_GEMM = "convsuite.backends._numba_gemm"
_LINE = "convsuite.backends._numba_line"
_BLOCKED = "convsuite.backends._numba_blocked"


def _direct_extra(s: ConvSpec, direction: str) -> tuple:
    return (CHUNKS_PER_THREAD * get_num_threads(),) if direction == "forward" else ()


def _gemm_extra(s: ConvSpec, direction: str) -> tuple:
    from ._tiles import rows_per_tile

    Ho, Wo = s.out_size
    threads = get_num_threads()
    if direction == "forward":
        # Enough row tiles that every thread gets work even at batch 1.
        min_tiles = -(-2 * threads // max(1, s.batch * s.groups))
        return (rows_per_tile(s.reduction_length, Wo, Ho, s.itemsize, min_tiles),)
    rows = rows_per_tile(s.reduction_length, Wo, Ho, s.itemsize, 1)
    per_partial = s.out_channels * s.reduction_length * s.itemsize
    partials = max(1, min(MAX_PARTIALS, PARTIALS_BYTES // max(1, per_partial)))
    return (rows, partials)


def _line_check(s: ConvSpec, direction: str) -> bool | str:
    if s.channels_per_group != 1 or s.out_channels_per_group != 1:
        return "'line1d' handles one input and one output channel per group (a signal, or depthwise 1-D)"
    return True


class NumbaBackend(KernelModuleBackend):
    """Multicore JIT kernels: ``@njit(parallel=True)`` with ``prange`` over owned outputs."""

    name = "numba"
    device = "cpu"
    priority = 30
    algorithms = ("direct", "gemm", "blocked", "line1d")
    description = "Numba prange over independent output tiles, all cores (direct, im2col+BLAS, 1-D line)"
    kernel_module = _DIRECT
    missing_hint = "numba is not installed; install it with `pip install 'convsuite[numba]'`"

    def _records(self):
        return (
            self.record(
                "direct",
                "AXPY tiles over output columns, MB=4 channels per input load, accumulators in L1",
                KernelSpec(_DIRECT, extra=_direct_extra),
            ),
            self.record(
                "gemm",
                "im2col tile per (image, group, row block) times the weights by np.dot (BLAS); "
                "1x1 without a copy; backward dW/dX from the same tile",
                KernelSpec(_GEMM, extra=_gemm_extra, blas=True),
                check=gemm_check,
            ),
            self.record(
                "blocked",
                "register-blocked direct: 4 output channels x a vector of columns in registers, "
                "a whole kernel row (KW unrolled) per pass",
                KernelSpec(_BLOCKED, backward=None, extra=_direct_extra),
            ),
            self.record(
                "line1d",
                "1-D single-channel signal in one pass, the taps' weights in registers",
                KernelSpec(_LINE, backward=None, extra=lambda s, d: (CHUNKS_PER_THREAD * get_num_threads(),)),
                ndims=(1,),
                check=_line_check,
            ),
        )

    def choose_algorithm(self, spec: ConvSpec, direction: str) -> tuple[str, str]:
        """The measured rule: ``gemm`` where the product is wide and deep enough for BLAS, else ``direct``."""
        s = spec.as_2d()
        if direction == "forward" and spec.ndim == 1 and _line_check(s, direction) is True:
            return "line1d", "1-D, one channel per group: one pass at memory speed"
        gemm, why = prefer_gemm(s, direction)
        if gemm:
            verdict = gemm_check(s, direction)
            if verdict is True:
                return "gemm", why
            return "direct", verdict
        return "direct", why

    def warm_up(self, dtype) -> float:
        """Compile or load from cache the kernels for ``dtype``; returns seconds spent."""
        import time

        start = time.perf_counter()
        self.kernels().warm_up(np.dtype(dtype))
        for name in ("gemm", "line1d"):
            self._warm_algorithm(name, np.dtype(dtype))
        return time.perf_counter() - start

    def _warm_algorithm(self, name: str, dtype) -> None:
        """Run ``name`` once on a tiny case of ``dtype`` in every direction it has."""
        from .._validation import prepare_forward

        ndim = 1 if name == "line1d" else 2
        x = np.ones((1, 1) + (5,) * ndim, dtype=dtype)
        w = np.ones((1, 1) + (3,) * ndim, dtype=dtype)
        spec = prepare_forward(f"conv{ndim}d", ndim, x, w, None, 1, 0, 1, 1).spec
        record = self.algorithm_table()[name]
        y = np.empty(spec.y_shape, dtype=dtype)
        record.plan(spec, "forward")(x, w, None, y)
        if "backward" in record.directions:
            record.plan(spec, "backward")(y, x, w, np.empty_like(x), np.empty_like(w), np.empty(1, dtype=dtype))

    def _launch(self, kernel, *args) -> None:
        import numba

        numba.set_num_threads(get_num_threads())  # numba's setting is per calling thread
        self.kernels().run_serialised(kernel, *args)
