"""Convolution layers: every call goes through ``convsuite.conv1d/conv2d`` and their backward."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from .. import _api, _planner
from .._registry import _check_name, check_algorithm_exists
from .._validation import as_int_tuple, float_dtype, parse_padding, positive_int, weight_generator, weight_shape
from ._xp import array_module
from .module import Module, Parameter

__all__ = ["Conv1D", "Conv2D"]


class _Conv(Module):
    """Shared body of :class:`Conv1D` and :class:`Conv2D`."""

    _ndim: ClassVar[int]
    category = "convolution"
    #: Activations ``forward`` can apply as an epilogue (``Sequential`` fuses a following ReLU or ReLU6).
    fusable_activations: ClassVar[tuple[str, ...]] = ("relu", "relu6")

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding: Any = 0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        *,
        backend: str | None = None,
        algorithm: str = "auto",
        dtype: Any = "float32",
        seed=None,
    ) -> None:
        super().__init__()
        nd = self._ndim
        self.in_channels = positive_int(in_channels, "in_channels")
        self.out_channels = positive_int(out_channels, "out_channels")
        self.kernel_size = as_int_tuple(kernel_size, nd, "kernel_size")
        self.stride = as_int_tuple(stride, nd, "stride")
        self.dilation = as_int_tuple(dilation, nd, "dilation")
        self.padding = parse_padding(padding, nd)
        self.groups = positive_int(groups, "groups")
        if self.in_channels % self.groups or self.out_channels % self.groups:
            raise ValueError(
                f"`groups` must divide in_channels={self.in_channels} and "
                f"out_channels={self.out_channels}; got groups={self.groups}"
            )
        if not isinstance(bias, (bool, np.bool_)):
            raise TypeError(f"`bias` must be True or False; got {bias!r}")
        # Named settings checked now, as the layers of convsuite.Conv2D do (not at the first call).
        if backend is not None:
            _check_name(backend, "`backend`")
        _planner.check_algorithm_type(algorithm)
        if algorithm != "auto":  # the check imports every backend to list their algorithms
            check_algorithm_exists(algorithm)
        self.backend = backend
        self.algorithm = algorithm
        dtype = float_dtype(dtype)
        rng = weight_generator(seed)
        # PyTorch's default: kaiming_uniform_(a=sqrt(5)), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
        # and the same bound for the bias.
        fan_in = (self.in_channels // self.groups) * math.prod(self.kernel_size)
        bound = 1.0 / math.sqrt(fan_in)
        shape = weight_shape(self.out_channels, self.in_channels, self.groups, self.kernel_size, dtype)
        self.weight = Parameter(rng.uniform(-bound, bound, size=shape).astype(dtype))
        self.bias = Parameter(rng.uniform(-bound, bound, size=self.out_channels).astype(dtype)) if bias else None
        self._x = None
        self._act_mask = None  # a fused activation's gradient mask, the layer's own (see forward)
        self._activation = None

    def _keywords(self) -> dict[str, Any]:
        return dict(
            stride=self.stride,
            padding=self.padding,
            dilation=self.dilation,
            groups=self.groups,
            backend=self.backend,
            algorithm=self.algorithm,
        )

    def forward(self, x, activation: str | None = None):
        """Convolve ``x`` of shape ``(B, C, ...)`` with the layer's weights.

        ``activation="relu"`` (or ``"relu6"``) returns ``relu(conv(x))`` (or
        ``relu6``) in one call (see :func:`convsuite.conv2d`); :meth:`backward`
        then takes ``grad_y`` with respect to that output and applies the
        activation's gradient mask itself.
        """
        conv = _api.conv1d if self._ndim == 1 else _api.conv2d
        keep = self._need_cache()
        bias = None if self.bias is None else self.bias.data
        y = conv(x, self.weight.data, bias, activation=activation, **self._keywords())
        # Plain caches, not state: set without Module.__setattr__'s bookkeeping (~1 us each).
        cache = self.__dict__
        cache["_x"] = x if keep else None
        cache["_act_mask"] = _activation_mask(y, activation) if (keep and activation is not None) else None
        cache["_activation"] = activation if keep else None
        return y

    skips_input_grad = True

    def backward(self, grad_y, input_grad: bool = True):
        """Gradient with respect to the input; weight and bias gradients accumulate.

        ``input_grad=False`` returns None and leaves the input gradient's work
        out where the backend can (``convsuite.conv2d_backward(..., input_grad=False)``).
        """
        if self._x is None:
            raise RuntimeError(f"{type(self).__name__}.backward needs a forward pass with gradients enabled first")
        conv_backward = _api.conv1d_backward if self._ndim == 1 else _api.conv2d_backward
        relu_output = None
        if self._activation == "relu":  # the mask inside the backward (or one masked copy), by the library
            relu_output = self._act_mask
        elif self._activation == "relu6":
            cut = self._act_mask
            xp = array_module(cut)
            grad_y = xp.where(cut, xp.zeros((), dtype=grad_y.dtype), grad_y)
        grad_x, grad_w, grad_b = conv_backward(
            grad_y, self._x, self.weight.data, relu_output=relu_output, input_grad=input_grad, **self._keywords()
        )
        self.weight.accumulate(grad_w)
        if self.bias is not None:
            self.bias.accumulate(grad_b)
        return grad_x

    def _moved(self, device: str) -> None:
        self._x = None
        self._act_mask = None
        self._activation = None

    def extra_repr(self) -> str:
        nd = self._ndim
        extras = "".join(
            f", {name}={value}"
            for name, value, default in (
                ("stride", self.stride, (1,) * nd),
                ("padding", self.padding, ((0, 0),) * nd),
                ("dilation", self.dilation, (1,) * nd),
                ("groups", self.groups, 1),
            )
            if value != default
        )
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}{extras}, "
            f"bias={self.bias is not None}"
        )


class Conv1D(_Conv):
    """1-D convolution layer, like ``torch.nn.Conv1d``, computed by the convsuite backends.

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size : int or tuple of 1 int
    stride, padding, dilation, groups
        As for :func:`convsuite.conv1d` (padding also ``'same'``, per-side pairs).
    bias : bool, default True
    backend : str, optional
        Backend of every call (default: the usual selection).
    algorithm : str, default 'auto'
    dtype : {'float32', 'float64'}, default 'float32'
    seed : int or numpy.random.Generator, optional
        Seed of PyTorch's default initialisation.

    Attributes
    ----------
    weight : Parameter, shape (M, C/groups, K)
    bias : Parameter of shape (M,) or None
    """

    _ndim = 1


class Conv2D(_Conv):
    """2-D convolution layer, like ``torch.nn.Conv2d``, computed by the convsuite backends.

    Parameters
    ----------
    in_channels, out_channels : int
    kernel_size : int or tuple of 2 int
    stride, padding, dilation, groups
        As for :func:`convsuite.conv2d` (padding also ``'same'``, per-side pairs).
    bias : bool, default True
    backend : str, optional
        Backend of every call (default: the usual selection).
    algorithm : str, default 'auto'
    dtype : {'float32', 'float64'}, default 'float32'
    seed : int or numpy.random.Generator, optional
        Seed of PyTorch's default initialisation.

    Attributes
    ----------
    weight : Parameter, shape (M, C/groups, KH, KW)
    bias : Parameter of shape (M,) or None
    """

    _ndim = 2


def _activation_mask(y, activation: str):
    """The gradient mask of a fused activation, computed from its output ``y`` into a new array.

    The layer must not keep ``y`` itself: the caller owns it and may edit it in
    place (``y -= 1``) before the backward, which would move the mask (the
    separate ``ReLU`` layer keeps its own mask for the same reason).
    ``"relu"``: a ``relu_output`` for :func:`convsuite.conv2d_backward`, 1 where
    the gradient passes and 0 where it is cut; a ReLU's output is >= 0 or NaN,
    so that is where ``y != 0``, one pass (NaN included: torch's
    threshold_backward passes it). It has ``y``'s dtype, so backends that read
    the mask inside their kernels take it as it is (another dtype would be
    converted on every backward: the copy those kernels exist to avoid).
    ``"relu6"``: True where the gradient is cut, at or beyond a kink (the
    output at 0 or 6; torch's hardtanh_backward; a NaN passes).
    """
    xp = array_module(y)
    if activation == "relu":
        return xp.not_equal(y, 0).astype(y.dtype)
    return (y <= 0) | (y >= 6)
