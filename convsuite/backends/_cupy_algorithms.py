"""The cupy backend's algorithms: one :class:`~convsuite.backends.base.Algorithm` record each.

A record holds everything about one way of computing: its name and summary,
the directions it implements, the cases it declines (with the reason) and its
``plan``, which does all that depends only on the spec once -- kernel
handles, grid, block, shared memory, packed integer arguments, workspace
sizes -- and returns the :data:`~convsuite.backends.base.Launch` that runs a
call. Constants shared with the kernels come from ``_cuda_sources.DEFINES``.

Tunable parameters. Where a kernel has hand-chosen constants, its record
declares them as :class:`~convsuite.backends.base.Tunable` s (the default is
today's hand rule, so an untuned plan is unchanged) and a ``constraint`` that
refuses, with the reason, the sets no launch can honour (threads per block,
shared memory, grid limits, accumulator registers). A block shape is a
launch argument; a template argument picks another kernel entry (its own
module, compiled on first use); a ``-D`` constant (``_cuda_sources.OVERRIDABLE``)
compiles the kernel once more for that configuration
(``_cupy_runtime.module(file, overrides, kernel=...)``).
The geometry helpers here are pure Python: nothing below imports cupy until a
plan is built.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

import numpy as np

from .._capture import capturing
from .._epilogue import ACTIVATION_CODES
from .._spec import ConvSpec
from . import _cupy_runtime as rt
from ._cuda_sources import (
    BLOCKED_WIDTHS,
    DEFINES,
    DEPTHWISE_FIXED,
    DEPTHWISE_WGRAD_KMAX,
    LADDER_KERNELS,
    OVERRIDABLE,
    POINTWISE_TILES,
    REGISTER_TILES,
)
from .base import Algorithm, Launch, Tunable, Verdict

__all__ = [
    "RECORDS",
    "ONE_D_ALGORITHMS",
    "TWO_D_ALGORITHMS",
    "ALGORITHMS",
    "LADDER",
    "FUSED_ACTIVATION",
    "FUSED_RELU_MASK",
    "plan_forward_activation",
    "plan_backward_relu",
    "ladder_weight_gradient",
    "register_tiled_blocks",
    "tf32x3_image_geometry",
    "tf32x3_image_taps",
]

THREADS = rt.THREADS
ARG = rt.ARG
#: x, w, bias, out: the per-call arrays of a forward kernel, in its argument order (see rt.bind).
_ARRAYS4 = (ARG, ARG, ARG, ARG)
SMEM_LIMIT = 48 * 1024  # static per-block shared memory without opt-in
CONST_BYTES = DEFINES["CS_CONST_BYTES"]
GRID_YZ_MAX = 65535
BLOCKED_V = DEFINES["CS_BLOCKED_V"]
REGISTER_PX = DEFINES["CS_RT_PX"]
GEMM_BM, GEMM_BN, GEMM_BK = DEFINES["CS_GEMM_BM"], DEFINES["CS_GEMM_BN"], DEFINES["CS_GEMM_BK"]
DW_PX, DW_PY = DEFINES["CS_DW_PX"], DEFINES["CS_DW_PY"]
PW_PX = DEFINES["CS_PW_PX"]
SPLITK_TILE = DEFINES["CS_SPLITK_TILE"]  # output tile of conv2d_pointwise_splitk: channels x pixels, and its chunk
WORKSPACE_BYTES = 512 * 2**20  # im2col columns per chunk; split-K partial sums
#: pointwise_splitk keeps its partial sums (and tile counters) with the plan, per stream, up to this size
#: and runs one fused launch; larger ones are allocated per call and summed by a second kernel, where the
#: product's time dwarfs a launch and an allocation. A kept set is at most 4 MiB per plan and stream.
SPLITK_KEPT_BYTES = 4 * 2**20
MAX_THREADS = 1024  # threads per block (every CUDA device since compute capability 2.0)
#: Accumulator registers (32-bit) a thread may hold: beyond this a kernel would
#: spill its accumulators to local memory (255 registers per thread, minus
#: addresses and operands) -- still correct, but never worth offering.
ACCUMULATOR_REGISTERS = 192
#: Block extents sweeps and the tuner try: FA19's tile widths (8-32) and
#: powers of two up to THREADS. The hand rule may choose any extent up to
#: THREADS (a block as wide as a 44-pixel row); that value is accepted too.
BLOCK_EXTENTS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 128, 256)
RT_PX_VALUES = OVERRIDABLE["CS_RT_PX"][1]


# --- packed arguments and geometry --------------------------------------------


def _params(s: ConvSpec) -> tuple:
    """The CONV_PARAMS of a 2-D spec, in kernel argument order."""
    H, W = s.in_size
    KH, KW = s.kernel_size
    Ho, Wo = s.out_size
    (sh, sw), (dh, dw) = s.stride, s.dilation
    return rt.i32(
        s.batch,
        s.in_channels,
        H,
        W,
        s.out_channels,
        s.channels_per_group,
        KH,
        KW,
        Ho,
        Wo,
        sh,
        sw,
        dh,
        dw,
        s.padding[0][0],
        s.padding[1][0],
    )


def _params_1d(s: ConvSpec) -> tuple:
    """The CONV1D_PARAMS of a 1-D spec."""
    return rt.i32(
        s.batch,
        s.in_channels,
        s.in_size[0],
        s.out_channels,
        s.channels_per_group,
        s.kernel_size[0],
        s.out_size[0],
        s.stride[0],
        s.dilation[0],
        s.padding[0][0],
    )


def _span(threads: int, stride: int, kernel: int, dilation: int) -> int:
    """Inputs a row of ``threads`` consecutive outputs reads."""
    return (threads - 1) * stride + (kernel - 1) * dilation + 1


def _balanced(n: int, most: int) -> int:
    """The smallest block extent covering n in as few blocks of at most ``most`` as possible."""
    most = max(1, min(most, n))
    return math.ceil(n / math.ceil(n / most))


def _register_tile(s: ConvSpec) -> int:
    """MT for register_tiled: the smallest instantiation covering M/g (the largest beyond)."""
    return next((mt for mt in REGISTER_TILES if mt >= s.out_channels_per_group), REGISTER_TILES[-1])


def _block_width(s: ConvSpec, px: int) -> int:
    """The hand rule's threads along W: the output row (in steps of ``px``) in as few blocks of <= 32 as possible.

    A one-row output (1-D cases) takes up to THREADS threads along W instead.
    """
    Ho, Wo = s.out_size
    return _balanced(math.ceil(Wo / px), 32 if Ho > 1 else THREADS)


def _block_height(s: ConvSpec, bx: int) -> int:
    """The hand rule's threads along H: the rest of a THREADS-thread block, balanced over Ho."""
    return _balanced(s.out_size[0], THREADS // bx)


def _tiled_params(s: ConvSpec, algorithm: str) -> dict:
    """The hand rule's parameters of a tiled 2-D kernel (the tunables' defaults).

    register_tiled takes REGISTER_PX outputs per thread, fewer on a grid
    too small to fill the GPU (:func:`_small_grid_px`).
    """
    if algorithm == "tiled_shared":
        bx = _block_width(s, 1)
        return {"tile_w": bx, "tile_h": _block_height(s, bx)}
    mt = _register_tile(s)
    return _register_tiled_params(s, mt, _small_grid_px(s, mt, REGISTER_PX))


def _small_grid_px(s: ConvSpec, mt: int, px: int) -> int:
    """``px`` halved while register_tiled's launch would have blocks for fewer than half the multiprocessors.

    A small problem (a few images, few channels) gives a grid of fewer blocks
    than the GPU has multiprocessors; halving the outputs per thread doubles
    the blocks. H100, register_tiled on input gradients of 64 blocks
    (3x3 C=16->32 and 5x5 C=3->32 at 32x32, B=64, 2026-11-26 sweep): px=2
    on 128 blocks 0.052 vs 0.068 ms and 0.057 vs 0.069 ms; at 128 blocks and
    more (LeNet, ECE408 layers) px=4 stays within 7% of the best or is it.
    Without a GPU (planning checks on a CPU-only machine) ``px`` is kept.
    """
    sms = rt.sm_count_or_none()
    if sms is None:
        return px
    while px > 1 and 2 * _register_tiled_blocks_at(s, mt, px) < sms:
        if _check_tiled(s, "register_tiled", _register_tiled_params(s, mt, px // 2)) is not True:
            break
        px //= 2
    return px


def _register_tiled_params(s: ConvSpec, mt: int, px: int) -> dict:
    """register_tiled's parameters for ``mt`` and ``px``, with the hand rule's block width for that px."""
    return {"mt": mt, "block_w": _block_width(s, px), "px": px}


def _register_tiled_blocks_at(s: ConvSpec, mt: int, px: int) -> int:
    """Thread blocks of register_tiled's launch with :func:`_register_tiled_params`."""
    geo = _tile_geometry(s, "register_tiled", _register_tiled_params(s, mt, px))
    return math.prod(_register_tiled_grid(s, mt, geo["tiles"]))


def _tile_geometry(s: ConvSpec, algorithm: str, params: dict | None = None) -> dict:
    """Block shape, tile count and shared memory of a tiled 2-D kernel with ``params`` (default: the hand rule).

    The hand rule shapes blocks from the output (at most 256 threads): as
    wide as the row allows, then as tall as the rest of the block.
    ``tiled_shared`` takes its block as ``tile_w`` x ``tile_h`` outputs;
    ``register_tiled`` takes ``block_w`` threads of ``px`` outputs along W
    and the hand rule's height for that width.
    """
    params = _tiled_params(s, algorithm) if params is None else params
    Ho, Wo = s.out_size
    (sh, sw), (dh, dw), (KH, KW) = s.stride, s.dilation, s.kernel_size
    if algorithm == "tiled_shared":
        px, bx, by = 1, params["tile_w"], params["tile_h"]
    else:
        px, bx = params["px"], params["block_w"]
        by = _block_height(s, bx)
    tile_w, tile_h = bx * px, by
    span_h = (tile_h - 1) * sh + (KH - 1) * dh + 1
    span_w = (tile_w - 1) * sw + (KW - 1) * dw + 1
    smem = span_h * span_w * s.itemsize
    if algorithm == "register_tiled":
        # Two stages (conv2d.cu: the next channel is copied in while this one is used), each the
        # MT filters of a channel and its patch, rounded up to 16 bytes.
        align = 16 // s.itemsize
        smem = 2 * math.ceil((span_h * span_w + params["mt"] * KH * KW) / align) * align * s.itemsize
    tiles = math.ceil(Ho / tile_h) * math.ceil(Wo / tile_w)
    return dict(block=(bx, by), tiles=tiles, smem=smem)


def _check_tiled(s: ConvSpec, algorithm: str, params: dict | None = None) -> Verdict:
    """Whether a tiled kernel's block (default: the hand rule's) can launch on ``s``, or why not."""
    params = _tiled_params(s, algorithm) if params is None else params
    geo = _tile_geometry(s, algorithm, params)
    (bx, by), named = geo["block"], ", ".join(f"{k}={v}" for k, v in sorted(params.items()))
    if bx * by > MAX_THREADS:
        return f"{named}: a {bx}x{by} block is {bx * by} threads (at most {MAX_THREADS})"
    if geo["tiles"] > GRID_YZ_MAX:
        return f"{named}: {geo['tiles']} output tiles per plane exceed the grid's y limit ({GRID_YZ_MAX})"
    if geo["smem"] > SMEM_LIMIT:
        return f"{named}: the input patch (and filters) need {geo['smem']} bytes of shared memory (> {SMEM_LIMIT})"
    if algorithm == "register_tiled":
        registers = params["mt"] * params["px"] * s.itemsize // 4
        if registers > ACCUMULATOR_REGISTERS:
            return (
                f"{named}: mt x px accumulators take {registers} 32-bit registers per thread "
                f"(at most {ACCUMULATOR_REGISTERS}; more would spill)"
            )
        passes = math.ceil(s.out_channels_per_group / params["mt"])
        if passes > GRID_YZ_MAX:
            return f"{named}: {passes} channel blocks exceed the grid's z limit ({GRID_YZ_MAX})"
    return True


def _with_bias(spec: ConvSpec, launch: Callable) -> Launch:
    """A forward launch that passes a cached zero vector when there is no bias."""
    zero = []  # the device's zero vector, looked up once: the lookup (str(dtype), device id) cost ~8 us a call

    def run(x, w, bias, out):
        if bias is None:
            if not zero:
                zero.append(rt.zeros(spec.out_channels, x.dtype))
            bias = zero[0]
        launch(x, w, bias, out)

    return run


def _reduction_chunks(channels: int, values: int, most: int = GRID_YZ_MAX) -> int:
    """Chunks to cut each channel's ``values`` into for a fixed-order block reduction.

    Enough (channel, chunk) blocks to fill the device (8 per multiprocessor), each
    summing >= 4096 values, at most ``most`` (the grid's y limit, or fewer units).
    """
    return max(1, min(math.ceil(8 * rt.sm_count() / channels), math.ceil(values / 4096), most))


def _chunk_sums(dtype: str, chunks: int, n: int, masked: bool = False):
    """A packed launch ``(partial, out)``: ``out`` (n values) = ``partial`` (chunks x n, contiguous)
    summed over its chunks in order (``masked``: the kernel from the masked module, for a backward
    through a ReLU, which compiles no plain module).
    """
    suffix = "_masked" if masked else ""
    fn = rt.kernel(f"backward_util{suffix}.cu", "chunk_sums", dtype)
    return rt.bind(fn, (rt.grid_stride_blocks(n),), (THREADS,), (ARG, ARG, np.int32(chunks), np.int64(n)))


def _bias_gradient(s: ConvSpec, masked: bool = False) -> Callable:
    """``run(grad_y, grad_b, relu_output=None)``: grad_b = grad_y summed over the batch and the output
    pixels (where ``masked``, only where relu_output is not <= 0: a NaN output passes its gradient, as
    torch.threshold_backward), in two packed launches of fixed order.

    Per channel, the B x pixels values are cut into chunks, enough that a few channels still fill
    the device (CuPy's reductions give one block per output: summing straight to M values ran M
    blocks over the whole gradient, H200 1.07 ms for a 74 MB gradient with M=16); their partial sums
    are then added in order. Two packed launches replace four CuPy calls (two reductions, a reshape
    copy and an assignment), whose host time small backward problems were bound by.
    """
    cp = rt.cupy()
    suffix = "_masked" if masked else ""
    M, L = s.out_channels, math.prod(s.out_size)
    chunks = _reduction_chunks(M, s.batch * L)
    fn = rt.kernel(f"backward_util{suffix}.cu", f"bias_grad_partial{suffix}", s.dtype)
    operands = (ARG, ARG, ARG) if masked else (ARG, ARG)  # grad_y[, relu_output], partial
    partial_sums = rt.bind(fn, (M, chunks), (THREADS,), (*operands, *rt.i32(s.batch, M), np.int64(L), np.int32(chunks)))
    total = _chunk_sums(s.dtype, chunks, M, masked)

    def run(grad_y, grad_b, relu_output=None):
        partial = cp.empty(chunks * M, dtype=grad_y.dtype)  # every element written by its block
        if masked:
            partial_sums(grad_y, relu_output, partial)
        else:
            partial_sums(grad_y, partial)
        total(partial, grad_b)

    return run


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


def _check_const(s: ConvSpec, direction: str) -> Verdict:
    need = math.prod(s.w_shape) * s.itemsize
    return True if need <= CONST_BYTES else f"the weights need {need} bytes; constant memory holds {CONST_BYTES}"


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
        OVERRIDABLE["CS_BLOCKED_V"][1],
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


# --- 2-D forward algorithms (1-D cases run as height 1) -------------------------


def _plan_per_output_2d(algorithm: str):
    def plan(spec: ConvSpec, direction: str) -> Launch:
        s = spec.as_2d()
        p, total = _params(s), math.prod(s.y_shape)
        blocks, block = (rt.grid_stride_blocks(total),), (THREADS,)
        fn = rt.kernel("conv2d.cu", f"conv2d_{algorithm}", s.dtype, total)
        if algorithm == "direct":
            return _with_bias(s, rt.bind(fn, blocks, block, (*_ARRAYS4, *p)))
        launch = rt.bind(fn, blocks, block, (ARG, ARG, ARG, *p))

        def run(x, w, bias, out):
            _upload_constant("conv2d.cu", "conv2d_const_weights|I", w)
            launch(x, bias, out)

        return _with_bias(s, run)

    return plan


def _upload_constant(filename: str, kernel: str, w) -> None:
    """Copy the weights into the constant memory of ``kernel``'s module (the copy its launches read)."""
    cp = rt.cupy()
    symbol = rt.module(filename, kernel=kernel).get_global("c_weights")
    symbol.copy_from_device_async(w.data, w.nbytes, cp.cuda.get_current_stream())


def _plan_tiled_2d(algorithm: str):
    def plan(spec: ConvSpec, direction: str, params: dict) -> Launch:
        s = spec.as_2d()
        geo, p = _tile_geometry(s, algorithm, params), _params(s)
        block, tiles, smem = geo["block"], geo["tiles"], geo["smem"]
        overrides = ()
        if algorithm == "tiled_shared":
            grid, name = (s.batch * s.out_channels, tiles), "conv2d_tiled_shared"
        else:
            mt = params["mt"]
            grid = _register_tiled_grid(s, mt, tiles)
            name, overrides = f"conv2d_register_tiled@{mt}", (("CS_RT_PX", params["px"]),)
        fn = rt.kernel("conv2d.cu", name, s.dtype, overrides=overrides)
        return _with_bias(s, rt.bind(fn, grid, block, (*_ARRAYS4, *p), smem))

    return plan


def _register_tiled_grid(s: ConvSpec, mt: int, tiles: int) -> tuple[int, int, int]:
    """register_tiled's grid: (image, group) x output tiles x blocks of ``mt`` output channels."""
    return (s.batch * s.groups, tiles, math.ceil(s.out_channels_per_group / mt))


def register_tiled_blocks(spec: ConvSpec) -> int:
    """Blocks of register_tiled's launch on ``spec`` at REGISTER_PX outputs per thread (what auto's rule weighs).

    The rule's thresholds (``_cupy_rule.REGISTER_TILED_BLOCKS`` and
    ``REGISTER_TILED_SEVERAL_CHANNELS_BLOCKS``) are block counts at
    REGISTER_PX outputs per thread, whatever px the hand rule then takes on a
    small grid (:func:`_small_grid_px`): the rule's picks do not depend on the
    device it runs on.
    """
    s = spec.as_2d()
    return _register_tiled_blocks_at(s, _register_tile(s), REGISTER_PX)


def _constraint_tiled_2d(algorithm: str):
    return lambda spec, direction, params: _check_tiled(spec.as_2d(), algorithm, dict(params))


def _default_of(algorithm: str, name: str):
    """The hand rule for one parameter of a tiled 2-D kernel, as a Tunable default."""
    return lambda spec, direction: _tiled_params(spec.as_2d(), algorithm)[name]


TILED_SHARED_TUNABLES = (
    Tunable(
        "tile_w",
        BLOCK_EXTENTS,
        _default_of("tiled_shared", "tile_w"),
        "outputs (threads) per block along W; FA19's sweep: 4, 8, 12, 16, 24, 32",
    ),
    Tunable(
        "tile_h",
        BLOCK_EXTENTS,
        lambda spec, direction, chosen: _block_height(spec.as_2d(), chosen["tile_w"]),
        "outputs (threads) per block along H; FA19's sweep: 1, 2, 4, 8, 12, 16, 24, 32",
        follows=("tile_w",),
    ),
)

REGISTER_TILED_TUNABLES = (
    Tunable("mt", REGISTER_TILES, _default_of("register_tiled", "mt"), "output channels per thread (template MT)"),
    Tunable(
        "block_w",
        BLOCK_EXTENTS,
        lambda spec, direction, chosen: _block_width(spec.as_2d(), chosen["px"]),
        "threads per block along W (the height follows the hand rule: the rest of 256 threads)",
        follows=("px",),
    ),
    Tunable(
        "px",
        RT_PX_VALUES,
        _default_of("register_tiled", "px"),
        "adjacent outputs per thread along W (-D CS_RT_PX: one module each); the hand rule: "
        f"{REGISTER_PX}, fewer on grids too small for the GPU",
    ),
)


# --- im2col + cuBLAS ------------------------------------------------------------


def _chunks(s: ConvSpec) -> list[tuple[int, int]]:
    """Batch chunks whose im2col columns fit the workspace."""
    per_item = s.channels_per_group * math.prod(s.kernel_size) * math.prod(s.out_size) * s.itemsize
    step = max(1, WORKSPACE_BYTES // max(per_item, 1))
    return [(b0, min(step, s.batch - b0)) for b0 in range(0, s.batch, step)]


def _plan_im2col(spec: ConvSpec, direction: str) -> Launch:
    s = spec.as_2d()
    cp = rt.cupy()
    G, Mg, Cg = s.groups, s.out_channels_per_group, s.channels_per_group
    kd, L = Cg * math.prod(s.kernel_size), math.prod(s.out_size)
    p, chunks = _params(s), _chunks(s)
    im2col = {bc: rt.kernel("im2col.cu", "im2col", s.dtype, bc * kd * L) for _, bc in chunks}

    def columns(x, b0, bc, g):
        cols = cp.empty((bc, kd, L), dtype=x.dtype)
        im2col[bc]((rt.grid_stride_blocks(cols.size),), (THREADS,), (x, cols, *rt.i32(b0, bc, g), *p))
        return cols

    if direction == "forward":

        def forward(x, w, bias, out):
            w_mat = w.reshape(G, Mg, -1)
            out4 = out.reshape(s.batch, G, Mg, -1)
            for b0, bc in chunks:
                for g in range(G):
                    out4[b0 : b0 + bc, g] = cp.matmul(w_mat[g], columns(x, b0, bc, g))  # cuBLAS, strict FP32
            if bias is not None:
                out.reshape(s.batch, s.out_channels, -1)[...] += bias.reshape(1, -1, 1)

        return forward

    col2im = rt.kernel("im2col.cu", "col2im", s.dtype)
    bias_gradient = _bias_gradient(s)

    def backward(grad_y, x, w, grad_x, grad_w, grad_b):
        bias_gradient(grad_y, grad_b)
        w_mat = w.reshape(G, Mg, -1)
        grad_w_mat = cp.zeros_like(w_mat)
        gy = grad_y.reshape(s.batch, G, Mg, L)
        for b0, bc in chunks:
            for g in range(G):
                cols = columns(x, b0, bc, g)
                gy_g = cp.ascontiguousarray(gy[b0 : b0 + bc, g])
                grad_w_mat[g] += cp.matmul(gy_g, cols.transpose(0, 2, 1)).sum(axis=0)
                grad_cols = cp.matmul(w_mat[g].T, gy_g)  # (bc, Kd, L)
                blocks = rt.grid_stride_blocks(bc * Cg * math.prod(s.in_size))
                col2im((blocks,), (THREADS,), (grad_cols, grad_x, *rt.i32(b0, bc, g), *p))
        grad_w.reshape(G, Mg, -1)[...] = grad_w_mat

    return backward


# --- implicit GEMM (forward, input gradient, weight gradient) --------------------


def _check_gemm(spec: ConvSpec, direction: str) -> Verdict:
    s = spec.as_2d()
    if s.groups > GRID_YZ_MAX:
        return f"{s.groups} groups exceed the grid's z limit ({GRID_YZ_MAX})"
    if direction == "backward" and math.ceil(s.channels_per_group / GEMM_BM) > GRID_YZ_MAX:
        return f"{s.channels_per_group} channels per group exceed the grid's y limit"
    if math.ceil(s.out_channels_per_group / GEMM_BM) > GRID_YZ_MAX:
        return f"{s.out_channels_per_group} output channels per group exceed the grid's y limit"
    return True


BIG_BN = 128  # columns of the big-tile kernels' block tile (implicit_gemm_big.cu); 2*BM threads a block


def _wgrad_splits(s: ConvSpec, rows: int, cols: int, blocks_per_sm: int) -> int:
    """Split-K factor of the weight gradient for ``rows x cols`` block tiles: as many
    blocks as the device holds at once (``blocks_per_sm`` a multiprocessor), at least
    256 products per split, and a partial-sum buffer within the workspace.

    Rounded down: one block past the device's capacity starts a second wave that
    costs a whole block's time (3x3 C=64 B=64: 5 column tiles x 80 splits = 400
    blocks for 396 places).
    """
    kd = s.channels_per_group * math.prod(s.kernel_size)
    tiles = math.ceil(kd / cols) * math.ceil(s.out_channels_per_group / rows) * s.groups
    n = s.batch * math.prod(s.out_size)
    by_memory = WORKSPACE_BYTES // max(1, s.out_channels * kd * s.itemsize)
    wanted = blocks_per_sm * rt.sm_count() // tiles
    return max(1, min(wanted, math.ceil(n / 256), GRID_YZ_MAX // s.groups, by_memory))


def _big_rows(out_per_group: int) -> int:
    """Block-tile rows of the big-tile kernels: 64 where a 128-row tile would be half idle."""
    return 64 if out_per_group <= 64 else 128


def _check_big(spec: ConvSpec, direction: str) -> Verdict:
    s = spec.as_2d()
    if s.dtype != "float32":
        return "igemm_big is float32 only (an 8x8 float64 register tile needs ~230 registers); use fused_gemm"
    limit = 2**31
    if (
        s.channels_per_group * math.prod(s.in_size) >= limit
        or s.out_channels_per_group * math.prod(s.out_size) >= limit
    ):
        return "one group's input or output gradient exceeds the filter-offset table's 32-bit offsets"
    return _check_gemm(spec, direction)


def _filter_offsets(channels: int, plane: tuple[int, int], kernel: tuple[int, int], dilation: tuple[int, int]):
    """koff[k] = (c*H*W + p*dh*W + q*dw, p*dh, q*dw, 0) for k = (c, p, q), on the device."""
    import numpy as np

    (H, W), (KH, KW), (dh, dw) = plane, kernel, dilation
    c, p, q = np.meshgrid(np.arange(channels), np.arange(KH), np.arange(KW), indexing="ij")
    table = np.stack([c * H * W + p * dh * W + q * dw, p * dh, q * dw, np.zeros_like(c)], axis=-1)
    return rt.cupy().asarray(table.reshape(-1, 4).astype(np.int32))


FUSED_GEMM_TUNABLES = (
    Tunable(
        "bk",
        OVERRIDABLE["CS_GEMM_BK"][1],
        GEMM_BK,
        "reduction slice per shared-memory stage (-D CS_GEMM_BK: one module each): deeper slices halve the "
        "barriers per reduction, shallower ones waste less of a short reduction",
    ),
)


def _plan_fused_gemm(spec: ConvSpec, direction: str, params: dict) -> Launch:
    """fused_gemm with the reduction slice ``params["bk"]`` (64 x 64 block tiles, both dtypes)."""
    return _plan_implicit_gemm(spec, direction, False, bk=params["bk"])


def _plan_igemm_big(spec: ConvSpec, direction: str, params: dict) -> Launch:
    """igemm_big with its block-tile rows ``params["bm"]`` and input gather ``params["gather"]``."""
    return _plan_implicit_gemm(spec, direction, True, bm=params["bm"], gather=params["gather"])


#: The big implicit GEMMs' input gathers -> template argument CHUNKED of their forward kernels
#: (in the sorted order of a tunable's values).
GATHERS = {"chunked": 1, "table": 0}

#: Channel chunk of the ``chunked`` gather: one shared-memory stage's reduction depth (the kernels'
#: BIG_BK and TX_BK).
GATHER_CHUNK = 8


def _gather_channels(spec: ConvSpec, direction: str) -> int:
    """Channels per group the big forward kernel gathers: the layer's input channels forward; backward
    its output channels (the stride-1 input gradient is a convolution of grad_y).
    """
    s = spec.as_2d()
    return s.channels_per_group if direction == "forward" else s.out_channels_per_group


def _default_gather_simt(spec: ConvSpec, direction: str) -> str:
    """igemm_big: ``chunked`` from one whole chunk of channels, padded or not.

    H100, 2026-11-26 (tools/gather_probe.py at tag notebook-2026-11-28, docs/measurements/gather-2026-11-26-h100.md):
    chunked 1.36-1.93x table forward on 3x3 layers of 16-128 channels and 1.29x on a
    1x1, and still 1.24x at 20 channels (a last chunk half zeros) and 1.05-1.10x at
    12 (the ECE408 fa19 conv2: a third of its chunks' work zeros). Below 8 channels
    every chunk is mostly zeros: the table.
    """
    return "chunked" if _gather_channels(spec, direction) >= GATHER_CHUNK else "table"


def _default_gather_tf32x3(spec: ConvSpec, direction: str) -> str:
    """tf32x3: ``chunked`` where the channels fill whole chunks of 8, and for the forward product
    on compute capability 9.0 (the wgmma kernel's only gather).

    H100, 2026-11-26 (tools/gather_probe.py at tag notebook-2026-11-28): chunked 1.06-1.17x table forward and
    1.07-1.13x backward on 16-256 channels and the 1x1 96->24, but 0.97x at 12
    channels (fa19 conv2) and 1.01x at 20: the zeros of a partial chunk cost three
    MMAs each, as much as the table gather saves.
    """
    if _wgmma_device(direction):
        # The wgmma kernel's only gather, on the device where it is the rule's kernel. (With mma
        # pinned to "sync" there, a partial last chunk keeps chunked: 0.97-1.01x the table, above.)
        return "chunked"
    return "chunked" if _gather_channels(spec, direction) % GATHER_CHUNK == 0 else "table"


def _gather_tunable(default) -> Tunable:
    """The ``gather`` tunable of igemm_big and tf32x3, with that algorithm's hand rule."""
    return Tunable(
        "gather",
        tuple(GATHERS),
        default,
        "the forward kernel's im2col gather (backward: the stride-1 input gradient's): 'chunked' reduces over "
        "chunks of 8 channels, tap by tap, so a thread's 8 elements share one bounds check and lie H*W apart "
        "(no table; a last chunk past the channels is zeros); 'table' reduces in the weights' order (c, p, q), "
        "each element's offset read from a table of taps",
    )


def _constraint_big(spec: ConvSpec, direction: str, params) -> Verdict:
    """Block-tile rows against the grid's y limit (forward and weight gradient tile Mg by bm)."""
    s = spec.as_2d()
    rows = math.ceil(s.out_channels_per_group / params["bm"])
    return True if rows <= GRID_YZ_MAX else f"bm={params['bm']}: {rows} row blocks exceed the grid's y limit"


def _constraint_tf32x3(spec: ConvSpec, direction: str, params) -> Verdict:
    """igemm_big's grid limit, and a stage count only where it applies (64-row tiles): at 128 rows
    another value would compile another module of the same kernel (a duplicate for the tuner).
    ``mma="wgmma"``: forward only, on compute capability 9.0, with the mma.sync kernel's own
    parameters at their defaults (the wgmma kernel has one tile, budget and pipeline, and the
    chunked gather only: any other value would run the same kernel under another name).
    """
    if params["mma"] == "wgmma":
        return _constraint_wgmma(spec, direction, params)
    verdict = _constraint_big(spec, direction, params)
    if verdict is True and params["bm"] >= 128 and params["stages"] != DEFINES["CS_TX_STAGES"]:
        return f"stages={params['stages']}: 128-row tiles keep two stages; the stage count is for bm=64"
    return verdict


def _constraint_wgmma(spec: ConvSpec, direction: str, params) -> Verdict:
    """Where tf32x3's wgmma forward kernel runs (see :func:`_constraint_tf32x3`)."""
    if direction != "forward":
        return "mma='wgmma' runs the forward product only; the backward kernels use mma.sync ('sync')"
    capability = rt.compute_capability()
    if capability is not None and capability != TF32X3_WGMMA_CAPABILITY:
        return f"mma='wgmma' needs Hopper (compute capability 9.0, sm_90a); this GPU is sm_{capability}: use 'sync'"
    for name, value in (("bm", 64), ("stages", DEFINES["CS_TX_STAGES"]), ("gather", "chunked")):
        if params[name] != value:
            return f"{name}={params[name]!r}: the wgmma kernel has {name}={value!r} only (mma='sync' takes it)"
    if params["blocks"] != _default_blocks_tf32x3(spec, direction):
        return f"blocks={params['blocks']}: the wgmma kernel has one register budget (mma='sync' takes it)"
    rows = math.ceil(spec.as_2d().out_channels_per_group / TF32X3_WGMMA_BM)
    return True if rows <= GRID_YZ_MAX else f"{rows} row blocks of {TF32X3_WGMMA_BM} exceed the grid's y limit"


IGEMM_BIG_TUNABLES = (
    Tunable(
        "bm",
        (64, 128),
        lambda spec, direction: _big_rows(spec.as_2d().out_channels_per_group),
        "block-tile rows (output channels; template BM, 2*BM threads): 64 where 128 would be half idle",
    ),
    _gather_tunable(_default_gather_simt),
)


#: Shortest reduction (products per output) tf32x3 takes: its ~2^-21 relative
#: error per product fits the float32 tolerance ``(n + 1) * eps`` only from here.
TF32X3_MIN_REDUCTION = 32


#: Compute capability from which the tensor cores take TF32 (``mma.sync ... .tf32``: Ampere).
TF32X3_MIN_CAPABILITY = 80


def _check_tf32x3(spec: ConvSpec, direction: str) -> Verdict:
    s = spec.as_2d()
    if s.dtype != "float32":
        return "tf32x3 splits float32 operands into TF32 pairs; float64 needs fused_gemm"
    capability = rt.compute_capability()
    if capability is not None and capability < TF32X3_MIN_CAPABILITY:
        return (
            f"tf32x3 needs TF32 tensor cores (compute capability {TF32X3_MIN_CAPABILITY // 10}.0 or later); "
            f"this GPU is sm_{capability}: use igemm_big"
        )
    # Forward sums C/g*KH*KW products per output. Backward, the tensor-core weight gradient sums
    # B*Ho*Wo; its dX checks its own (transposed) problem in _plan_input_gradient. The forward
    # bound is kept for backward too: a weight gradient of fewer than 32 taps has not run on a GPU.
    sums = [("products per output", spec.reduction_length)]
    if direction == "backward":
        sums.append(("pixels summed per weight-gradient entry", s.batch * math.prod(s.out_size)))
    for what, n in sums:
        if n < TF32X3_MIN_REDUCTION:
            return (
                f"a reduction of {n} {what} (< {TF32X3_MIN_REDUCTION}): tf32x3's ~2^-21 error per product "
                "exceeds the float32 tolerance of so short a sum; use igemm_big"
            )
    return _check_big(spec, direction)


#: Blocks of the tf32x3 weight-gradient kernel that fit a multiprocessor's 64K registers
#: (sm_90 SASS from nvcc 13: 128, 166, 162 and 160 registers a thread at 16, 32, 64 and 128
#: rows; 64 threads below 64 rows, 2*BM from there; 22-36 KB of shared memory).
TF32X3_WGRAD_BLOCKS_PER_SM = {16: 8, 32: 6, 64: 3, 128: 1}


def tf32x3_wgrad_rows(out_per_group: int, bm: int) -> int:
    """Block-tile rows of tf32x3's weight gradient: the smallest of 16, 32, 64 and 128 that holds a
    group's output channels (128 beyond), at most ``bm``.

    Its rows are the output channels, so a 64-row tile over 16 channels (ECE408 fa21 conv2)
    spent three quarters of its MMAs on zero rows; the smaller tiles cost more instructions per
    MMA (sm_90 SASS from nvcc 13, main loop per block and 8-pixel slice: 1,176 instructions at
    16 rows, 1,326 at 32, 2,136 at 64), so they are used only where they remove idle rows.
    """
    fits = next(rows for rows in (16, 32, 64, 128) if rows >= min(out_per_group, 128))
    return min(fits, bm)


def _plan_tf32x3(spec: ConvSpec, direction: str, params: dict) -> Launch:
    """tf32x3 with its block-tile rows ``params["bm"]``, register budget ``params["blocks"]`` and
    pipeline depth ``params["stages"]``, or its wgmma forward kernel (``params["mma"]``).
    """
    return _plan_implicit_gemm(
        spec,
        direction,
        True,
        bm=params["bm"],
        kind="tf32x3",
        tx_blocks=params["blocks"],
        tx_stages=params["stages"],
        gather=params["gather"],
        tx_wgmma=params["mma"] == "wgmma",
    )


#: Reduction length (channels per group x taps) from which tf32x3's forward kernel runs on the
#: larger register budget of three blocks per multiprocessor (:func:`_default_blocks_tf32x3`).
TF32X3_THREE_BLOCKS_FROM = 768


def _default_blocks_tf32x3(spec: ConvSpec, direction: str) -> int:
    """tf32x3's register budget: 3 blocks (<= 168 registers) from a reduction of
    :data:`TF32X3_THREE_BLOCKS_FROM` products per output, 4 (128 registers) below.

    H100, 2026-11-26, one process with the two budgets interleaved (forward, B=64 or 32;
    docs/measurements/tf32x3-pipeline-2026-11-26-h100.md), time of 4 over 3: reduction 288 (3x3
    C=32) 0.99, 576 (3x3 C=64) 0.98, 864 (3x3 C=96) 1.02, 1024 (1x1 C=1024) 1.04, 1152 (3x3
    C=128) 1.05, 1728 1.04, 2304 1.07, 4608 (3x3 C=512) 1.08. Backward the budget is the
    stride-1 input gradient's, whose reduction runs over the layer's output channels.
    """
    return 3 if _gather_channels(spec, direction) * math.prod(spec.kernel_size) >= TF32X3_THREE_BLOCKS_FROM else 4


#: Compute capability of tf32x3's wgmma forward kernel (tf32x3_wgmma.cu: sm_90a, Hopper only).
TF32X3_WGMMA_CAPABILITY = 90

#: Output channels and pixels of the wgmma kernel's block tile (its wgmma N, and two row halves of 64).
TF32X3_WGMMA_BM, TF32X3_WGMMA_BN = 64, 128

#: Dynamic shared memory of the wgmma kernel: CS_TW_STAGES stages of the split weights (2 x 64 x 8
#: words) and the inputs (8 x 136 words).
TF32X3_WGMMA_SMEM = (
    DEFINES["CS_TW_STAGES"] * (2 * TF32X3_WGMMA_BM * GATHER_CHUNK + GATHER_CHUNK * (TF32X3_WGMMA_BN + 8)) * 4
)


def _wgmma_device(direction: str) -> bool:
    """Whether tf32x3's wgmma kernel is the rule's choice for ``direction`` on the current device."""
    return direction == "forward" and rt.compute_capability() == TF32X3_WGMMA_CAPABILITY


def _default_mma_tf32x3(spec: ConvSpec, direction: str, chosen: dict) -> str:
    """``wgmma`` for the forward product on compute capability 9.0, ``sync`` elsewhere, and
    ``sync`` wherever ``chosen`` (the other parameters, given or their rules') holds a value only
    the mma.sync kernel has: pinning ``bm=128``, a stage count, a register budget or the table
    gather keeps selecting the kernel they describe.

    H100, 2026-11-27, cuDNN-FP32's time over the wgmma kernel's (launched alone; one process,
    interleaved; docs/measurements/tf32x3-wgmma-2026-11-27-h100.md), in parentheses over
    mma.sync's through the API: 3x3 C=32 64x64 B=64 2.31 (1.34), 3x3 C=64 56x56 1.99 (1.45),
    3x3 C=128 28x28 1.21 (0.82), 3x3 C=256 14x14 1.34 (0.90), 1x1 96->24 1.40 (1.00), 5x5
    stride 2 C=20 1.30 (0.84). A call through the API adds ~10 us of host time to either.
    """
    if not _wgmma_device(direction):
        return "sync"
    own = {"bm": 64, "stages": DEFINES["CS_TX_STAGES"], "gather": "chunked"}
    if any(chosen[name] != value for name, value in own.items()):
        return "sync"
    return "wgmma" if chosen["blocks"] == _default_blocks_tf32x3(spec, direction) else "sync"


TF32X3_TUNABLES = (
    Tunable(
        "mma",
        ("sync", "wgmma"),
        _default_mma_tf32x3,
        "the forward product's tensor-core instruction: 'sync' (mma.sync m16n8k8, any GPU from sm_80; its "
        "tile, budget, pipeline and gather the other parameters) or 'wgmma' (Hopper's asynchronous "
        "warpgroup MMA, sm_90a: one kernel, 128 pixels x 64 channels a block, chunked gather; the rule's "
        "choice on compute capability 9.0 unless another parameter is pinned to a value only mma.sync has; "
        "H100, the kernel alone 1.4-1.7x mma.sync through the API)",
        follows=("bm", "blocks", "stages", "gather"),
    ),
    Tunable(
        "bm",
        (64, 128),
        64,
        "block-tile rows (output channels; template BM, 2*BM threads): 64 keeps several blocks per "
        "multiprocessor; 128 was slower at 128 and 256 channels (H100, three blocks of 168 registers against "
        "one: 0.504 vs 0.468 ms, 0.601 vs 0.447 ms)",
    ),
    Tunable(
        "blocks",
        OVERRIDABLE["CS_TX_BLOCKS"][1],
        _default_blocks_tf32x3,
        "128-thread blocks per multiprocessor the forward kernel's registers must allow (-D CS_TX_BLOCKS, "
        "its __launch_bounds__; one module each; 0: no minimum): more blocks hide more latency, fewer "
        "registers may spill; the rule takes 3 from a reduction of 768 products per output, 4 below "
        "(H100: 4 is 1.01-1.02x faster at 288-576 products, 3 is 1.02-1.08x faster at 864-4608)",
    ),
    Tunable(
        "stages",
        OVERRIDABLE["CS_TX_STAGES"][1],
        DEFINES["CS_TX_STAGES"],
        "shared-memory stages of the forward kernel's cp.async pipeline at 64 rows (-D CS_TX_STAGES; "
        "S - 1 in flight, 10.25 KiB each, dynamic shared memory; 128-row tiles keep two; H100: 5 was "
        "1.01-1.02x on 3x3 C=32-64 layers, 0.98-0.99x on fatter ones, 6 leaves three blocks per SM)",
    ),
    _gather_tunable(_default_gather_tf32x3),
)


# --- tf32x3_image: tf32x3 with a whole image in shared memory (narrow layers) ----------

#: Most output channels tf32x3_image covers: four 8-column MMA tiles (template NT).
TF32X3_IMAGE_MAX_CHANNELS = 32

#: Shared memory tf32x3_image may ask for: two blocks per sm_90 multiprocessor (228 KiB, less
#: 1 KiB the system keeps per block), so one block's image load overlaps the other's MMAs.
TF32X3_IMAGE_SMEM = 113 * 1024

#: Warps of a tf32x3_image block: its __launch_bounds__(384, 2), two blocks per multiprocessor.
TF32X3_IMAGE_MAX_WARPS = 12


def tf32x3_image_geometry(spec: ConvSpec) -> dict:
    """Launch geometry of tf32x3_image (pure arithmetic, no GPU).

    ``rows``/``cols``: the padded image rows and columns the outputs read
    (Hp, Wp); ``ksteps``: 8-deep reduction steps; ``nt``: 8-channel MMA
    tiles; ``warps``: one per pair of 16-pixel tiles, at most 12 (a warp
    then takes several pairs, as evenly as the pairs divide); ``smem``: the
    dynamic shared memory in bytes (fragment-ordered split weights, the tap
    table, the image's big and small parts).
    """
    s = spec.as_2d()
    (Ho, Wo), (KH, KW), (sh, sw), (dh, dw) = s.out_size, s.kernel_size, s.stride, s.dilation
    rows, cols = (Ho - 1) * sh + (KH - 1) * dh + 1, (Wo - 1) * sw + (KW - 1) * dw + 1
    ksteps = math.ceil(s.channels_per_group * KH * KW / 8)
    nt = math.ceil(s.out_channels / 8)
    pairs = math.ceil(Ho * Wo / 32)
    rounds = math.ceil(pairs / TF32X3_IMAGE_MAX_WARPS)
    warps = math.ceil(pairs / rounds)
    image = s.in_channels * rows * cols
    smem = ksteps * nt * 32 * 16 + ksteps * 4 * 8 + 2 * image * 4
    return {"rows": rows, "cols": cols, "ksteps": ksteps, "nt": nt, "warps": warps, "smem": smem}


def _check_tf32x3_image(spec: ConvSpec, direction: str) -> Verdict:
    s = spec.as_2d()
    if s.groups != 1:
        return f"tf32x3_image multiplies one image by all filters: groups=1 only (got {s.groups}); use tf32x3"
    if s.out_channels > TF32X3_IMAGE_MAX_CHANNELS:
        return (
            f"tf32x3_image holds at most {TF32X3_IMAGE_MAX_CHANNELS} output channels in its MMA columns "
            f"(got {s.out_channels}); use tf32x3"
        )
    verdict = _check_tf32x3(spec, direction)  # float32, TF32 tensor cores, a long enough reduction
    if verdict is not True:
        return verdict
    smem = tf32x3_image_geometry(s)["smem"]
    optin = rt.shared_memory_optin()
    limit = TF32X3_IMAGE_SMEM if optin is None else min(TF32X3_IMAGE_SMEM, optin)
    if smem > limit:
        return (
            f"an image of {s.in_channels} x {s.in_size[0]} x {s.in_size[1]} and the split weights need {smem} bytes "
            f"of shared memory (> {limit}); use tf32x3"
        )
    return True


def tf32x3_image_taps(spec: ConvSpec) -> np.ndarray:
    """tf32x3_image's tap table, ``(ksteps, 4, 2)`` int32: entry ``[s, t]`` holds the offsets in the
    padded image of taps ``k = 8s + t`` and ``k + 4`` (an MMA thread's two A columns); a tap past
    the reduction reads offset 0, in the image for every pixel, against a zero weight (exactly 0:
    images with non-finite values take the kernel's float32 path). ``k = (c, p, q)`` is at
    ``c*Hp*Wp + p*dh*Wp + q*dw``.
    """
    s = spec.as_2d()
    geo = tf32x3_image_geometry(s)
    rows, cols, ksteps = geo["rows"], geo["cols"], geo["ksteps"]
    (KH, KW), (dh, dw) = s.kernel_size, s.dilation
    c, p, q = np.meshgrid(np.arange(s.in_channels), np.arange(KH), np.arange(KW), indexing="ij")
    offsets = (c * rows * cols + p * dh * cols + q * dw).reshape(-1)
    padded = np.zeros(ksteps * 8, dtype=np.int64)
    padded[: offsets.size] = offsets
    steps = padded.reshape(ksteps, 2, 4)  # [s][half][t]: k = 8s + 4 half + t
    return np.ascontiguousarray(steps.transpose(0, 2, 1)).astype(np.int32)


def _plan_tf32x3_image(spec: ConvSpec, direction: str, act: int = 0) -> Launch:
    """Persistent blocks, each walking over images; as many as the GPU holds at once."""
    s = spec.as_2d()
    geo = tf32x3_image_geometry(s)
    fn = rt.kernel("tf32x3_image.cu", f"conv2d_tf32x3_image@{geo['nt']},{act}", s.dtype)
    threads = 32 * geo["warps"]
    per_sm = rt.resident_blocks(fn, threads, geo["smem"])
    if per_sm < 1:
        raise RuntimeError(f"tf32x3_image: no block of {threads} threads and {geo['smem']} bytes fits a multiprocessor")
    grid = (min(s.batch, per_sm * rt.sm_count()),)
    table = rt.cupy().asarray(tf32x3_image_taps(s))
    args = (*_ARRAYS4, table, *rt.i32(geo["rows"], geo["cols"], geo["ksteps"]), *_params(s))
    return _with_bias(s, rt.bind(fn, grid, (threads,), args, geo["smem"]))


def _plan_implicit_gemm(
    spec: ConvSpec,
    direction: str,
    big: bool,
    masked: bool = False,
    bm: int | None = None,
    bk: int = GEMM_BK,
    kind: str = "simt",
    act: int = 0,
    tx_blocks: int | None = None,
    gather: str | None = None,
    tx_stages: int | None = None,
    tx_wgmma: bool = False,
) -> Launch:
    """fused_gemm (64x64 tiles, both dtypes) or igemm_big (float32, BM x 128 tiles, pipelined).

    ``act`` (forward): the activation code of the kernel's epilogue
    (``_epilogue.ACTIVATION_CODES``); ``masked`` (backward): the ``_masked``
    kernels that read grad_y through the ReLU output (the launch then takes
    ``relu_output`` as a seventh operand);
    ``bm`` sets igemm_big's block-tile rows (default: the hand rule); ``bk``
    fused_gemm's reduction slice (the ``-D CS_GEMM_BK`` module);
    ``kind="tf32x3"`` runs the forward product, the weight gradient and the
    input gradient of a stride-1 convolution (itself a forward problem) on
    the tensor cores with error-compensated TF32 (it has no ``_masked``
    kernels: ``fuses_relu_mask`` says False for it); ``tx_blocks`` is its
    register budget (``-D CS_TX_BLOCKS``, the module of its kernels; None: the default), ``tx_stages``
    its forward kernel's pipeline depth at 64 rows (``-D CS_TX_STAGES``; None: the default);
    ``gather`` the big forward kernels' im2col gather (:func:`_gather_tunable`; None: the algorithm's rule),
    backward that of the stride-1 input gradient when it runs through them; ``tx_wgmma``: tf32x3's
    forward product on its wgmma kernel (sm_90a; its own tile, so ``bm``, ``tx_blocks`` and
    ``tx_stages`` do not apply).
    """
    slice_depth = (("CS_GEMM_BK", bk),)
    tx_overrides = tuple(
        (name, value) for name, value in (("CS_TX_BLOCKS", tx_blocks), ("CS_TX_STAGES", tx_stages)) if value is not None
    )
    s = spec.as_2d()
    p = _params(s)
    G, Mg, Cg = s.groups, s.out_channels_per_group, s.channels_per_group
    (H, W), (Ho, Wo), (KH, KW) = s.in_size, s.out_size, s.kernel_size
    n = s.batch * Ho * Wo
    if big and bm is None:
        bm = _big_rows(Mg)
    elif not big:
        bm = None
    if big and gather is None:
        gather = (_default_gather_tf32x3 if kind == "tf32x3" else _default_gather_simt)(s, direction)
    if direction == "forward":
        if bm is not None:
            koff = _filter_offsets(Cg, (H, W), (KH, KW), s.dilation)
            grid = (math.ceil(n / BIG_BN), math.ceil(Mg / bm), G)
            chunked = GATHERS[gather]
            if kind == "tf32x3" and tx_wgmma:
                return _with_bias(s, _tf32x3_wgmma_forward(s, act, koff, p))
            if kind == "tf32x3":
                return _with_bias(s, _tf32x3_forward(s, grid, bm, act, chunked, koff, p, tx_overrides))
            fn = rt.kernel("implicit_gemm_big.cu", f"conv2d_igemm_fwd@{bm},{act},{chunked}", s.dtype)
            return _with_bias(s, rt.bind(fn, grid, (2 * bm,), (*_ARRAYS4, koff, *p)))
        grid = (math.ceil(n / GEMM_BN), math.ceil(Mg / GEMM_BM), G)
        fn = rt.kernel("implicit_gemm.cu", f"conv2d_implicit_gemm@{act}", s.dtype, overrides=slice_depth)
        return _with_bias(s, rt.bind(fn, grid, (256,), (*_ARRAYS4, *p)))
    cp = rt.cupy()
    kd = Cg * KH * KW
    if masked and kind == "tf32x3":
        raise ValueError("tf32x3 has no kernels that read grad_y through a ReLU mask")
    dgrad = _plan_input_gradient(
        s,
        big,
        slice_depth,
        masked=masked,
        tensor_cores=kind == "tf32x3",
        tx_blocks=tx_blocks,
        tx_stages=tx_stages,
        gather=gather,
    )
    suffix = "_masked" if masked else ""
    if bm is not None:
        koff = _filter_offsets(Cg, (H, W), (KH, KW), s.dilation)
        if kind == "tf32x3":
            rows = tf32x3_wgrad_rows(Mg, bm)
            splits = _wgrad_splits(s, rows, BIG_BN, TF32X3_WGRAD_BLOCKS_PER_SM[rows])
            # CS_TX_BLOCKS bounds the forward kernel only: the weight gradient's module is the
            # default one whatever the budget (a module per kernel: no second compile of the same code).
            wgrad = rt.kernel("implicit_gemm_tf32x3.cu", f"conv2d_tf32x3_wgrad@{rows}", s.dtype)
            wblock = (2 * rows if rows >= 32 else 64,)  # tx_wgrad_threads in the .cu
        else:
            rows = bm
            splits = _wgrad_splits(s, bm, BIG_BN, 256 // bm)
            wgrad = rt.kernel(f"implicit_gemm_big{suffix}.cu", f"conv2d_igemm_wgrad{suffix}@{bm}", s.dtype)
            wblock = (2 * bm,)
        wgrid = (math.ceil(kd / BIG_BN), math.ceil(Mg / rows), splits * G)
        wargs = (koff, *rt.i32(splits), *p)
    else:
        splits = _wgrad_splits(s, GEMM_BM, GEMM_BN, 4)
        wgrad = rt.kernel(
            f"implicit_gemm{suffix}.cu", f"conv2d_wgrad_implicit_gemm{suffix}", s.dtype, overrides=slice_depth
        )
        wgrid = (math.ceil(kd / GEMM_BN), math.ceil(Mg / GEMM_BM), splits * G)
        wargs = (*rt.i32(splits), *p)
        wblock = (256,)

    # Packed launches: the slices' weight-gradient sums, their total in slice order, and the bias gradient.
    weight_sums = rt.bind(wgrad, wgrid, wblock, ((ARG, ARG, ARG, ARG) if masked else (ARG, ARG, ARG)) + wargs)
    sum_slices = _chunk_sums(s.dtype, splits, s.out_channels * kd, masked)
    bias_gradient = _bias_gradient(s, masked)

    if masked:

        def backward_through_relu(grad_y, x, w, grad_x, grad_w, grad_b, relu_output):
            dgrad(grad_y, w, grad_x, relu_output)
            partial = cp.empty((splits, s.out_channels, kd), dtype=x.dtype)
            weight_sums(grad_y, relu_output, x, partial)
            sum_slices(partial, grad_w)
            bias_gradient(grad_y, grad_b, relu_output)

        return backward_through_relu

    def backward(grad_y, x, w, grad_x, grad_w, grad_b):
        dgrad(grad_y, w, grad_x)
        partial = cp.empty((splits, s.out_channels, kd), dtype=x.dtype)
        weight_sums(grad_y, x, partial)
        sum_slices(partial, grad_w)
        bias_gradient(grad_y, grad_b)

    return backward


#: Words of a split-weight row (TX_AROW) and of padding after a 128-column input row (TX_PAD) in the
#: forward kernel's stages (implicit_gemm_tf32x3.cu).
TF32X3_A_ROW, TF32X3_B_PAD = 12, 8


def tf32x3_stage_bytes(bm: int, overrides=()) -> int:
    """Dynamic shared memory of ``conv2d_tf32x3_fwd``: its cp.async stages (``tx_stages`` in the .cu:
    ``CS_TX_STAGES`` at 64 rows, two at 128), each the split weights (big and small, BM rows of 12
    words) and 8 x 136 input words.
    """
    stages = dict(overrides).get("CS_TX_STAGES", DEFINES["CS_TX_STAGES"]) if bm < 128 else 2
    return stages * (2 * bm * TF32X3_A_ROW + GATHER_CHUNK * (BIG_BN + TF32X3_B_PAD)) * 4


def _tf32x3_forward(s: ConvSpec, grid, bm: int, act: int, chunked: int, koff, p, overrides) -> Callable:
    """tf32x3's forward launch: the weights split into big and small TF32 parts, stage by stage
    (``tf32x3_split_weights``, a grid-stride launch over G*steps*Mg*8 elements, into a buffer kept
    per stream), then ``conv2d_tf32x3_fwd@{bm},{act},{chunked}`` reading them.

    The split runs every call (the weights may change between calls) and is small:
    2*G*steps*Mg*8 words, steps = ceil(Cg/8)*KH*KW (chunked) or ceil(Cg*KH*KW/8) (table).
    """
    after_split = _after_weight_split(s, chunked)
    fn = rt.kernel("implicit_gemm_tf32x3.cu", f"conv2d_tf32x3_fwd@{bm},{act},{chunked}", s.dtype, overrides=overrides)
    smem = tf32x3_stage_bytes(bm, overrides)
    if smem > 48 * 1024:  # past what a launch may ask without raising the kernel's ceiling (done here)
        rt.resident_blocks(fn, 2 * bm, smem)
    return after_split(rt.bind(fn, grid, (2 * bm,), (ARG, ARG, ARG, ARG, ARG, koff, *p), smem))


def _tf32x3_wgmma_forward(s: ConvSpec, act: int, koff, p) -> Callable:
    """tf32x3's forward product on Hopper's wgmma (``conv2d_tf32x3_wgmma@{act}``, tf32x3_wgmma.cu):
    the weights split in the chunked order as for the mma.sync kernel, then one launch of
    128-thread blocks over tiles of 128 pixels x 64 output channels.
    """
    G, Mg = s.groups, s.out_channels_per_group
    grid = (math.ceil(s.batch * math.prod(s.out_size) / TF32X3_WGMMA_BN), math.ceil(Mg / TF32X3_WGMMA_BM), G)
    after_split = _after_weight_split(s, 1)
    fn = rt.kernel("tf32x3_wgmma.cu", f"conv2d_tf32x3_wgmma@{act}", s.dtype)
    args = (ARG, ARG, ARG, ARG, ARG, koff, *p)
    return after_split(rt.bind(fn, grid, (128,), args, TF32X3_WGMMA_SMEM))


def _after_weight_split(s: ConvSpec, chunked: int) -> Callable:
    """``after_split(conv)`` -> ``forward(x, w, bias, out)``: the weights split
    (``tf32x3_split_weights@{chunked}``) into a buffer kept per stream, then ``conv(x, w, split,
    bias, out)``.
    """
    G, Mg, Cg = s.groups, s.out_channels_per_group, s.channels_per_group
    taps = math.prod(s.kernel_size)
    steps = math.ceil(Cg / GATHER_CHUNK) * taps if chunked else math.ceil(Cg * taps / GATHER_CHUNK)
    shape = (2, G, steps, Mg, GATHER_CHUNK)
    total = G * steps * Mg * GATHER_CHUNK
    split_fn = rt.kernel("implicit_gemm_tf32x3.cu", f"tf32x3_split_weights@{chunked}", s.dtype)

    def after_split(conv) -> Callable:
        made = []  # (the split launch, its buffers per stream): made at the first call, which has the device

        def forward(x, w, bias, out):
            if not made:
                cp = rt.cupy()
                split = rt.bind(
                    split_fn, (rt.grid_stride_blocks(total),), (THREADS,), (ARG, ARG, *rt.i32(G, Mg, Cg, taps, steps))
                )
                made.append((split, rt.PerStream(lambda: cp.empty(shape, dtype=cp.uint32)), cp))
            split, kept, cp = made[0]
            # A graph capture takes a fresh buffer (rt.PerStream), as its replays may overlap this stream.
            ws = None if capturing() else kept.get()
            if ws is None:
                ws = cp.empty(shape, dtype=cp.uint32)
            split(w, ws)
            conv(x, w, ws, bias, out)

        return forward

    return after_split


def _input_gradient_as_forward(s: ConvSpec) -> ConvSpec:
    """The input gradient of a stride-1 convolution, as a forward problem on grad_y.

    ``grad_x = conv(grad_y, w')`` with ``w'[g*Cg + c, m] = w[g*Mg + m, c, ::-1, ::-1]``
    (flipped in space, transposed per group), stride 1, the same dilation and
    padding ``d*(k-1) - pad`` on each side (negative where the forward padding
    exceeds the kernel's reach: every kernel checks bounds, so it just skips).
    """
    (KH, KW), (dh, dw), ((pt, pb), (pl, pr)) = s.kernel_size, s.dilation, s.padding
    reach_h, reach_w = dh * (KH - 1), dw * (KW - 1)
    return replace(
        s,
        in_channels=s.out_channels,
        out_channels=s.in_channels,
        in_size=s.out_size,
        out_size=s.in_size,
        padding=((reach_h - pt, reach_h - pb), (reach_w - pl, reach_w - pr)),
        has_bias=False,
    )


def _plan_input_gradient(
    s: ConvSpec,
    big: bool,
    overrides=(),
    masked: bool = False,
    tensor_cores: bool = False,
    tx_blocks=None,
    gather: str | None = None,
    tx_stages=None,
) -> Callable:
    """``dgrad(grad_y, w, grad_x)`` for an implicit-GEMM backward pass.

    ``overrides`` (fused_gemm's ``-D CS_GEMM_BK``) select the gather kernel's
    module; the stride-1 path plans the transposed problem with its own
    defaults. ``masked``: ``dgrad(grad_y, w, grad_x, relu_output)`` reads
    grad_y through the ReLU output, in the same kernels' ``_masked`` variants.

    With stride 1 the input gradient is itself a convolution
    (:func:`_input_gradient_as_forward`), run by the forward kernel that suits
    its shape: ``register_tiled`` when it has at most 24 output channels per
    group (the input channels of the layer: ECE408-style layers), else the
    algorithm's own implicit GEMM (``tensor_cores``: tf32x3 where it takes
    the transposed problem, with the layer's register budget ``tx_blocks``, else igemm_big; the
    layer's own kernel with the im2col gather ``gather``, a fallback or None: the hand rule of the
    transposed problem).
    The filters are flipped and transposed per call (a copy of the weights, small). Other strides use a dedicated gather
    kernel that skips the stride gaps.
    """
    G, Mg, Cg = s.groups, s.out_channels_per_group, s.channels_per_group
    KH, KW = s.kernel_size
    if s.stride == (1, 1):
        cp = rt.cupy()
        t = _input_gradient_as_forward(s)
        if Cg <= REGISTER_TILES[-1] and _check_tiled(t, "register_tiled") is True:
            name = "register_tiled"
        elif tensor_cores and not masked and _check_tf32x3(t, "forward") is True:
            name = "tf32x3"
        else:
            name = "igemm_big" if big else "fused_gemm"

        # The filters of the transposed problem, one packed launch into a fresh buffer (a CuPy
        # transpose, flip and copy took several Python-level calls and an elementwise launch).
        suffix = "_masked" if masked else ""
        flip = rt.kernel(f"backward_util{suffix}.cu", "flip_weights", s.dtype)
        n_weights = G * Mg * Cg * KH * KW
        flip_args = (ARG, ARG, *rt.i32(G, Mg, Cg, KH, KW))  # w, wt
        flip_launch = rt.bind(flip, (rt.grid_stride_blocks(n_weights),), (THREADS,), flip_args)

        def flipped(w):
            """The filters of the transposed problem: ``t.w_shape``, ``(G, Cg, Mg, KH, KW)`` in memory, taps flipped."""
            wt = cp.empty(t.w_shape, dtype=w.dtype)
            flip_launch(w, wt)
            return wt

        if masked:
            conv_masked = _plan_forward_masked(t, name, gather)

            def dgrad_as_conv_masked(grad_y, w, grad_x, relu_output):
                conv_masked(grad_y, relu_output, flipped(w), grad_x)

            return dgrad_as_conv_masked
        # The hand-chosen parameters of the transposed problem (tf32x3: the layer's register budget),
        # and the gather the backward plan was given, where the layer's own kernel runs it (tf32x3's
        # dX falling back to igemm_big, on a reduction too short for it, takes igemm_big's rule).
        given = {}
        if name == "tf32x3":
            # dX stays on the mma.sync kernel (the wgmma kernel serves forward layers only, so far).
            given["mma"] = "sync"
        if name == "tf32x3" and tx_blocks is not None:
            given["blocks"] = tx_blocks
        if name == "tf32x3" and tx_stages is not None:
            given["stages"] = tx_stages
        if gather is not None and name == ("tf32x3" if tensor_cores else "igemm_big"):
            given["gather"] = gather
        conv = RECORDS[name].build(t, "forward", given or None)

        def dgrad_as_conv(grad_y, w, grad_x):
            conv(grad_y, flipped(w), None, grad_x)

        return dgrad_as_conv
    suffix = "_masked" if masked else ""
    fn = rt.kernel(f"implicit_gemm{suffix}.cu", f"conv2d_dgrad_implicit_gemm{suffix}", s.dtype, overrides=overrides)
    grid = (math.ceil(s.batch * math.prod(s.in_size) / GEMM_BN), math.ceil(Cg / GEMM_BM), G)
    p = _params(s)
    if masked:
        gather_masked = rt.bind(fn, grid, (256,), (ARG, ARG, ARG, ARG, *p))  # grad_y, relu_output, w, grad_x
        return lambda grad_y, w, grad_x, relu_output: gather_masked(grad_y, relu_output, w, grad_x)
    return rt.bind(fn, grid, (256,), (ARG, ARG, ARG, *p))  # called as (grad_y, w, grad_x)


def _plan_forward_masked(spec: ConvSpec, algorithm: str, gather: str | None = None) -> Callable:
    """``run(x, xmask, w, out)``: the forward kernel of ``algorithm`` (hand-chosen parameters, no bias;
    igemm_big's im2col gather ``gather`` if given) reading x through the ReLU mask ``xmask`` (x's shape).

    The stride-1 input gradient through a ReLU (x is grad_y, xmask the
    layer's ReLU output); the geometry is that of the record's own forward plan.
    """
    s = spec.as_2d()
    p = _params(s)
    G, Mg = s.groups, s.out_channels_per_group
    if algorithm == "register_tiled":
        params = _tiled_params(s, algorithm)
        geo, mt = _tile_geometry(s, algorithm, params), params["mt"]
        grid, block, smem = (s.batch * G, geo["tiles"], math.ceil(Mg / mt)), geo["block"], geo["smem"]
        overrides = (("CS_RT_PX", params["px"]),)
        fn = rt.kernel("conv2d_masked.cu", f"conv2d_register_tiled_masked@{mt}", s.dtype, overrides=overrides)

        def launch(x, xmask, w, bias, out):
            fn(grid, block, (x, xmask, w, bias, out, *p), shared_mem=smem)

    elif algorithm == "igemm_big":
        bm, n = _big_rows(Mg), s.batch * math.prod(s.out_size)
        koff = _filter_offsets(s.channels_per_group, s.in_size, s.kernel_size, s.dilation)
        grid = (math.ceil(n / BIG_BN), math.ceil(Mg / bm), G)
        chunked = GATHERS[gather or _default_gather_simt(s, "forward")]
        fn = rt.kernel("implicit_gemm_big_masked.cu", f"conv2d_igemm_fwd_masked@{bm},{chunked}", s.dtype)

        def launch(x, xmask, w, bias, out):
            fn(grid, (2 * bm,), (x, xmask, w, bias, out, koff, *p))

    else:  # fused_gemm, default reduction slice
        n = s.batch * math.prod(s.out_size)
        grid = (math.ceil(n / GEMM_BN), math.ceil(Mg / GEMM_BM), G)
        fn = rt.kernel("implicit_gemm_masked.cu", "conv2d_implicit_gemm_masked", s.dtype)

        def launch(x, xmask, w, bias, out):
            fn(grid, (256,), (x, xmask, w, bias, out, *p))

    zero = []  # the device's zero bias, looked up once (as _with_bias)

    def run(x, xmask, w, out):
        if not zero:
            zero.append(rt.zeros(s.out_channels, x.dtype))
        launch(x, xmask, w, zero[0], out)

    return run


#: Forward algorithms whose kernel applies ``activation=`` ("relu", "relu6") in its epilogue.
FUSED_ACTIVATION = ("fused_gemm", "igemm_big", "tf32x3", "tf32x3_image", "depthwise", "pointwise", "pointwise_splitk")

#: Backward algorithms whose every grad_y load (dX, dW and the db reduction)
#: can read through the ReLU output (``relu_output=``): :func:`plan_backward_relu`.
#: The cuBLAS ones (pointwise_gemm, im2col_gemm) multiply grad_y inside cuBLAS,
#: where no mask can be applied: they take a masked copy as before.
FUSED_RELU_MASK = (
    "fused_gemm",
    "igemm_big",
    "depthwise",
    "wgrad_atomic",
    "wgrad_shuffle",
    "wgrad_registers",
    "wgrad_padded",
)


def plan_forward_activation(spec: ConvSpec, algorithm: str, activation: str, params: dict | None = None) -> Launch:
    """The forward launch of a :data:`FUSED_ACTIVATION` algorithm with ``activation`` in the kernel's epilogue.

    ``activation``: ``"relu"`` or ``"relu6"``. ``params`` sets the
    algorithm's tunables as for the plain forward plan (resolved here:
    defaults filled in, names and values checked).
    """
    if algorithm not in FUSED_ACTIVATION:
        raise ValueError(
            f"{algorithm!r} fuses no activation into its kernel; those that do: {', '.join(FUSED_ACTIVATION)}"
        )
    act = ACTIVATION_CODES.get(activation) if isinstance(activation, str) else None
    if not act:
        fused = ", ".join(repr(a) for a in ACTIVATION_CODES if a)
        raise ValueError(f"`activation` of a fused epilogue must be one of {fused}; got {activation!r}")
    resolved = RECORDS[algorithm].resolve(spec, "forward", params)
    if algorithm == "depthwise":
        return _plan_depthwise(spec, "forward", resolved, act=act)
    if algorithm == "pointwise":
        return _plan_pointwise_kernel(spec, "forward", resolved, act=act)
    if algorithm == "pointwise_splitk":
        return _plan_pointwise_splitk(spec, "forward", act=act)
    if algorithm == "tf32x3_image":
        return _plan_tf32x3_image(spec, "forward", act=act)
    return _plan_implicit_gemm(
        spec,
        "forward",
        algorithm != "fused_gemm",
        bm=resolved.get("bm"),
        bk=resolved.get("bk", GEMM_BK),
        kind="tf32x3" if algorithm == "tf32x3" else "simt",
        act=act,
        tx_blocks=resolved.get("blocks"),
        tx_stages=resolved.get("stages"),
        gather=resolved.get("gather"),
        tx_wgmma=resolved.get("mma") == "wgmma",
    )


def plan_backward_relu(spec: ConvSpec, algorithm: str, params: dict | None = None) -> Launch:
    """The backward launch of a :data:`FUSED_RELU_MASK` algorithm that reads grad_y through the ReLU output.

    ``launch(grad_y, x, w, grad_x, grad_w, grad_b, relu_output)``: every load
    of grad_y in the dX and dW kernels, and the db reduction, reads
    ``0 if relu_output <= 0 else grad_y`` (``relu_output`` of grad_y's shape
    and dtype, contiguous), so no masked copy of grad_y is made. ``params``
    sets the algorithm's tunables as for the plain backward plan.
    """
    if algorithm not in FUSED_RELU_MASK:
        raise ValueError(
            f"{algorithm!r} does not read grad_y through a ReLU mask; those that do: {', '.join(FUSED_RELU_MASK)}"
        )
    resolved = RECORDS[algorithm].resolve(spec, "backward", params)
    if algorithm in LADDER:
        return _plan_ladder(algorithm)(spec, "backward", masked=True)
    if algorithm == "depthwise":
        return _plan_depthwise(spec, "backward", resolved, masked=True)
    return _plan_implicit_gemm(
        spec,
        "backward",
        algorithm == "igemm_big",
        masked=True,
        bm=resolved.get("bm"),
        bk=resolved.get("bk", GEMM_BK),
        gather=resolved.get("gather"),
    )


# --- the dW ladder of the "Optimizing a CNN in CUDA" write-up --------------------

#: The ladder's steps in order: algorithm name -> kernel of its weight gradient.
LADDER = {
    "wgrad_atomic": "wgrad_ladder_atomic",
    "wgrad_shuffle": "wgrad_ladder_shuffle",
    "wgrad_registers": "wgrad_ladder_registers",
    "wgrad_padded": "wgrad_ladder_padded",
}
_LADDER_COMMON = (
    "; dX by the deterministic kernels of fused_gemm (stride 1: a conv of grad_y), db a fixed-order sum; "
    "dW summed with atomicAdd, so not bit-reproducible (never chosen by auto)"
)
LADDER_YB = DEFINES["CS_LADDER_YB"]


def _check_ladder(step: str):
    def check(spec: ConvSpec, direction: str) -> Verdict:
        s = spec.as_2d()
        if s.out_channels * s.channels_per_group > GRID_YZ_MAX:
            return f"{s.out_channels} x {s.channels_per_group} weight rows (M x C/groups) exceed the grid's y limit"
        if math.prod(s.out_size) >= 2**31 - THREADS:
            return "an output plane of 2^31 pixels or more exceeds the kernel's 32-bit pixel blocks"
        if step in ("wgrad_atomic", "wgrad_shuffle"):
            return _check_gemm(spec, direction)  # the input gradient runs fused_gemm's kernels
        (KH, KW) = s.kernel_size
        if KH != KW or KH not in LADDER_KERNELS:
            return (
                f"{step!r} keeps every tap in registers, compiled for square kernels "
                f"{', '.join(f'{k}x{k}' for k in LADDER_KERNELS)}; got {KH}x{KW}"
            )
        if step == "wgrad_padded" and (s.stride != (1, 1) or s.dilation != (1, 1)):
            return (
                f"'wgrad_padded' slides a window of input rows: stride 1 and dilation 1 only; "
                f"got stride {s.stride}, dilation {s.dilation}"
            )
        return _check_gemm(spec, direction)  # the input gradient runs fused_gemm's kernels

    return check


def ladder_weight_gradient(spec: ConvSpec, step: str, masked: bool = False) -> Callable:
    """``wgrad(grad_y, x, grad_w)``: the weight gradient of ladder ``step`` alone (zeroes grad_w, then adds).

    ``masked``: ``wgrad(grad_y, x, grad_w, relu_output)`` reads grad_y through
    the ReLU output (the step's ``_masked`` kernel).
    """
    cp = rt.cupy()
    s = spec.as_2d()
    (Ho, Wo), (KH, KW) = s.out_size, s.kernel_size
    name, p = LADDER[step] + ("_masked" if masked else ""), _params(s)
    if step in ("wgrad_registers", "wgrad_padded"):
        name = f"{name}@{KH}"
    fn = rt.kernel("wgrad_ladder_masked.cu" if masked else "wgrad_ladder.cu", name, s.dtype)
    rows = s.out_channels * s.channels_per_group
    pad = None
    if step == "wgrad_padded":
        ((pt, pb), (pl, pr)), (H, W) = s.padding, s.in_size
        pad = ((0, 0), (0, 0), (pt, pb), (pl, pr))
        # the kernel sees the padded plane, unpadded: H, W and the padding of CONV_PARAMS change
        p = (*p[:2], *rt.i32(H + pt + pb, W + pl + pr), *p[4:14], *rt.i32(0, 0))
        grid = (math.ceil(math.ceil(Ho / LADDER_YB) * Wo / THREADS), rows)
    elif step == "wgrad_registers":
        grid = (math.ceil(Ho * Wo / THREADS), rows)
    else:
        grid = (math.ceil(Ho * Wo / THREADS), rows, KH * KW)

    def wgrad(grad_y, x, grad_w, relu_output=None):
        grad_w.fill(0)  # the blocks add into it
        xin = x if pad is None else cp.pad(x.reshape(s.x_shape), pad)  # the padded copy is part of step 4's cost
        operands = (grad_y, xin) if relu_output is None else (grad_y, relu_output, xin)
        fn(grid, (THREADS,), (*operands, grad_w, *p))

    return wgrad


def _plan_ladder(step: str):
    def plan(spec: ConvSpec, direction: str, masked: bool = False) -> Launch:
        s = spec.as_2d()
        dgrad = _plan_input_gradient(s, big=False, masked=masked)
        wgrad = ladder_weight_gradient(s, step, masked=masked)
        bias_gradient = _bias_gradient(s, masked)
        if masked:

            def backward_through_relu(grad_y, x, w, grad_x, grad_w, grad_b, relu_output):
                dgrad(grad_y, w, grad_x, relu_output)
                wgrad(grad_y, x, grad_w, relu_output)
                bias_gradient(grad_y, grad_b, relu_output)

            return backward_through_relu

        def backward(grad_y, x, w, grad_x, grad_w, grad_b):
            dgrad(grad_y, w, grad_x)
            wgrad(grad_y, x, grad_w)
            bias_gradient(grad_y, grad_b)

        return backward

    return plan


# --- pointwise (1x1) as GEMM ----------------------------------------------------


def _check_pointwise(spec: ConvSpec, direction: str) -> Verdict:
    if any(k != 1 for k in spec.kernel_size):
        return f"pointwise_gemm needs a 1x1 kernel; got {spec.kernel_size}"
    if any(st != 1 for st in spec.stride):
        return f"pointwise_gemm needs stride 1 (a strided 1x1 is not a plain GEMM of x); got {spec.stride}"
    if any(lo or hi for lo, hi in spec.padding):
        return f"pointwise_gemm needs no padding; got {spec.padding}"
    return True


def _pointwise_tile(spec: ConvSpec) -> int:
    """MT of conv2d_pointwise: the smallest instantiation covering M/g (float64 stops at 16: more spills)."""
    tiles = POINTWISE_TILES if spec.dtype == "float32" else tuple(t for t in POINTWISE_TILES if t <= 16)
    return next((mt for mt in tiles if mt >= spec.out_channels_per_group), tiles[-1])


def _check_pointwise_kernel(spec: ConvSpec, direction: str) -> Verdict:
    verdict = _check_pointwise(spec, direction)
    if verdict is not True:
        return verdict.replace("pointwise_gemm", "pointwise")
    blocks = math.ceil(math.prod(spec.in_size) / (THREADS * PW_PX)) * spec.batch * spec.groups
    if blocks > 2**31 - 1:
        return f"{blocks} pixel blocks exceed the grid's x limit"
    return True


def _constraint_pointwise(spec: ConvSpec, direction: str, params) -> Verdict:
    """Channel blocks against the grid's y limit; accumulators against the registers."""
    mt = params["mt"]
    passes = math.ceil(spec.out_channels_per_group / mt)
    if passes > GRID_YZ_MAX:
        return f"mt={mt}: {passes} channel blocks exceed the grid's y limit ({GRID_YZ_MAX})"
    registers = mt * PW_PX * spec.itemsize // 4
    if registers > ACCUMULATOR_REGISTERS:
        return (
            f"mt={mt}: {mt} x {PW_PX} {spec.dtype} accumulators take {registers} 32-bit registers per thread "
            f"(at most {ACCUMULATOR_REGISTERS}; more would spill)"
        )
    return True


POINTWISE_TUNABLES = (
    Tunable(
        "mt",
        POINTWISE_TILES,
        lambda spec, direction: _pointwise_tile(spec),
        "output channels per thread (template MT): passes over x = ceil(Mg / mt)",
    ),
)


def _plan_pointwise_kernel(spec: ConvSpec, direction: str, params: dict, act: int = 0) -> Launch:
    """conv2d_pointwise: pixels x MT output channels per thread, weights broadcast from shared memory
    (``act``: the activation code of its epilogue).
    """
    mt = params["mt"]
    L = math.prod(spec.in_size)
    grid = (math.ceil(L / (THREADS * PW_PX)) * spec.batch * spec.groups, math.ceil(spec.out_channels_per_group / mt))
    fn = rt.kernel("pointwise.cu", f"conv2d_pointwise@{mt},{act}", spec.dtype)
    p = rt.i32(spec.in_channels, L, spec.out_channels, spec.channels_per_group)
    return _with_bias(spec, rt.bind(fn, grid, (THREADS,), (*_ARRAYS4, *p)))


def splitk_tiles(spec: ConvSpec) -> int:
    """Output tiles of conv2d_pointwise_splitk (before the reduction is split); the rule reads it too."""
    L = math.prod(spec.in_size)
    return math.ceil(L / SPLITK_TILE) * spec.batch * spec.groups * math.ceil(spec.out_channels_per_group / SPLITK_TILE)


def _splitk_slices(spec: ConvSpec, blocks_per_sm: int = 2) -> tuple[int, int]:
    """(slices, channels per slice): enough blocks to fill the device, at least one 32-channel chunk each,
    and the partial sums within the workspace.
    """
    Cg = spec.channels_per_group
    per_slice = spec.batch * spec.out_channels * math.prod(spec.in_size) * spec.itemsize
    wanted = math.ceil(blocks_per_sm * rt.sm_count() / splitk_tiles(spec))
    slices = max(1, min(wanted, math.ceil(Cg / SPLITK_TILE), WORKSPACE_BYTES // max(1, per_slice), GRID_YZ_MAX))
    width = math.ceil(Cg / slices)
    return math.ceil(Cg / width), width


def _check_pointwise_splitk(spec: ConvSpec, direction: str) -> Verdict:
    verdict = _check_pointwise(spec, direction)
    if verdict is not True:
        return verdict.replace("pointwise_gemm", "pointwise_splitk")
    L = math.prod(spec.in_size)
    if math.ceil(L / SPLITK_TILE) * spec.batch * spec.groups > 2**31 - 1:
        return "pixel tiles exceed the grid's x limit"
    if math.ceil(spec.out_channels_per_group / SPLITK_TILE) > GRID_YZ_MAX:
        return f"{spec.out_channels_per_group} output channels per group exceed the grid's y limit"
    if spec.batch * spec.out_channels * L * spec.itemsize > WORKSPACE_BYTES:
        return f"one slice of partial sums ({spec.batch * spec.out_channels * L} values) exceeds the workspace"
    return True


def _plan_pointwise_splitk(spec: ConvSpec, direction: str, act: int = 0) -> Launch:
    """conv2d_pointwise_splitk into per-slice partial tiles, then the fixed-order reduce with the bias
    (and the activation of code ``act``).

    Where the partial sums are small (:data:`SPLITK_KEPT_BYTES`), one fused
    launch does both (the last block of each tile sums it), with partial sums
    and tile counters kept per stream (``rt.PerStream``); the same bits as the
    two launches. While a graph is captured, the two launches with fresh
    partial sums.
    """
    cp = rt.cupy()
    L = math.prod(spec.in_size)
    slices, width = _splitk_slices(spec)
    grid = (
        math.ceil(L / SPLITK_TILE) * spec.batch * spec.groups,
        math.ceil(spec.out_channels_per_group / SPLITK_TILE),
        slices,
    )
    fn = rt.kernel("pointwise.cu", "conv2d_pointwise_splitk", spec.dtype)
    reduce = rt.kernel("pointwise.cu", f"conv2d_pointwise_splitk_reduce@{act}", spec.dtype)
    n = spec.batch * spec.out_channels * L
    p = rt.i32(spec.batch, spec.in_channels, L, spec.out_channels, spec.channels_per_group, width)
    tail = (np.int64(n), *rt.i32(spec.out_channels, L, slices))
    blocks = (rt.grid_stride_blocks(n),)
    products = rt.bind(fn, grid, (THREADS,), (ARG, ARG, ARG, *p))
    total = rt.bind(reduce, blocks, (THREADS,), (ARG, ARG, ARG, *tail))

    def two_launches(x, w, bias, out):
        part = cp.empty((slices, n), dtype=x.dtype)  # every element written by its slice's tile
        products(x, w, part)
        total(part, bias, out)

    tiles = grid[0] * grid[1]
    if slices * n * spec.itemsize + 4 * tiles > SPLITK_KEPT_BYTES:
        return _with_bias(spec, two_launches)
    # Small partial sums stay with the plan, one set per stream, with the tiles' counters
    # (zeroed once; each launch leaves them at zero): one launch per call, nothing allocated.
    fused = rt.bind(
        rt.kernel("pointwise.cu", f"conv2d_pointwise_splitk_fused@{act}", spec.dtype),
        grid,
        (THREADS,),
        (ARG, ARG, ARG, ARG, ARG, ARG, *p),  # x, w, bias, part, out, counters
    )
    kept = rt.PerStream(lambda: (cp.empty((slices, n), dtype=spec.dtype), cp.zeros(tiles, dtype=cp.uint32)))
    current_stream = cp.cuda.get_current_stream

    def forward(x, w, bias, out):
        # Under graph_capture (CapturedNetwork's warm-up passes and its capture alike) the two launches,
        # so that warm-up allocates what the capture will; a stream capturing otherwise: the same.
        if capturing():
            two_launches(x, w, bias, out)
            return
        # The stream is read once, for the buffers and the launch (0.15-0.38 us a read, H100 hosts).
        stream = current_stream()
        state = kept.get(stream)
        if state is None:
            two_launches(x, w, bias, out)
        else:
            part, counters = state
            fused(x, w, bias, part, out, counters, stream=stream.ptr)

    return _with_bias(spec, forward)


def _plan_pointwise(spec: ConvSpec, direction: str) -> Launch:
    """A 1x1 stride-1 conv is ``y[b, g] = w[g] @ x[b, g]``: strided-batched cuBLAS on reshaped views."""
    cp = rt.cupy()
    B, G, Mg, Cg = spec.batch, spec.groups, spec.out_channels_per_group, spec.channels_per_group
    L = math.prod(spec.in_size)
    if direction == "forward":

        def forward(x, w, bias, out):
            cp.matmul(w.reshape(G, Mg, Cg), x.reshape(B, G, Cg, L), out=out.reshape(B, G, Mg, L))
            if bias is not None:
                out.reshape(B, spec.out_channels, L)[...] += bias.reshape(1, -1, 1)

        return forward

    bias_gradient = _bias_gradient(spec)

    def backward(grad_y, x, w, grad_x, grad_w, grad_b):
        gy = grad_y.reshape(B, G, Mg, L)
        cp.matmul(w.reshape(G, Mg, Cg).transpose(0, 2, 1), gy, out=grad_x.reshape(B, G, Cg, L))
        per_image = cp.matmul(gy, x.reshape(B, G, Cg, L).transpose(0, 1, 3, 2))  # (B, G, Mg, Cg)
        per_image.sum(axis=0, out=grad_w.reshape(G, Mg, Cg))
        bias_gradient(grad_y, grad_b)

    return backward


# --- depthwise -------------------------------------------------------------------


def _depthwise_fixed(s: ConvSpec) -> tuple[int, int]:
    """(K, S) of the compile-time instantiation that fits ``s``, or (0, 0) for the general one."""
    (KH, KW), (sh, sw), (dh, dw) = s.kernel_size, s.stride, s.dilation
    if KH == KW and sh == sw and dh == dw == 1 and (KH, sh) in DEPTHWISE_FIXED:
        return KH, sh
    return 0, 0


def _check_depthwise(spec: ConvSpec, direction: str) -> Verdict:
    s = spec.as_2d()
    if s.channels_per_group != 1:
        return f"depthwise needs one input channel per group (C/groups = 1); got {s.channels_per_group}"
    if direction == "backward" and max(s.kernel_size) > DEPTHWISE_WGRAD_KMAX[-1]:
        return (
            f"the depthwise weight gradient keeps every tap in registers: kernels up to "
            f"{DEPTHWISE_WGRAD_KMAX[-1]}x{DEPTHWISE_WGRAD_KMAX[-1]}; got {s.kernel_size}"
        )
    return True


DEPTHWISE_TUNABLES = (
    Tunable("px", OVERRIDABLE["CS_DW_PX"][1], DW_PX, "forward outputs per thread along W (-D CS_DW_PX)"),
    Tunable("py", OVERRIDABLE["CS_DW_PY"][1], DW_PY, "forward outputs per thread along H (-D CS_DW_PY)"),
)


def _constraint_depthwise(spec: ConvSpec, direction: str, params) -> Verdict:
    """The forward kernel alone reads px and py: the backward pass accepts only the defaults."""
    if direction == "backward" and (params["px"], params["py"]) != (DW_PX, DW_PY):
        return (
            f"px={params['px']}, py={params['py']}: the depthwise backward kernels do not read them; "
            f"only the defaults px={DW_PX}, py={DW_PY}"
        )
    return True


def _plan_depthwise(spec: ConvSpec, direction: str, params: dict, masked: bool = False, act: int = 0) -> Launch:
    """The depthwise forward (``act``: the activation code of its epilogue), or backward
    (``masked``: grad_y read through a seventh operand, the ReLU output).
    """
    s = spec.as_2d()
    p = _params(s)
    k, st = _depthwise_fixed(s)
    (Ho, Wo), (H, W) = s.out_size, s.in_size
    if direction == "forward":
        px, py = params["px"], params["py"]
        total = s.batch * s.out_channels * math.ceil(Ho / py) * math.ceil(Wo / px)
        overrides = (("CS_DW_PX", px), ("CS_DW_PY", py))
        fn = rt.kernel("depthwise.cu", f"depthwise_forward@{k},{st},{act}", s.dtype, total, overrides=overrides)
        blocks = (rt.grid_stride_blocks(total),)
        return _with_bias(s, rt.bind(fn, blocks, (THREADS,), (*_ARRAYS4, *p)))
    cp = rt.cupy()
    suffix = "_masked" if masked else ""
    dgrad = rt.kernel(f"depthwise{suffix}.cu", f"depthwise_grad_input{suffix}@{k},{st}", s.dtype)
    dblocks = (rt.grid_stride_blocks(s.batch * s.in_channels * H * W),)
    kmax = next(km for km in DEPTHWISE_WGRAD_KMAX if km >= max(s.kernel_size))
    wgrad = rt.kernel(f"depthwise{suffix}.cu", f"depthwise_grad_weight{suffix}@{kmax}", s.dtype)
    finish = rt.kernel(f"depthwise{suffix}.cu", "depthwise_grad_finish", s.dtype)
    rows = s.batch * Ho
    chunks = _reduction_chunks(s.out_channels, rows * Wo, min(rows, GRID_YZ_MAX))  # chunks of whole rows
    taps = math.prod(s.kernel_size)
    # Three packed launches and one allocation: dX; per chunk, the taps' and the bias's sums
    # (taps + 1 per channel); the chunks summed into dW and db. (Before: two RawKernel calls and
    # four CuPy reductions and copies: regret runs of a B=4 layer read 112-123 us before, 33 after.)
    per_chunk = s.out_channels * (taps + 1)
    masked_args = (ARG,) if masked else ()
    input_grad = rt.bind(dgrad, dblocks, (THREADS,), (ARG, *masked_args, ARG, ARG, *p))
    weight_sums = rt.bind(
        wgrad, (s.out_channels, chunks), (THREADS,), (ARG, *masked_args, ARG, ARG, *rt.i32(chunks), *p)
    )
    finish_sums = rt.bind(
        finish,
        (rt.grid_stride_blocks(per_chunk),),
        (THREADS,),
        (ARG, ARG, ARG, *rt.i32(chunks, s.out_channels, taps)),
    )

    if masked:

        def backward_through_relu(grad_y, x, w, grad_x, grad_w, grad_b, relu_output):
            input_grad(grad_y, relu_output, w, grad_x)
            partial = cp.empty(chunks * per_chunk, dtype=x.dtype)  # every element written by its block
            weight_sums(grad_y, relu_output, x, partial)
            finish_sums(partial, grad_w, grad_b)

        return backward_through_relu

    def backward(grad_y, x, w, grad_x, grad_w, grad_b):
        input_grad(grad_y, w, grad_x)
        partial = cp.empty(chunks * per_chunk, dtype=x.dtype)  # every element written by its block
        weight_sums(grad_y, x, partial)
        finish_sums(partial, grad_w, grad_b)

    return backward


# --- the table -------------------------------------------------------------------

_FWD, _BWD, _BOTH = ("forward",), ("backward",), ("forward", "backward")

RECORDS: dict[str, Algorithm] = {
    record.name: record
    for record in (
        Algorithm("direct", "one thread per output, everything from global memory", _plan_per_output_2d("direct")),
        Algorithm(
            "const_weights",
            "one thread per output, weights in constant memory",
            _plan_per_output_2d("const_weights"),
            check=_check_const,
        ),
        Algorithm(
            "tiled_shared",
            "input patch (tile plus halo) in shared memory per channel",
            _plan_tiled_2d("tiled_shared"),
            tunables=TILED_SHARED_TUNABLES,
            constraint=_constraint_tiled_2d("tiled_shared"),
        ),
        Algorithm(
            "im2col_gemm",
            "im2col buffer + cuBLAS GEMM (backward: two GEMMs and a gather col2im)",
            _plan_im2col,
            directions=_BOTH,
        ),
        Algorithm(
            "fused_gemm",
            "implicit GEMM, 64x64 tiles (backward: dX as a conv of grad_y for stride 1, else a gather implicit GEMM; "
            "split-K dW)",
            _plan_fused_gemm,
            directions=_BOTH,
            check=_check_gemm,
            tunables=FUSED_GEMM_TUNABLES,
        ),
        Algorithm(
            "igemm_big",
            "float32 implicit GEMM, 128x128 (64x128) tiles, 8x8 per thread, prefetch pipeline, filter-offset table; "
            "backward: dX as a conv of grad_y (stride 1; register_tiled for <= 24 channels), split-K dW",
            _plan_igemm_big,
            directions=_BOTH,
            check=_check_big,
            tunables=IGEMM_BIG_TUNABLES,
            constraint=_constraint_big,
        ),
        Algorithm(
            "tf32x3",
            "float32 implicit GEMM on the tensor cores: each operand split into two TF32 parts, three MMAs per "
            "product (error-compensated TF32, precision class 'high'), 64x128 / 128x128 tiles of 32x64 warp tiles; "
            "backward: dX the same way "
            "(stride 1; else fused_gemm's gather), split-K dW on the tensor cores",
            _plan_tf32x3,
            directions=_BOTH,
            check=_check_tf32x3,
            tunables=TF32X3_TUNABLES,
            constraint=_constraint_tf32x3,
            precision="high",
        ),
        Algorithm(
            "tf32x3_image",
            "tf32x3 for narrow layers (<= 32 output channels): a whole image split once into shared memory, the "
            "weights split once per block in MMA fragment order, pixels x channels MMA tiles, persistent blocks",
            _plan_tf32x3_image,
            check=_check_tf32x3_image,
            precision="high",
        ),
        Algorithm(
            "register_tiled",
            "shared patch + MT channels x 4 pixels of accumulators per thread",
            _plan_tiled_2d("register_tiled"),
            tunables=REGISTER_TILED_TUNABLES,
            constraint=_constraint_tiled_2d("register_tiled"),
        ),
        Algorithm(
            "depthwise",
            f"one channel per group: {DW_PX} (along W) x {DW_PY} (along H) outputs per thread from register rows; "
            "backward gather dX, per-channel dW",
            _plan_depthwise,
            directions=_BOTH,
            check=_check_depthwise,
            tunables=DEPTHWISE_TUNABLES,
            constraint=_constraint_depthwise,
        ),
        Algorithm(
            "pointwise_gemm",
            "1x1 stride 1 as strided-batched cuBLAS GEMM on views (no im2col), forward and backward",
            _plan_pointwise,
            directions=_BOTH,
            check=_check_pointwise,
        ),
        Algorithm(
            "pointwise",
            "1x1 stride 1: 4 pixels x up to 32 output channels per thread, float4 rows, weights broadcast",
            _plan_pointwise_kernel,
            check=_check_pointwise_kernel,
            tunables=POINTWISE_TUNABLES,
            constraint=_constraint_pointwise,
        ),
        Algorithm(
            "pointwise_splitk",
            "1x1 stride 1 with the reduction split: 32x32 output tiles x channel slices, "
            "then a fixed-order sum (few pixels, many channels: late MobileNetV2 layers)",
            _plan_pointwise_splitk,
            check=_check_pointwise_splitk,
        ),
        Algorithm(
            "wgrad_atomic",
            "dW ladder step 1: one tap per thread over the batch, shared-memory tree reduction, "
            "one atomicAdd per block" + _LADDER_COMMON,
            _plan_ladder("wgrad_atomic"),
            directions=_BWD,
            ndims=(2,),
            check=_check_ladder("wgrad_atomic"),
            deterministic=False,
        ),
        Algorithm(
            "wgrad_shuffle",
            "dW ladder step 2: step 1 with the last 64 values reduced by __shfl_down_sync" + _LADDER_COMMON,
            _plan_ladder("wgrad_shuffle"),
            directions=_BWD,
            ndims=(2,),
            check=_check_ladder("wgrad_shuffle"),
            deterministic=False,
        ),
        Algorithm(
            "wgrad_registers",
            "dW ladder step 3: all KxK taps accumulated in registers per thread, then reduced tap by tap"
            + _LADDER_COMMON,
            _plan_ladder("wgrad_registers"),
            directions=_BWD,
            ndims=(2,),
            check=_check_ladder("wgrad_registers"),
            deterministic=False,
        ),
        Algorithm(
            "wgrad_padded",
            f"dW ladder step 4: zero-padded input copy (no bounds checks), {LADDER_YB} output rows per thread "
            "from a register window (yBatch)" + _LADDER_COMMON,
            _plan_ladder("wgrad_padded"),
            directions=_BWD,
            ndims=(2,),
            check=_check_ladder("wgrad_padded"),
            deterministic=False,
        ),
        Algorithm("naive", "1-D: one thread per output", _plan_per_output_1d("naive"), ndims=(1,)),
        Algorithm(
            "const_mask",
            "1-D: mask in constant memory",
            _plan_per_output_1d("const_mask"),
            ndims=(1,),
            check=_check_const,
        ),
        Algorithm(
            "tiled_halo",
            "1-D: tile plus halo in shared memory",
            _plan_tiled_1d("tiled_halo"),
            ndims=(1,),
            check=_check_tiled_1d("tiled_halo"),
        ),
        Algorithm(
            "tiled_cached_halo",
            "1-D: tile in shared memory, halo through the cache",
            _plan_tiled_1d("tiled_cached_halo"),
            ndims=(1,),
            check=_check_tiled_1d("tiled_cached_halo"),
        ),
        Algorithm(
            "blocked",
            f"1-D stride 1: {BLOCKED_V} outputs per thread (v), sliding register window, float4 rows",
            _plan_blocked,
            ndims=(1,),
            check=_check_tiled_1d("blocked"),
            tunables=BLOCKED_TUNABLES,
            constraint=_constraint_blocked,
        ),
    )
}

ONE_D_ALGORITHMS = tuple(name for name, r in RECORDS.items() if r.ndims == (1,))
TWO_D_ALGORITHMS = tuple(name for name in RECORDS if name not in ONE_D_ALGORITHMS)
ALGORITHMS = TWO_D_ALGORITHMS + ONE_D_ALGORITHMS
