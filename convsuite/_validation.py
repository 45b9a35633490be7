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
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from ._arrays import available_host_memory, is_cupy_array, total_host_memory
from ._spec import ConvSpec, full_padding, output_length, same_padding

__all__ = [
    "INDEX_LIMIT",
    "PreparedCall",
    "as_int_tuple",
    "channels_last_hint",
    "check_memory",
    "float_dtype",
    "convert_operands",
    "reserve_memory",
    "weight_generator",
    "parse_padding",
    "positive_int",
    "prepare_backward",
    "prepare_forward",
]

PADDING_MODES = ("valid", "same", "full")

#: Every stride, dilation, padding and kernel extent, and every offset derived
#: from them (padded length, dilated kernel span), must stay below this bound.
#: Compiled kernels index with signed 64-bit integers (Cython ``Py_ssize_t``,
#: numba ``int64``); the widest intermediate they form is the sum of two such
#: values (e.g. ``pad_left + stride - 1``, ``W - 1 + pad_left``), which stays
#: below ``2**63`` under this bound. See docs of :func:`check_index_bounds`.
INDEX_LIMIT = 2**62
_DIM_NAMES = {1: ("W",), 2: ("H", "W")}


def _show(value: Any) -> str:
    """A short echo of what the user passed, for error messages."""
    if isinstance(value, (np.generic, np.ndarray)) and value.ndim == 0:
        return f"{value.item()!r} ({value.dtype})"  # a NumPy scalar: echo its value
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_int(value: Any) -> bool:
    """True for Python and NumPy integers, but not for bools."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def int_at_least(value: Any, name: str, minimum: int) -> int:
    """An int >= ``minimum`` (a count: repeats, rounds, grid sizes); a bool, a float (2.5, NaN) or a string is none."""
    if not _is_int(value):
        raise TypeError(f"`{name}` must be an int >= {minimum}; got {_show(value)}")
    if value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}; got {_show(value)}")
    return int(value)


def positive_int(value: Any, name: str) -> int:
    """Validate a single positive integer such as ``groups`` or ``in_channels``."""
    if not _is_int(value):
        raise TypeError(f"`{name}` must be a positive int; got {_show(value)}")
    if value < 1:
        raise ValueError(f"`{name}` must be a positive int (>= 1); got {_show(value)}")
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
    if any(v >= INDEX_LIMIT for v in items):
        raise ValueError(
            f"`{name}` must be below 2**62 in every dimension (kernels index with 64-bit integers); got {_show(value)}"
        )
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
        if pair[0] >= INDEX_LIMIT or pair[1] >= INDEX_LIMIT:
            raise ValueError(
                f"`padding` must be below 2**62 on every side (kernels index with 64-bit integers); got {_show(value)}"
            )
        pairs.append((int(pair[0]), int(pair[1])))
    return tuple(pairs)


def _xp(value: Any) -> Any:
    """numpy, or cupy for a cupy array (already imported by whoever made it)."""
    if is_cupy_array(value):
        return sys.modules["cupy"]
    return np


def _from_foreign(value: Any, name: str) -> Any:
    """A NumPy array from an object that is not one: ``__array__``, DLPack, lists."""
    if isinstance(value, np.ma.MaskedArray):
        # np.asarray would drop the mask and let masked values (often 1e20 or
        # garbage) into the result: refuse rather than change the meaning.
        raise TypeError(
            f"`{name}` is a masked array; convsuite does not know what masked elements "
            f"should contribute: pass `{name}.filled(0)` (masked elements as zeros) or "
            f"`{name}.data` (the raw values)"
        )
    if _is_torch_tensor(value):
        return _from_torch(value, name)
    if getattr(value, "requires_grad", False) is True:
        # A torch tensor in an autograd graph: torch refuses .numpy() on it, and
        # convsuite's result would not be part of that graph anyway.
        raise TypeError(
            f"`{name}` is a {type(value).__name__} that requires grad; convsuite does not "
            f"record autograd graphs: pass `{name}.detach()` and compute gradients with "
            f"convsuite.conv1d_backward/conv2d_backward"
        )
    try:
        if not hasattr(value, "__array__") and hasattr(value, "__dlpack__"):
            return np.from_dlpack(value)
        return np.asarray(value)
    except (ValueError, TypeError, RuntimeError, BufferError) as exc:
        # ragged lists, unconvertible objects, tensors on another device
        raise TypeError(
            f"`{name}` must be an array of real numbers (a NumPy or CuPy array, an object "
            f"with __array__ or __dlpack__ on the CPU, or nested lists of numbers); got "
            f"{_show(value)} ({exc})"
        ) from None


def _is_torch_tensor(value: Any) -> bool:
    """True for a torch tensor, told without importing torch."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _from_torch(tensor: Any, name: str) -> Any:
    """A torch tensor read zero-copy through DLPack: a NumPy array (CPU) or a CuPy array (CUDA).

    bfloat16, which NumPy has no dtype for, is read as float32 (the dtype it is
    computed in anyway); the result goes back as bfloat16 (``_interop``).
    """
    if tensor.requires_grad:
        raise TypeError(
            f"`{name}` is a {type(tensor).__name__} that requires grad; convsuite's functions do not "
            f"record autograd graphs: pass `{name}.detach()`, or use convsuite.torch's modules, whose "
            "backward runs through torch.autograd"
        )
    torch = sys.modules["torch"]
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    if tensor.device.type == "cuda":
        try:
            import cupy
        except ImportError:
            raise TypeError(
                f"`{name}` is a CUDA tensor; reading it needs CuPy (pip install cupy-cuda13x), or pass `{name}.cpu()`"
            ) from None
        return cupy.from_dlpack(tensor)
    if tensor.device.type != "cpu":
        raise TypeError(f"`{name}` is a tensor on device {tensor.device}; convsuite reads CPU and CUDA tensors")
    try:
        return np.from_dlpack(tensor)
    except (TypeError, RuntimeError, BufferError) as exc:  # dtypes NumPy cannot hold (complex32, quantised)
        raise TypeError(f"`{name}` must be a tensor of real numbers; got dtype {tensor.dtype} ({exc})") from None


