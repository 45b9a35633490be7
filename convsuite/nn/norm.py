"""Batch normalisation, and folding it into the preceding convolution for inference."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from .. import _forksafe
from .._validation import float_dtype
from ._xp import array_module, real_input
from .conv import _Conv
from .layers import Identity
from .module import Module, Parameter, Sequential, _finite_real

__all__ = ["BatchNorm2D", "fold_batchnorm", "fold_batchnorms"]


#: The GPU's one-kernel form of _running_affine (a cupy.ElementwiseKernel, made on first use).
_AFFINE_KERNEL: list = []
# It holds per-device compiled modules: a forked child cannot use the parent's.
_forksafe.at_fork_in_child(_AFFINE_KERNEL.clear)


def _running_affine(x: Any, mean: Any, var: Any, weight: Any, bias: Any, eps: float) -> Any:
    """Batch norm with running statistics as one affine map per channel, PyTorch's inference form:
    ``y = x * a + (bias - mean * a)`` with ``a = weight / sqrt(var + eps)``.

    One pass over ``x`` (one kernel on the GPU) instead of the four of
    ``(x - mean) * inv_std * weight + bias``: at batch 1 on the GPU each of
    those is a CuPy call of ~10-20 us of host time, which made MobileNetV2
    with unfolded batch norms 3x slower than with them folded.
    """
    xp = array_module(x)
    shape = (1, -1, 1, 1)
    dtype = x.dtype
    eps = dtype.type(eps)
    mean, var, weight, bias = (a.astype(dtype, copy=False).reshape(shape) for a in (mean, var, weight, bias))
    if xp is np:
        scale = weight / np.sqrt(var + eps)
        y = x * scale
        y += bias - mean * scale
        return y
    if not _AFFINE_KERNEL:
        _AFFINE_KERNEL.append(
            xp.ElementwiseKernel(
                "T x, T mean, T var, T weight, T bias, T eps",
                "T y",
                "const T a = weight / sqrt(var + eps); y = x * a + (bias - mean * a)",
                "convsuite_batchnorm_inference",
            )
        )
    return _AFFINE_KERNEL[0](x, mean, var, weight, bias, eps)


class BatchNorm2D(Module):
    """Per-channel normalisation of ``(B, C, H, W)``, like ``torch.nn.BatchNorm2d``.

    In training mode it normalises with the batch's mean and (biased)
    variance and updates the running estimates (unbiased variance, as
    PyTorch); in evaluation mode it uses the running estimates.

    Floating-point input is computed in its own dtype; integer input in
    float64 (as ``convsuite.conv2d`` reads it: the mean of integers is not an
    integer); bool, complex and object input is refused with a ``TypeError``.
    The running estimates keep the layer's ``dtype`` whatever the input's, so
    ``state_dict`` does not change dtype with the batches seen.

    Parameters
    ----------
    num_features : int
        ``C``.
    eps : float, default 1e-5
        Added to the variance; positive and finite.
    momentum : float, default 0.1
        Weight of the new batch in the running estimates, in [0, 1].
    dtype : {'float32', 'float64'}, default 'float32'
        Of the parameters and the running estimates.

    Attributes
    ----------
    weight, bias : Parameter, shape (C,)
        Scale (ones) and shift (zeros) at initialisation.
    running_mean, running_var : ndarray, shape (C,)
        Buffers (zeros and ones at initialisation), saved by ``state_dict``.
    """

    category = "batch norm"
    # Buffers, set through register_buffer.
    running_mean: Any
    running_var: Any

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, *, dtype: Any = "float32") -> None:
        super().__init__()
        if not isinstance(num_features, (int, np.integer)) or isinstance(num_features, bool) or num_features < 1:
            raise ValueError(f"`num_features` must be a positive integer; got {num_features!r}")
        momentum = _finite_real(momentum, "momentum", "in [0, 1]", lambda v: 0 <= v <= 1)
        eps = _finite_real(eps, "eps", "positive and finite", lambda v: v > 0)
        dtype = float_dtype(dtype)
        self.num_features, self.eps, self.momentum = int(num_features), eps, momentum
        self.weight = Parameter(np.ones(self.num_features, dtype))
        self.bias = Parameter(np.zeros(self.num_features, dtype))
        self.register_buffer("running_mean", np.zeros(self.num_features, dtype))
        self.register_buffer("running_var", np.ones(self.num_features, dtype))
        self._cache: tuple[Any, Any, bool] | None = None

    def _check(self, x: Any) -> Any:
        """``x`` checked, and as float64 when it holds integers (see the class doc)."""
        x = real_input(x, "BatchNorm2D input `x`")
        if x.ndim != 4 or x.shape[1] != self.num_features:
            raise ValueError(
                f"BatchNorm2D({self.num_features}) expects input (B, {self.num_features}, H, W); "
                f"got shape {tuple(x.shape)}"
            )
        return x

    def forward(self, x: Any) -> Any:
        """Normalise per channel with batch statistics (training, updating the running ones) or running ones."""
        x = self._check(x)
        xp = array_module(x)
        axes = (0, 2, 3)
        if self.training:
            count = x.shape[0] * x.shape[2] * x.shape[3]
            if count < 2:
                raise ValueError(
                    f"BatchNorm2D in training mode needs more than one value per channel; got shape {tuple(x.shape)}"
                )
            mean = x.mean(axis=axes, dtype=x.dtype)
            var = x.var(axis=axes, dtype=x.dtype)
            m = self.momentum
            # Cast to the estimates' own dtype, not the batch's: a float64 batch must not turn a
            # float32 layer's state float64, nor a float16 one make it float16.
            keep = self.running_mean.dtype
            self.running_mean = ((1 - m) * self.running_mean + m * mean).astype(keep)
            self.running_var = ((1 - m) * self.running_var + m * var * (count / (count - 1))).astype(keep)
        elif not self._need_cache():  # inference: one affine pass, nothing kept
            self._cache = None
            return _running_affine(x, self.running_mean, self.running_var, self.weight.data, self.bias.data, self.eps)
        else:
            mean, var = self.running_mean, self.running_var
        inv_std = (1 / xp.sqrt(var + x.dtype.type(self.eps))).astype(x.dtype)
        shape = (1, -1, 1, 1)
        xhat = (x - mean.reshape(shape)) * inv_std.reshape(shape)
        self._cache = (xhat, inv_std, self.training) if self._need_cache() else None
        return xhat * self.weight.data.reshape(shape) + self.bias.data.reshape(shape)

    def backward(self, grad_y: Any) -> Any:
        """Gradient with respect to the input; accumulates the weight and bias gradients."""
        if self._cache is None:
            raise RuntimeError("BatchNorm2D.backward needs a forward pass with gradients enabled first")
        xhat, inv_std, batch_stats = self._cache
        axes, shape = (0, 2, 3), (1, -1, 1, 1)
        self.weight.accumulate((grad_y * xhat).sum(axis=axes))
        self.bias.accumulate(grad_y.sum(axis=axes))
        grad_xhat = grad_y * self.weight.data.reshape(shape)
        if not batch_stats:  # running statistics are constants
            return grad_xhat * inv_std.reshape(shape)
        # The mean and variance depend on every input of the channel:
        # dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)), means over (B, H, W).
        mean_g = grad_xhat.mean(axis=axes, keepdims=True)
        mean_gx = (grad_xhat * xhat).mean(axis=axes, keepdims=True)
        return (grad_xhat - mean_g - xhat * mean_gx) * inv_std.reshape(shape)

    def _moved(self, device: str) -> None:
        self._cache = None

    def extra_repr(self) -> str:
        """Feature count, eps and momentum, for ``repr``."""
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


def fold_batchnorm(conv: _Conv, bn: BatchNorm2D) -> _Conv:
    """A convolution equal to ``bn(conv(x))`` in evaluation mode.

    ``w' = w * gamma / sqrt(var + eps)`` per output channel and
    ``b' = (b - mean) * gamma / sqrt(var + eps) + beta``: one layer instead
    of two, the same result up to rounding.

    Parameters
    ----------
    conv : Conv1D or Conv2D
    bn : BatchNorm2D
        Normalises ``conv``'s output channels.

    Returns
    -------
    Conv1D or Conv2D
        A new layer with a bias; ``conv`` and ``bn`` are unchanged.
    """
    if not isinstance(conv, _Conv) or not isinstance(bn, BatchNorm2D):
        raise TypeError(
            f"fold_batchnorm takes a Conv1D/Conv2D and a BatchNorm2D; got {type(conv).__name__}, {type(bn).__name__}"
        )
    if bn.num_features != conv.out_channels:
        raise ValueError(
            f"BatchNorm2D({bn.num_features}) cannot follow a convolution with {conv.out_channels} output channels"
        )
    xp = array_module(conv.weight.data)
    w = conv.weight.data
    scale = bn.weight.data / xp.sqrt(bn.running_var + w.dtype.type(bn.eps))
    bias = -bn.running_mean if conv.bias is None else conv.bias.data - bn.running_mean
    folded = copy.copy(conv)
    object.__setattr__(folded, "_parameters", type(conv._parameters)())
    folded._x = None
    folded.weight = Parameter((w * scale.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype))
    folded.bias = Parameter((bias * scale + bn.bias.data).astype(w.dtype))
    return folded


def fold_batchnorms(network: Module) -> Module:
    """A copy of ``network`` in evaluation mode with every conv -> batch norm pair folded.

    In every :class:`Sequential`, a convolution directly followed by a
    :class:`BatchNorm2D` becomes the folded convolution followed by an
    :class:`Identity` (so child names, and the remaining keys, stay put).
    The original network is unchanged.
    """
    folded = copy.deepcopy(network).eval()
    for _, module in folded.named_modules():
        if not isinstance(module, Sequential):
            continue
        names = list(module._modules)
        for first, second in zip(names, names[1:]):
            conv, bn = module._modules[first], module._modules[second]
            if isinstance(conv, _Conv) and isinstance(bn, BatchNorm2D):
                setattr(module, first, fold_batchnorm(conv, bn))
                setattr(module, second, Identity())
    return folded
