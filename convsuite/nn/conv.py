"""Convolution layers: every call goes through ``convsuite.conv1d/conv2d`` and their backward.

These are the package's one layer family: ``convsuite.Conv2D`` *is*
``convsuite.nn.Conv2D``. A layer is a :class:`~convsuite.nn.Module` (its
weights are :class:`~convsuite.nn.Parameter` objects, which read as arrays),
and it also keeps the plain-array conveniences of a stand-alone layer: built
with a device backend (``backend="cupy"``) it keeps its weights on that
device and takes NumPy inputs too (NumPy in, NumPy out); ``backward(grad_y,
x)`` returns the three gradients for that input without touching the
accumulated ones; a Dask input gives a lazy Dask output. Plans live in the
package's plan cache, keyed on the arrays each call computes with.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, ClassVar

import numpy as np

from .. import _api, _planner, distributed
from .._arrays import is_cupy_array
from .._interop import result_converter
from .._registry import _check_name, check_algorithm_exists, get_backend
from .._validation import (
    as_int_tuple,
    channels_last_hint,
    float_dtype,
    parse_padding,
    positive_int,
    weight_generator,
    weight_shape,
)
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
        kernel_size: int | tuple[int, ...],
        stride: int | tuple[int, ...] = 1,
        padding: Any = 0,
        dilation: int | tuple[int, ...] = 1,
        groups: int = 1,
        bias: bool = True,
        backend: str | None = None,
        dtype: Any = "float32",
        seed: int | np.random.Generator | None = None,
        *,
        algorithm: str = "auto",
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
        chosen = None if backend is None else get_backend(backend)
        device = None
        if chosen is not None and chosen.device != "cpu" and chosen.available() is True:
            # A layer pinned to a device backend keeps its weights there: no copy per call.
            device = chosen
            for param in self.parameters():
                param.data = chosen.to_device(param.data)
        object.__setattr__(self, "_device_backend", device)  # a setting, not module state
        self._x: Any = None  # the input, kept for backward
        self._x_kind: Any = None  # how grad_x goes back to the forward input's kind (a torch tensor's)
        self._act_mask: Any = None  # a fused activation's gradient mask, the layer's own (see forward)
        self._activation: str | None = None

    def _keywords(self) -> dict[str, Any]:
        return dict(
            stride=self.stride,
            padding=self.padding,
            dilation=self.dilation,
            groups=self.groups,
            backend=self.backend,
            algorithm=self.algorithm,
        )

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the weights (float32 or float64)."""
        return self.weight.data.dtype

    def _on_weight_device(self, *arrays: Any) -> tuple[tuple[Any, ...], Callable[[Any], Any] | None]:
        """Inputs moved to the device the weights live on, and a function to bring results back (or None).

        Only a layer built with a device backend moves anything: its NumPy
        inputs go to the device and its results come back (NumPy in, NumPy
        out). Dask inputs stay lazy; their blocks are moved where they run.
        """
        device = self.__dict__.get("_device_backend")
        if device is None or any(distributed.is_dask_array(a) or device.owns(a) for a in arrays):
            return arrays, None
        return tuple(device.to_device(_planner.read_operand(a, "x")) for a in arrays), device.to_host

    def __getstate__(self) -> dict[str, Any]:
        """Configuration and parameters; the device backend by name, the cached input left out."""
        state = self.__dict__.copy()
        device = state.get("_device_backend")
        state["_device_backend"] = None if device is None else self.backend
        state.update(_x=None, _x_kind=None, _act_mask=None, _activation=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore :meth:`__getstate__`'s state, finding the device backend by its name."""
        self.__dict__.update(state)
        device = state.get("_device_backend")
        self.__dict__["_device_backend"] = None if device is None else get_backend(device)

    def forward(self, x: Any, activation: str | None = None) -> Any:
        """Convolve ``x`` of shape ``(B, C, ...)`` with the layer's weights.

        ``activation="relu"`` (or ``"relu6"``) returns ``relu(conv(x))`` (or
        ``relu6``) in one call (see :func:`convsuite.conv2d`); :meth:`backward`
        then takes ``grad_y`` with respect to that output and applies the
        activation's gradient mask itself.
        """
        conv = _api.conv1d if self._ndim == 1 else _api.conv2d
        keep = self._need_cache()
        x, kind = self._read_input(x)
        (x,), back = self._on_weight_device(x)
        bias = None if self.bias is None else self.bias.data
        y = conv(x, self.weight.data, bias, activation=activation, **self._keywords())
        # Plain caches, not state: set without Module.__setattr__'s bookkeeping (~1 us each).
        cache = self.__dict__
        cache["_x"] = x if keep else None
        cache["_x_kind"] = kind if keep else None
        cache["_act_mask"] = _activation_mask(y, activation) if (keep and activation is not None) else None
        cache["_activation"] = activation if keep else None
        y = y if back is None else back(y)
        return y if kind is None else kind(y)

    def _read_input(self, x: Any) -> tuple[Any, Callable[[Any], Any] | None]:
        """``x`` as the array computed with (read once) and checked against ``in_channels``; and how a result goes
        back to ``x``'s kind (None: it needs nothing).

        The channel axis is read from the array itself (an array-like's own ``.shape`` may not be its data's),
        so a wrong input is named against the layer's ``in_channels`` rather than the weight it never saw.
        """
        kind = None
        if type(x) is not np.ndarray and not is_cupy_array(x) and not distributed.is_dask_array(x):
            kind = result_converter(x)
            x = _planner.read_operand(x, "x")
        nd = self._ndim
        if x.ndim in (nd + 1, nd + 2):  # other ranks: the convolution's own message lists the layouts
            channels = x.shape[x.ndim - nd - 1]
            # A Dask array's unknown chunk sizes read as NaN: nothing to check before it is computed.
            if channels != self.in_channels and isinstance(channels, numbers.Integral):
                sp = ", ".join(("H", "W")[2 - nd :])
                c = self.in_channels
                raise ValueError(
                    f"{type(self).__name__}({c}, {self.out_channels}, kernel_size={self.kernel_size}) expects x of "
                    f"shape (B, {c}, {sp}) or ({c}, {sp}), with in_channels={c} channels; got x of shape "
                    f"{tuple(x.shape)}, with {channels} channels on axis {x.ndim - nd - 1}"
                    + channels_last_hint(tuple(x.shape), nd, c)
                )
        return x, kind

    skips_input_grad = True

    def backward(self, grad_y: Any, x: Any = None, *, input_grad: bool = True) -> Any:
        """Gradient with respect to the input; weight and bias gradients accumulate.

        ``input_grad=False`` returns None and leaves the input gradient's work
        out where the backend can (``convsuite.conv2d_backward(..., input_grad=False)``).

        With ``x`` given (the stand-alone form), returns ``(grad_x, grad_w,
        grad_b)`` of this layer at input ``x`` (``grad_b`` None without a
        bias) and accumulates nothing; no forward pass is needed first.
        """
        if x is not None:
            return self._gradients_at(grad_y, x, input_grad)
        if self._x is None:
            raise RuntimeError(f"{type(self).__name__}.backward needs a forward pass with gradients enabled first")
        kind = self.__dict__.get("_x_kind")
        conv_backward = _api.conv1d_backward if self._ndim == 1 else _api.conv2d_backward
        relu_output = None
        if self._activation == "relu":  # the mask inside the backward (or one masked copy), by the library
            relu_output = self._act_mask
        elif self._activation == "relu6":
            cut = self._act_mask
            xp = array_module(cut)
            grad_y = xp.where(cut, xp.zeros((), dtype=grad_y.dtype), grad_y)
        (grad_y,), back = self._on_weight_device(grad_y)
        grad_x, grad_w, grad_b = conv_backward(
            grad_y, self._x, self.weight.data, relu_output=relu_output, input_grad=input_grad, **self._keywords()
        )
        self.weight.accumulate(grad_w)
        if self.bias is not None:
            self.bias.accumulate(grad_b)
        if grad_x is None:
            return None
        grad_x = grad_x if back is None else back(grad_x)
        return grad_x if kind is None else kind(grad_x)  # in the kind of the forward's input

    def _gradients_at(self, grad_y: Any, x: Any, input_grad: bool) -> tuple[Any, Any, Any]:
        """``(grad_x, grad_w, grad_b)`` at input ``x``, nothing accumulated (``grad_b`` None without a bias)."""
        conv_backward = _api.conv1d_backward if self._ndim == 1 else _api.conv2d_backward
        x, kind = self._read_input(x)
        (grad_y, x), back = self._on_weight_device(grad_y, x)
        grads: tuple[Any, ...] = conv_backward(grad_y, x, self.weight.data, input_grad=input_grad, **self._keywords())
        grads = grads if back is None else tuple(None if g is None else back(g) for g in grads)
        grad_x, grad_w, grad_b = grads if kind is None else (None if g is None else kind(g) for g in grads)
        return grad_x, grad_w, (grad_b if self.bias is not None else None)

    def _moved(self, device: str) -> None:
        self.__dict__["_device_backend"] = None  # moved by hand: the arrays' device rules from now on
        self._x = None
        self._x_kind = None
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
        Whether the layer learns an additive bias.
    backend : str, optional
        Backend of every call (default: the usual selection). A device
        backend (``"cupy"``) that is available keeps the weights on its device.
    dtype : {'float32', 'float64'}, default 'float32'
    seed : int or numpy.random.Generator, optional
        Seed of PyTorch's default initialisation,
        ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for weight and bias.
    algorithm : str, default 'auto'
        Pin one of the backend's algorithms (keyword only).

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
        Whether the layer learns an additive bias.
    backend : str, optional
        Backend of every call (default: the usual selection). A device
        backend (``"cupy"``) that is available keeps the weights on its device.
    dtype : {'float32', 'float64'}, default 'float32'
    seed : int or numpy.random.Generator, optional
        Seed of PyTorch's default initialisation,
        ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for weight and bias.
    algorithm : str, default 'auto'
        Pin one of the backend's algorithms (keyword only).

    Attributes
    ----------
    weight : Parameter, shape (M, C/groups, KH, KW)
    bias : Parameter of shape (M,) or None
    """

    _ndim = 2


def _activation_mask(y: Any, activation: str) -> Any:
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
