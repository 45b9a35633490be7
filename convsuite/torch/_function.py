"""The autograd Function that runs a convolution on convsuite, and the functional ``conv1d``/``conv2d``.

Forward calls :func:`convsuite.conv1d`/:func:`convsuite.conv2d`; backward calls
:func:`convsuite.conv1d_backward`/:func:`convsuite.conv2d_backward` once for
the gradients autograd asks for. Tensors cross over as they are, detached and
contiguous: convsuite reads a torch tensor zero-copy through DLPack (a CPU
tensor as a NumPy array, a CUDA tensor as a CuPy array) and hands its results
back as tensors of the input's dtype and device, the same way.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch.autograd.function import once_differentiable

from .. import _api

__all__ = ["conv1d", "conv2d"]

#: The dtypes torch convolves; float16 and bfloat16 are computed in float32 and returned in their own dtype.
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class Geometry(NamedTuple):
    """Everything of one call but its tensors: the keywords of ``convsuite.conv{ndim}d``."""

    ndim: int
    stride: Any
    padding: Any
    dilation: Any
    groups: Any
    backend: str | None
    algorithm: str

    def keywords(self) -> dict[str, Any]:
        """The keyword arguments of ``convsuite.conv{ndim}d`` and its backward."""
        return dict(
            stride=self.stride,
            padding=self.padding,
            dilation=self.dilation,
            groups=self.groups,
            backend=self.backend,
            algorithm=self.algorithm,
        )


def _operand(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor as convsuite reads it: out of the autograd graph (DLPack refuses one in it) and contiguous."""
    return tensor.detach().contiguous()


class ConvFunction(torch.autograd.Function):
    """``y = conv(x, weight, bias)`` of either rank, forward and backward on convsuite."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, geometry: Geometry
    ) -> torch.Tensor:
        """Convolve on convsuite and keep ``x`` and ``weight`` for the backward."""
        conv = _api.conv1d if geometry.ndim == 1 else _api.conv2d
        b = None if bias is None else _operand(bias)
        y = conv(_operand(x), _operand(weight), b, **geometry.keywords())
        ctx.geometry = geometry
        ctx.save_for_backward(x, weight)
        return y

    @staticmethod
    @once_differentiable  # the backward runs on convsuite, outside autograd: no double backward
    def backward(ctx: Any, grad_y: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """The gradients autograd asks for, from one convsuite backward call."""
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]  # need_b is False without a bias
        conv_backward = _api.conv1d_backward if ctx.geometry.ndim == 1 else _api.conv2d_backward
        # input_grad=False leaves dX's work out where a backend can (the network's first layer);
        # convsuite has no such switch for dW, which is computed whenever anything is needed.
        grad_x, grad_w, grad_b = conv_backward(
            _operand(grad_y), _operand(x), _operand(weight), input_grad=need_x, **ctx.geometry.keywords()
        )
        return (grad_x if need_x else None), (grad_w if need_w else None), (grad_b if need_b else None), None


def check_tensors(x: Any, weight: Any, bias: Any) -> None:
    """Refuse what torch's own convolution refuses: non-tensors, non-float dtypes, mixed dtypes or devices."""
    for name, value in (("input", x), ("weight", weight), ("bias", bias)):
        if value is None and name == "bias":
            continue
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"`{name}` must be a torch.Tensor; got {type(value).__name__} "
                "(convsuite.conv1d/conv2d take NumPy and CuPy arrays)"
            )
        if value.dtype not in FLOAT_DTYPES:
            raise TypeError(
                f"`{name}` must be a floating-point tensor (float16, bfloat16, float32 or float64); got {value.dtype}"
            )
        if value.dtype != x.dtype:
            raise TypeError(
                f"`{name}` must have the dtype of `input` ({x.dtype}), as in torch.nn.functional.conv*d; "
                f"got {value.dtype} (convert the module with .to({x.dtype}) or the input with .to({value.dtype}))"
            )
        if value.device != x.device:
            raise ValueError(f"`{name}` must be on the device of `input` ({x.device}); got {value.device}")


