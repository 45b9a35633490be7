"""conv1d / conv2d, their backward passes and explain(): validate, pick, call."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _buffers, _epilogue, _nonfinite
from ._instrument import kernel_section
from ._registry import select
from ._spec import ConvSpec
from ._validation import (
    PreparedCall,
    as_real_array,
    check_memory,
    check_activation,
    convert_operands,
    prepare_backward,
    prepare_forward,
    prepare_relu_output,
    reserve_memory,
)

__all__ = ["conv1d", "conv2d", "conv1d_backward", "conv2d_backward", "explain", "Explanation"]


def _check_algorithm_type(algorithm: Any) -> None:
    if not isinstance(algorithm, str):
        raise TypeError(f"`algorithm` must be a string such as 'auto'; got {algorithm!r}")


def _backend_xp(device: str):
    """numpy for CPU backends, cupy (importable whenever the backend is) for GPU ones."""
    if device == "gpu":
        import cupy

        return cupy
    return np


def _to_backend_device(call: PreparedCall, device: str, *arrays):
    """Move operands to where the backend computes: arrays in = arrays out."""
    if device == "cpu" and call.xp is not np:
        return tuple(None if a is None else a.get() for a in arrays)
    if device == "gpu" and call.xp is np:
        xp = _backend_xp(device)
        return tuple(None if a is None else xp.asarray(a) for a in arrays)
    return arrays


def _to_caller(call: PreparedCall, array):
    """Return results where the inputs came from: arrays in = arrays out."""
    if call.xp is not np and isinstance(array, np.ndarray):
        array = sys.modules["cupy"].asarray(array)
    elif call.xp is np and not isinstance(array, np.ndarray):
        array = array.get()  # a GPU backend ran on NumPy input
    return array


def _allocate(backend, shapes, dtype):
    """Output buffers on the backend's device, refused up front if they cannot fit.

    Host memory was checked with the input (validation); a device backend
    declares its own limit through ``memory_limit()``.
    """
    memory_limit = getattr(backend, "memory_limit", None)
    if memory_limit is not None:
        nbytes = sum(int(np.prod(shape, dtype=object)) for shape in shapes) * np.dtype(dtype).itemsize
        check_memory(nbytes, f"outputs of shapes {list(shapes)}", device=backend.device, limit=memory_limit())
    xp = _backend_xp(backend.device)
    return [_buffers.empty(shape, dtype, xp) for shape in shapes]


def _forward(op, ndim, x, w, bias, stride, padding, dilation, groups, backend, algorithm, activation=None):
    _check_algorithm_type(algorithm)
    check_activation(activation)
    call = prepare_forward(op, ndim, x, w, bias, stride, padding, dilation, groups, convert=False)
    chosen = select(call.spec, backend, algorithm, "forward")
    reserve_memory(call, chosen.backend, chosen.algorithm, "forward")  # before any copy
    call = convert_operands(call)
    xb, wb, bb = _to_backend_device(call, chosen.backend.device, call.x, call.w, call.bias)
    (out,) = _allocate(chosen.backend, [call.spec.y_shape], call.spec.dtype)
    fused = _epilogue.backend_fuses(chosen.backend, call.spec, chosen.algorithm, activation)
    with kernel_section(chosen.backend.device):
        extra = {"activation": activation} if fused else {}
        chosen.backend.forward(call.spec, xb, wb, bb, out, chosen.algorithm, **extra)
    _nonfinite.fix_forward(call.spec, wb, out, _backend_xp(chosen.backend.device))  # NaN only: relu keeps it
    if not fused:
        _epilogue.apply_activation(activation, out, _backend_xp(chosen.backend.device))
    return _to_caller(call, call.to_user(out))


def _backward(op, ndim, grad_y, x, w, stride, padding, dilation, groups, backend, algorithm, relu_output=None):
    _check_algorithm_type(algorithm)
    call, grad_y = prepare_backward(op, ndim, grad_y, x, w, stride, padding, dilation, groups, convert=False)
    relu_output = prepare_relu_output(relu_output, grad_y, call)
    spec = call.spec
    chosen = select(spec, backend, algorithm, "backward")
    reserve_memory(call, chosen.backend, chosen.algorithm, "backward", grad_y)  # before any copy
    call = convert_operands(call)
    grad_y = call.xp.ascontiguousarray(grad_y, dtype=spec.dtype)
    if relu_output is not None:  # the gradient through the ReLU, once, for dX, dW and db alike
        grad_y = _epilogue.mask_relu_gradient(grad_y, relu_output, call.xp)
    gyb, xb, wb = _to_backend_device(call, chosen.backend.device, grad_y, call.x, call.w)
    shapes = [spec.x_shape, spec.w_shape, (spec.out_channels,)]
    grad_x, grad_w, grad_b = _allocate(chosen.backend, shapes, spec.dtype)
    with kernel_section(chosen.backend.device):
        chosen.backend.backward(spec, gyb, xb, wb, grad_x, grad_w, grad_b, chosen.algorithm)
    _nonfinite.fix_backward(spec, gyb, grad_w, grad_b, _backend_xp(chosen.backend.device))
    # grad_x takes the caller's layout of x; a plain-signal weight gets back (K,).
    grad_w_user = grad_w.reshape(spec.kernel_size) if call.layout == "signal" else grad_w
    return tuple(_to_caller(call, g) for g in (call.to_user(grad_x), grad_w_user, grad_b))


_FORWARD_DOC = """{ndim}-D convolution (deep-learning cross-correlation, as in PyTorch).

    ``y[b, m, {o}] = bias[m] + sum over c, {k} of
    x[b, g*C/groups + c, {i}] * w[m, c, {k}]`` with zeros outside the input.

    Parameters
    ----------
    x : array_like
        Input ``(B, C, {sp})``; also ``(C, {sp})`` without a batch axis, or a
        plain {plain} ``({sp})`` together with a plain kernel ``w ({ks})``.
        Array-likes: NumPy and CuPy arrays, objects with ``__array__`` or
        (CPU) ``__dlpack__``, nested lists. Masked arrays and tensors that
        require grad are refused (TypeError); byte order does not matter.
    w : array_like
        Weights ``(M, C/groups, {ks})`` (or ``({ks})`` for the plain form).
    bias : array_like, optional
        ``(M,)``, added to every output position of channel ``m``.
    stride, dilation : int or tuple of {ndim} int, default 1
        Step between outputs and between kernel taps, per dimension.
    padding : int, tuple, per-side pairs, 'valid', 'same' or 'full', default 0
        Zero padding. An int or one int per dimension pads both sides; per-side
        pairs give ``(before, after)`` per dimension. ``'same'`` gives
        ``ceil(n / stride)`` outputs with any stride (the odd pixel of padding
        goes after, as in TensorFlow); ``'full'`` pads ``dilation*(k-1)`` on
        both sides.
    groups : int, default 1
        Channel groups; must divide C and M. ``groups == C`` is depthwise.
    backend : str, optional
        Backend name (see :func:`convsuite.list_backends`) or ``'auto'``; by
        default ``use_backend``/``set_backend``/``$CONVSUITE_BACKEND``/auto.
    algorithm : str, default 'auto'
        Pin one of the backend's algorithms.
    activation : {{None, 'relu'}}, default None
        An epilogue applied to ``y`` (after the bias): ``'relu'`` returns
        ``relu(conv + bias)`` (``v < 0 -> 0``; NaN stays NaN, as ``torch.relu``).
        The cupy backend fuses it into the kernel of its implicit-GEMM
        algorithms; other backends and algorithms apply it after the kernel.
        Its gradient: ``conv{ndim}d_backward(..., relu_output=y)``.

    Returns
    -------
    y : ndarray
        ``(B, M, {so})`` (or without the axes the input left out), float32 if
        every input is float32, else float64; NumPy in gives NumPy out, CuPy in
        gives CuPy out.

    Raises
    ------
    TypeError, ValueError
        Bad input; the message names the parameter and what is accepted.
    BackendUnavailableError, UnsupportedCaseError
        An explicitly requested backend is missing or cannot run the case.
    MemoryError
        The output, operand copies and the backend's workspace would not fit
        in the memory available now (nothing allocated).

    Notes
    -----
    Non-finite values follow IEEE arithmetic on the zero-padded input, as in
    PyTorch, on every backend: a NaN or infinite weight meeting a padding
    zero gives NaN (``inf * 0``), also in the weight gradient of backward.
    """


def conv1d(
    x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, backend=None, algorithm="auto", activation=None
):
    return _forward("conv1d", 1, x, w, bias, stride, padding, dilation, groups, backend, algorithm, activation)


def conv2d(
    x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, backend=None, algorithm="auto", activation=None
):
    return _forward("conv2d", 2, x, w, bias, stride, padding, dilation, groups, backend, algorithm, activation)


conv1d.__doc__ = _FORWARD_DOC.format(
    ndim=1, o="o", k="k", i="o*stride + k*dilation - pad", sp="W", ks="K", so="W_out", plain="signal"
)
conv2d.__doc__ = _FORWARD_DOC.format(
    ndim=2,
    o="oh, ow",
    k="p, q",
    i="oh*sh + p*dh - pad_top, ow*sw + q*dw - pad_left",
    sp="H, W",
    ks="KH, KW",
    so="H_out, W_out",
    plain="image",
)

_BACKWARD_DOC = """Gradients of a {ndim}-D convolution with respect to x, w and bias.

    Given ``grad_y`` = dL/dy for ``y = conv{ndim}d(x, w, bias, ...)``, returns
    ``(grad_x, grad_w, grad_b)`` with the shapes of ``x``, ``w`` and ``(M,)``.
    ``grad_b`` is returned whether or not the forward used a bias. Keywords are
    those of :func:`conv{ndim}d`, with the same validation and dtype rules.

    ``relu_output``: for ``y = conv{ndim}d(..., activation='relu')``, pass that
    ``y`` (shape of ``grad_y``, where ``x`` lives) and ``grad_y = dL/dy``; the
    gradients are then taken through the ReLU: ``grad_y`` is zeroed where
    ``y <= 0`` (as ``torch.threshold_backward``) before dX, dW and db.
    """


def conv1d_backward(
    grad_y, x, w, *, stride=1, padding=0, dilation=1, groups=1, backend=None, algorithm="auto", relu_output=None
):
    return _backward(
        "conv1d", 1, grad_y, x, w, stride, padding, dilation, groups, backend, algorithm, relu_output
    )


def conv2d_backward(
    grad_y, x, w, *, stride=1, padding=0, dilation=1, groups=1, backend=None, algorithm="auto", relu_output=None
):
    return _backward(
        "conv2d", 2, grad_y, x, w, stride, padding, dilation, groups, backend, algorithm, relu_output
    )


conv1d_backward.__doc__ = _BACKWARD_DOC.format(ndim=1)
conv2d_backward.__doc__ = _BACKWARD_DOC.format(ndim=2)


@dataclass(frozen=True)
class Explanation:
    """What :func:`explain` found: the backend and algorithm a call would use.

    Attributes
    ----------
    op, direction : str
        ``"conv1d"``/``"conv2d"`` and ``"forward"``/``"backward"``.
    backend, algorithm : str
        The choice.
    source : str
        Which setting asked for the backend (argument, use_backend, ...).
    reason : str
        Why this backend and algorithm.
    considered : tuple of (str, str)
        Backends tried before it by ``"auto"``, with why each was skipped.
    spec : ConvSpec
        The normalised problem (shapes, padding, output size, dtype).
    """

    op: str
    direction: str
    backend: str
    algorithm: str
    source: str
    reason: str
    considered: tuple[tuple[str, str], ...]
    spec: ConvSpec

    def __str__(self) -> str:
        s = self.spec
        lines = [
            f"{self.op} {self.direction}: x {s.x_shape} * w {s.w_shape} -> y {s.y_shape} "
            f"[{s.dtype}, stride {s.stride}, padding {s.padding}, dilation {s.dilation}, groups {s.groups}]",
            f"backend {self.backend!r}, algorithm {self.algorithm!r}",
            f"why: {self.reason}",
        ]
        lines += [f"skipped {name}: {why}" for name, why in self.considered]
        return "\n".join(lines)


def explain(
    x,
    w,
    bias=None,
    *,
    stride=1,
    padding=0,
    dilation=1,
    groups=1,
    backend=None,
    algorithm="auto",
    direction="forward",
) -> Explanation:
    """Say which backend and algorithm a call would use, and why; run nothing.

    Takes the arguments of :func:`conv1d`/:func:`conv2d` (the operation is told
    by the rank of ``w``: 1 or 3 for 1-D, 2 or 4 for 2-D). ``direction`` is
    ``"forward"`` or ``"backward"``.

    Returns
    -------
    Explanation
        Printable; its fields give the choice, the reason and the skipped backends.
    """
    _check_algorithm_type(algorithm)
    if direction not in ("forward", "backward"):
        raise ValueError(f"`direction` must be 'forward' or 'backward'; got {direction!r}")
    w = as_real_array(w, "w")
    ndim = {1: 1, 3: 1, 2: 2, 4: 2}.get(w.ndim)
    if ndim is None:
        raise ValueError(
            "`w` must have rank 3 (conv1d), 4 (conv2d), or 1/2 for a plain signal/image; "
            f"got shape {tuple(w.shape)}"
        )
    op = f"conv{ndim}d"
    call = prepare_forward(op, ndim, x, w, bias, stride, padding, dilation, groups, convert=False)
    chosen = select(call.spec, backend, algorithm, direction)
    return Explanation(
        op=op,
        direction=direction,
        backend=chosen.backend.name,
        algorithm=chosen.algorithm,
        source=chosen.source,
        reason=chosen.reason,
        considered=chosen.considered,
        spec=call.spec,
    )
