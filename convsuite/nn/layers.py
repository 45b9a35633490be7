"""Element-wise and shape layers: array expressions on the input's array module.

Every ``backward`` needs a forward call first (a ``RuntimeError`` otherwise)
and a ``grad_y`` of exactly the forward output's shape (a ``ValueError``
otherwise): these layers' array expressions would broadcast a wrong one
into a wrong gradient without a word.
"""

from __future__ import annotations

import math
import numbers
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from .. import _forksafe
from .._blas_spin import numpy_blas_spins_long
from .._capture import capturing
from .._validation import _show, check_input_grad, float_dtype, weight_generator
from ._xp import array_module
from .module import Module, Parameter

__all__ = ["Add", "Dropout", "Flatten", "Identity", "Linear", "ReLU", "ReLU6"]


def _check_grad_y(layer: str, grad_y: Any, expected: tuple[int, ...]) -> None:
    """Refuse a ``grad_y`` whose shape is not ``expected`` (the last forward output's).

    Element-wise expressions would broadcast it, a reshape would refold it:
    either way a wrong gradient, silently.
    """
    shape = getattr(grad_y, "shape", None)
    if shape is None or tuple(shape) != tuple(expected):
        got = _show(grad_y) if shape is None else tuple(shape)
        raise ValueError(f"{layer}.backward expects `grad_y` of shape {tuple(expected)} (the last output's); got {got}")


def _no_forward(layer: str) -> RuntimeError:
    """The error of a backward call with no forward call before it."""
    return RuntimeError(f"{layer}.backward needs a forward pass first")


class Identity(Module):
    """Returns its input (what a folded batch norm leaves behind)."""

    category = "reshape"

    def __init__(self) -> None:
        super().__init__()
        self._shape: tuple[int, ...] | None = None

    @property
    def fusion_transparent(self) -> bool:
        """``Sequential`` fuses a convolution with an activation across this layer (not across a
        subclass that overrides what it computes).
        """
        cls = type(self)
        return cls.forward is Identity.forward and cls.backward is Identity.backward

    def forward(self, x: Any) -> Any:
        """Return ``x`` unchanged."""
        self._shape = x.shape  # for backward's check
        return x

    def backward(self, grad_y: Any) -> Any:
        """Return ``grad_y`` unchanged (once checked to have the last output's shape)."""
        if self._shape is None:
            raise _no_forward(type(self).__name__)
        _check_grad_y(type(self).__name__, grad_y, self._shape)
        return grad_y


class ReLU(Module):
    """``max(x, 0)``, like ``torch.nn.ReLU``."""

    category = "activation"
    _upper: float | None = None
    #: What a preceding convolution applies in its epilogue when ``Sequential`` fuses the pair.
    fusable_activation: str | None = "relu"

    def __init__(self) -> None:
        super().__init__()
        self._mask: Any = None

    def forward(self, x: Any) -> Any:
        """Clamp ``x`` below at 0 (and above at the upper bound, if any); keep the gradient mask if needed."""
        xp = array_module(x)
        y = xp.maximum(x, 0) if self._upper is None else xp.clip(x, 0, self._upper)
        # The gradient is cut where the input lies at or beyond a kink (PyTorch's
        # convention at the kinks: zero); a NaN input passes it, as in torch's
        # threshold_backward and hardtanh_backward, and as the fused epilogues do.
        if self._need_cache():
            self._mask = (x <= 0) if self._upper is None else ((x <= 0) | (x >= self._upper))
        return y.astype(x.dtype, copy=False)

    def backward(self, grad_y: Any) -> Any:
        """``grad_y`` where the input lay inside the linear piece (or was NaN), zero elsewhere."""
        if self._mask is None:
            raise RuntimeError(f"{type(self).__name__}.backward needs a forward pass with gradients enabled first")
        _check_grad_y(type(self).__name__, grad_y, self._mask.shape)
        xp = array_module(grad_y)
        return xp.where(self._mask, xp.zeros((), dtype=grad_y.dtype), grad_y)  # an inf gradient stays inf


class ReLU6(ReLU):
    """``min(max(x, 0), 6)``, like ``torch.nn.ReLU6`` (MobileNetV2's activation)."""

    _upper = 6.0
    fusable_activation = "relu6"


