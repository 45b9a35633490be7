"""Depthwise convolution (one input channel per group): register rows of outputs per thread forward,
a gather input gradient and per-channel weight-gradient sums backward (``depthwise.cu``; the
backward through a ReLU: ``depthwise_masked.cu``).
"""

from __future__ import annotations

import math

from ...._spec import ConvSpec
from ... import _cupy_runtime as rt
from ...base import Launch, Tunable, Verdict
from .._record import CudaAlgorithm
from .._sources import CudaSource
from ._common import _ARRAYS4, ARG, EPILOGUES, GRID_YZ_MAX, HERE, THREADS, _params, _reduction_chunks, _with_bias

#: (kernel size, stride) pairs the depthwise kernels are compiled for with both
#: fixed at compile time (square kernel, dilation 1); (0, 0) reads them at run time.
DEPTHWISE_FIXED = ((3, 1), (3, 2), (5, 1), (5, 2), (7, 1), (7, 2), (0, 0))

#: Largest kernel extents the depthwise weight gradient keeps in registers.
DEPTHWISE_WGRAD_KMAX = (3, 5, 7)

DEPTHWISE_CU = CudaSource(
    "depthwise.cu",
    HERE,
    (
        *[f"depthwise_forward@{k},{s},{act}|I" for k, s in DEPTHWISE_FIXED for act in EPILOGUES],
        *[f"depthwise_grad_input@{k},{s}" for k, s in DEPTHWISE_FIXED],
        *[f"depthwise_grad_weight@{k}" for k in DEPTHWISE_WGRAD_KMAX],
        "depthwise_grad_finish",
    ),
    # outputs per thread along W and H: 2 x 4 ran 1.04-1.35x the old 4 x 2 on 9 of 11 MobileNet-class
    # layers, 1.00x and 0.91x on the two 7x7-14x14 ones (H100, docs/measurements/depthwise-2026-11-26-h100.md)
    defines={"CS_DW_PX": 2, "CS_DW_PY": 4},
    # depthwise_forward only (the backward kernels do not read them): acc[PY][PX]
    # and, with K fixed, v[(PX-1)*S+K] per row are per-thread arrays over a
    # grid-stride loop with every output bounds-checked; any PX, PY >= 1 is correct.
    overridable={"CS_DW_PX": (1, 2, 4, 8), "CS_DW_PY": (1, 2, 4)},
)
DEPTHWISE_MASKED_CU = CudaSource(
    "depthwise_masked.cu",
    HERE,
    (
        *[f"depthwise_grad_input_masked@{k},{s}" for k, s in DEPTHWISE_FIXED],
        *[f"depthwise_grad_weight_masked@{k}" for k in DEPTHWISE_WGRAD_KMAX],
        "depthwise_grad_finish",  # reads partial sums only; named here so a masked backward needs no plain module
    ),
    includes=(DEPTHWISE_CU,),
)

DW_PX, DW_PY = DEPTHWISE_CU.defines["CS_DW_PX"], DEPTHWISE_CU.defines["CS_DW_PY"]


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
    Tunable("px", DEPTHWISE_CU.overridable["CS_DW_PX"], DW_PX, "forward outputs per thread along W (-D CS_DW_PX)"),
    Tunable("py", DEPTHWISE_CU.overridable["CS_DW_PY"], DW_PY, "forward outputs per thread along H (-D CS_DW_PY)"),
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


def _plan_activation(spec: ConvSpec, resolved: dict, act: int) -> Launch:
    """The forward launch with the activation ``act`` in the epilogue."""
    return _plan_depthwise(spec, "forward", resolved, act=act)


def _plan_relu_mask(spec: ConvSpec, resolved: dict) -> Launch:
    """The backward launch reading grad_y through the ReLU output."""
    return _plan_depthwise(spec, "backward", resolved, masked=True)


def _ieee_padding(spec: ConvSpec, direction: str) -> bool:
    """Forward with a compiled kernel size and stride: that path reads zero rows for the padding."""
    return direction == "forward" and _depthwise_fixed(spec.as_2d()) != (0, 0)


DEPTHWISE = CudaAlgorithm(
    name="depthwise",
    summary=f"one channel per group: {DW_PX} (along W) x {DW_PY} (along H) outputs per thread from register rows; "
    "backward gather dX, per-channel dW",
    plan=_plan_depthwise,
    directions=("forward", "backward"),
    check=_check_depthwise,
    tunables=DEPTHWISE_TUNABLES,
    constraint=_constraint_depthwise,
    sources=(DEPTHWISE_CU, DEPTHWISE_MASKED_CU),
    plan_activation=_plan_activation,
    plan_relu_mask=_plan_relu_mask,
    ieee_padding=_ieee_padding,
    calls_cublas=False,
)

ALGORITHMS = (DEPTHWISE,)
