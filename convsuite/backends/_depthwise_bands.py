"""Band sizes and the applicability check shared by the CPU rungs' ``depthwise`` algorithms.

Both kernels (``_numba_depthwise`` and ``cython_src/_depthwise_cy.pyx``) copy
a band of output rows x columns worth of input into ``sh * sw`` zero-padded
phase planes of pitch ``cols + coloff`` and then run one flat AXPY per tap;
this module sizes the bands so the planes fit a budget (L2 by default) and
declines the cases where the planes would waste more than they save.
"""

from __future__ import annotations

from .._spec import ConvSpec
from .base import Tunable

__all__ = [
    "BAND",
    "BAND_KIB_VALUES",
    "DEFAULT_BAND_KIB",
    "DEPTHWISE_WHY",
    "SUMMARY",
    "MAX_MULTIPLIER",
    "MAX_PHASES",
    "bands",
    "depthwise_check",
    "prefer",
    "reach",
]

#: Default budget of one item's phase planes: within L2 with room for the output rows.
DEFAULT_BAND_KIB = 128

#: Values of the ``band_kib`` tunable.
BAND_KIB_VALUES = (16, 32, 64, 128, 256, 512, 1024, 4096)

#: The ``band_kib`` tunable of both rungs' ``depthwise`` records.
BAND = Tunable(
    "band_kib",
    BAND_KIB_VALUES,
    DEFAULT_BAND_KIB,
    "KiB budget of one work item's phase planes: sets the band of output rows and columns per item",
)

#: What the algorithm shows (the records' summary).
SUMMARY = (
    "one input channel per group: the input copied once into zero-padded phase planes, "
    "then one flat AXPY per tap over a band of rows (any stride and dilation)"
)

#: Most phase planes (``sh * sw``): past this a stride is longer than a 3x3 or 5x5
#: kernel's reach and most of every plane would be copied for nothing.
MAX_PHASES = 16

#: Largest smallest plane (one output row and column plus the kernel's reach), bytes:
#: a dilation or padding that large makes the copy cost more than the convolution.
MAX_PLANE_BYTES = 64 * 2**20


def reach(s: ConvSpec) -> tuple[int, int]:
    """(rows, columns) of a phase plane that one output row / column needs beyond itself."""
    (KH, KW), (sh, sw), (dh, dw) = s.kernel_size, s.stride, s.dilation
    return ((KH - 1) * dh) // sh, ((KW - 1) * dw) // sw


def _plane_elements(rows: int, cols: int, rowoff: int, coloff: int) -> int:
    return (rows + rowoff) * (cols + coloff) + coloff


def depthwise_check(s: ConvSpec, direction: str) -> bool | str:
    """True when ``depthwise`` applies to ``s`` (1-D runs as 2-D with a unit height), else why not."""
    s = s.as_2d()
    if s.channels_per_group != 1:
        return (
            f"'depthwise' needs one input channel per group (groups == in_channels); "
            f"got {s.in_channels} channels in {s.groups} groups"
        )
    (sh, sw) = s.stride
    if sh * sw > MAX_PHASES:
        return f"'depthwise' copies stride_h*stride_w phase planes, at most {MAX_PHASES}; got {sh}*{sw}"
    rowoff, coloff = reach(s)
    smallest = _plane_elements(1, 1, rowoff, coloff) * sh * sw * s.itemsize
    if smallest > MAX_PLANE_BYTES:
        return (
            f"'depthwise' needs {smallest} bytes of planes for a single output with this dilation and padding, "
            f"more than {MAX_PLANE_BYTES}"
        )
    return True


#: Most output channels per input channel for which the rules pick ``depthwise``: each
#: one re-reads the planes once per tap, so a wide multiplier is better served by
#: ``gemm`` (measured 2026-11-22, 2-core Xeon, float32: ECE408 fa19 conv1, 1 -> 12
#: 5x5, cython gemm 9.3 ms vs depthwise 22.6; fa21 conv1, 1 -> 4 7x7, 72 vs 43 ms;
#: LeNet conv1, 1 -> 6 5x5, 3.0 vs 1.2 ms).
MAX_MULTIPLIER = 8

DEPTHWISE_WHY = "one input channel per group: phase planes and one flat AXPY per tap beat per-row tiles"


def prefer(s: ConvSpec) -> bool:
    """Whether the rules should pick ``depthwise`` for ``s`` (forward)."""
    return s.out_channels_per_group <= MAX_MULTIPLIER and depthwise_check(s, "forward") is True


def bands(s: ConvSpec, band_kib: int, threads: int) -> tuple[int, int]:
    """(rows, cols) of output per item: planes within ``band_kib`` KiB, >= 2 items per thread if it can."""
    Ho, Wo = s.out_size
    sh, sw = s.stride
    rowoff, coloff = reach(s)
    budget = max(1, band_kib * 1024 // (s.itemsize * sh * sw))
    cols = min(Wo, max(1, budget // (1 + rowoff) - coloff))
    rows = min(Ho, max(1, budget // (cols + coloff) - rowoff))
    planes = s.batch * s.in_channels * -(-Wo // cols)
    wanted = 2 * max(1, threads)
    if planes < wanted:  # batch 1, few channels: split the rows too
        rows = min(rows, max(1, -(-Ho // -(-wanted // planes))))
    return rows, cols
