"""Conv1D / Conv2D layer objects: weights with PyTorch's initialisation.

A layer holds the plans of its calls (one per input shape and direction, with
the settings in force), so a call is a small lookup in the layer's own dict:
no validation and no selection after the first call of a shape. Weights of a
layer pinned to a device backend live on that device; moving them and the
inputs goes through the backend's device protocol. A Dask input goes through
:mod:`convsuite.distributed` as in ``cs.conv2d``: Dask in, Dask out, lazy.

A layer pickles (and deep-copies) its configuration and parameters, never its
plans: they hold kernel handles, and are built again on the first call.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from . import _api, _planner, _registry, distributed
from ._registry import _check_name, get_backend
from ._validation import as_int_tuple, float_dtype, parse_padding, positive_int, weight_generator, weight_shape

__all__ = ["Conv1D", "Conv2D"]


class _ConvLayer:
    """Shared body of :class:`Conv1D` and :class:`Conv2D`."""

    _ndim: ClassVar[int]
    #: Plans a layer keeps (input shapes x directions x settings it has seen).
    MAX_PLANS: ClassVar[int] = 16

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
    ) -> None:
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
        if backend is not None:
            _check_name(backend, "`backend`")
        self.backend = backend
        self.dtype = float_dtype(dtype)
        rng = weight_generator(seed)

        # PyTorch's default: kaiming_uniform_(a=sqrt(5)) for the weight, which is
        # U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias.
        fan_in = (self.in_channels // self.groups) * math.prod(self.kernel_size)
        bound = 1.0 / math.sqrt(fan_in)
        shape = weight_shape(self.out_channels, self.in_channels, self.groups, self.kernel_size, self.dtype)
        self.weight = rng.uniform(-bound, bound, size=shape).astype(self.dtype)
        self.bias = rng.uniform(-bound, bound, size=self.out_channels).astype(self.dtype) if bias else None
        chosen = None if backend is None else get_backend(backend)
        self._device_backend = None
        if chosen is not None and chosen.device != "cpu" and chosen.available() is True:
            # A device layer keeps its weights on the device: no copy per call.
            self._device_backend = chosen
            self.weight = chosen.to_device(self.weight)
            self.bias = None if self.bias is None else chosen.to_device(self.bias)
        self._plans: dict[tuple, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        """Configuration and parameters; the plans are left out (rebuilt on the next call)."""
        state = self.__dict__.copy()
        state["_plans"] = {}
        # A backend object holds modules: the copy finds it again by the name it was asked for.
        state["_device_backend"] = None if state["_device_backend"] is None else self.backend
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore :meth:`__getstate__`'s state, finding the device backend by name."""
        self.__dict__.update(state)
        device = state["_device_backend"]
        self._device_backend = None if device is None else get_backend(device)

    def _keywords(self) -> dict[str, Any]:
        return dict(
            stride=self.stride,
            padding=self.padding,
            dilation=self.dilation,
            groups=self.groups,
            backend=self.backend,
        )

    def _on_weight_device(self, *arrays):
        """Inputs moved to where the weights live, and a function to bring results back."""
        device = self._device_backend
        if device is not None and not any(device.owns(a) for a in arrays):
            return [device.to_device(a) for a in arrays], device.to_host
        return list(arrays), None

    def _plan(self, direction: str, a, b, c):
        """The layer's plan for these operands under the current settings (built once)."""
        name, source = _registry.requested_backend(self.backend)
        try:
            key = _planner.plan_key(
                self._ndim,
                direction,
                a,
                b,
                c,
                self.stride,
                self.padding,
                self.dilation,
                self.groups,
                name,
                source,
                "auto",
            )
        except (AttributeError, TypeError):  # a list input: no key, plan every call
            key = None
        found = self._plans.get(key) if key is not None else None
        if found is None:
            found = _planner.planned(
                self._ndim,
                direction,
                a,
                b,
                c,
                self.stride,
                self.padding,
                self.dilation,
                self.groups,
                self.backend,
                "auto",
            )
            if key is not None:
                if len(self._plans) >= self.MAX_PLANS:  # settings churn: start afresh
                    self._plans.clear()
                self._plans[key] = found
        return found

    def _geometry(self) -> tuple:
        """stride, padding, dilation, groups, backend and algorithm, in the front end's argument order."""
        return (self.stride, self.padding, self.dilation, self.groups, self.backend, "auto")

    def __call__(self, x):
        """Apply the layer to ``x`` of shape ``(B, C, ...)`` (or ``(C, ...)``).

        NumPy input gives NumPy output and device input device output, wherever
        the weights live; a Dask array gives a lazy Dask array, as ``cs.conv2d``.
        """
        if distributed.is_dask_array(x):  # Dask in, Dask out: the blocks are planned where they run
            return _api._lazy_forward(self._ndim, x, self.weight, self.bias, *self._geometry())
        (x,), back = self._on_weight_device(x)
        weight, bias = self.weight, self.bias
        plan = self._plan("forward", x, weight, bias)
        kind = plan.in_type
        if type(x) is not kind or type(weight) is not kind or (bias is not None and type(bias) is not kind):
            # A list or another array-like (x, or weights the user assigned): read as conv2d reads it.
            x, weight, bias = _planner.as_plan_operands(plan, ("x", "weight", "bias"), (x, weight, bias))
        y = plan._run_forward(x, weight, bias)
        return y if back is None else back(y)

    def backward(self, grad_y, x):
        """Gradients ``(grad_x, grad_w, grad_b)`` for output gradient ``grad_y`` at input ``x``.

        ``grad_b`` is None when the layer has no bias. A Dask ``grad_y`` or
        ``x`` gives lazy Dask gradients.
        """
        if distributed.is_dask_array(x) or distributed.is_dask_array(grad_y):
            grad_x, grad_w, grad_b = _api._lazy_backward(self._ndim, grad_y, x, self.weight, *self._geometry())
            return grad_x, grad_w, (grad_b if self.bias is not None else None)
        (grad_y, x), back = self._on_weight_device(grad_y, x)
        weight = self.weight
        plan = self._plan("backward", grad_y, x, weight)
        kind = plan.in_type
        if type(grad_y) is not kind or type(x) is not kind or type(weight) is not kind:
            grad_y, x, weight = _planner.as_plan_operands(plan, ("grad_y", "x", "weight"), (grad_y, x, weight))
        grads = plan._run_backward(grad_y, x, weight)
        grad_x, grad_w, grad_b = grads if back is None else (back(g) for g in grads)
        return grad_x, grad_w, (grad_b if self.bias is not None else None)

    def __repr__(self) -> str:
        extras = "".join(
            f", {name}={value}"
            for name, value, default in (
                ("stride", self.stride, (1,) * self._ndim),
                ("padding", self.padding, ((0, 0),) * self._ndim),
                ("dilation", self.dilation, (1,) * self._ndim),
                ("groups", self.groups, 1),
            )
            if value != default
        )
        return (
            f"{type(self).__name__}({self.in_channels}, {self.out_channels}, "
            f"kernel_size={self.kernel_size}{extras}, bias={self.bias is not None}, "
            f"dtype={self.dtype.name})"
        )


