"""The implicit GEMMs: ``fused_gemm`` (64x64 tiles, both dtypes: ``implicit_gemm.cu``), ``igemm_big``
(float32, 128x128 / 64x128 tiles, pipelined: ``implicit_gemm_big.cu``) and ``tf32x3``
(error-compensated TF32 on the tensor cores: ``implicit_gemm_tf32x3.cu``, and on Hopper
``tf32x3_wgmma.cu``).

One family: a single planner (:func:`_plan_implicit_gemm`) builds the forward product, the weight
gradient (split-K, summed in a fixed order) and the input gradient of all three; the stride-1 input
gradient is itself a convolution of grad_y, run by the forward kernel that suits its shape
(:func:`_plan_input_gradient`: register_tiled, or the family's own). The ``_masked`` sources are
the backward kernels that read grad_y through a ReLU output (``relu_output=``).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

from ...._capture import capturing
from ...._spec import ConvSpec
from ... import _cupy_runtime as rt
from ...base import Launch, Tunable, Verdict
from .._record import CudaAlgorithm
from .._sources import CudaSource
from ._common import (
    _ARRAYS4,
    ARG,
    BACKWARD_UTIL,
    BACKWARD_UTIL_CU,
    EPILOGUES,
    GRID_YZ_MAX,
    HERE,
    THREADS,
    WORKSPACE_BYTES,
    _bias_gradient,
    _chunk_sums,
    _params,
    _with_bias,
)
from .conv2d import (
    CONV2D_CU,
    CONV2D_MASKED_CU,
    REGISTER_TILED,
    REGISTER_TILES,
    _check_tiled,
    _tile_geometry,
    _tiled_params,
)

#: implicit_gemm.cu (fused_gemm, all three kernels): each thread loads BK / 4 elements of each operand
#: per stage and 256 / BK threads share a row of the weight-gradient loads, so BK must divide 256 and
#: be a multiple of 4; the kernels #error on anything else. Shared memory at 32 (float64, the padded
#: dW tile): 33.8 KiB.
_GEMM_BK = {"CS_GEMM_BK": (8, 16, 32)}

IMPLICIT_GEMM_CU = CudaSource(
    "implicit_gemm.cu",
    HERE,
    (
        *[f"conv2d_implicit_gemm@{act}" for act in EPILOGUES],  # the activation fused into the epilogue
        "conv2d_dgrad_implicit_gemm",
        "conv2d_wgrad_implicit_gemm",
    ),
    # block tile rows (output channels) and columns (pixels), reduction slice per shared-memory stage
    defines={"CS_GEMM_BM": 64, "CS_GEMM_BN": 64, "CS_GEMM_BK": 16},
    overridable=_GEMM_BK,
)
IMPLICIT_GEMM_MASKED_CU = CudaSource(
    "implicit_gemm_masked.cu",
    HERE,
    (
        "conv2d_implicit_gemm_masked",  # the stride-1 dX: the forward kernel with grad_y as x
        "conv2d_dgrad_implicit_gemm_masked",
        "conv2d_wgrad_implicit_gemm_masked",
    ),
    overridable=_GEMM_BK,
    includes=(IMPLICIT_GEMM_CU,),
)
IMPLICIT_GEMM_BIG_CU = CudaSource(
    "implicit_gemm_big.cu",
    HERE,
    (
        *[f"conv2d_igemm_fwd@{bm},{act},{chunked}" for bm in (64, 128) for act in EPILOGUES for chunked in (0, 1)],
        *[f"conv2d_igemm_wgrad@{bm}" for bm in (64, 128)],
    ),
)
IMPLICIT_GEMM_BIG_MASKED_CU = CudaSource(
    "implicit_gemm_big_masked.cu",
    HERE,
    (
        *[f"conv2d_igemm_fwd_masked@{bm},{chunked}" for bm in (64, 128) for chunked in (0, 1)],
        *[f"conv2d_igemm_wgrad_masked@{bm}" for bm in (64, 128)],
    ),
    includes=(IMPLICIT_GEMM_BIG_CU,),
)
TF32X3_CU = CudaSource(
    "implicit_gemm_tf32x3.cu",
    HERE,
    (
        *[f"conv2d_tf32x3_fwd@{bm},{act},{chunked}" for bm in (64, 128) for act in EPILOGUES for chunked in (0, 1)],
        *[f"conv2d_tf32x3_wgrad@{bm}" for bm in (16, 32, 64, 128)],
        *[f"tf32x3_split_weights@{chunked}" for chunked in (0, 1)],
    ),
    defines={
        # 128-thread blocks per multiprocessor its registers must allow; 0: no minimum. 4: 128 registers,
        # the default module; the rule takes the 3 module (168 registers) from 768 products per output
        # (_default_blocks_tf32x3).
        "CS_TX_BLOCKS": 4,
        # shared-memory stages of the forward kernel's cp.async pipeline at BM = 64 (the "stages" tunable)
        "CS_TX_STAGES": 4,
    },
    overridable={
        # conv2d_tf32x3_fwd's __launch_bounds__ minimum blocks (in 128-thread blocks; BM = 128 asks half
        # as many; 0: none given): a register budget only, the source is the same for any value, so every
        # value is correct. 3 caps the kernel at 168 registers, 4 at 128 (ptxas: no spills at sm_90). 1
        # and 2 are not offered: a minimum of one block made ptxas take 174 registers, two blocks per
        # multiprocessor, slower than no minimum.
        "CS_TX_BLOCKS": (0, 3, 4),
        # conv2d_tf32x3_fwd at BM = 64: cp.async stages in dynamic shared memory (the launch sizes it from
        # the same value); any S >= 2 keeps the pipeline's order (S - 1 stages in flight, one commit group each).
        "CS_TX_STAGES": (2, 3, 4, 5, 6),
    },
)
#: tf32x3's forward product on Hopper's wgmma: compiled for sm_90a, which runs on compute capability
#: 9.0 alone (the backend launches it nowhere else); on any other target it compiles to kernels that trap.
TF32X3_WGMMA_CU = CudaSource(
    "tf32x3_wgmma.cu",
    HERE,
    tuple(f"conv2d_tf32x3_wgmma@{act}" for act in EPILOGUES),
    # cp.async stages in dynamic shared memory, sized from the same value (TF32X3_WGMMA_SMEM)
    defines={"CS_TW_STAGES": 5},
    arch="sm_90a",
)

GEMM_BM, GEMM_BN, GEMM_BK = (IMPLICIT_GEMM_CU.defines[f"CS_GEMM_{n}"] for n in ("BM", "BN", "BK"))
TX_STAGES = TF32X3_CU.defines["CS_TX_STAGES"]
TW_STAGES = TF32X3_WGMMA_CU.defines["CS_TW_STAGES"]


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
        IMPLICIT_GEMM_CU.overridable["CS_GEMM_BK"],
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
    if verdict is True and params["bm"] >= 128 and params["stages"] != TX_STAGES:
        return f"stages={params['stages']}: 128-row tiles keep two stages; the stage count is for bm=64"
    return verdict


def _constraint_wgmma(spec: ConvSpec, direction: str, params) -> Verdict:
    """Where tf32x3's wgmma forward kernel runs (see :func:`_constraint_tf32x3`)."""
    if direction != "forward":
        return "mma='wgmma' runs the forward product only; the backward kernels use mma.sync ('sync')"
    capability = rt.compute_capability()
    if capability is not None and capability != TF32X3_WGMMA_CAPABILITY:
        return f"mma='wgmma' needs Hopper (compute capability 9.0, sm_90a); this GPU is sm_{capability}: use 'sync'"
    for name, value in (("bm", 64), ("stages", TX_STAGES), ("gather", "chunked")):
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
TF32X3_WGMMA_SMEM = TW_STAGES * (2 * TF32X3_WGMMA_BM * GATHER_CHUNK + GATHER_CHUNK * (TF32X3_WGMMA_BN + 8)) * 4


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
    own = {"bm": 64, "stages": TX_STAGES, "gather": "chunked"}
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
        TF32X3_CU.overridable["CS_TX_BLOCKS"],
        _default_blocks_tf32x3,
        "128-thread blocks per multiprocessor the forward kernel's registers must allow (-D CS_TX_BLOCKS, "
        "its __launch_bounds__; one module each; 0: no minimum): more blocks hide more latency, fewer "
        "registers may spill; the rule takes 3 from a reduction of 768 products per output, 4 below "
        "(H100: 4 is 1.01-1.02x faster at 288-576 products, 3 is 1.02-1.08x faster at 864-4608)",
    ),
    Tunable(
        "stages",
        TF32X3_CU.overridable["CS_TX_STAGES"],
        TX_STAGES,
        "shared-memory stages of the forward kernel's cp.async pipeline at 64 rows (-D CS_TX_STAGES; "
        "S - 1 in flight, 10.25 KiB each, dynamic shared memory; 128-row tiles keep two; H100: 5 was "
        "1.01-1.02x on 3x3 C=32-64 layers, 0.98-0.99x on fatter ones, 6 leaves three blocks per SM)",
    ),
    _gather_tunable(_default_gather_tf32x3),
)


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
    stages = dict(overrides).get("CS_TX_STAGES", TX_STAGES) if bm < 128 else 2
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
        conv = _input_gradient_record(name).build(t, "forward", given or None)

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


