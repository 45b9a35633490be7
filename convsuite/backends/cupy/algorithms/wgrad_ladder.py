"""The weight-gradient ladder of the "Optimizing a CNN in CUDA" write-up (``wgrad_ladder.cu``; through
a ReLU: ``wgrad_ladder_masked.cu``): four steps, each a pinnable backward algorithm whose dW sums with
atomics (not bit-reproducible: never picked by auto); dX runs fused_gemm's kernels.
"""

from __future__ import annotations

import math
from typing import Callable

from ...._spec import ConvSpec
from ... import _cupy_runtime as rt
from ...base import Launch, Verdict
from .._record import CudaAlgorithm
from .._sources import CudaSource
from ._common import BACKWARD_UTIL, GRID_YZ_MAX, HERE, THREADS, _bias_gradient, _params
from .conv2d import CONV2D_CU, CONV2D_MASKED_CU
from .implicit_gemm import IMPLICIT_GEMM_CU, IMPLICIT_GEMM_MASKED_CU, _check_gemm, _plan_input_gradient

#: Square kernel sizes the register steps of the dW ladder are compiled for.
LADDER_KERNELS = (1, 3, 5, 7)

WGRAD_LADDER_CU = CudaSource(
    "wgrad_ladder.cu",
    HERE,
    (
        "wgrad_ladder_atomic",
        "wgrad_ladder_shuffle",
        *[f"wgrad_ladder_{step}@{k}" for step in ("registers", "padded") for k in LADDER_KERNELS],
    ),
    defines={"CS_LADDER_YB": 4},  # output rows per thread of the dW ladder's padded step (the write-up's yBatch)
)
WGRAD_LADDER_MASKED_CU = CudaSource(
    "wgrad_ladder_masked.cu",
    HERE,
    (
        "wgrad_ladder_atomic_masked",
        "wgrad_ladder_shuffle_masked",
        *[f"wgrad_ladder_{step}_masked@{k}" for step in ("registers", "padded") for k in LADDER_KERNELS],
    ),
    includes=(WGRAD_LADDER_CU,),
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
LADDER_YB = WGRAD_LADDER_CU.defines["CS_LADDER_YB"]


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


def _plan_relu_mask(step: str) -> Callable:
    """``plan(spec, resolved)``: ladder ``step``'s backward reading grad_y through the ReLU output."""

    def plan(spec: ConvSpec, resolved: dict) -> Launch:
        return _plan_ladder(step)(spec, "backward", masked=True)

    return plan


#: dX by fused_gemm's kernels (register_tiled's for a stride-1 dX of few channels), db by the bias sums.
_SOURCES = (
    WGRAD_LADDER_CU,
    WGRAD_LADDER_MASKED_CU,
    IMPLICIT_GEMM_CU,
    IMPLICIT_GEMM_MASKED_CU,
    CONV2D_CU,
    CONV2D_MASKED_CU,
    *BACKWARD_UTIL,
)


def _step(step: str, summary: str) -> CudaAlgorithm:
    """The record of ladder ``step``."""
    return CudaAlgorithm(
        name=step,
        summary=summary + _LADDER_COMMON,
        plan=_plan_ladder(step),
        directions=("backward",),
        ndims=(2,),
        check=_check_ladder(step),
        deterministic=False,
        sources=_SOURCES,
        plan_activation=None,
        plan_relu_mask=_plan_relu_mask(step),
        ieee_padding=(),
        calls_cublas=False,
    )


ALGORITHMS = (
    _step(
        "wgrad_atomic",
        "dW ladder step 1: one tap per thread over the batch, shared-memory tree reduction, one atomicAdd per block",
    ),
    _step("wgrad_shuffle", "dW ladder step 2: step 1 with the last 64 values reduced by __shfl_down_sync"),
    _step(
        "wgrad_registers",
        "dW ladder step 3: all KxK taps accumulated in registers per thread, then reduced tap by tap",
    ),
    _step(
        "wgrad_padded",
        f"dW ladder step 4: zero-padded input copy (no bounds checks), {LADDER_YB} output rows per thread "
        "from a register window (yBatch)",
    ),
)
