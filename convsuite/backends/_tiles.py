"""Tile sizes shared by the im2col + GEMM algorithms of the compiled CPU rungs."""

from __future__ import annotations

import math

__all__ = [
    "MAX_ROW_BYTES",
    "MIN_GEMM_COLUMNS",
    "TILE_KIB_VALUES",
    "WORKSPACE_BYTES",
    "default_tile_kib",
    "gemm_check",
    "prefer_gemm",
    "rows_per_tile",
]

#: Target size of one im2col tile: large enough for BLAS to run at speed on
#: one thread, small enough to stay in L2 between the copy and the product.
#: 2 MiB until the sweeps of 2026-11-22 (2-core Xeon): 256 KiB tiles were
#: 1.2-2.3x faster for cython's gemm on the ECE408 layers and 1.4-2.3x on
#: held-out layers, numba's gemm equal or faster.
WORKSPACE_BYTES = 256 * 2**10

#: Values of the GEMM algorithms' ``tile_kib`` tunable (the budget above, in
#: KiB, is the default): from a few rows per tile to whole images.
TILE_KIB_VALUES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


#: Columns (the BLAS product's N) a default tile reaches if a budget up to
#: :data:`MAX_DEFAULT_TILE_KIB` allows: BLAS re-packs the weights (M x K) on every
#: call, and a thin tile pays that for little work. Measured on the 2-core EPYC VM
#: (2026-11-26, scipy-openblas32 0.3.34, interleaved medians, default 256 KiB ->
#: best budget): numba, 2 threads, forward, 3x3 C=64 56x56 B=8 (one 56-column row
#: per tile) 13.5 -> 11.5 ms, C=128 28x28 14.9 -> 11.0, C=256 14x14 (16 columns)
#: 20.5 -> 11.4; backward C=256 42.0 -> 31.8; Cython 3x3 C=64 22.6 -> 21.6, C=256
#: 28.4 -> 20.3; tiles that already had >= 128 columns were within 5 % either way.
MIN_GEMM_COLUMNS = 256
#: The largest default tile budget (KiB); the tunable goes higher.
MAX_DEFAULT_TILE_KIB = 4096


def default_tile_kib(per_column: int, width: int, out_height: int, itemsize: int) -> int:
    """The default ``tile_kib``: :data:`WORKSPACE_BYTES`, or the smallest larger value of
    :data:`TILE_KIB_VALUES` (at most :data:`MAX_DEFAULT_TILE_KIB`) whose tile holds
    :data:`MIN_GEMM_COLUMNS` columns (or every output row).

    ``per_column`` is the elements a tile column costs (the reduction length,
    plus the result's rows where they share the budget), ``width`` the
    columns per output row.
    """
    base = WORKSPACE_BYTES // 1024
    need_rows = min(out_height, -(-MIN_GEMM_COLUMNS // max(1, width)))
    row_bytes = max(1, per_column * width * itemsize)
    for kib in (base, *(v for v in TILE_KIB_VALUES if base < v <= MAX_DEFAULT_TILE_KIB)):
        if max(1, kib * 1024 // row_bytes) >= need_rows:
            return kib
    return max(base, MAX_DEFAULT_TILE_KIB)


def rows_per_tile(
    reduction: int, out_width: int, out_height: int, itemsize: int, min_tiles: int, budget: int | None = None
) -> int:
    """Output rows per im2col tile: fits ``budget`` bytes, and gives >= ``min_tiles`` tiles if it can.

    ``budget`` defaults to :data:`WORKSPACE_BYTES`, read at call time. One
    row is the least, whatever the budget (:func:`gemm_check` bounds a row).
    """
    budget = WORKSPACE_BYTES if budget is None else budget
    rows = max(1, budget // max(1, reduction * out_width * itemsize))
    rows = min(rows, max(1, -(-out_height // max(1, min_tiles))))
    return max(1, min(rows, out_height))


#: Largest im2col of a single output row: the GEMM algorithms tile rows, not
#: columns, so a very long 1-D signal (10^7 samples) is left to the others.
MAX_ROW_BYTES = 64 * 2**20

#: Output channels per group and reduction length (C/g * KH * KW) from which
#: the GEMM algorithms beat the direct ones forward; below either, the
#: product is too thin for BLAS (measured on the 2-core machine:
#: docs/measurements, ``python -m convsuite.bench.cpu_targets``).
GEMM_MIN_OUT_CHANNELS = 8
GEMM_MIN_REDUCTION = 16


#: The BLAS routines take 32-bit sizes and leading dimensions (``_blas_routines``).
MAX_BLAS_EXTENT = 2**31 - 1


def gemm_check(s, direction: str):
    """Cases the GEMM algorithms decline: one output row whose im2col exceeds :data:`MAX_ROW_BYTES`,
    or a matrix extent (reduction, channels, an image plane: a leading dimension) past 32-bit BLAS.
    """
    extents = {
        "reduction C/g*KH*KW": s.reduction_length,
        "output channels": s.out_channels,
        "input plane": math.prod(s.in_size),
        "output plane": math.prod(s.out_size),
    }
    for what, n in extents.items():
        if n > MAX_BLAS_EXTENT:
            return f"'gemm' calls a 32-bit BLAS, and the {what} here is {n} (> 2**31 - 1); use 'direct'"
    row_bytes = s.reduction_length * s.out_size[-1] * s.itemsize
    if row_bytes > MAX_ROW_BYTES:
        return (
            f"'gemm' tiles output rows, and one row's im2col here is {row_bytes / 2**20:.0f} MiB "
            f"(> {MAX_ROW_BYTES // 2**20} MiB); use 'direct'"
        )
    return True


def prefer_gemm(s, direction: str) -> tuple[bool, str]:
    """Whether the measured rule prefers GEMM over the direct kernels here, and why."""
    Mg, red = s.out_channels_per_group, s.reduction_length
    if all(k == 1 for k in s.kernel_size) and all(v == 1 for v in s.stride) and all(p == (0, 0) for p in s.padding):
        return True, "1x1 kernel: the convolution is a matrix product (no im2col copy)"
    if direction == "backward":
        # Thin products too: the direct backward walks dW per (output, input channel) pair.
        # 2-core Xeon, float32, 2026-11-22 (cython / numba, direct vs gemm, ms): LeNet conv1
        # 1->6 5x5 B=64 9.5 vs 2.3 / 17.4 vs 5.3; ECE408 fa21 conv1 B=8 12.6 vs 2.8 / 19.2 vs
        # 4.5; 3->4 3x3 B=2 1.05 vs 0.40; depthwise C96 15.3 vs 15.1; 1-D 2->2 k9 0.25 vs 0.19.
        return True, "backward: dW and dX as BLAS products of one im2col tile"
    if Mg < GEMM_MIN_OUT_CHANNELS:
        return False, f"{Mg} output channels per group (< {GEMM_MIN_OUT_CHANNELS}): too thin a product for BLAS"
    if red < GEMM_MIN_REDUCTION:
        return False, f"reduction C/g*KH*KW = {red} (< {GEMM_MIN_REDUCTION}): too short for BLAS"
    return True, f"{Mg} output channels per group, reduction {red}: BLAS wins"