class Dropout(Module):
    """Zeroes each element with probability ``p`` in training, scaling the rest by ``1/(1-p)``.

    Parameters
    ----------
    p : float, default 0.5
        Drop probability, in [0, 1): a Python or NumPy real number (not a bool).
    seed : int or numpy.random.Generator, optional
        Source of the masks (drawn on the host, so a seed gives the same
        masks on every backend and device).
    """

    category = "element-wise"

    def __init__(self, p: float = 0.5, *, seed: int | np.random.Generator | None = None) -> None:
        super().__init__()
        # numbers.Real takes NumPy scalars (np.float32(0.5)) as the rest of the project does; float is
        # one too, named for the type checker, which does not count float as a numbers.Real.
        if not isinstance(p, (float, numbers.Real)) or isinstance(p, (bool, np.bool_)) or not 0 <= p < 1:
            raise ValueError(f"`p` must be a number in [0, 1); got {_show(p)}")
        self.p = float(p)
        self._rng = weight_generator(seed)
        self._mask: Any = None
        self._shape: tuple[int, ...] | None = None

    def forward(self, x: Any) -> Any:
        """Apply a fresh dropout mask in training mode; return ``x`` unchanged otherwise."""
        self._shape = x.shape  # for backward's check
        if not self.training or self.p == 0:
            self._mask = None
            return x
        xp = array_module(x)
        keep = self._rng.random(x.shape) >= self.p
        mask = xp.asarray(keep.astype(x.dtype) / x.dtype.type(1 - self.p))
        self._mask = mask
        return x * mask

    def backward(self, grad_y: Any) -> Any:
        """``grad_y`` times the last forward's mask (unchanged if none was applied)."""
        if self._shape is None:
            raise _no_forward("Dropout")
        _check_grad_y("Dropout", grad_y, self._shape)
        return grad_y if self._mask is None else grad_y * self._mask

    def extra_repr(self) -> str:
        """Drop probability, for ``repr``."""
        return f"p={self.p}"


class Flatten(Module):
    """``(B, d1, d2, ...) -> (B, d1*d2*...)``, like ``torch.nn.Flatten()`` (an empty batch too)."""

    category = "reshape"

    def __init__(self) -> None:
        super().__init__()
        self._shape: tuple[int, ...] | None = None

    def forward(self, x: Any) -> Any:
        """Reshape ``(B, ...)`` to ``(B, -1)``, remembering the input shape."""
        self._shape = x.shape
        # The explicit product, not -1: NumPy cannot infer -1 for an empty batch (0, C, H, W).
        return x.reshape(x.shape[0], math.prod(x.shape[1:]))

    def backward(self, grad_y: Any) -> Any:
        """``grad_y`` reshaped back to the last forward's input shape."""
        if self._shape is None:
            raise _no_forward("Flatten")
        _check_grad_y("Flatten", grad_y, (self._shape[0], math.prod(self._shape[1:])))
        return grad_y.reshape(self._shape)


_LINEAR_SOURCE = r"""
template <typename T>
__global__ void linear_rows(const T* x, const T* w, const T* b, T* y, int rows, int n_in, int n_out, int has_bias) {
    // One thread per output y[r, o] = b[o] + sum_i x[r, i] * w[o, i]; used only under
    // CUDA-graph capture, where cuBLAS may not be called (batch-1 classifiers).
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (long long)rows * n_out) return;
    int r = (int)(t / n_out), o = (int)(t % n_out);
    const T* xr = x + (long long)r * n_in;
    const T* wr = w + (long long)o * n_in;
    T acc = has_bias ? b[o] : T(0);
    for (int i = 0; i < n_in; ++i) acc += xr[i] * wr[i];
    y[t] = acc;
}
"""
_linear_modules: dict = {}
# CUDA module handles: a forked child cannot use the parent's.
_forksafe.at_fork_in_child(_linear_modules.clear)


