"""Element-wise and shape layers: array expressions on the input's array module."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._xp import array_module
from .conv import _float_dtype, _rng
from .module import Module, Parameter

__all__ = ["Add", "Dropout", "Flatten", "Identity", "Linear", "ReLU", "ReLU6"]


class Identity(Module):
    """Returns its input (what a folded batch norm leaves behind)."""

    category = "reshape"

    def forward(self, x):
        return x

    def backward(self, grad_y):
        return grad_y


class ReLU(Module):
    """``max(x, 0)``, like ``torch.nn.ReLU``."""

    category = "activation"
    _upper: float | None = None
    #: What a preceding convolution applies in its epilogue when ``Sequential`` fuses the pair.
    fusable_activation: str | None = "relu"

    def __init__(self) -> None:
        super().__init__()
        self._mask = None

    def forward(self, x):
        xp = array_module(x)
        y = xp.maximum(x, 0) if self._upper is None else xp.clip(x, 0, self._upper)
        # The gradient passes where the input lies strictly inside the linear
        # piece (PyTorch's convention at the kinks: zero).
        if self._need_cache():
            self._mask = (x > 0) if self._upper is None else ((x > 0) & (x < self._upper))
        return y.astype(x.dtype, copy=False)

    def backward(self, grad_y):
        if self._mask is None:
            raise RuntimeError(f"{type(self).__name__}.backward needs a forward pass with gradients enabled first")
        return grad_y * self._mask


class ReLU6(ReLU):
    """``min(max(x, 0), 6)``, like ``torch.nn.ReLU6`` (MobileNetV2's activation)."""

    _upper = 6.0
    fusable_activation = None  # no ReLU6 epilogue: runs as its own layer


class Dropout(Module):
    """Zeroes each element with probability ``p`` in training, scaling the rest by ``1/(1-p)``.

    Parameters
    ----------
    p : float, default 0.5
        Drop probability, in [0, 1).
    seed : int or numpy.random.Generator, optional
        Source of the masks (drawn on the host, so a seed gives the same
        masks on every backend and device).
    """

    category = "element-wise"

    def __init__(self, p: float = 0.5, *, seed=None) -> None:
        super().__init__()
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 <= p < 1:
            raise ValueError(f"`p` must be a number in [0, 1); got {p!r}")
        self.p = float(p)
        self._rng = _rng(seed)
        self._mask = None

    def forward(self, x):
        if not self.training or self.p == 0:
            self._mask = None
            return x
        xp = array_module(x)
        keep = self._rng.random(x.shape) >= self.p
        mask = xp.asarray(keep.astype(x.dtype) / x.dtype.type(1 - self.p))
        self._mask = mask
        return x * mask

    def backward(self, grad_y):
        return grad_y if self._mask is None else grad_y * self._mask

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Flatten(Module):
    """``(B, d1, d2, ...) -> (B, d1*d2*...)``, like ``torch.nn.Flatten()``."""

    category = "reshape"

    def __init__(self) -> None:
        super().__init__()
        self._shape = None

    def forward(self, x):
        self._shape = x.shape
        return x.reshape(x.shape[0], -1)

    def backward(self, grad_y):
        return grad_y.reshape(self._shape)


class Linear(Module):
    """``y = x @ weight.T + bias``, like ``torch.nn.Linear`` (same initialisation).

    Parameters
    ----------
    in_features, out_features : int
    bias : bool, default True
    dtype : {'float32', 'float64'}, default 'float32'
    seed : int or numpy.random.Generator, optional

    Attributes
    ----------
    weight : Parameter, shape (out_features, in_features)
    bias : Parameter of shape (out_features,) or None
    """

    category = "fully connected"

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, dtype: Any = "float32",
                 seed=None) -> None:
        super().__init__()
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer; got {value!r}")
        self.in_features, self.out_features = int(in_features), int(out_features)
        dtype = _float_dtype(dtype)
        rng = _rng(seed)
        bound = 1.0 / math.sqrt(self.in_features)
        self.weight = Parameter(rng.uniform(-bound, bound, (self.out_features, self.in_features)).astype(dtype))
        self.bias = Parameter(rng.uniform(-bound, bound, self.out_features).astype(dtype)) if bias else None
        self._x = None

    def forward(self, x):
        if x.ndim != 2 or x.shape[1] != self.in_features:
            raise ValueError(
                f"Linear({self.in_features}, {self.out_features}) expects input of shape (B, {self.in_features}); "
                f"got {tuple(x.shape)}"
            )
        self._x = x if self._need_cache() else None
        y = x @ self.weight.data.T
        if self.bias is not None:
            y += self.bias.data
        return y

    def backward(self, grad_y):
        if self._x is None:
            raise RuntimeError("Linear.backward needs a forward pass with gradients enabled first")
        self.weight.accumulate(grad_y.T @ self._x)
        if self.bias is not None:
            self.bias.accumulate(grad_y.sum(axis=0))
        return grad_y @ self.weight.data

    def _moved(self, device: str) -> None:
        self._x = None

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Add(Module):
    """Residual addition ``a + b`` of two branches (the seed report's element-wise layer).

    ``backward(grad_y)`` returns the pair ``(grad_a, grad_b)``, both ``grad_y``.
    """

    category = "element-wise"

    def forward(self, a, b):
        if a.shape != b.shape:
            raise ValueError(f"Add needs inputs of one shape; got {tuple(a.shape)} and {tuple(b.shape)}")
        return a + b

    def backward(self, grad_y):
        return grad_y, grad_y
