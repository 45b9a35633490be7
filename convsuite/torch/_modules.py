"""Drop-in ``torch.nn.Conv1d``/``Conv2d`` subclasses whose convolution runs on convsuite.

They are torch's modules in every other respect (parameters, ``state_dict``,
initialisation, ``repr``, ``.to()``): only ``_conv_forward``, the one method
torch's convolution modules (and their subclasses) compute through, is
replaced, plus ``forward``, which calls it as torch's does.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch.nn.common_types import _size_1_t, _size_2_t
from torch.types import Device

from ._checks import checked_settings
from ._function import convolve

__all__ = ["Conv1d", "Conv2d"]

#: torch's padding modes (``torch.nn.Conv2d``'s ``padding_mode``).
PaddingMode = Literal["zeros", "reflect", "replicate", "circular"]


def pad_widths(padding: Any, kernel_size: tuple, dilation: tuple) -> list[int]:
    """The widths ``F.pad`` takes (last dimension first, before and after) for a torch module's padding.

    As torch pads for the padding modes other than 'zeros': ``'same'`` puts
    ``d*(k-1) // 2`` before and the rest after, ``'valid'`` nothing.
    """
    widths: list[int] = []
    for axis in reversed(range(len(kernel_size))):
        if padding == "valid":
            before = after = 0
        elif padding == "same":
            total = dilation[axis] * (kernel_size[axis] - 1)
            before, after = total // 2, total - total // 2
        else:
            before = after = padding[axis]
        widths += [before, after]
    return widths


class _OnConvsuite(torch.nn.Module):
    """What the convsuite modules add to torch's: the settings, and a forward that runs on convsuite.

    A mixin placed before ``torch.nn.Conv1d``/``Conv2d``, whose attributes it reads (declared here as
    torch's ``_ConvNd`` declares them, for the type checker).
    """

    backend: str | None
    algorithm: str
    # torch's, set by torch.nn.Conv1d/Conv2d.__init__
    kernel_size: tuple[int, ...]
    stride: tuple[int, ...]
    padding: str | tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    padding_mode: PaddingMode
    weight: torch.Tensor
    bias: torch.Tensor | None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Convolve ``input`` (``(B, C, *spatial)`` or unbatched) with the module's weight and bias."""
        return self._conv_forward(input, self.weight, self.bias)

    def _conv_forward(self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """Torch's padding modes, then convsuite's convolution (zero padding its own)."""
        padding: str | tuple[int, ...] | int = self.padding
        if self.padding_mode != "zeros":  # as torch: pad by the mode, then convolve without padding
            input = F.pad(input, pad_widths(padding, self.kernel_size, self.dilation), mode=self.padding_mode)
            padding = 0
        ndim = len(self.kernel_size)
        geometry = (self.stride, padding, self.dilation, self.groups, self.backend, self.algorithm)
        return convolve(ndim, input, weight, bias, *geometry)

    def extra_repr(self) -> str:
        """Torch's description, plus the convsuite settings that are not the defaults."""
        text = super().extra_repr()
        if self.backend is not None:
            text += f", backend={self.backend!r}"
        if self.algorithm != "auto":
            text += f", algorithm={self.algorithm!r}"
        return text


class Conv1d(_OnConvsuite, torch.nn.Conv1d):
    """``torch.nn.Conv1d`` whose convolution runs on convsuite.

    Parameters
    ----------
    in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode, device, dtype
        As for ``torch.nn.Conv1d`` (the same checks, initialisation and
        attributes). Padding modes other than ``'zeros'`` pad with
        ``torch.nn.functional.pad`` first, as torch does.
    backend : str, optional
        A convsuite backend name (see :func:`convsuite.list_backends`) or
        ``'auto'``; by default the usual selection (``use_backend``,
        ``set_backend``, ``$CONVSUITE_BACKEND``, auto). Keyword only.
    algorithm : str, default 'auto'
        Pin one of the backend's algorithms. Keyword only.

    Raises
    ------
    ValueError
        An unknown backend, or an algorithm the backend (any backend, when
        none is named) does not have; torch's own checks of the geometry.
    TypeError
        ``algorithm`` not a string.

    Notes
    -----
    Forward and backward run on convsuite through one ``torch.autograd.Function``
    (see :func:`convsuite.torch.conv1d`). ``backend`` and ``algorithm`` are
    attributes, not part of the ``state_dict``, which has torch's keys and
    loads into a ``torch.nn.Conv1d`` and back.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: _size_1_t,
        stride: _size_1_t = 1,
        padding: Any = 0,
        dilation: _size_1_t = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: PaddingMode = "zeros",
        device: Device = None,
        dtype: torch.dtype | None = None,
        *,
        backend: str | None = None,
        algorithm: str = "auto",
    ) -> None:
        settings = checked_settings(backend, algorithm)  # before torch allocates anything
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode, device, dtype
        )
        self.backend, self.algorithm = settings


class Conv2d(_OnConvsuite, torch.nn.Conv2d):
    """``torch.nn.Conv2d`` whose convolution runs on convsuite.

    Parameters
    ----------
    in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode, device, dtype
        As for ``torch.nn.Conv2d`` (the same checks, initialisation and
        attributes). Padding modes other than ``'zeros'`` pad with
        ``torch.nn.functional.pad`` first, as torch does.
    backend : str, optional
        A convsuite backend name (see :func:`convsuite.list_backends`) or
        ``'auto'``; by default the usual selection (``use_backend``,
        ``set_backend``, ``$CONVSUITE_BACKEND``, auto). Keyword only.
    algorithm : str, default 'auto'
        Pin one of the backend's algorithms. Keyword only.

    Raises
    ------
    ValueError
        An unknown backend, or an algorithm the backend (any backend, when
        none is named) does not have; torch's own checks of the geometry.
    TypeError
        ``algorithm`` not a string.

    Notes
    -----
    Forward and backward run on convsuite through one ``torch.autograd.Function``
    (see :func:`convsuite.torch.conv2d`). ``backend`` and ``algorithm`` are
    attributes, not part of the ``state_dict``, which has torch's keys and
    loads into a ``torch.nn.Conv2d`` and back.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: _size_2_t,
        stride: _size_2_t = 1,
        padding: Any = 0,
        dilation: _size_2_t = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: PaddingMode = "zeros",
        device: Device = None,
        dtype: torch.dtype | None = None,
        *,
        backend: str | None = None,
        algorithm: str = "auto",
    ) -> None:
        settings = checked_settings(backend, algorithm)  # before torch allocates anything
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode, device, dtype
        )
        self.backend, self.algorithm = settings
