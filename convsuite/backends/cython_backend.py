"""The ``cython`` backend: compiled single-core kernels from ``cython_src/``.

The kernels live in the extension modules ``convsuite._cython._conv_cy``
(``direct``), ``convsuite._cython._gemm_cy`` (``gemm``) and
``convsuite._cython._depthwise_cy`` (``depthwise``), built by ``pip
install .``; they are imported only when the backend is first asked for, so
a missing build is reported with its reason instead of breaking ``import
convsuite``. There is no pure-Python stand-in.

Algorithms (``algorithm=``; ``"auto"`` follows :meth:`CythonBackend.choose_algorithm`):

- ``direct``: AXPY tiles gcc vectorises, accumulators in L1; the fastest
  where the reduction is short or the layer is depthwise.
- ``gemm``: packed im2col tiles and BLAS ``sgemm``/``dgemm`` (``_blas_routines``) written
  straight into the output rows; long reductions, 1x1 layers, and backward.
- ``depthwise``: one input channel per group (depthwise layers, a
  single-channel input with several filters): zero-padded phase planes and
  one flat AXPY per tap over whole bands of rows (forward).

Tunable parameters (``params=``): ``direct`` has ``tile_w`` (forward
columns per pass), ``gemm`` has ``tile_kib`` (the im2col tile budget),
``depthwise`` has ``band_kib`` (its phase planes' budget); all are kernel
arguments, so a sweep rebuilds nothing.
"""

from __future__ import annotations

from .._spec import ConvSpec
from . import _tiles
from ._depthwise_bands import BAND, DEPTHWISE_WHY, SUMMARY, bands, depthwise_check
from ._depthwise_bands import prefer as _prefer_depthwise
from ._kernel_module import KernelModuleBackend, KernelSpec
from ._tiles import TILE_KIB_VALUES, gemm_check, prefer_gemm
from .base import Tunable

__all__ = ["CythonBackend"]

_DIRECT = "convsuite._cython._conv_cy"
_GEMM = "convsuite._cython._gemm_cy"
_DEPTHWISE = "convsuite._cython._depthwise_cy"


# --- tunable parameters ------------------------------------------------------
# Runtime arguments of the compiled kernels: a sweep rebuilds nothing.

_DIRECT_TILE = Tunable(
    "tile_w",
    (32, 64, 128, 256, 512, 1024),  # at most _conv_cy's TILE_W_MAX: its accumulators are stack arrays
    256,  # _conv_cy's TILE_W
    "output columns per pass: MB=4 accumulator rows of this length stay in L1 (forward)",
)
_GEMM_TILE = Tunable(
    "tile_kib",
    TILE_KIB_VALUES,
    lambda s, direction: _default_tile_kib(s.as_2d()),
    "KiB budget of one packed im2col tile: its output rows are as many as fit (at least one); "
    "by default 256, more where a tile would have fewer than 256 columns",
)


def _default_tile_kib(s: ConvSpec) -> int:
    """``gemm``'s default budget: 256 KiB, more where its tiles would be thin (``_tiles.default_tile_kib``)."""
    Ho, Wo = s.out_size
    return _tiles.default_tile_kib(s.reduction_length, Wo, Ho, s.itemsize)


def _direct_extra(s: ConvSpec, direction: str, params) -> tuple:
    return (params["tile_w"],) if direction == "forward" else ()


def _direct_constraint(s: ConvSpec, direction: str, params) -> bool | str:
    """The backward kernel has no column tiles: only the default ``tile_w`` there."""
    if direction == "backward" and params["tile_w"] != _DIRECT_TILE.default:
        return (
            f"the backward kernel does not use 'tile_w' (only its default, {_DIRECT_TILE.default}); "
            f"got {params['tile_w']!r}"
        )
    return True


def _gemm_extra(s: ConvSpec, direction: str, params) -> tuple:
    Ho, Wo = s.out_size
    return (_tiles.rows_per_tile(s.reduction_length, Wo, Ho, s.itemsize, 1, params["tile_kib"] * 1024),)


def _depthwise_extra(s: ConvSpec, direction: str, params) -> tuple:
    return bands(s, params["band_kib"], 1)  # one core: no need to split for threads


#: Forward, one input channel per group and 2+ filters each: from this many outputs
#: (batch x pixels x filters) ``gemm`` beats ``depthwise``, which re-reads its phase
#: planes once per filter (2-core AMD EPYC VM, 2026-11-25, float32, medians of 7-15
#: interleaved calls): ECE408 fa21 conv1 (1000 x 1 -> 4, 7x7) gemm 85 ms vs depthwise
#: 115; LeNet conv1 at batch 8 (38k outputs) 72 vs 139 us; 16 -> 32 3x3 56x56 batch 8
#: 1.05 vs 1.45 ms; below it depthwise: LeNet conv1 at batch 1 (4.7k) 25 vs 36 us, 1 -> 2
#: 3x3 stride 2 on 224x224 (25k) 73 vs 125 us. One filter per channel stays depthwise
#: (MobileNet's 3x3 layers: within 5 % of direct, ahead of gemm).
MULTIPLIER_GEMM_OUTPUTS = 2**15


class CythonBackend(KernelModuleBackend):
    """Single-core compiled loops (typed memoryviews, GIL released, no OpenMP)."""

    name = "cython"
    device = "cpu"
    priority = 20
    description = "Cython, one core: tiled AXPY loops gcc vectorises, or im2col + BLAS; GIL released"
    # No OpenMP; gemm's BLAS at one thread: scipy-openblas32 is set to one at load (_blas_routines),
    # SciPy's fallback is held to one by threadpoolctl during a launch (without threadpoolctl, an
    # install without both, gemm's BLAS may use its own threads: the only exception).
    single_core = True
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
                KernelSpec(_DIRECT, extra=_direct_extra),
                tunables=(_DIRECT_TILE,),
                constraint=_direct_constraint,
            ),
            self.record(
                "gemm",
                "packed im2col tile times the weights by BLAS sgemm/dgemm (_blas_routines) into the output rows; "
                "1x1 without a copy; backward dW/dX from the same tile",
                KernelSpec(_GEMM, extra=_gemm_extra, blas=True),
                check=gemm_check,
                tunables=(_GEMM_TILE,),
            ),
            self.record(
                "depthwise",
                SUMMARY,
                KernelSpec(_DEPTHWISE, backward=None, extra=_depthwise_extra),
                check=depthwise_check,
                tunables=(BAND,),
            ),
        )

    def choose_algorithm(self, spec: ConvSpec, direction: str) -> tuple[str, str]:
        """The measured rule: ``depthwise`` for one input channel per group and one filter each
        (or few filters and little work), ``gemm`` where the product is wide and deep enough
        for BLAS, else ``direct``.
        """
        s = spec.as_2d()
        if direction == "forward" and _prefer_depthwise(s):
            outputs = s.batch * s.out_size[0] * s.out_size[1] * s.out_channels
            if (
                s.out_channels_per_group == 1
                or outputs < MULTIPLIER_GEMM_OUTPUTS
                or gemm_check(s, direction) is not True
            ):
                return "depthwise", DEPTHWISE_WHY
            return "gemm", (
                f"{s.out_channels_per_group} filters per input channel, {outputs} outputs "
                f"(>= {MULTIPLIER_GEMM_OUTPUTS}): one BLAS product beats re-reading the planes per filter"
            )
        gemm, why = prefer_gemm(s, direction)
        if gemm:
            verdict = gemm_check(s, direction)
            if verdict is True:
                return "gemm", why
            return "direct", verdict
        return "direct", why
