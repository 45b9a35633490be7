"""tf32x3 for narrow layers: a whole image split once into shared memory, the weights split once per
block in MMA fragment order, pixels x channels MMA tiles, persistent blocks (``tf32x3_image.cu``).
"""

from __future__ import annotations

import math

import numpy as np

from ...._spec import ConvSpec
from ... import _cupy_runtime as rt
from ...base import Launch, Verdict
from .._record import CudaAlgorithm
from .._sources import CudaSource
from ._common import _ARRAYS4, EPILOGUES, HERE, _params, _with_bias
from .implicit_gemm import _check_tf32x3

TF32X3_IMAGE_CU = CudaSource(
    "tf32x3_image.cu", HERE, tuple(f"conv2d_tf32x3_image@{nt},{act}" for nt in (1, 2, 3, 4) for act in EPILOGUES)
)


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


def _plan_activation(spec: ConvSpec, resolved: dict, act: int) -> Launch:
    """The forward launch with the activation ``act`` in the epilogue."""
    return _plan_tf32x3_image(spec, "forward", act=act)


# Its image in shared memory holds the padding as zeros, multiplied like any other input.
TF32X3_IMAGE = CudaAlgorithm(
    name="tf32x3_image",
    summary="tf32x3 for narrow layers (<= 32 output channels): a whole image split once into shared memory, the "
    "weights split once per block in MMA fragment order, pixels x channels MMA tiles, persistent blocks",
    plan=_plan_tf32x3_image,
    check=_check_tf32x3_image,
    precision="high",
    sources=(TF32X3_IMAGE_CU,),
    plan_activation=_plan_activation,
    plan_relu_mask=None,
    ieee_padding=("forward",),
    calls_cublas=False,
)

ALGORITHMS = (TF32X3_IMAGE,)
