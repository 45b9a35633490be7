"""The 1-D algorithms of the course report: one thread per output, the mask in constant memory, two
tiling strategies for the halo, and the register-blocked kernel (``conv1d.cu``).
"""

from __future__ import annotations

import math

from ...._spec import ConvSpec
from ... import _cupy_runtime as rt
from ...base import Launch, Tunable, Verdict
from .._record import CudaAlgorithm
from .._sources import CudaSource
from ._common import (
    _ARRAYS4,
    ACCUMULATOR_REGISTERS,
    ARG,
    GRID_YZ_MAX,
    HERE,
    SMEM_LIMIT,
    THREADS,
    _check_const,
    _params_1d,
    _span,
    _upload_constant,
    _with_bias,
)

#: Mask widths conv1d_blocked is compiled for (0: any width, read at run time).
BLOCKED_WIDTHS = (0, 3, 5, 7, 9, 31)

CONV1D_CU = CudaSource(
    "conv1d.cu",
    HERE,
    (
        "conv1d_naive|I",
        "conv1d_const_mask|I",
        "conv1d_tiled_halo",
        "conv1d_tiled_cached_halo",
        *[f"conv1d_blocked@{k}" for k in BLOCKED_WIDTHS],
        *[f"conv1d_blocked_pipelined@{k}" for k in BLOCKED_WIDTHS],
    ),
    defines={"CS_BLOCKED_V": 9},  # outputs per thread of conv1d_blocked (odd: no bank conflicts)
    # conv1d_blocked: acc[V] and win[V] per thread; the tile holds blockDim.x * V
    # outputs plus the halo (sized in Python from V), the sliding window reads
    # win0[V + k] < span, the float4 loads end before the mask at span + 8 and
    # the float4 stores read only the staged outputs, whatever V >= 1. Odd V
    # only avoids bank conflicts, so only odd values are offered.
    overridable={"CS_BLOCKED_V": (1, 3, 5, 7, 9, 11, 13, 15)},
)

BLOCKED_V = CONV1D_CU.defines["CS_BLOCKED_V"]


# --- 1-D algorithms ---------------------------------------------------------


def _check_rows(s: ConvSpec) -> Verdict:
    rows = s.batch * s.out_channels
    return (
        True
        if rows <= GRID_YZ_MAX
        else f"{rows} rows (batch x output channels) exceed the grid's y limit ({GRID_YZ_MAX})"
    )


def _plan_per_output_1d(algorithm: str):
    def plan(s: ConvSpec, direction: str) -> Launch:
        p = _params_1d(s)
        total = s.batch * s.out_channels * s.out_size[0]
        blocks, block = (rt.grid_stride_blocks(total),), (THREADS,)
        fn = rt.kernel("conv1d.cu", f"conv1d_{algorithm}", s.dtype, total)
        if algorithm == "naive":
            return _with_bias(s, rt.bind(fn, blocks, block, (*_ARRAYS4, *p)))
        launch = rt.bind(fn, blocks, block, (ARG, ARG, ARG, *p))

        def run(x, w, bias, out):
            _upload_constant("conv1d.cu", "conv1d_const_mask|I", w)
            launch(x, bias, out)

        return _with_bias(s, run)

    return plan


def _check_tiled_1d(algorithm: str):
    def check(s: ConvSpec, direction: str) -> Verdict:
        rows = _check_rows(s)
        if rows is not True:
            return rows
        (st,), (d,), (k,) = s.stride, s.dilation, s.kernel_size
        if algorithm == "tiled_halo":
            need = _span(THREADS, st, k, d) * s.itemsize
            return True if need <= SMEM_LIMIT else f"tile plus halo needs {need} bytes of shared memory"
        if algorithm == "tiled_cached_halo":
            need = THREADS * st * s.itemsize
            return True if need <= SMEM_LIMIT else f"the tile needs {need} bytes of shared memory"
        if st != 1:
            return f"'blocked' computes consecutive outputs from one window: stride 1 only; got {st}"
        return True  # the shared memory depends on v: _constraint_blocked

    return check


