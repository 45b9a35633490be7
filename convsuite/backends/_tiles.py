"""Tile sizes shared by the im2col + GEMM algorithms of the compiled CPU rungs."""

from __future__ import annotations

__all__ = ["WORKSPACE_BYTES", "rows_per_tile"]

#: Target size of one im2col tile: large enough for BLAS to run at speed on
#: one thread, small enough to stay in L2/L3 between the copy and the product.
WORKSPACE_BYTES = 2 * 2**20


def rows_per_tile(reduction: int, out_width: int, out_height: int, itemsize: int, min_tiles: int) -> int:
    """Output rows per im2col tile: fits :data:`WORKSPACE_BYTES`, and gives >= ``min_tiles`` tiles if it can."""
    rows = max(1, WORKSPACE_BYTES // max(1, reduction * out_width * itemsize))
    rows = min(rows, max(1, -(-out_height // max(1, min_tiles))))
    return max(1, min(rows, out_height))