def _input_gradient_record(name: str) -> CudaAlgorithm:
    """The record whose forward kernel runs a stride-1 input gradient (looked up at plan time)."""
    return {"register_tiled": REGISTER_TILED, "tf32x3": TF32X3, "igemm_big": IGEMM_BIG, "fused_gemm": FUSED_GEMM}[name]


def _plan_activation(algorithm: str) -> Callable:
    """``plan(spec, resolved, act)``: the forward launch of ``algorithm``, activation ``act`` in its epilogue."""

    def plan(spec: ConvSpec, resolved: dict, act: int) -> Launch:
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

    return plan


def _plan_relu_mask(algorithm: str) -> Callable:
    """``plan(spec, resolved)``: the backward launch of ``algorithm`` reading grad_y through the ReLU output."""

    def plan(spec: ConvSpec, resolved: dict) -> Launch:
        return _plan_implicit_gemm(
            spec,
            "backward",
            algorithm == "igemm_big",
            masked=True,
            bm=resolved.get("bm"),
            bk=resolved.get("bk", GEMM_BK),
            gather=resolved.get("gather"),
        )

    return plan


_BOTH = ("forward", "backward")
#: The stride-1 input gradient's kernels (register_tiled, plain and through a ReLU), the gather input
#: gradient of other strides (implicit_gemm.cu) and the bias gradient's sums: every algorithm here.
_SHARED = (IMPLICIT_GEMM_CU, IMPLICIT_GEMM_MASKED_CU, CONV2D_CU, CONV2D_MASKED_CU, *BACKWARD_UTIL)

