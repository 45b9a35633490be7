"""Pooling layers: loops over the few window offsets, each one array expression.

A window of ``KH x KW`` taps is visited one tap at a time: every tap is a
strided slice of the (padded) input covering all outputs at once, so the
work is ``KH*KW`` vectorised operations on NumPy or CuPy alike, with no
Python loop over pixels, and the backward pass scatters the same way.

Only the taps that land inside the input for some output position are
visited, on a padded copy cropped to what they read: the others read
padding for every window (``-inf`` never wins a maximum, since every window
holds a tap inside the input when the padding is at most half the kernel;
a zero adds nothing to a mean's sum). So the work and memory are bounded by
the input and output sizes, not the kernel's: ``MaxPool1D(2**32,
padding=2**31)`` on a short signal visits a few taps, not ``2**32``.

Integer input is pooled in float64, as ``convsuite.conv2d`` reads it (a
mean of integers is not an integer, and ``-inf`` padding has no integer);
float inputs keep their dtype; bool, complex and object arrays are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np

from .. import _forksafe
from .._validation import INDEX_LIMIT, _show, as_int_tuple
from ._xp import array_module, real_input
from .layers import _check_grad_y
from .module import Module

__all__ = ["AdaptiveAvgPool2D", "AvgPool2D", "MaxPool1D", "MaxPool2D"]

_host_module: Any = None


@_forksafe.at_fork_in_child
def _judge_again_after_fork() -> None:
    """In a forked child: the numba backend may have become unusable there (see its fork_refusal)."""
    global _host_module
    _host_module = None


def _host_kernels() -> ModuleType | None:
    """``convsuite.backends._numba_pool`` (max pooling for NumPy arrays), or None without numba."""
    global _host_module
    if _host_module is None:
        from .._registry import get_backend

        # The numba backend's own verdict: numba installed, importable and compiling (not NUMBA_DISABLE_JIT).
        if get_backend("numba").available() is True:
            from ..backends import _numba_pool

            _host_module = _numba_pool
        else:
            _host_module = False
    return _host_module or None


def _host_kernels_for(array: Any) -> ModuleType | None:
    """The numba pooling kernels if they take ``array`` (NumPy, float32/float64) and numba is usable, else None."""
    if isinstance(array, np.ndarray) and array.dtype in (np.float32, np.float64):
        return _host_kernels()
    return None


def _out_size(n: int, k: int, s: int, p: int) -> int:
    """Output length of a pooling window (floor mode, as PyTorch's default)."""
    return (n + 2 * p - k) // s + 1


def _code_dtype(taps: int) -> np.dtype:
    """The narrowest type for arg-max tap codes ``0 .. taps - 1``.

    A narrower one wraps: int32 codes past ``2**31`` turned negative and the
    backward pass wrote outside the gradient (heap corruption, an abort).
    """
    if taps <= 256:
        return np.dtype(np.uint8)
    return np.dtype(np.int32 if taps - 1 <= np.iinfo(np.int32).max else np.int64)


def _span(n: int, o: int, k: int, s: int, p: int) -> tuple[int, int, int, int]:
    """One dimension's taps and crop: ``(first, stop, offset, length)``.

    Taps ``first .. stop - 1`` are those inside the input for some output
    position (tap ``t`` of window ``i`` reads padded position ``i*s + t``;
    the input lies at ``p .. p + n - 1``). The crop of the padded input
    starts at padded position ``first`` and is ``length`` long: what those
    taps read, and the whole input (at ``offset`` in it), so that the
    gradient's input part is a plain slice. At most ``3n`` long whatever
    ``k`` and ``p`` (``(o - 1) * s <= n + 2p - k <= n``).
    """
    first, last = max(0, p - (o - 1) * s), min(k - 1, p + n - 1)
    return first, last + 1, p - first, max((o - 1) * s + last + 1, p + n) - first


def _tap(padded: Any, p: int, q: int, s: tuple[int, ...], out: tuple[int, int]) -> Any:
    """The strided slice of ``padded`` that tap ``(p, q)`` of every window reads."""
    (sh, sw), (ho, wo) = s, out
    return padded[:, :, p : p + sh * (ho - 1) + 1 : sh, q : q + sw * (wo - 1) + 1 : sw]


class _Pool2D(Module):
    """Shared geometry of the 2-D pools (inputs ``(B, C, H, W)``)."""

    category = "pooling"
    #: What padding reads as (-inf for max pooling, 0 for average pooling): set by each sub-class.
    _pad_value: float

    def __init__(
        self,
        kernel_size: int | tuple[int, ...],
        stride: int | tuple[int, ...] | None = None,
        padding: int | tuple[int, ...] = 0,
    ) -> None:
        super().__init__()
        self.kernel_size = as_int_tuple(kernel_size, 2, "kernel_size")
        self.stride = self.kernel_size if stride is None else as_int_tuple(stride, 2, "stride")
        self.padding = _padding(padding, 2)
        if any(2 * p > k for p, k in zip(self.padding, self.kernel_size)):
            raise ValueError(f"`padding` must be at most half of kernel_size={self.kernel_size}; got {self.padding}")
        if self.kernel_size[0] * self.kernel_size[1] >= INDEX_LIMIT:  # arg-max tap codes are 64-bit integers
            raise ValueError(
                f"`kernel_size` must have fewer than 2**62 taps (kh*kw, the limit of derived extents); "
                f"got {self.kernel_size}"
            )
        self._cache: Any = None

    def _geometry(self, x: Any) -> tuple[tuple[int, int], tuple, Any]:
        """Output size, per-dimension :func:`_span` and the cropped padded input (pad value chosen by the
        sub-class).
        """
        out = self._out_shape(x)
        spans = self._spans(x.shape, out)
        return out, spans, self._pad(x, spans)

    def _spans(self, x_shape: tuple[int, ...], out: tuple[int, int]) -> tuple:
        """:func:`_span` of each spatial dimension."""
        return tuple(map(_span, x_shape[2:], out, self.kernel_size, self.stride, self.padding))

    def _taps(self, padded: Any, spans: tuple, out: tuple[int, int]) -> Iterator[tuple[int, int, Any]]:
        """``(p, q, view)`` for every tap that reads the input somewhere, in raster order."""
        (p0, p1, _, _), (q0, q1, _, _) = spans
        for p in range(p0, p1):
            for q in range(q0, q1):
                yield p, q, _tap(padded, p - p0, q - q0, self.stride, out)

    def _out_shape(self, x: Any) -> tuple[int, int]:
        """Output size for input ``x``, checked to be 4-D and at least one window large."""
        if x.ndim != 4:
            raise ValueError(f"{type(self).__name__} expects input (B, C, H, W); got shape {tuple(x.shape)}")
        if min(x.shape[2:]) < 1:  # torch refuses it too; a window of padding alone has no arg-max input
            raise ValueError(
                f"{type(self).__name__} needs an input of at least 1 row and 1 column; got shape {tuple(x.shape)}"
            )
        out_h, out_w = (
            _out_size(n, k, s, p) for n, k, s, p in zip(x.shape[2:], self.kernel_size, self.stride, self.padding)
        )
        out = (out_h, out_w)
        if min(out) < 1:
            raise ValueError(
                f"{type(self).__name__} with kernel_size={self.kernel_size}, padding={self.padding} needs an input "
                f"of at least that size; got spatial size {tuple(x.shape[2:])}"
            )
        return out

    def _pad(self, x: Any, spans: tuple) -> Any:
        """The crop of the padded input that the visited taps read (``x`` itself without padding)."""
        (_, _, top, rows), (_, _, left, cols) = spans
        if (top, left, rows, cols) == (0, 0, *x.shape[2:]):
            return x
        xp = array_module(x)
        padded = xp.full((*x.shape[:2], rows, cols), self._pad_value, dtype=x.dtype)
        padded[:, :, top : top + x.shape[2], left : left + x.shape[3]] = x
        return padded

    def _scatter(
        self,
        per_tap: Callable[[int, int, Any], None],
        x_shape: tuple[int, ...],
        dtype: Any,
        xp: Any,
        out: tuple[int, int],
    ) -> Any:
        """Sum the per-tap gradients back into an input-shaped array.

        ``per_tap(p, q, into)`` writes tap ``(p, q)``'s gradient into ``into``
        (a strided view of the result, sized like the output).
        """
        spans = self._spans(x_shape, out)
        (_, _, top, rows), (_, _, left, cols) = spans
        # Windows that tile the (cropped) padded input exactly, every tap visited, write
        # every element once: no zero fill and no read-modify-write (LeNet's 2x2 pools).
        tiles = self.stride == self.kernel_size and all(
            (first, stop, length) == (0, k, o * k)
            for (first, stop, _, length), o, k in zip(spans, out, self.kernel_size)
        )
        grad = (xp.empty if tiles else xp.zeros)((*x_shape[:2], rows, cols), dtype=dtype)
        scratch = None if tiles else xp.empty((*x_shape[:2], *out), dtype=dtype)
        for p, q, view in self._taps(grad, spans, out):  # the other taps would write padding only
            if tiles:
                per_tap(p, q, view)
            else:
                per_tap(p, q, scratch)
                view += scratch
        return grad[:, :, top : top + x_shape[2], left : left + x_shape[3]]

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


def _padding(padding: int | tuple[int, ...], nd: int) -> tuple[int, ...]:
    """Non-negative symmetric padding per dimension."""
    return as_int_tuple(padding, nd, "padding", minimum=0)


class MaxPool2D(_Pool2D):
    """Maximum over ``kernel_size`` windows, like ``torch.nn.MaxPool2d`` (floor mode).

    Float input keeps its dtype; integer input is pooled in float64 (as
    ``convsuite.conv2d`` reads it); bool, complex and object input is a
    ``TypeError``.

    Parameters
    ----------
    kernel_size : int or tuple of 2 int
        Fewer than ``2**62`` taps in all.
    stride : int or tuple of 2 int, optional
        Default: ``kernel_size``.
    padding : int or tuple of 2 int, default 0
        Implicit ``-inf`` padding on both sides, at most half the kernel.
    """

    _pad_value = float("-inf")

    def forward(self, x: Any) -> Any:
        """Window maxima of ``x (B, C, H, W)``; keeps the argmax when gradients are needed.

        As ``torch.nn.MaxPool2d``: the first maximal element of a window wins
        ties, a NaN wins over numbers (the last NaN of the window), and a
        window of ``-inf`` keeps its first element that is not padding.
        """
        x = real_input(x, f"{type(self).__name__} input `x`")
        kernels = _host_kernels_for(x)
        if kernels is not None:
            return self._forward_on_host(x, kernels)
        xp = array_module(x)
        out, spans, padded = self._geometry(x)
        kw = self.kernel_size[1]
        taps = [(p * kw + q, view) for p, q, view in self._taps(padded, spans, out)]
        arg = None
        if not self._need_cache():
            best = taps[0][1].copy()
            for _, tap in taps[1:]:
                xp.maximum(best, tap, out=best)  # NaN-propagating, as torch's value
        else:
            # NumPy: test taps for NaN only when a window's maximum is NaN (rare; one look
            # at the output). CuPy: always, since looking would wait for the device.
            best, arg = self._max_and_arg(taps, x.shape[:2], out, xp, nan_aware=xp is not np)
            if xp is np and np.isnan(best).any():
                best, arg = self._max_and_arg(taps, x.shape[:2], out, xp, nan_aware=True)
        self._cache = (x.shape, out, arg) if arg is not None else None
        return best

    def _forward_on_host(self, x: Any, kernels: ModuleType) -> Any:
        """:meth:`forward` by numba's one-pass kernel (NumPy input): 4-7x the tap-by-tap ufuncs'
        speed on LeNet-5's pools (2-core VM), same values and arg-max.
        """
        out = self._out_shape(x)
        best, arg = kernels.max_pool2d_forward(
            np.ascontiguousarray(x), self.kernel_size, self.stride, self.padding, out, self._code_dtype()
        )
        self._cache = (x.shape, out, arg) if self._need_cache() else None
        return best

    def _max_and_arg(
        self,
        taps: list[tuple[int, Any]],
        batch_channels: tuple[int, int],
        out: tuple[int, int],
        xp: Any,
        nan_aware: bool,
    ) -> tuple[Any, Any]:
        """Window maxima and arg-max tap codes ``p * kw + q``.

        The code is updated by arithmetic, ``arg += taken * (code - arg)``: a masked
        copy (``copyto(where=)``, ``where()``) cost ~3.5 ns per element on the 2-core VM
        against ~0.1 ns for a plain ufunc (NumPy 2.4, random masks). Starting from the
        first tap and taking strictly greater ones keeps the first maximum of a tie; a
        window whose first tap is padding starts at its first tap inside the input.
        """
        best = taps[0][1].copy()
        arg = self._first_valid_tap(batch_channels, out, xp)
        taken = xp.empty(best.shape, dtype=bool)
        step = xp.empty(best.shape, dtype=arg.dtype)
        for code, tap in taps[1:]:
            xp.greater(tap, best, out=taken)
            if nan_aware:
                taken |= xp.isnan(tap)  # a NaN takes over, the last one wins (torch)
            xp.subtract(arg.dtype.type(code), arg, out=step)
            step *= taken
            arg += step
            xp.maximum(best, tap, out=best)
        return best, arg

    def _first_valid_tap(self, batch_channels: tuple[int, int], out: tuple[int, int], xp: Any) -> Any:
        """Per window, the code of its first tap inside the input (the arg-max of an all ``-inf`` window)."""
        firsts = []
        for n_out, s, pad in zip(out, self.stride, self.padding):
            starts = xp.arange(n_out) * s  # window starts in padded coordinates
            firsts.append(xp.maximum(pad, starts) - starts)
        (first_p, first_q), kw = firsts, self.kernel_size[1]
        codes = (first_p[:, None] * kw + first_q[None, :]).astype(self._code_dtype())
        return xp.broadcast_to(codes, (*batch_channels, *out)).copy()

    def _code_dtype(self) -> np.dtype:
        """The arg-max codes' type, on both paths (see :func:`_code_dtype`)."""
        return _code_dtype(self.kernel_size[0] * self.kernel_size[1])

    def backward(self, grad_y: Any) -> Any:
        """``grad_y`` routed to each window's maximal input (see :meth:`forward`)."""
        if self._cache is None:
            raise RuntimeError(f"{type(self).__name__}.backward needs a forward pass with gradients enabled first")
        x_shape, out, arg = self._cache
        _check_grad_y(type(self).__name__, grad_y, (*x_shape[:2], *out))
        kernels = _host_kernels_for(grad_y)
        if kernels is not None:
            return kernels.max_pool2d_backward(
                np.ascontiguousarray(grad_y), arg, x_shape, self.kernel_size, self.stride, self.padding
            )
        xp = array_module(grad_y)
        kw = self.kernel_size[1]

        def routed(p: int, q: int, into: Any) -> None:
            xp.multiply(grad_y, arg == p * kw + q, out=into)

        return self._scatter(routed, x_shape, grad_y.dtype, xp, out)


class AvgPool2D(_Pool2D):
    """Mean over ``kernel_size`` windows, like ``torch.nn.AvgPool2d`` (zero padding counted).

    Float input keeps its dtype; integer input is pooled in float64 (as
    ``convsuite.conv2d`` reads it); bool, complex and object input is a
    ``TypeError``.

    Parameters
    ----------
    kernel_size : int or tuple of 2 int
        Fewer than ``2**62`` taps in all.
    stride : int or tuple of 2 int, optional
        Default: ``kernel_size``.
    padding : int or tuple of 2 int, default 0
    """

    _pad_value = 0.0

    def forward(self, x: Any) -> Any:
        """Window means of ``x (B, C, H, W)``, padding zeros counted."""
        x = real_input(x, f"{type(self).__name__} input `x`")
        out, spans, padded = self._geometry(x)
        kh, kw = self.kernel_size
        taps = self._taps(padded, spans, out)
        total = next(taps)[2].copy()
        for _, _, view in taps:
            total += view
        self._cache = (x.shape, out)
        return total * x.dtype.type(1.0 / (kh * kw))

    def backward(self, grad_y: Any) -> Any:
        """``grad_y`` spread evenly over each window's inputs."""
        if self._cache is None:
            raise RuntimeError(f"{type(self).__name__}.backward needs a forward pass first")
        x_shape, out = self._cache
        _check_grad_y(type(self).__name__, grad_y, (*x_shape[:2], *out))
        share = grad_y * grad_y.dtype.type(1.0 / (self.kernel_size[0] * self.kernel_size[1]))
        xp = array_module(grad_y)

        def spread(p: int, q: int, into: Any) -> None:
            into[...] = share

        return self._scatter(spread, x_shape, grad_y.dtype, xp, out)


class MaxPool1D(Module):
    """Maximum over windows of a ``(B, C, W)`` input, like ``torch.nn.MaxPool1d``.

    Float input keeps its dtype; integer input is pooled in float64 (as
    ``convsuite.conv1d`` reads it); bool, complex and object input is a
    ``TypeError``.

    Parameters
    ----------
    kernel_size : int
    stride : int, optional
        Default: ``kernel_size``.
    padding : int, default 0
        Implicit ``-inf`` padding on both sides, at most half the kernel.
    """

    category = "pooling"

    def __init__(
        self, kernel_size: int | tuple[int], stride: int | tuple[int] | None = None, padding: int | tuple[int] = 0
    ) -> None:
        super().__init__()
        (k,) = as_int_tuple(kernel_size, 1, "kernel_size")
        (s,) = (k,) if stride is None else as_int_tuple(stride, 1, "stride")
        (p,) = _padding(padding, 1)
        # Checked here so that the message speaks of this layer's values, not its 2-D helper's.
        if 2 * p > k:
            raise ValueError(f"`padding` must be at most half of kernel_size={k}; got {p}")
        self.kernel_size, self.stride, self.padding = k, s, p
        # A private helper, not a child: this layer is the leaf that timing and repr see.
        self._pool: MaxPool2D
        object.__setattr__(self, "_pool", MaxPool2D((1, k), (1, s), (0, p)))

    def forward(self, x: Any) -> Any:
        """Window maxima of ``x (B, C, W)``."""
        x = real_input(x, "MaxPool1D input `x`")
        if x.ndim != 3:
            raise ValueError(f"MaxPool1D expects input (B, C, W); got shape {tuple(x.shape)}")
        if x.shape[2] < 1:  # torch refuses it too; a window of padding alone has no arg-max input
            raise ValueError(f"MaxPool1D needs an input of at least 1 element per row; got shape {tuple(x.shape)}")
        if _out_size(x.shape[2], self.kernel_size, self.stride, self.padding) < 1:
            raise ValueError(
                f"MaxPool1D with kernel_size={self.kernel_size}, padding={self.padding} needs an input of at "
                f"least that size; got length {x.shape[2]}"
            )
        return self._pool.forward(x[:, :, None, :])[:, :, 0, :]

    def backward(self, grad_y: Any) -> Any:
        """``grad_y`` routed to each window's (first) maximal input."""
        if self._pool._cache is None:
            raise RuntimeError("MaxPool1D.backward needs a forward pass with gradients enabled first")
        x_shape, out, _ = self._pool._cache
        _check_grad_y("MaxPool1D", grad_y, (*x_shape[:2], out[1]))
        return self._pool.backward(grad_y[:, :, None, :])[:, :, 0, :]

    def extra_repr(self) -> str:
        """Kernel size, stride and padding, for ``repr``."""
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2D(Module):
    """Global average pooling to ``(B, C, 1, 1)``, like ``torch.nn.AdaptiveAvgPool2d(1)``.

    Float input keeps its dtype; integer input is pooled in float64 (as
    ``convsuite.conv2d`` reads it); bool, complex and object input is a
    ``TypeError``. An input with no rows or no columns has no mean: a
    ``ValueError`` (not NaN).

    Parameters
    ----------
    output_size : 1 or (1, 1)
        Only the global form is implemented (what MobileNetV2 and ResNets use).
    """

    category = "pooling"

    def __init__(self, output_size: int | tuple[int, int] = 1) -> None:
        super().__init__()
        # The type first (bools, arrays and floats refused with their own message), then the value.
        if as_int_tuple(output_size, 2, "output_size") != (1, 1):
            raise ValueError(
                f"`output_size` must be 1 or (1, 1) (only global pooling is implemented); got {_show(output_size)}"
            )
        self._shape: tuple[int, ...] | None = None

    def forward(self, x: Any) -> Any:
        """Mean over ``H`` and ``W`` of ``x (B, C, H, W)``, shape ``(B, C, 1, 1)``."""
        x = real_input(x, "AdaptiveAvgPool2D input `x`")
        if x.ndim != 4:
            raise ValueError(f"AdaptiveAvgPool2D expects input (B, C, H, W); got shape {tuple(x.shape)}")
        if x.shape[2] == 0 or x.shape[3] == 0:
            raise ValueError(
                f"AdaptiveAvgPool2D needs an input of at least 1 row and 1 column; got shape {tuple(x.shape)}"
            )
        self._shape = x.shape
        return x.mean(axis=(2, 3), keepdims=True, dtype=x.dtype)

    def backward(self, grad_y: Any) -> Any:
        """``grad_y`` spread evenly over the ``H * W`` inputs of each channel."""
        if self._shape is None:
            raise RuntimeError("AdaptiveAvgPool2D.backward needs a forward pass first")
        _check_grad_y("AdaptiveAvgPool2D", grad_y, (*self._shape[:2], 1, 1))
        xp = array_module(grad_y)
        scale = grad_y.dtype.type(1.0 / (self._shape[2] * self._shape[3]))
        return xp.broadcast_to(grad_y * scale, self._shape).copy()

    def extra_repr(self) -> str:
        """The output size, for ``repr``."""
        return "output_size=1"
