"""Tile sizes shared by the im2col + GEMM algorithms of the compiled CPU rungs."""

from __future__ import annotations

__all__ = [
    "MAX_ROW_BYTES",
    "MAX_TILE_BYTES",
    "WORKSPACE_BYTES",
    "gemm_check",
    "prefer_gemm",
    "rows_per_tile",
    "tile_check",
]

#: Target size of one im2col tile: large enough for BLAS to run at speed on
#: one thread, small enough to stay in L2/L3 between the copy and the product.
WORKSPACE_BYTES = 2 * 2**20


def rows_per_tile(reduction: int, out_width: int, out_height: int, itemsize: int, min_tiles: int) -> int:
    """Output rows per im2col tile: fits :data:`WORKSPACE_BYTES`, and gives >= ``min_tiles`` tiles if it can."""
    rows = max(1, WORKSPACE_BYTES // max(1, reduction * out_width * itemsize))
    rows = min(rows, max(1, -(-out_height // max(1, min_tiles))))
    return max(1, min(rows, out_height))


#: Largest im2col of a single output row: the GEMM algorithms tile rows, not
#: columns, so a very long 1-D signal (10^7 samples) is left to the others.
MAX_ROW_BYTES = 64 * 2**20

#: Largest im2col tile a tuned ``rows_per_tile`` may ask for (per thread):
#: beyond it a sweep would only measure paging. The hand rule never exceeds
#: it (it stays within :data:`WORKSPACE_BYTES`, or one row, itself capped
#: by :data:`MAX_ROW_BYTES`).
MAX_TILE_BYTES = 64 * 2**20


def tile_check(s, rows: int, default_rows: int):
    """Whether ``rows`` output rows per im2col tile fit :data:`MAX_TILE_BYTES` (the default always does)."""
    rows = min(rows, s.out_size[0])
    tile = s.reduction_length * s.out_size[-1] * s.itemsize * rows
    if rows > default_rows and tile > MAX_TILE_BYTES:
        return (
            f"'rows_per_tile'={rows} makes an im2col tile of {tile / 2**20:.0f} MiB "
            f"(> {MAX_TILE_BYTES // 2**20} MiB per tile); choose fewer rows"
        )
    return True


#: Output channels per group and reduction length (C/g * KH * KW) from which
#: the GEMM algorithms beat the direct ones forward; below either, the
#: product is too thin for BLAS (measured on the 2-core machine:
#: docs/measurements, ``python -m convsuite.bench.cpu_targets``).
GEMM_MIN_OUT_CHANNELS = 8
GEMM_MIN_REDUCTION = 16


def gemm_check(s, direction: str):
    """Cases the GEMM algorithms decline: one output row whose im2col exceeds :data:`MAX_ROW_BYTES`."""
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
    if Mg < GEMM_MIN_OUT_CHANNELS:
        return False, f"{Mg} output channels per group (< {GEMM_MIN_OUT_CHANNELS}): too thin a product for BLAS"
    if red < GEMM_MIN_REDUCTION:
        return False, f"reduction C/g*KH*KW = {red} (< {GEMM_MIN_REDUCTION}): too short for BLAS"
    if direction == "backward":
        return True, "backward: dW and dX as BLAS products of one im2col tile"
    return True, f"{Mg} output channels per group, reduction {red}: BLAS wins"