# The implicit-GEMM gathers load padding as zeros into their tiles and multiply them (forward).
FUSED_GEMM = CudaAlgorithm(
    name="fused_gemm",
    summary="implicit GEMM, 64x64 tiles (backward: dX as a conv of grad_y for stride 1, else a gather implicit "
    "GEMM; split-K dW)",
    plan=_plan_fused_gemm,
    directions=_BOTH,
    check=_check_gemm,
    tunables=FUSED_GEMM_TUNABLES,
    sources=_SHARED,
    plan_activation=_plan_activation("fused_gemm"),
    plan_relu_mask=_plan_relu_mask("fused_gemm"),
    ieee_padding=("forward",),
    calls_cublas=False,
)
IGEMM_BIG = CudaAlgorithm(
    name="igemm_big",
    summary="float32 implicit GEMM, 128x128 (64x128) tiles, 8x8 per thread, prefetch pipeline, filter-offset "
    "table; backward: dX as a conv of grad_y (stride 1; register_tiled for <= 24 channels), split-K dW",
    plan=_plan_igemm_big,
    directions=_BOTH,
    check=_check_big,
    tunables=IGEMM_BIG_TUNABLES,
    constraint=_constraint_big,
    sources=(IMPLICIT_GEMM_BIG_CU, IMPLICIT_GEMM_BIG_MASKED_CU, *_SHARED),
    plan_activation=_plan_activation("igemm_big"),
    plan_relu_mask=_plan_relu_mask("igemm_big"),
    ieee_padding=("forward",),
    calls_cublas=False,
)
# tf32x3 has no _masked kernels: the front end masks grad_y before it.
TF32X3 = CudaAlgorithm(
    name="tf32x3",
    summary="float32 implicit GEMM on the tensor cores: each operand split into two TF32 parts, three MMAs per "
    "product (error-compensated TF32, precision class 'high'), 64x128 / 128x128 tiles of 32x64 warp tiles; "
    "backward: dX the same way "
    "(stride 1; else fused_gemm's gather), split-K dW on the tensor cores",
    plan=_plan_tf32x3,
    directions=_BOTH,
    check=_check_tf32x3,
    tunables=TF32X3_TUNABLES,
    constraint=_constraint_tf32x3,
    precision="high",
    sources=(TF32X3_CU, TF32X3_WGMMA_CU, IMPLICIT_GEMM_BIG_CU, IMPLICIT_GEMM_CU, CONV2D_CU, BACKWARD_UTIL_CU),
    plan_activation=_plan_activation("tf32x3"),
    plan_relu_mask=None,
    ieee_padding=("forward",),
    calls_cublas=False,
)

ALGORITHMS = (FUSED_GEMM, IGEMM_BIG, TF32X3)