def _autocast(tensors: tuple, device_type: str) -> tuple:
    """The operands in autocast's dtype when autocast is on, as torch casts those of its own convolutions.

    Autocast casts eligible operands (floating point, not float64) of the ops on
    its lower-precision list, the convolutions among them; a custom Function is
    not on that list, so its caller casts. The casts are recorded by autograd,
    so float32 parameters still get float32 gradients.
    """
    if not torch.is_autocast_enabled(device_type):
        return tensors
    dtype = torch.get_autocast_dtype(device_type)
    return tuple(
        t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64 else t
        for t in tensors
    )


def convolve(
    ndim: int,
    x: Any,
    weight: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: Any,
    backend: str | None,
    algorithm: str,
) -> torch.Tensor:
    """One convolution through :class:`ConvFunction`, operands checked (and cast under autocast) first."""
    if isinstance(x, torch.Tensor):
        x, weight, bias = _autocast((x, weight, bias), x.device.type)
    check_tensors(x, weight, bias)
    geometry = Geometry(ndim, stride, padding, dilation, groups, backend, algorithm)
    return ConvFunction.apply(x, weight, bias, geometry)


_DOC = """{ndim}-D convolution of torch tensors on convsuite, with autograd.

    The arguments of ``torch.nn.functional.conv{ndim}d``, plus ``backend`` and ``algorithm``.

    Parameters
    ----------
    input : torch.Tensor
        ``(B, C, {sp})`` or unbatched ``(C, {sp})``; float16, bfloat16, float32 or float64, on the CPU
        (or on a CUDA device, with CuPy installed).
    weight : torch.Tensor
        ``(M, C/groups, {ks})``, of the dtype and device of ``input``.
    bias : torch.Tensor, optional
        ``(M,)``.
    stride, dilation : int or tuple of {ndim} int, default 1
    padding : int, tuple, 'valid' or 'same', default 0
        As torch's; also anything :func:`convsuite.conv{ndim}d` takes (per-side pairs, ``'full'``,
        ``'same'`` with a stride).
    groups : int, default 1
    backend : str, optional
        A convsuite backend name or ``'auto'``; by default the usual selection
        (``use_backend``, ``set_backend``, ``$CONVSUITE_BACKEND``, auto).
    algorithm : str, default 'auto'
        Pin one of the backend's algorithms.

    Returns
    -------
    torch.Tensor
        ``(B, M, {so})``, contiguous, of the dtype and device of ``input``
        (float16 and bfloat16 computed in float32). Under ``torch.autocast``
        the operands are cast as for torch's convolutions first.

    Raises
    ------
    TypeError, ValueError
        Not a tensor, not a floating dtype, dtypes or devices that differ, or
        a bad geometry (convsuite's messages).
    convsuite.BackendUnavailableError, convsuite.UnsupportedCaseError
        A named backend that is missing or cannot run the case.

    Notes
    -----
    Backward runs on convsuite too (``convsuite.conv{ndim}d_backward``; the
    input gradient is left out when ``input`` does not need one); it is
    ``once_differentiable``: a double backward raises.
    """


def conv1d(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | tuple[int, ...] = 1,
    padding: Any = 0,
    dilation: int | tuple[int, ...] = 1,
    groups: int = 1,
    *,
    backend: str | None = None,
    algorithm: str = "auto",
) -> torch.Tensor:
    return convolve(1, input, weight, bias, stride, padding, dilation, groups, backend, algorithm)


def conv2d(
    input: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride: int | tuple[int, ...] = 1,
    padding: Any = 0,
    dilation: int | tuple[int, ...] = 1,
    groups: int = 1,
    *,
    backend: str | None = None,
    algorithm: str = "auto",
) -> torch.Tensor:
    return convolve(2, input, weight, bias, stride, padding, dilation, groups, backend, algorithm)


conv1d.__doc__ = _DOC.format(ndim=1, sp="W", ks="K", so="W_out")
conv2d.__doc__ = _DOC.format(ndim=2, sp="H, W", ks="KH, KW", so="H_out, W_out")