def as_real_array(value: Any, name: str) -> Any:
    """Turn ``value`` into a NumPy/CuPy array of real numbers, or raise.

    Accepts NumPy and CuPy arrays, objects with ``__array__`` (e.g. CPU torch
    tensors that do not require grad), objects that only speak DLPack
    (``__dlpack__``, CPU only), and nested lists. Refuses masked arrays (their
    mask would be lost), tensors that require grad, and bool, complex, object,
    string and empty arrays, each with a message naming ``name``. Byte order is
    not a meaning: a big-endian ``'>f4'`` array is float32. The dtype is not
    changed here: :func:`compute_dtype` decides it for all operands together.
    """
    if type(value) is np.ndarray or is_cupy_array(value):
        array = value  # the common case: no conversion, no further checks
    else:
        array = _from_foreign(value, name)
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


def result_dtype(*arrays: Any) -> np.dtype:
    """The dtype of the results: NumPy's promotion of the operands' dtypes, integers read as float64.

    float16 with float16 gives float16, float16 with float32 gives float32,
    float32 with float64 (or an integer) gives float64 — as ``np.result_type``
    does for floats, the one rule for mixed widths on every backend.
    """
    # kind and size, not dtype equality: a big-endian '>f4' array is float32 too.
    widest = max((a.dtype.itemsize if a.dtype.kind == "f" else 8) for a in arrays if a is not None)
    return np.dtype({2: np.float16, 4: np.float32}.get(widest, np.float64))


def compute_dtype(*arrays: Any) -> np.dtype:
    """The dtype the kernels compute in: float32 for float16/float32 results, else float64.

    Half-precision results are computed in float32 and converted once at the
    end (as torch computes float16 convolutions on the CPU).
    """
    return np.dtype(np.float64) if result_dtype(*arrays) == np.float64 else np.dtype(np.float32)