def _blocked_tile_smem(s: ConvSpec, v: int) -> int:
    """Shared bytes of conv1d_blocked (one tile per block): tile, halo, float4 slack, mask."""
    (d,), (k,) = s.dilation, s.kernel_size
    return (THREADS * v + (k - 1) * d + 8 + k) * s.itemsize


def _blocked_stage_elements(s: ConvSpec, v: int) -> int:
    """Elements of one conv1d_blocked_pipelined stage (as the kernel lays it out): window, slack, mask.

    The window is ``THREADS * v`` outputs plus the halo, with room for the copy
    to start up to one 16-byte piece early and end on a whole piece; the mask
    follows on a 16-byte boundary.
    """
    (d,), (k,) = s.dilation, s.kernel_size
    per_copy = 16 // s.itemsize
    span = THREADS * v + (k - 1) * d
    window = (span + 2 * per_copy - 1) // per_copy * per_copy
    return window + (k + per_copy - 1) // per_copy * per_copy


def _blocked_smem(s: ConvSpec, v: int, persistent: int) -> int:
    """Shared bytes of a blocked launch: one tile, or (persistent) two stages where they fit.

    Past the limit the persistent kernel gets one stage (it then loads, then
    computes); it tells the two apart by the shared memory its launch got.
    """
    if not persistent:
        return _blocked_tile_smem(s, v)
    stage = _blocked_stage_elements(s, v) * s.itemsize
    return 2 * stage if 2 * stage <= SMEM_LIMIT else stage


def _constraint_blocked(s: ConvSpec, direction: str, params) -> Verdict:
    """A tile or stage (window, halo and mask) in 48 KiB; 2 v accumulator and window registers per thread."""
    v = params["v"]
    need = _blocked_smem(s, v, params["persistent"])
    if need > SMEM_LIMIT:
        return f"v={v}: tile, halo and mask need {need} bytes of shared memory (> {SMEM_LIMIT})"
    registers = 2 * v * s.itemsize // 4
    if registers > ACCUMULATOR_REGISTERS:
        return f"v={v}: the accumulators and the window take {registers} 32-bit registers per thread"
    return True


#: Taps from which blocked's rule takes the persistent grid for a float32 mask compiled in, dilation 1
#: (measured: 3, 5, 7 and 9 taps one tile per block, 31 persistent).
BLOCKED_PERSISTENT_FROM = 16


#: blocked's outputs per thread on long masks: a longer window per halo, more FMAs per shared load.
BLOCKED_LONG_MASK_V = 11


def _default_persistent_blocked(spec: ConvSpec, direction: str, chosen: dict) -> int:
    """The grid of blocked: persistent and pipelined where a stage's arithmetic can hide the next copy.

    That is one input channel per output (a stage per channel otherwise: its bookkeeping and
    barriers cost more than the overlap gives), two stages of ``chosen["v"]`` outputs per thread
    in shared memory (one stage overlaps nothing: not measured, so not chosen), and enough work
    per output: float64, a dilated mask (the window read from shared memory tap by tap), a width
    not compiled in (the tap loop not unrolled), or :data:`BLOCKED_PERSISTENT_FROM` taps or more.
    H100, 2026-11-26, blocked-persistent-2026-11-26-h100.md: three processes, held plans interleaved (ms, one
    tile per block / persistent): N=1e8 K=3 0.338 / 0.354, K=5 0.328 / 0.363, K=7 0.331 / 0.349,
    K=31 0.391 / 0.365, K=8 (run-time width) 0.384 / 0.349, K=5 dilation 3 0.376 / 0.356, float64
    N=5e7 K=3 0.367 / 0.354, K=31 0.468 / 0.354; B=64 C=1->16 K=31 0.251 / 0.223; depthwise C=64
    K=9 0.135 / 0.141; C=64->64 K=9 0.698 / 0.915; C=64 groups 8 K=9 0.159 / 0.154.
    """
    (k,), (d,) = spec.kernel_size, spec.dilation
    if spec.channels_per_group != 1 or not _blocked_two_stages_fit(spec, chosen["v"]):
        return 0
    heavy = spec.dtype == "float64" or d > 1 or k not in BLOCKED_WIDTHS or k >= BLOCKED_PERSISTENT_FROM
    return int(heavy)


