"""Every check on user input, in one place and with one wording.

Messages name the parameter, say what is accepted, echo what was received and,
where there is one, suggest the fix. Type problems raise ``TypeError``, value
problems ``ValueError``; nothing here allocates memory proportional to the
problem (the output size is checked before any backend allocates it).
"""

from __future__ import annotations

import math
import numbers
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._arrays import is_cupy_array, total_host_memory
from ._spec import ConvSpec, full_padding, output_length, same_padding

__all__ = [
    "PreparedCall",
    "as_int_tuple",
    "check_memory",
    "parse_padding",
    "positive_int",
    "prepare_backward",
    "prepare_forward",
]

PADDING_MODES = ("valid", "same", "full")
_DIM_NAMES = {1: ("W",), 2: ("H", "W")}


def _show(value: Any) -> str:
    """A short echo of what the user passed, for error messages."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(value: Any) -> bool:
    """True for Python and NumPy integers, but not for bools."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def positive_int(value: Any, name: str) -> int:
    """Validate a single positive integer such as ``groups`` or ``in_channels``."""
    if not _is_int(value):
        raise TypeError(f"`{name}` must be a positive int; got {_show(value)}")
    if value < 1:
        raise ValueError(f"`{name}` must be a positive int (>= 1); got {value}")
    return int(value)


def as_int_tuple(value: Any, ndim: int, name: str, minimum: int = 1) -> tuple[int, ...]:
    """Normalise an int or a tuple of ``ndim`` ints, each ``>= minimum``."""
    accepted = f"an int or a tuple of {ndim} ints" if ndim > 1 else "an int or a tuple of 1 int"
    if _is_int(value):
        items = (value,) * ndim
    elif isinstance(value, (tuple, list)) and len(value) == ndim and all(map(_is_int, value)):
        items = tuple(value)
    else:
        raise TypeError(f"`{name}` must be {accepted}; got {_show(value)}")
    if any(v < minimum for v in items):
        raise ValueError(f"`{name}` must be >= {minimum} in every dimension; got {_show(value)}")
    return tuple(int(v) for v in items)


def parse_padding(value: Any, ndim: int) -> str | tuple[tuple[int, int], ...]:
    """Validate the form of ``padding`` without knowing the input size.

    Returns a mode string (``"valid"``, ``"same"``, ``"full"``) or per-dimension
    ``(before, after)`` pairs. Accepted forms: an int; a tuple of ``ndim`` items
    each an int (both sides) or a pair ``(before, after)``; one of the modes.
    """
    pairs_hint = "((before, after),)" if ndim == 1 else "((top, bottom), (left, right))"
    accepted = (
        f"an int, a tuple of {ndim} int{'s' if ndim > 1 else ''}, per-side pairs "
        f"{pairs_hint}, 'valid', 'same' or 'full'"
    )
    if isinstance(value, str):
        if value in PADDING_MODES:
            return value
        raise ValueError(f"`padding` must be {accepted}; got {value!r}")
    if _is_int(value):
        items: tuple[Any, ...] = (value,) * ndim
    elif isinstance(value, (tuple, list)) and len(value) == ndim:
        items = tuple(value)
    else:
        raise TypeError(f"`padding` must be {accepted}; got {_show(value)}")
    pairs = []
    for item in items:
        if _is_int(item):
            pair = (item, item)
        elif isinstance(item, (tuple, list)) and len(item) == 2 and all(map(_is_int, item)):
            pair = tuple(item)
        else:
            raise TypeError(f"`padding` must be {accepted}; got {_show(value)}")
        if pair[0] < 0 or pair[1] < 0:
            raise ValueError(f"`padding` must be non-negative in every dimension; got {_show(value)}")
        pairs.append((int(pair[0]), int(pair[1])))
    return tuple(pairs)


def _xp(value: Any):
    """numpy, or cupy for a cupy array (already imported by whoever made it)."""
    if is_cupy_array(value):
        return sys.modules["cupy"]
    return np