def check_index_bounds(
    ndim: int,
    in_size: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    pads: Sequence[tuple[int, int]],
) -> None:
    """Refuse geometry whose derived offsets reach :data:`INDEX_LIMIT`.

    Stride, dilation and each side of the padding were bounded when parsed;
    here the derived extents are: the dilated kernel span ``d*(k-1)+1`` and
    the padded length ``n + before + after``. Under these bounds every index
    a kernel forms (``oh*sh + p*dh - pad``, ``pad_left - q*dw``,
    ``shift + sw - 1``, ``W - 1 + shift``) lies in ``(-2**63, 2**63)``.
    """
    for axis, (n, k, _s, d, (before, after)) in enumerate(zip(in_size, kernel, stride, dilation, pads)):
        dim = _DIM_NAMES[ndim][axis]
        span = d * (k - 1) + 1
        if span >= INDEX_LIMIT:
            raise ValueError(
                f"`dilation` too large along {dim}: the dilated kernel spans "
                f"{d} * ({k} - 1) + 1 = {span} samples, which must be below 2**62 "
                f"(kernels index with 64-bit integers)"
            )
        padded = n + before + after
        if padded >= INDEX_LIMIT:
            raise ValueError(
                f"`padding` too large along {dim}: input {n} + padding {before} + {after} "
                f"= {padded} must be below 2**62 (kernels index with 64-bit integers)"
            )


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

    def to_user(self, array: Any) -> Any:
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


def _layout_for(op: str, ndim: int, x: Any, w: Any) -> str:
    """Decide batched / unbatched / signal from the ranks of x and w."""
    full = ndim + 2
    if w.ndim == full and x.ndim == full:
        return "batched"
    if w.ndim == full and x.ndim == full - 1:
        return "unbatched"
    if w.ndim == ndim and x.ndim == ndim:
        return "signal"
    raise ValueError(f"{op}: {_layouts_in_words(ndim)}; got {_ranks(x, w)}{_rank_hint(ndim, x, w)}")


#: The axes of each layout, in words (for the messages).
_AXIS_WORDS = {1: "width", 2: "height, width"}


def _layouts_in_words(ndim: int) -> str:
    """The three accepted layouts of x and w, spelled out."""
    sp = ", ".join(_DIM_NAMES[ndim])
    k = "K" if ndim == 1 else "KH, KW"
    what = "signal" if ndim == 1 else "image"
    return (
        f"x must have shape (B, C, {sp}) (batch, channels, {_AXIS_WORDS[ndim]}) or (C, {sp}) (one sample), "
        f"with w of shape (M, C/groups, {k}) (output channels, input channels per group, kernel size); "
        f"or x must be a plain {what} ({sp}) with a plain kernel w ({k})"
    )


def _ranks(x: Any, w: Any) -> str:
    """What the user passed: the ranks and shapes of x and w."""
    return f"x.ndim={x.ndim} (shape {tuple(x.shape)}) and w.ndim={w.ndim} (shape {tuple(w.shape)})"


def _rank_hint(ndim: int, x: Any, w: Any) -> str:
    """The likely fix when one operand has an accepted rank and the other does not ('' when none is clear)."""
    full = ndim + 2
    sp = ", ".join(_DIM_NAMES[ndim])
    k = "K" if ndim == 1 else "KH, KW"
    what = "signal" if ndim == 1 else "image"
    if x.ndim == ndim and w.ndim == full:
        if w.shape[1] == 1:
            return f"; a plain {what} takes a plain kernel ({k}): to apply this w, pass x[None, None] (1, 1, {sp})"
        return (
            f"; a plain {what} takes a plain kernel ({k}); this w reads {w.shape[1]} input channels per group, "
            f"so x needs a channel axis: (C, {sp}) or (B, C, {sp})"
        )
    if x.ndim in (full, full - 1) and w.ndim != full:
        return f"; with this x, w needs {full} dimensions (M, C/groups, {k})"
    return ""


