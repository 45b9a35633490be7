"""Splitting one convolution into independent pieces along a spatial axis.

Both scale-out paths (Dask chunks, joblib pieces) cut the *output* of a
convolution into intervals and give each interval the input it reads: the
input slab plus the padding that slab still needs on each side. Everything
here is integer geometry along one axis; the same answer for every axis.

Output ``j`` reads the input samples ``j*s - pad_before + t*d`` for the taps
``t = 0 .. K-1`` (zero where that falls outside ``[0, n_in)``). An output
interval ``[lo, hi)`` therefore reads the window
``[lo*s - pad_before, (hi-1)*s - pad_before + d*(K-1) + 1)``; clipped to the
input it is the slab, and what was clipped off is the piece's own padding.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Piece", "even_bounds", "output_bounds_for_input_chunks", "overlapping_chunks", "pieces"]


@dataclass(frozen=True)
class Piece:
    """One output interval along one axis and the input it needs.

    Attributes
    ----------
    out_lo, out_hi : int
        The output interval ``[out_lo, out_hi)``.
    in_lo, in_hi : int
        The input slab ``[in_lo, in_hi)``, clipped to the input; empty when
        every tap of every output in the interval falls on padding.
    pad_before, pad_after : int
        Zero padding the slab needs so that the local convolution of the
        slab gives exactly ``out_hi - out_lo`` outputs (meaningless when the
        slab is empty).
    """

    out_lo: int
    out_hi: int
    in_lo: int
    in_hi: int
    pad_before: int
    pad_after: int

    @property
    def out_size(self) -> int:
        """Outputs in this piece."""
        return self.out_hi - self.out_lo

    @property
    def in_size(self) -> int:
        """Input samples in the slab (0: the piece reads only padding)."""
        return self.in_hi - self.in_lo


def pieces(
    out_bounds: Sequence[int], n_in: int, pad_before: int, kernel: int, stride: int, dilation: int
) -> list[Piece]:
    """The :class:`Piece` of each interval ``[out_bounds[i], out_bounds[i+1])``."""
    reach = dilation * (kernel - 1) + 1
    result = []
    for lo, hi in itertools.pairwise(out_bounds):
        first = lo * stride - pad_before  # first input index read, may be < 0
        end = (hi - 1) * stride - pad_before + reach  # one past the last read, may be > n_in
        in_lo, in_hi = min(max(first, 0), n_in), min(max(end, 0), n_in)
        if in_hi <= in_lo:
            in_lo = in_hi = min(max(first, 0), n_in)
        result.append(Piece(lo, hi, in_lo, in_hi, in_lo - first, end - in_hi))
    return result


def even_bounds(n: int, parts: int) -> list[int]:
    """``parts`` near-equal intervals of ``range(n)`` as boundaries (fewer if ``n < parts``)."""
    parts = max(1, min(parts, n))
    return [n * i // parts for i in range(parts + 1)]


def output_bounds_for_input_chunks(in_chunks: Sequence[int], n_out: int, pad_before: int, stride: int) -> list[int]:
    """Output chunk boundaries aligned with the stride in padded coordinates.

    Output ``j`` starts reading at padded position ``j*stride``; an input chunk
    that starts at ``a`` (padded position ``a + pad_before``) owns the outputs
    whose window starts inside it, so the output boundary is
    ``ceil((a + pad_before) / stride)``. Each output chunk then reads its own
    input chunk plus a halo of ``dilation*(kernel-1)`` on the right only; chunks
    that own no output (a chunk shorter than the stride) disappear.
    """
    bounds = [0]
    start = 0
    for size in in_chunks[:-1]:
        start += size
        b = min(max(-(-(start + pad_before) // stride), 0), n_out)
        if b > bounds[-1]:
            bounds.append(b)
    if n_out > bounds[-1]:
        bounds.append(n_out)
    return bounds


def overlapping_chunks(chunks: Sequence[int], lo: int, hi: int) -> list[tuple[int, int, int]]:
    """The chunks of an axis that ``[lo, hi)`` touches: ``(index, start, stop)`` local to each."""
    found = []
    offset = 0
    for index, size in enumerate(chunks):
        a, b = max(lo, offset), min(hi, offset + size)
        if a < b:
            found.append((index, a - offset, b - offset))
        offset += size
    return found
