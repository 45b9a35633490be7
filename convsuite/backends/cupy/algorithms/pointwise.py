"""1x1 stride-1 convolutions: strided-batched cuBLAS on views (``pointwise_gemm``), the pointwise kernel
(pixels x up to 32 output channels per thread) and its split-reduction twin (``pointwise.cu``).
"""

from __future__ import annotations

import math

import numpy as np

from ...._capture import capturing
from ...._spec import ConvSpec
from ... import _cupy_runtime as rt
from ...base import Launch, Tunable, Verdict
from .._record import CudaAlgorithm
from .._sources import CudaSource
from ._common import (
    _ARRAYS4,
    ACCUMULATOR_REGISTERS,
    ARG,
    BACKWARD_UTIL_CU,
    EPILOGUES,
    GRID_YZ_MAX,
    HERE,
    THREADS,
    WORKSPACE_BYTES,
    _bias_gradient,
    _with_bias,
)

#: Output channels per thread of conv2d_pointwise (template argument MT).
POINTWISE_TILES = (8, 16, 24, 32)

POINTWISE_CU = CudaSource(
    "pointwise.cu",
    HERE,
    (
        *[f"conv2d_pointwise@{mt},{act}" for mt in POINTWISE_TILES for act in EPILOGUES],
        "conv2d_pointwise_splitk",
        *[f"conv2d_pointwise_splitk_reduce@{act}" for act in EPILOGUES],
        *[f"conv2d_pointwise_splitk_fused@{act}" for act in EPILOGUES],
    ),
    defines={
        "CS_PW_PX": 4,  # pointwise pixels per thread (one float4)
        "CS_SPLITK_TILE": 32,  # pointwise_splitk: output channels and pixels of a block's tile, channels per chunk
    },
)

PW_PX = POINTWISE_CU.defines["CS_PW_PX"]
SPLITK_TILE = POINTWISE_CU.defines["CS_SPLITK_TILE"]  # output tile of conv2d_pointwise_splitk: channels x pixels
#: pointwise_splitk keeps its partial sums (and tile counters) with the plan, per stream, up to this size
#: and runs one fused launch; larger ones are allocated per call and summed by a second kernel, where the
#: product's time dwarfs a launch and an allocation. A kept set is at most 4 MiB per plan and stream.
SPLITK_KEPT_BYTES = 4 * 2**20


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


def _plan_pointwise_activation(spec: ConvSpec, resolved: dict, act: int) -> Launch:
    """The forward launch of pointwise with the activation ``act`` in the epilogue."""
    return _plan_pointwise_kernel(spec, "forward", resolved, act=act)


def _plan_splitk_activation(spec: ConvSpec, resolved: dict, act: int) -> Launch:
    """The forward launch of pointwise_splitk with the activation ``act`` in the reduction's epilogue."""
    return _plan_pointwise_splitk(spec, "forward", act=act)


POINTWISE_GEMM = CudaAlgorithm(
    name="pointwise_gemm",
    summary="1x1 stride 1 as strided-batched cuBLAS GEMM on views (no im2col), forward and backward",
    plan=_plan_pointwise,
    directions=("forward", "backward"),
    check=_check_pointwise,
    sources=(BACKWARD_UTIL_CU,),  # its products are cuBLAS's; the bias gradient is ours
    plan_activation=None,
    plan_relu_mask=None,  # grad_y is multiplied inside cuBLAS, where no mask can be applied
    ieee_padding=(),
    calls_cublas=True,
)
POINTWISE = CudaAlgorithm(
    name="pointwise",
    summary="1x1 stride 1: 4 pixels x up to 32 output channels per thread, float4 rows, weights broadcast",
    plan=_plan_pointwise_kernel,
    check=_check_pointwise_kernel,
    tunables=POINTWISE_TUNABLES,
    constraint=_constraint_pointwise,
    sources=(POINTWISE_CU,),
    plan_activation=_plan_pointwise_activation,
    plan_relu_mask=None,
    ieee_padding=(),
    calls_cublas=False,
)
POINTWISE_SPLITK = CudaAlgorithm(
    name="pointwise_splitk",
    summary="1x1 stride 1 with the reduction split: 32x32 output tiles x channel slices, "
    "then a fixed-order sum (few pixels, many channels: late MobileNetV2 layers)",
    plan=_plan_pointwise_splitk,
    check=_check_pointwise_splitk,
    sources=(POINTWISE_CU,),
    plan_activation=_plan_splitk_activation,
    plan_relu_mask=None,
    ieee_padding=(),
    calls_cublas=False,
)

ALGORITHMS = (POINTWISE_GEMM, POINTWISE, POINTWISE_SPLITK)