class Conv1D(_ConvLayer):
    """A 1-D convolution layer holding its weights, like ``torch.nn.Conv1d``.

    Parameters
    ----------
    in_channels, out_channels : int
        ``C`` and ``M``.
    kernel_size : int or tuple of 1 int
    stride, padding, dilation, groups
        As for :func:`convsuite.conv1d`.
    bias : bool, default True
        Whether the layer learns an additive bias.
    backend : str, optional
        Backend for every call of this layer (default: the usual selection).
    dtype : {'float32', 'float64'}, default 'float32'
    seed : int or numpy.random.Generator, optional
        Seed of PyTorch's default initialisation,
        ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for weight and bias.

    Attributes
    ----------
    weight : ndarray, shape (M, C/groups, K)
    bias : ndarray of shape (M,) or None
    """

    _ndim = 1


class Conv2D(_ConvLayer):
    """A 2-D convolution layer holding its weights, like ``torch.nn.Conv2d``.

    Parameters
    ----------
    in_channels, out_channels : int
        ``C`` and ``M``.
    kernel_size : int or tuple of 2 int
    stride, padding, dilation, groups
        As for :func:`convsuite.conv2d`.
    bias : bool, default True
        Whether the layer learns an additive bias.
    backend : str, optional
        Backend for every call of this layer (default: the usual selection).
    dtype : {'float32', 'float64'}, default 'float32'
    seed : int or numpy.random.Generator, optional
        Seed of PyTorch's default initialisation,
        ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for weight and bias.

    Attributes
    ----------
    weight : ndarray, shape (M, C/groups, KH, KW)
    bias : ndarray of shape (M,) or None
    """

    _ndim = 2