def _blocked_two_stages_fit(spec: ConvSpec, v: int) -> bool:
    """Whether the persistent kernel gets two stages (overlapped copies) at ``v`` outputs per thread."""
    return 2 * _blocked_stage_elements(spec, v) * spec.itemsize <= SMEM_LIMIT


def _default_v_blocked(spec: ConvSpec, direction: str) -> int:
    """Outputs per thread of blocked: :data:`BLOCKED_LONG_MASK_V` for masks of
    :data:`BLOCKED_PERSISTENT_FROM` taps or more where both grids get as much as at 9 (its tile
    fits; the persistent kernel's two stages fit wherever they fit at 9), ``CS_BLOCKED_V`` (9)
    otherwise.

    H100, 2026-11-26, blocked-persistent-2026-11-26-h100.md, the v sweep (held plans, medians of two processes, ms,
    v=9 / v=11 / best): N=1e8 K=31 persistent 0.335 / 0.325 / 0.325 (v=11), one tile per block
    0.355 / 0.345; B=64 C=1->16 W=65536 K=31 0.195 / 0.193 / 0.182 (v=13); float64 N=5e7 K=31
    0.325 / 0.313 / 0.313 (v=11); N=1e8 K=3 0.294 at v=9, the best.
    """
    v = BLOCKED_LONG_MASK_V
    if spec.kernel_size[0] < BLOCKED_PERSISTENT_FROM:
        return BLOCKED_V
    fits = max(_blocked_tile_smem(spec, v), _blocked_stage_elements(spec, v) * spec.itemsize) <= SMEM_LIMIT
    # a long (dilated) halo: the shorter tile where the longer does not fit, or would lose the pipelining
    keeps_two = _blocked_two_stages_fit(spec, v) or not _blocked_two_stages_fit(spec, BLOCKED_V)
    return v if fits and keeps_two else BLOCKED_V


BLOCKED_TUNABLES = (
    Tunable(
        "v",
        CONV1D_CU.overridable["CS_BLOCKED_V"],
        _default_v_blocked,
        "outputs per thread (-D CS_BLOCKED_V; odd: a warp's reads of tile[lane * v + j] hit 32 banks); "
        "the rule: 11 from 16 taps (H100 K=31: 1.03-1.04x over 9), else 9",
    ),
    Tunable(
        "persistent",
        (0, 1),
        _default_persistent_blocked,
        "1: a persistent grid whose blocks copy the next stage (cp.async) while computing one; 0: one "
        "tile per block, loaded then computed (the rule: 1 for one input channel with float64, dilation, "
        "a width not compiled in or >= 16 taps, where two stages fit; H100: 1.07x at N=1e8 K=31, 1.32x in "
        "float64; 0.90x at K=5)",
        follows=("v",),
    ),
)


def _plan_blocked(s: ConvSpec, direction: str, params: dict) -> Launch:
    """conv1d_blocked (or, ``persistent``, conv1d_blocked_pipelined) with ``v`` outputs per thread."""
    (d,), (k,) = s.dilation, s.kernel_size
    v, persistent = params["v"], params["persistent"]
    per_block, smem = THREADS * v, _blocked_smem(s, v, persistent)
    kernel = "conv1d_blocked_pipelined" if persistent else "conv1d_blocked"
    name = f"{kernel}@{k if d == 1 and k in BLOCKED_WIDTHS else 0}"  # a width compiled in, if any
    fn, p = rt.kernel("conv1d.cu", name, s.dtype, overrides=(("CS_BLOCKED_V", v),)), _params_1d(s)
    tiles = math.ceil(s.out_size[0] / per_block)
    if persistent:  # as many blocks as the device holds at once, each a contiguous run of (row, tile) items
        grid = (min(tiles * s.batch * s.out_channels, rt.sm_count() * max(1, rt.resident_blocks(fn, THREADS, smem))),)
    else:
        grid = (tiles, s.batch * s.out_channels)
    return _with_bias(s, rt.bind(fn, grid, (THREADS,), (*_ARRAYS4, *p), smem))