def channels_last_hint(shape: tuple, ndim: int, channels: int) -> str:
    """A hint for an input of ``shape`` laid out channels-last whose last axis has the ``channels`` expected.

    Returns ``''`` unless moving the last axis first would give the channel
    axis ``channels`` (and it has another count now); the hint names the
    ``transpose`` (NumPy, CuPy, Dask) or ``permute`` (torch) that moves it.
    """
    rank = len(shape)
    if rank not in (ndim + 1, ndim + 2) or shape[-1] != channels or shape[rank - ndim - 1] == channels:
        return ""
    batched = rank == ndim + 2
    last = ("N" if batched else "") + "".join(_DIM_NAMES[ndim]) + "C"
    first = ("B, " if batched else "") + "C, " + ", ".join(_DIM_NAMES[ndim])
    order = ", ".join(map(str, ((0,) if batched else ()) + (rank - 1,) + tuple(range(int(batched), rank - 1))))
    return (
        f"; x looks channels-last ({last}); convsuite takes ({first}): "
        f"pass x.transpose({order}) (a torch tensor: x.permute({order}))"
    )


def _canonical(array: Any, layout: str, ndim: int) -> Any:
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
    if is_cupy_array(x) != is_cupy_array(w) or (bias is not None and is_cupy_array(bias) != is_cupy_array(x)):
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

    # Both channel errors say when x looks channels-last against the channels w reads (the usual slip of a
    # TensorFlow or image user).
    if channels % groups:
        hint = channels_last_hint(tuple(x.shape), ndim, channels_per_group * groups)
        raise ValueError(f"`groups` must divide the input channels C={channels}; got groups={groups}{hint}")
    if out_channels % groups:
        raise ValueError(f"`groups` must divide the output channels M={out_channels} (w.shape[0]); got groups={groups}")
    if channels_per_group * groups != channels:
        hint = channels_last_hint(tuple(x.shape), ndim, channels_per_group * groups)
        raise ValueError(
            f"channel mismatch: x has C={channels} channels (axis {x.ndim - ndim - 1} of x), so w.shape[1] must be "
            f"C/groups={channels // groups}; got w.shape[1]={channels_per_group} "
            f"(x shape {tuple(x.shape)}, w shape {tuple(w.shape)}, groups={groups}){hint}"
        )
    if bias is not None and tuple(bias.shape) != (out_channels,):
        raise ValueError(
            f"`bias` must have shape (M,) = ({out_channels},), one value per output "
            f"channel; got shape {tuple(bias.shape)}"
        )

    if not isinstance(padding_p, str):
        pads = padding_p
    elif padding_p == "same":
        pads = tuple(map(same_padding, in_size, kernel, stride_t, dilation_t))
    elif padding_p == "full":
        pads = tuple(map(full_padding, kernel, dilation_t))
    else:  # "valid"
        pads = ((0, 0),) * ndim
    check_index_bounds(ndim, in_size, kernel, stride_t, dilation_t, pads)
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
    call = PreparedCall(spec, xc, wc, bias, layout, xp)
    return convert_operands(call) if convert else call


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
    convert: bool = True,
) -> tuple[PreparedCall, Any]:
    """Validate a backward call; returns the forward's PreparedCall and grad_y.

    With ``convert=False`` grad_y comes back reshaped to ``spec.y_shape`` but
    not copied (see :func:`convert_operands`).
    """
    grad_y = as_real_array(grad_y, "grad_y")
    call = prepare_forward(op, ndim, x, w, None, stride, padding, dilation, groups, extra=(grad_y,), convert=False)
    spec = call.spec
    expected = call.user_shape(spec.y_shape)
    if tuple(grad_y.shape) != tuple(expected):
        raise ValueError(
            f"`grad_y` must have the shape of the forward output, {tuple(expected)}; got {tuple(grad_y.shape)}"
        )
    if is_cupy_array(grad_y) != (call.xp is not np):
        raise TypeError("`grad_y` must live where `x` lives (both NumPy or both CuPy)")
    grad_y = grad_y.reshape(spec.y_shape)
    if not convert:
        return call, grad_y
    return convert_operands(call), _contiguous(call.xp, grad_y, spec.dtype)


