"""ConvSpec: one convolution call with every parameter normalised.

The front end turns user keywords into a :class:`ConvSpec` once; backends read
only this object, so they never parse ``padding="same"`` or tuples themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

__all__ = ["ConvSpec", "same_padding", "full_padding", "output_length", "tap_output_ranges"]


def same_padding(length: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """Padding that gives ``ceil(length / stride)`` outputs (TensorFlow's rule).

    The odd pixel, when the total is odd, goes on the right/bottom side, which is
    also what PyTorch does for ``padding="same"`` with stride 1.
    """
    out = -(-length // stride)
    span = dilation * (kernel - 1) + 1
    total = max((out - 1) * stride + span - length, 0)
    return total // 2, total - total // 2


def full_padding(kernel: int, dilation: int) -> tuple[int, int]:
    """Padding at which every input sample meets every kernel tap ("full" mode)."""
    reach = dilation * (kernel - 1)
    return reach, reach


def output_length(length: int, pad: tuple[int, int], kernel: int, stride: int, dilation: int) -> int:
    """Number of outputs along one dimension; may be <= 0 for an impossible case."""
    span = dilation * (kernel - 1) + 1
    padded = length + pad[0] + pad[1]
    if padded < span:
        return 0
    return (padded - span) // stride + 1


@dataclass(frozen=True)
class ConvSpec:
    """A validated convolution problem: shapes, geometry and dtype.

    Attributes
    ----------
    ndim : int
        Number of spatial dimensions, 1 or 2.
    batch, in_channels, out_channels, groups : int
        ``B``, ``C``, ``M`` and the group count; ``groups`` divides ``C`` and ``M``.
    in_size, kernel_size, out_size : tuple of int
        Spatial extents of input, kernel and output, one entry per dimension.
    stride, dilation : tuple of int
        Per-dimension stride and dilation, each >= 1.
    padding : tuple of (int, int)
        Per-dimension ``(before, after)`` zero padding, already resolved from
        ``"same"``/``"full"``/``"valid"``.
    dtype : str
        ``"float32"`` or ``"float64"``: inputs, output and accumulation type.
    has_bias : bool
        Whether a bias vector of length ``out_channels`` is added.
    """

    ndim: int
    batch: int
    in_channels: int
    out_channels: int
    groups: int
    in_size: tuple[int, ...]
    kernel_size: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]
    out_size: tuple[int, ...]
    dtype: str
    has_bias: bool

    @property
    def channels_per_group(self) -> int:
        """Input channels each output channel reads (``C / groups``)."""
        return self.in_channels // self.groups

    @property
    def out_channels_per_group(self) -> int:
        """Output channels produced by each group (``M / groups``)."""
        return self.out_channels // self.groups

    @property
    def is_depthwise(self) -> bool:
        """True when every group reads exactly one input channel."""
        return self.groups > 1 and self.channels_per_group == 1

    @property
    def reduction_length(self) -> int:
        """Products summed into one output: ``C/groups * prod(kernel)``."""
        return self.channels_per_group * math.prod(self.kernel_size)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the forward pass (padding taps included)."""
        return self.batch * self.out_channels * math.prod(self.out_size) * self.reduction_length

    @property
    def flops(self) -> int:
        """Floating-point operations of the forward pass, ``2 * macs``."""
        return 2 * self.macs

    @property
    def itemsize(self) -> int:
        """Bytes per element of the compute dtype."""
        return 4 if self.dtype == "float32" else 8

    @property
    def x_shape(self) -> tuple[int, ...]:
        """Canonical input shape ``(B, C, *in_size)``."""
        return (self.batch, self.in_channels, *self.in_size)

    @property
    def w_shape(self) -> tuple[int, ...]:
        """Canonical weight shape ``(M, C/groups, *kernel_size)``."""
        return (self.out_channels, self.channels_per_group, *self.kernel_size)

    @property
    def y_shape(self) -> tuple[int, ...]:
        """Canonical output shape ``(B, M, *out_size)``."""
        return (self.batch, self.out_channels, *self.out_size)

    @property
    def compulsory_bytes(self) -> int:
        """Bytes every implementation must move: read x, w, bias once, write y once."""
        elements = (
            math.prod(self.x_shape)
            + math.prod(self.w_shape)
            + math.prod(self.y_shape)
            + (self.out_channels if self.has_bias else 0)
        )
        return elements * self.itemsize

    def as_2d(self) -> ConvSpec:
        """The same problem as a 2-D convolution with a unit height axis.

        A 1-D case ``x (B, C, W)`` is exactly the 2-D case ``x (B, C, 1, W)`` with
        kernel height 1, no vertical padding, stride or dilation; backends that
        only implement 2-D loops use this view (arrays reshape for free).
        """
        if self.ndim == 2:
            return self
        return replace(
            self,
            ndim=2,
            in_size=(1, *self.in_size),
            kernel_size=(1, *self.kernel_size),
            stride=(1, *self.stride),
            dilation=(1, *self.dilation),
            padding=((0, 0), *self.padding),
            out_size=(1, *self.out_size),
        )


def tap_output_ranges(spec: ConvSpec, axis: int) -> tuple[list[int], list[int]]:
    """For each tap ``p`` along ``axis`` of the 2-D view: the outputs that read real input.

    Tap ``p`` at output ``o`` reads input ``o*stride + p*dilation - before``;
    that is inside the input exactly for ``lo[p] <= o < hi[p]`` (both clipped
    to ``[0, out_size]``; ``lo >= hi`` means the tap only ever reads padding).
    Exact Python integers, for any validated geometry.
    """
    s = spec.as_2d()
    n, k = s.in_size[axis], s.kernel_size[axis]
    stride, dilation = s.stride[axis], s.dilation[axis]
    before, out = s.padding[axis][0], s.out_size[axis]
    lo = [min(max(-(-(before - p * dilation) // stride), 0), out) for p in range(k)]
    hi = [min(max(-(-(n + before - p * dilation) // stride), 0), out) for p in range(k)]
    return lo, hi