def as_real_array(value: Any, name: str):
    """Turn ``value`` into a NumPy/CuPy array of real numbers, or raise.

    Accepts anything ``numpy.asarray`` turns into an integer or floating array;
    rejects bool, complex, object, string and empty arrays. The dtype is not
    changed here: :func:`compute_dtype` decides it for all operands together.
    """
    if is_cupy_array(value):
        array = value
    else:
        try:
            array = np.asarray(value)
        except (ValueError, TypeError) as exc:  # ragged lists, unconvertible objects
            raise TypeError(
                f"`{name}` must be an array of real numbers; got {_show(value)} ({exc})"
            ) from None
    kind = array.dtype.kind
    if kind == "O" and array.ndim == 0:
        raise TypeError(
            f"`{name}` must be an array of real numbers (a NumPy or CuPy array, or "
            f"nested lists of numbers); got {type(value).__name__}"
        )
    if kind not in "iuf":
        what = {
            "b": "bool",
            "c": "complex",
            "O": "object",
            "U": "string",
            "S": "bytes",
            "M": "datetime",
            "m": "timedelta",
            "V": "structured",
        }.get(kind, str(array.dtype))
        raise TypeError(
            f"`{name}` must have a real numeric dtype (float32, float64 or an integer "
            f"type, which is converted to float64); got {what} dtype {array.dtype}"
        )
    if array.size == 0:
        raise ValueError(f"`{name}` must not be empty; got shape {tuple(array.shape)}")
    return array


def compute_dtype(*arrays) -> np.dtype:
    """float32 only when every operand is float32; otherwise float64.

    Integer and other real inputs are read as float64 (NumPy's promotion), so a
    float32 input meeting a float64 or integer one computes in float64.
    """
    if all(a.dtype == np.float32 for a in arrays if a is not None):
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def check_memory(nbytes: int, what: str, device: str = "cpu", limit: int | None = None) -> None:
    """Refuse, before allocating, a buffer larger than the machine's memory."""
    if limit is None:
        limit = total_host_memory() if device == "cpu" else None
    if limit is not None and nbytes > limit:
        raise MemoryError(
            f"{what} would need {nbytes / 2**30:.3g} GiB but this {device} has "
            f"{limit / 2**30:.3g} GiB; reduce the batch, the input size or the padding"
        )