def _contiguous(xp: Any, array: Any, dtype: Any) -> Any:
    """``array`` as a C-contiguous array of native ``dtype`` (a copy only when needed)."""
    return None if array is None else xp.ascontiguousarray(array, dtype=dtype)


def convert_operands(call: PreparedCall) -> PreparedCall:
    """The call with x, w and bias contiguous, native-endian and of the spec's dtype.

    Non-contiguous and read-only inputs are fine: the copy (only when needed)
    is owned by convsuite, and inputs are never written.
    """
    xp, dtype = call.xp, call.spec.dtype
    return replace(
        call,
        x=_contiguous(xp, call.x, dtype),
        w=_contiguous(xp, call.w, dtype),
        bias=_contiguous(xp, call.bias, dtype),
    )


def copy_bytes(array: Any, dtype: Any) -> int:
    """Host bytes :func:`convert_operands` allocates for ``array`` (0: no copy).

    A broadcast view (``np.broadcast_to``) costs its full size here: the copy
    is contiguous. Device arrays are the device's business (0).
    """
    if array is None or not isinstance(array, np.ndarray):
        return 0
    if array.dtype == dtype and array.flags.c_contiguous:
        return 0
    return array.size * np.dtype(dtype).itemsize


#: Below this many bytes a call skips reading /proc/meminfo: a machine that
#: cannot find this much is already failing, and the read costs per call.
SMALL_CALL_BYTES = 16 * 2**20


def check_call_memory(plan: Any, direction: str, operands: tuple) -> None:
    """The per-call memory check of a large cached plan (see :func:`reserve_memory`)."""
    _check_buffers(plan.spec, plan.backend, plan.algorithm, direction, operands)


def reserve_memory(call: PreparedCall, backend: Any, algorithm: str, direction: str, grad_y: Any = None) -> None:
    """Refuse, before anything is allocated, a call whose buffers do not fit in memory.

    Counts every host buffer the call allocates: copies of the operands
    (dtype, byte order, contiguity; a broadcast view copies in full), the
    outputs and the backend's declared workspace
    (``backend.workspace_bytes(spec, algorithm, direction)``), against the
    memory available now (:func:`~convsuite._arrays.available_host_memory`).
    Outputs and workspace of a GPU backend are checked on its device instead.
    """
    _check_buffers(call.spec, backend, algorithm, direction, (call.x, call.w, call.bias, grad_y))


def _check_buffers(spec: ConvSpec, backend: Any, algorithm: str, direction: str, operands: tuple) -> None:
    """Operand copies, and on a CPU backend outputs and workspace, against available memory."""
    parts = {"operand copies": sum(copy_bytes(a, spec.dtype) for a in operands)}
    if backend.device == "cpu":
        if direction == "forward":
            outputs = math.prod(spec.y_shape)
        else:
            outputs = math.prod(spec.x_shape) + math.prod(spec.w_shape) + spec.out_channels
        parts["outputs"] = outputs * spec.itemsize
        parts["workspace"] = int(backend.workspace_bytes(spec, algorithm, direction))
    _refuse_if_short(parts, direction)


def _refuse_if_short(parts: dict, direction: str) -> None:
    """MemoryError when the buffers in ``parts`` exceed the memory available now."""
    total = sum(parts.values())
    if total <= SMALL_CALL_BYTES:
        return
    limit = available_host_memory()
    if limit is not None and total > limit:
        detail = ", ".join(f"{k} {v / 2**30:.3g} GiB" for k, v in parts.items() if v)
        raise MemoryError(
            f"this {direction} call would allocate {total / 2**30:.3g} GiB ({detail}) but "
            f"only {limit / 2**30:.3g} GiB of memory is available now; reduce the batch, "
            f"the input size or the padding, or pass contiguous arrays of the compute dtype"
        )