def _linear_without_blas(x: Any, w: Any, b: Any) -> Any:
    """``x @ w.T + b`` on the GPU with one thread per output (no cuBLAS)."""
    import cupy

    dtype = x.dtype
    key = (cupy.cuda.Device().id, dtype.name)
    module = _linear_modules.get(key)
    if module is None:
        name = "linear_rows<float>" if dtype == np.float32 else "linear_rows<double>"
        module = cupy.RawModule(code=_LINEAR_SOURCE, options=("-std=c++17",), name_expressions=[name])
        _linear_modules[key] = module = (module, name)
    raw, name = module
    x = cupy.ascontiguousarray(x, dtype=dtype)
    w = cupy.ascontiguousarray(w, dtype=dtype)
    rows, n_in, n_out = x.shape[0], x.shape[1], w.shape[0]
    y = cupy.empty((rows, n_out), dtype=dtype)
    bias = y if b is None else cupy.ascontiguousarray(b, dtype=dtype)  # any pointer when there is none
    total = rows * n_out
    kernel = raw.get_function(name)
    kernel(
        ((total + 255) // 256,),
        (256,),
        (x, w, bias, y, np.int32(rows), np.int32(n_in), np.int32(n_out), np.int32(b is not None)),
    )
    return y


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

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        dtype: Any = "float32",
        seed: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer; got {value!r}")
        self.in_features, self.out_features = int(in_features), int(out_features)
        dtype = float_dtype(dtype)
        rng = weight_generator(seed)
        bound = 1.0 / math.sqrt(self.in_features)
        self.weight = Parameter(rng.uniform(-bound, bound, (self.out_features, self.in_features)).astype(dtype))
        self.bias = Parameter(rng.uniform(-bound, bound, self.out_features).astype(dtype)) if bias else None
        self._x: Any = None

    def forward(self, x: Any) -> Any:
        """``x @ weight.T + bias`` for ``x`` of shape ``(B, in_features)``."""
        if x.ndim != 2 or x.shape[1] != self.in_features:
            raise ValueError(
                f"Linear({self.in_features}, {self.out_features}) expects input of shape (B, {self.in_features}); "
                f"got {tuple(x.shape)}"
            )
        self._x = x if self._need_cache() else None
        if capturing():  # CuPy refuses cuBLAS during CUDA-graph capture: a kernel of our own
            return _linear_without_blas(x, self.weight.data, None if self.bias is None else self.bias.data)
        with _products(x):
            y = x @ self.weight.data.T
        if self.bias is not None:
            y += self.bias.data
        return y

    skips_input_grad = True

    def backward(self, grad_y: Any, input_grad: bool = True) -> Any:
        """Gradient with respect to the input; accumulates the weight and bias gradients.

        ``input_grad=False``: the weight and bias gradients only; returns None.
        """
        if self._x is None:
            raise RuntimeError("Linear.backward needs a forward pass with gradients enabled first")
        _check_grad_y("Linear", grad_y, (self._x.shape[0], self.out_features))
        input_grad = check_input_grad(input_grad)
        with _products(grad_y):
            self.weight.accumulate(grad_y.T @ self._x)
            grad_x = grad_y @ self.weight.data if input_grad else None
        if self.bias is not None:
            self.bias.accumulate(grad_y.sum(axis=0))
        return grad_x

    def _moved(self, device: str) -> None:
        self._x = None

    def extra_repr(self) -> str:
        """Feature counts and whether there is a bias, for ``repr``."""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def _products(array: Any) -> AbstractContextManager[Any]:
    """Where a layer's NumPy products run: on one BLAS thread while NumPy's OpenBLAS spins long.

    A product on two or more OpenBLAS threads leaves the idle ones spinning for
    ~0.1 s (when NumPy was imported before convsuite, see ``_blas_spin``); the
    numba backend's convolutions that follow then share the cores with them
    and ran up to 8x slower (2-core VM, LeNet-5 training step, 2026-11-24).
    One thread wakes no worker. CuPy arrays, and a shortened spin, keep the
    library's own threading.
    """
    if type(array) is np.ndarray and numpy_blas_spins_long():
        from ..backends._blas_threads import one_blas_thread

        return one_blas_thread()
    return nullcontext()


class Add(Module):
    """Residual addition ``a + b`` of two branches (the seed report's element-wise layer).

    ``backward(grad_y)`` returns the pair ``(grad_a, grad_b)``, both ``grad_y``.
    """

    category = "element-wise"

    def __init__(self) -> None:
        super().__init__()
        self._shape: tuple[int, ...] | None = None

    def forward(self, a: Any, b: Any) -> Any:
        """``a + b`` for inputs of one shape."""
        if a.shape != b.shape:
            raise ValueError(f"Add needs inputs of one shape; got {tuple(a.shape)} and {tuple(b.shape)}")
        self._shape = a.shape  # for backward's check
        return a + b

    def backward(self, grad_y: Any) -> tuple[Any, Any]:
        """The pair ``(grad_a, grad_b)``, both ``grad_y``."""
        if self._shape is None:
            raise _no_forward("Add")
        _check_grad_y("Add", grad_y, self._shape)
        return grad_y, grad_y