@dataclass(frozen=True)
class PreparedCall:
    """A validated call: spec, contiguous operands and how to shape the result."""

    spec: ConvSpec
    x: Any
    w: Any
    bias: Any
    layout: str  # "batched", "unbatched" (no batch axis) or "signal" (no batch or channel axes)
    xp: Any  # numpy or cupy

    def to_user(self, array):
        """Reshape a canonical ``(B, C, ...)`` result into the caller's layout."""
        if self.layout == "batched":
            return array
        if self.layout == "unbatched":
            return array[0]
        return array[0, 0]

    def user_shape(self, canonical_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape :meth:`to_user` gives an array of ``canonical_shape``."""
        drop = {"batched": 0, "unbatched": 1, "signal": 2}[self.layout]
        return tuple(canonical_shape[drop:])


def _layout_for(op: str, ndim: int, x, w) -> str:
    """Decide batched / unbatched / signal from the ranks of x and w."""
    full = ndim + 2
    if w.ndim == full and x.ndim == full:
        return "batched"
    if w.ndim == full and x.ndim == full - 1:
        return "unbatched"
    if w.ndim == ndim and x.ndim == ndim:
        return "signal"
    dims = "".join(_DIM_NAMES[ndim])
    k = "K" if ndim == 1 else "KH, KW"
    sp = ", ".join(_DIM_NAMES[ndim])
    raise ValueError(
        f"{op} expects x (B, C, {sp}) with w (M, C/groups, {k}); or x (C, {sp}) with "
        f"w (M, C/groups, {k}); or a plain {'signal' if ndim == 1 else 'image'} x "
        f"({sp}) with w ({k}); got x.ndim={x.ndim} (shape {tuple(x.shape)}) and "
        f"w.ndim={w.ndim} (shape {tuple(w.shape)}) [{dims}]"
    )


def _canonical(array, layout: str, ndim: int):
    """Add the batch (and channel) axes that the layout leaves out."""
    if layout == "batched":
        return array
    if layout == "unbatched":
        return array[None]
    return array.reshape((1, 1) + tuple(array.shape))


def prepare_forward(
    op: str,
    ndim: int,
    x: Any,
    w: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: Any,
    extra: tuple = (),
    convert: bool = True,
) -> PreparedCall:
    """Validate a forward call and return canonical, contiguous operands.

    ``extra`` holds further operands (grad_y for backward) that take part in the
    dtype decision; they are converted by the caller. With ``convert=False``
    the operands are returned as given (reshaped, not copied): enough for
    :func:`convsuite.explain`, which only needs the spec.
    """
    x = as_real_array(x, "x")
    w = as_real_array(w, "w")
    if bias is not None:
        bias = as_real_array(bias, "bias")
    if is_cupy_array(x) != is_cupy_array(w) or (
        bias is not None and is_cupy_array(bias) != is_cupy_array(x)
    ):
        raise TypeError(
            "`x`, `w` and `bias` must all be NumPy arrays or all be CuPy arrays; "
            f"got x: {type(x).__module__}, w: {type(w).__module__}"
            + ("" if bias is None else f", bias: {type(bias).__module__}")
        )
    xp = _xp(x)
    layout = _layout_for(op, ndim, x, w)
    groups = positive_int(groups, "groups")
    stride_t = as_int_tuple(stride, ndim, "stride")
    dilation_t = as_int_tuple(dilation, ndim, "dilation")
    padding_p = parse_padding(padding, ndim)

    xc = _canonical(x, layout, ndim)
    wc = _canonical(w, "signal", ndim) if layout == "signal" else w
    batch, channels, *in_size = (int(s) for s in xc.shape)
    out_channels, channels_per_group, *kernel = (int(s) for s in wc.shape)

    if channels % groups:
        raise ValueError(
            f"`groups` must divide the input channels C={channels}; got groups={groups}"
        )
    if out_channels % groups:
        raise ValueError(
            f"`groups` must divide the output channels M={out_channels} (w.shape[0]); "
            f"got groups={groups}"
        )
    if channels_per_group * groups != channels:
        raise ValueError(
            f"channel mismatch: x has C={channels} channels, so w.shape[1] must be "
            f"C/groups={channels // groups}; got w.shape[1]={channels_per_group} "
            f"(x shape {tuple(x.shape)}, w shape {tuple(w.shape)}, groups={groups})"
        )
    if bias is not None and tuple(bias.shape) != (out_channels,):
        raise ValueError(
            f"`bias` must have shape (M,) = ({out_channels},), one value per output "
            f"channel; got shape {tuple(bias.shape)}"
        )

    if padding_p == "valid":
        pads = ((0, 0),) * ndim
    elif padding_p == "same":
        pads = tuple(map(same_padding, in_size, kernel, stride_t, dilation_t))
    elif padding_p == "full":
        pads = tuple(map(full_padding, kernel, dilation_t))
    else:
        pads = padding_p
    out_size = []
    for axis, (n, p, k, s, d) in enumerate(zip(in_size, pads, kernel, stride_t, dilation_t)):
        n_out = output_length(n, p, k, s, d)
        if n_out < 1:
            raise ValueError(
                f"kernel is larger than the padded input along {_DIM_NAMES[ndim][axis]}: "
                f"dilated kernel extent {d * (k - 1) + 1} (kernel {k}, dilation {d}) > "
                f"input {n} + padding {p[0]} + {p[1]} = {n + p[0] + p[1]}; use a "
                f"smaller kernel or dilation, or more padding"
            )
        out_size.append(n_out)

    dtype = compute_dtype(x, w, bias, *extra)
    spec = ConvSpec(
        ndim=ndim,
        batch=batch,
        in_channels=channels,
        out_channels=out_channels,
        groups=groups,
        in_size=tuple(in_size),
        kernel_size=tuple(kernel),
        stride=stride_t,
        dilation=dilation_t,
        padding=tuple(pads),
        out_size=tuple(out_size),
        dtype=dtype.name,
        has_bias=bias is not None,
    )
    device = "gpu" if xp is not np else "cpu"
    if device == "cpu":
        check_memory(math.prod(spec.y_shape) * spec.itemsize, f"the output of shape {spec.y_shape}")
    if not convert:
        return PreparedCall(spec, xc, wc, bias, layout, xp)
    # Non-contiguous and read-only inputs are fine: the copy (only when needed)
    # is owned by convsuite, and inputs are never written.
    xc = xp.ascontiguousarray(xc, dtype=dtype)
    wc = xp.ascontiguousarray(wc, dtype=dtype)
    if bias is not None:
        bias = xp.ascontiguousarray(bias, dtype=dtype)
    return PreparedCall(spec, xc, wc, bias, layout, xp)


def prepare_backward(
    op: str,
    ndim: int,
    grad_y: Any,
    x: Any,
    w: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: Any,
):
    """Validate a backward call; returns the forward's PreparedCall and grad_y."""
    grad_y = as_real_array(grad_y, "grad_y")
    call = prepare_forward(
        op, ndim, x, w, None, stride, padding, dilation, groups, extra=(grad_y,)
    )
    spec = call.spec
    expected = call.user_shape(spec.y_shape)
    if tuple(grad_y.shape) != tuple(expected):
        raise ValueError(
            f"`grad_y` must have the shape of the forward output, {tuple(expected)}; "
            f"got {tuple(grad_y.shape)}"
        )
    if is_cupy_array(grad_y) != (call.xp is not np):
        raise TypeError("`grad_y` must live where `x` lives (both NumPy or both CuPy)")
    grad_y = call.xp.ascontiguousarray(grad_y.reshape(spec.y_shape), dtype=spec.dtype)
    return call, grad_y