def check_input_grad(input_grad: Any) -> bool:
    """``input_grad`` as a bool (NumPy's bools too), or a TypeError naming it."""
    if isinstance(input_grad, (bool, np.bool_)):
        return bool(input_grad)
    raise TypeError(f"`input_grad` must be True or False; got {_show(input_grad)}")


def check_activation(activation: Any) -> None:
    """``activation`` must be None or one of the fused epilogues' names."""
    from ._epilogue import ACTIVATIONS

    if activation is None:
        return
    accepted = ", ".join(repr(a) for a in ACTIVATIONS)
    if not isinstance(activation, str):
        raise TypeError(f"`activation` must be one of {accepted}; got {_show(activation)}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"`activation` must be one of {accepted}; got {activation!r}")


def check_relu_output(relu_output: Any, plan: Any) -> Any:
    """``relu_output`` for a backward plan: the forward's shape, where the operands live.

    Any real dtype is accepted (only its sign is read). Returned as an array
    of the plan's array type, in the caller's layout (the shape of grad_y).
    """
    if type(relu_output) is not plan.in_type:
        relu_output = as_real_array(relu_output, "relu_output")
        if type(relu_output) is not plan.in_type:
            raise TypeError(
                "`relu_output` must live where `x` lives (both NumPy or both on the same device); "
                f"got {type(relu_output).__module__}.{type(relu_output).__name__}"
            )
    expected = plan.user_y_shape
    if tuple(relu_output.shape) != tuple(expected):
        raise ValueError(
            f"`relu_output` must have the shape of the forward output (and grad_y), {tuple(expected)}; "
            f"got {tuple(relu_output.shape)}"
        )
    if relu_output.dtype.kind not in "iuf":
        raise TypeError(f"`relu_output` must have a real numeric dtype; got {relu_output.dtype}")
    return relu_output


def weight_shape(
    out_channels: int, in_channels: int, groups: int, kernel_size: tuple[int, ...], dtype: np.dtype
) -> tuple[int, ...]:
    """A layer's weight shape ``(M, C/groups, *K)``; ValueError naming the channels and kernel when its
    bytes pass what any array can address (NumPy's own error names none of them).
    """
    shape = (out_channels, in_channels // groups, *kernel_size)
    named = f"in_channels={in_channels}, out_channels={out_channels}, groups={groups} and kernel_size={kernel_size}"
    if math.prod(shape) * np.dtype(dtype).itemsize > np.iinfo(np.intp).max:
        raise ValueError(f"{named} make weights of shape {shape}: more bytes than any array can address")
    # The initial values are drawn in float64 and then cast: both arrays exist for a moment.
    need = math.prod(shape) * (8 + np.dtype(dtype).itemsize)
    limit = total_host_memory()
    if limit is not None and need > limit:
        raise MemoryError(
            f"{named} make weights of shape {shape}, whose initialisation needs {need / 2**30:.3g} GiB; "
            f"this machine has {limit / 2**30:.3g} GiB"
        )
    return shape


def float_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as float32/float64; None, bools and anything else are refused."""
    accepted = "`dtype` must be 'float32' or 'float64' (or the NumPy types)"
    if dtype is None or isinstance(dtype, (bool, np.bool_)):
        raise TypeError(f"{accepted}; got {dtype!r}")
    try:
        resolved = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{accepted}; got {_show(dtype)}") from None
    if resolved not in (np.float32, np.float64):
        raise TypeError(f"{accepted}; got {_show(dtype)}")
    return resolved


def weight_generator(seed: Any) -> np.random.Generator:
    """The generator of the initial weights: None, an int >= 0, or a Generator."""
    if seed is None or isinstance(seed, np.random.Generator):
        return np.random.default_rng(seed)
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"`seed` must be None, an int >= 0 or a numpy Generator; got {_show(seed)}")
    if seed < 0:
        raise ValueError(f"`seed` must be None, an int >= 0 or a numpy Generator; got {_show(seed)}")
    return np.random.default_rng(int(seed))
