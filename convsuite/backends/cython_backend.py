"""The ``cython`` backend: compiled single-core kernels from ``cython_src/``.

The kernels live in the extension modules ``convsuite._cython._conv_cy``
(``direct``) and ``convsuite._cython._gemm_cy`` (``gemm``), built by ``pip
install .``; they are imported only when the backend is first asked for, so
a missing build is reported with its reason instead of breaking ``import
convsuite``. There is no pure-Python stand-in.

Algorithms (``algorithm=``; ``"auto"`` follows :meth:`CythonBackend.choose_algorithm`):

- ``direct``: AXPY tiles gcc vectorises, accumulators in L1; the fastest
  where the reduction is short or the layer is depthwise.
- ``gemm``: packed im2col tiles and SciPy's BLAS ``sgemm``/``dgemm`` written
  straight into the output rows; long reductions, 1x1 layers, and backward.
"""

from __future__ import annotations

from .._spec import ConvSpec
from ._kernel_module import KernelModuleBackend, KernelSpec
from ._tiles import gemm_check, prefer_gemm

__all__ = ["CythonBackend"]

_DIRECT = "convsuite._cython._conv_cy"
_GEMM = "convsuite._cython._gemm_cy"


def _gemm_extra(s: ConvSpec, direction: str) -> tuple:
    from ._tiles import rows_per_tile

    Ho, Wo = s.out_size
    return (rows_per_tile(s.reduction_length, Wo, Ho, s.itemsize, 1),)


class CythonBackend(KernelModuleBackend):
    """Single-core compiled loops (typed memoryviews, GIL released, no OpenMP)."""

    name = "cython"
    device = "cpu"
    priority = 20
    algorithms = ("direct", "gemm")
    description = "Cython, one core: tiled AXPY loops gcc vectorises, or im2col + BLAS; GIL released"
    kernel_module = _DIRECT
    missing_hint = (
        "extension not built; reinstall with `pip install .` on a machine with a C compiler "
        "(set CONVSUITE_REQUIRE_EXTENSION=1 to see the build error)"
    )

    def _records(self):
        return (
            self.record(
                "direct",
                "AXPY tiles over output columns, 4 channels per input load, accumulators in L1",
                KernelSpec(_DIRECT),
            ),
            self.record(
                "gemm",
                "packed im2col tile times the weights by SciPy's sgemm/dgemm into the output rows; "
                "1x1 without a copy; backward dW/dX from the same tile",
                KernelSpec(_GEMM, extra=_gemm_extra, blas=True),
                check=gemm_check,
            ),
        )

    def choose_algorithm(self, spec: ConvSpec, direction: str) -> tuple[str, str]:
        """The measured rule: ``gemm`` where the product is wide and deep enough for BLAS, else ``direct``."""
        s = spec.as_2d()
        gemm, why = prefer_gemm(s, direction)
        if gemm:
            verdict = gemm_check(s, direction)
            if verdict is True:
                return "gemm", why
            return "direct", verdict
        return "direct", why
