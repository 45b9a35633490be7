"""Random convolution cases for property tests, with their own geometry oracle.

The padding each case should resolve to is computed here from the textbook
rules, not by convsuite, so the tests check convsuite's geometry too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st


def expected_pads(padding, ndim, in_size, kernel, stride, dilation):
    """(before, after) per dimension, by the rules DESIGN.md states."""
    pads = []
    for axis in range(ndim):
        n, k, s, d = in_size[axis], kernel[axis], stride[axis], dilation[axis]
        span = d * (k - 1) + 1
        if padding == "valid":
            pads.append((0, 0))
        elif padding == "full":
            pads.append((span - 1, span - 1))
        elif padding == "same":
            out = -(-n // s)  # ceil(n / s)
            total = max(0, (out - 1) * s + span - n)
            pads.append((total // 2, total - total // 2))
        elif isinstance(padding, int):
            pads.append((padding, padding))
        else:
            item = padding[axis]
            pads.append((item, item) if isinstance(item, int) else tuple(item))
    return tuple(pads)


@dataclass
class Case:
    """One convolution problem in the caller's layout."""

    ndim: int
    layout: str  # "batched", "unbatched" or "signal"
    batch: int
    groups: int
    channels_per_group: int
    out_per_group: int
    in_size: tuple
    kernel: tuple
    stride: tuple
    dilation: tuple
    padding: object
    dtype: type
    bias: bool
    noncontiguous: bool
    seed: int

    @property
    def keywords(self) -> dict:
        stride = self.stride if self.ndim > 1 else self.stride[0]  # exercise int and tuple forms
        return dict(stride=stride, padding=self.padding, dilation=self.dilation, groups=self.groups)

    @property
    def pads(self):
        return expected_pads(self.padding, self.ndim, self.in_size, self.kernel, self.stride, self.dilation)

    def arrays(self):
        """x, w, bias in the case's layout; read-only, and strided if asked."""
        rng = np.random.default_rng(self.seed)
        C = self.groups * self.channels_per_group
        M = self.groups * self.out_per_group
        x_shape = (self.batch, C, *self.in_size)
        w_shape = (M, self.channels_per_group, *self.kernel)
        if self.layout == "unbatched":
            x_shape = x_shape[1:]
        elif self.layout == "signal":
            x_shape, w_shape = tuple(self.in_size), tuple(self.kernel)
        if self.noncontiguous:
            # Every other element of a larger array: a strided, non-contiguous view.
            big = rng.standard_normal((*x_shape[:-1], 2 * x_shape[-1])).astype(self.dtype)
            x = big[..., ::2]
        else:
            x = rng.standard_normal(x_shape).astype(self.dtype)
        w = rng.standard_normal(w_shape).astype(self.dtype)
        b = rng.standard_normal(M).astype(self.dtype) if self.bias else None
        for a in (x, w, b):
            if a is not None:
                a.setflags(write=False)  # read-only inputs must be accepted, never written
        return x, w, b


@st.composite
def cases(draw, ndim: int, max_extra: int = 8, channels: tuple[int, int] = (1, 3)) -> Case:
    """A random case: shapes, strides, every padding form, dilation, groups, dtype.

    ``channels``: the range of input channels per group (wider for the
    algorithms that decline reductions of fewer than 32 products).
    """
    layout = draw(st.sampled_from(["batched", "batched", "unbatched", "signal"]))
    if layout == "signal":
        groups, cg, mg, batch, bias = 1, 1, 1, 1, draw(st.booleans())
    else:
        groups = draw(st.integers(1, 3))
        cg = draw(st.integers(*channels))
        mg = draw(st.integers(1, 3))
        batch = 1 if layout == "unbatched" else draw(st.integers(1, 2))
        bias = draw(st.booleans())
    dims = st.tuples(*[st.integers(1, 4)] * ndim)
    kernel = draw(dims)
    dilation = draw(st.tuples(*[st.integers(1, 3)] * ndim))
    stride = draw(st.tuples(*[st.integers(1, 3)] * ndim))
    form = draw(st.sampled_from(["int", "tuple", "pairs", "valid", "same", "full"]))
    if form == "int":
        padding = draw(st.integers(0, 3))
    elif form == "tuple":
        padding = tuple(draw(st.integers(0, 3)) for _ in range(ndim))
    elif form == "pairs":
        padding = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(ndim))
    else:
        padding = form
    in_size = []
    for axis in range(ndim):
        span = dilation[axis] * (kernel[axis] - 1) + 1
        if form in ("same", "full"):
            smallest = 1
        else:
            lo, hi = expected_pads(padding, ndim, (span,) * ndim, kernel, stride, dilation)[axis]
            smallest = max(1, span - lo - hi)  # the kernel must fit in the padded input
        in_size.append(draw(st.integers(smallest, smallest + max_extra)))
    return Case(
        ndim=ndim,
        layout=layout,
        batch=batch,
        groups=groups,
        channels_per_group=cg,
        out_per_group=mg,
        in_size=tuple(in_size),
        kernel=kernel,
        stride=stride,
        dilation=dilation,
        padding=padding,
        dtype=draw(st.sampled_from([np.float32, np.float64])),
        bias=bias,
        noncontiguous=draw(st.booleans()),
        seed=draw(st.integers(0, 2**32 - 1)),
    )