def _plan_tiled_1d(algorithm: str):
    def plan(s: ConvSpec, direction: str) -> Launch:
        (st,), (d,), (k,) = s.stride, s.dilation, s.kernel_size
        if algorithm == "tiled_halo":
            per_block, smem, name = THREADS, _span(THREADS, st, k, d) * s.itemsize, "conv1d_tiled_halo"
        else:
            per_block, smem, name = THREADS, THREADS * st * s.itemsize, "conv1d_tiled_cached_halo"
        grid = (math.ceil(s.out_size[0] / per_block), s.batch * s.out_channels)
        fn, p = rt.kernel("conv1d.cu", name, s.dtype), _params_1d(s)
        return _with_bias(s, rt.bind(fn, grid, (THREADS,), (*_ARRAYS4, *p), smem))

    return plan


_FORWARD = ("forward",)

NAIVE = CudaAlgorithm(
    name="naive",
    summary="1-D: one thread per output",
    plan=_plan_per_output_1d("naive"),
    ndims=(1,),
    sources=(CONV1D_CU,),
    plan_activation=None,
    plan_relu_mask=None,
    ieee_padding=(),
    calls_cublas=False,
)
CONST_MASK = CudaAlgorithm(
    name="const_mask",
    summary="1-D: mask in constant memory",
    plan=_plan_per_output_1d("const_mask"),
    ndims=(1,),
    check=_check_const,
    sources=(CONV1D_CU,),
    plan_activation=None,
    plan_relu_mask=None,
    ieee_padding=(),
    calls_cublas=False,
)
# The 1-D tiles of tiled_halo, tiled_cached_halo and blocked hold padding as zeros and multiply them.
TILED_HALO = CudaAlgorithm(
    name="tiled_halo",
    summary="1-D: tile plus halo in shared memory",
    plan=_plan_tiled_1d("tiled_halo"),
    ndims=(1,),
    check=_check_tiled_1d("tiled_halo"),
    sources=(CONV1D_CU,),
    plan_activation=None,
    plan_relu_mask=None,
    ieee_padding=_FORWARD,
    calls_cublas=False,
)
TILED_CACHED_HALO = CudaAlgorithm(
    name="tiled_cached_halo",
    summary="1-D: tile in shared memory, halo through the cache",
    plan=_plan_tiled_1d("tiled_cached_halo"),
    ndims=(1,),
    check=_check_tiled_1d("tiled_cached_halo"),
    sources=(CONV1D_CU,),
    plan_activation=None,
    plan_relu_mask=None,
    ieee_padding=_FORWARD,
    calls_cublas=False,
)
BLOCKED = CudaAlgorithm(
    name="blocked",
    summary=f"1-D stride 1: {BLOCKED_V} outputs per thread (v), sliding register window, float4 rows",
    plan=_plan_blocked,
    ndims=(1,),
    check=_check_tiled_1d("blocked"),
    tunables=BLOCKED_TUNABLES,
    constraint=_constraint_blocked,
    sources=(CONV1D_CU,),
    plan_activation=None,
    plan_relu_mask=None,
    ieee_padding=_FORWARD,
    calls_cublas=False,
)

ALGORITHMS = (NAIVE, CONST_MASK, TILED_HALO, TILED_CACHED_HALO, BLOCKED)
