"""The 2-D direct algorithms of the course reports: one thread per output (weights in global or
constant memory), the shared-memory tiled kernel and the register-tiled one (``conv2d.cu``), and
register_tiled's twin that reads its input through a ReLU mask (``conv2d_masked.cu``: the stride-1
input gradient through a ReLU, run by the implicit GEMMs' backward).
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
    BLOCK_EXTENTS,
    GRID_YZ_MAX,
    HERE,
    MAX_THREADS,
    SMEM_LIMIT,
    THREADS,
    _balanced,
    _check_const,
    _params,
    _upload_constant,
    _with_bias,
)

#: Output channels per thread of conv2d_register_tiled (template argument MT).
REGISTER_TILES = (4, 8, 12, 16, 24)

#: acc[MT][PX] and v[PX] are plain per-thread arrays; any PX >= 1 is correct.
_RT_PX = {"CS_RT_PX": (1, 2, 4, 8)}

CONV2D_CU = CudaSource(
    "conv2d.cu",
    HERE,
    (
        "conv2d_direct|I",
        "conv2d_const_weights|I",
        "conv2d_tiled_shared",
        *[f"conv2d_register_tiled@{mt}" for mt in REGISTER_TILES],
    ),
    defines={"CS_RT_PX": 4},  # adjacent outputs per thread of conv2d_register_tiled
    overridable=_RT_PX,
)

#: register_tiled reading its input through the ReLU output (the "_masked" twin: a MASK switch in the
#: same device body, its own module, so the plain module compiles as before).
CONV2D_MASKED_CU = CudaSource(
    "conv2d_masked.cu",
    HERE,
    tuple(f"conv2d_register_tiled_masked@{mt}" for mt in REGISTER_TILES),
    overridable=_RT_PX,
    includes=(CONV2D_CU,),
)

REGISTER_PX = CONV2D_CU.defines["CS_RT_PX"]
RT_PX_VALUES = CONV2D_CU.overridable["CS_RT_PX"]


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


_FORWARD = ("forward",)

DIRECT = CudaAlgorithm(
    name="direct",
    summary="one thread per output, everything from global memory",
    plan=_plan_per_output_2d("direct"),
    sources=(CONV2D_CU,),
    plan_activation=None,
    plan_relu_mask=None,
    ieee_padding=(),
    calls_cublas=False,
)
CONST_WEIGHTS = CudaAlgorithm(
    name="const_weights",
    summary="one thread per output, weights in constant memory",
    plan=_plan_per_output_2d("const_weights"),
    check=_check_const,
    sources=(CONV2D_CU,),
    plan_activation=None,
    plan_relu_mask=None,
    ieee_padding=(),
    calls_cublas=False,
)
# The tiled kernels load padding as zeros into their shared patch (load_patch) and multiply them.
TILED_SHARED = CudaAlgorithm(
    name="tiled_shared",
    summary="input patch (tile plus halo) in shared memory per channel",
    plan=_plan_tiled_2d("tiled_shared"),
    tunables=TILED_SHARED_TUNABLES,
    constraint=_constraint_tiled_2d("tiled_shared"),
    sources=(CONV2D_CU,),
    plan_activation=None,
    plan_relu_mask=None,
    ieee_padding=_FORWARD,
    calls_cublas=False,
)
REGISTER_TILED = CudaAlgorithm(
    name="register_tiled",
    summary="shared patch + MT channels x 4 pixels of accumulators per thread",
    plan=_plan_tiled_2d("register_tiled"),
    tunables=REGISTER_TILED_TUNABLES,
    constraint=_constraint_tiled_2d("register_tiled"),
    sources=(CONV2D_CU,),
    plan_activation=None,
    plan_relu_mask=None,
    ieee_padding=_FORWARD,
    calls_cublas=False,
)

ALGORITHMS = (DIRECT, CONST_WEIGHTS, TILED_SHARED, REGISTER_TILED)
