"""``Module``, ``Parameter`` and ``Sequential``: PyTorch's conventions, explicit backward.

There is no autograd engine. A layer's ``forward`` keeps what its
``backward`` needs (inputs, masks, statistics) while gradients are enabled;
``backward(grad_y)`` returns the gradient with respect to the layer's input
and *adds* the gradients of its parameters into ``Parameter.grad``, as
``loss.backward()`` does in PyTorch (``SGD.zero_grad`` clears them).

``network.backward(grad, input_grad=False)`` is the training step's form: the
input (the data) needs no gradient, so the first layer leaves its input
gradient out (as torch does for an input that does not require grad) and
``None`` is returned. Layers that can save that work say so with
``skips_input_grad`` and take ``backward(grad_y, input_grad=False)``; for
the others :meth:`Module.run_backward` computes it and drops it.
"""

from __future__ import annotations

import math
import numbers
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
import numpy.typing as npt

from .._arrays import is_cupy_array
from .._validation import _show, as_real_array, check_input_grad
from . import _timing
from ._xp import array_module, to_numpy

__all__ = ["Module", "Parameter", "Sequential", "grad_enabled", "no_grad", "state_generation"]

# Bumped whenever a module attribute (parameter, buffer, child module) or a
# parameter's array is replaced. A CUDA graph reads arrays by address:
# CapturedNetwork re-reads every address only when this number moved, so a
# replay costs no walk over the network's state (measured on an H100: 522 us
# of host time per MobileNetV2 call before, most of it that walk).
_generation = [0]


def _finite_real(value: Any, name: str, accepted: str, ok: Callable[[float], bool]) -> float:
    """``value`` as a float that is finite and passes ``ok``, or an error naming ``name``.

    Bools, strings and other non-numbers are a ``TypeError`` (``True`` is not
    a learning rate, and ``"0.1" > 0`` would fail with a message naming
    nothing); NaN, infinities and values that fail ``ok`` are a
    ``ValueError``. ``accepted`` completes "`name` must be ...".
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be {accepted} (a real number); got {_show(value)}")
    number = float(value)
    # NaN fails every comparison, so without isfinite a NaN setting could pass a range check.
    if not math.isfinite(number) or not ok(number):
        raise ValueError(f"`{name}` must be {accepted}; got {_show(value)}")
    return number


def state_generation() -> int:
    """A number that changes whenever any module's parameters, buffers or children are replaced."""
    return _generation[0]


_GRAD_ENABLED: ContextVar[bool] = ContextVar("convsuite_nn_grad_enabled", default=True)


@contextmanager
def no_grad() -> Iterator[None]:
    """Inside the block, layers keep nothing for a backward pass (saves memory)."""
    token = _GRAD_ENABLED.set(False)
    try:
        yield
    finally:
        _GRAD_ENABLED.reset(token)


def grad_enabled() -> bool:
    """Whether layers should keep what their backward needs."""
    return _GRAD_ENABLED.get()


class Parameter:
    """A learnable array and its accumulated gradient.

    A parameter reads as its array: ``np.asarray(p)``, ``p.shape``,
    ``p.dtype``, ``p[...] = 0``, ``p.get()`` (CuPy) and the array's other
    public attributes go to :attr:`data`, as a torch ``Parameter`` is a tensor.

    Attributes
    ----------
    data : ndarray
        The value (NumPy or CuPy), updated in place by optimisers.
    grad : ndarray or None
        Sum of the gradients since the last ``zero_grad``; None before any.
    """

    __slots__ = ("_data", "grad")

    def __init__(self, data: Any) -> None:
        self.data = data
        self.grad: Any = None

    @property
    def data(self) -> Any:
        """The value (NumPy or CuPy)."""
        return self._data

    @data.setter
    def data(self, value: Any) -> None:
        self._data = value
        _generation[0] += 1

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of :attr:`data`."""
        return tuple(self.data.shape)

    @property
    def dtype(self) -> np.dtype:
        """The dtype of :attr:`data`."""
        return self._data.dtype

    def accumulate(self, grad: Any) -> None:
        """Add ``grad`` into :attr:`grad`."""
        if self.grad is None:
            self.grad = grad.copy()
        else:
            self.grad += grad

    # --- reading as the array it holds -------------------------------------

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        # NumPy data as it is (no copy unless asked); CuPy data refuses an implicit copy to the host, as CuPy does.
        if copy:
            return np.array(self._data, dtype=dtype, copy=True)
        return np.asarray(self._data, dtype=dtype)

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._data.__dlpack_device__()

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._data[key] = value  # in place: the same array, so a captured graph still reads it

    def __neg__(self) -> Any:
        return -self._data

    def __abs__(self) -> Any:
        return abs(self._data)

    def __getattr__(self, name: str) -> Any:
        # Only public names (get, copy, ndim, T, ...): protocol names (__deepcopy__, __setstate__) must
        # find the Parameter's own, and _data is absent only while an unpickled Parameter is being filled.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._data, name)

    def __repr__(self) -> str:
        return f"Parameter(shape={self.shape}, dtype={self.data.dtype})"


def _arithmetic(op: str) -> tuple[Callable[[Parameter, Any], Any], ...]:
    """``Parameter.__op__``, ``__rop__`` and ``__iop__``: as the array's (a new array), and in place on it."""

    def plain(self: Parameter, other: Any) -> Any:
        return getattr(self._data, f"__{op}__")(other)

    def reflected(self: Parameter, other: Any) -> Any:
        return getattr(self._data, f"__r{op}__")(other)

    def in_place(self: Parameter, other: Any) -> Parameter:
        getattr(self._data, f"__i{op}__")(other)  # the same array: optimisers and captured graphs still see it
        return self

    return plain, reflected, in_place


def _install_arithmetic() -> None:
    """Give :class:`Parameter` the arithmetic operators of the array it holds."""
    for op in ("add", "sub", "mul", "truediv", "floordiv", "pow", "matmul"):
        for prefix, method in zip(("", "r", "i"), _arithmetic(op)):
            method.__name__ = f"__{prefix}{op}__"
            setattr(Parameter, method.__name__, method)


_install_arithmetic()


class Module:
    """Base class of layers and networks.

    Sub-classes set parameters (:class:`Parameter`), buffers
    (:meth:`register_buffer`) and child modules as attributes, in
    ``__init__``; names and order follow assignment, as in PyTorch, so
    ``state_dict`` keys match a PyTorch model built the same way.

    Attributes
    ----------
    training : bool
        Training mode (batch statistics, dropout) or evaluation mode.
    category : str
        Layer type for per-layer timing tables (``"convolution"``,
        ``"pooling"``, ``"element-wise"``, ...); containers say ``"container"``.
    """

    category = "container"

    # Set in __init__ through object.__setattr__ (this class's __setattr__ files values into these tables).
    _parameters: OrderedDict[str, Parameter]
    _buffers: OrderedDict[str, None]  # names only: the values live in the attributes
    _modules: OrderedDict[str, Module]
    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"call super().__init__() in {type(self).__name__}.__init__ before setting {name!r}")
        if name in self._buffers and not isinstance(value, (Parameter, Module)):
            object.__setattr__(self, name, value)  # a buffer stays a buffer when reassigned
            _generation[0] += 1
            return
        if name in self._parameters and value is not None and not isinstance(value, (Parameter, Module)):
            # An array (or list) assigned to a parameter's name becomes its value: the parameter stays one.
            self._parameters[name].data = as_real_array(value, name)
            return
        target: OrderedDict[str, Any] | None = None
        if isinstance(value, Parameter):
            target = self._parameters
        elif isinstance(value, Module):
            target = self._modules
        replaced = False
        for table in (self._parameters, self._buffers, self._modules):
            if table is not target and name in table:
                del table[name]
                replaced = True
        if target is not None:
            target[name] = value  # an existing name keeps its place (Sequential order, state_dict order)
        object.__setattr__(self, name, value)
        if target is not None or replaced:  # state changed (a layer's cached input does not count)
            _generation[0] += 1

    def register_buffer(self, name: str, value: Any) -> None:
        """Keep ``value`` as state (saved by ``state_dict``) that is not learned."""
        setattr(self, name, value)
        self._buffers[name] = None  # the value itself lives in the attribute

    # --- calling ---------------------------------------------------------

    def forward(self, *inputs: Any) -> Any:
        """The layer's computation; sub-classes define it."""
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    #: Whether :meth:`backward` takes ``input_grad=False`` (parameter gradients only, returns None).
    skips_input_grad: bool = False

    def backward(self, grad_y: Any) -> Any:
        """Gradient with respect to the input, given ``grad_y``; accumulates parameter gradients."""
        raise NotImplementedError(f"{type(self).__name__} does not define backward()")

    def __call__(self, *inputs: Any, **options: Any) -> Any:
        """Run :meth:`forward`, timing it when a recorder is open and this is a leaf module."""
        recorder = _timing.current_recorder()
        if recorder is None or self._modules:
            return self.forward(*inputs, **options)
        timer = _timing.timer_for(inputs[0])
        timer.start()
        out = self.forward(*inputs, **options)
        recorder.add(self, "forward", timer.stop())
        return out

    def run_backward(self, grad_y: Any, input_grad: bool = True) -> Any:
        """``backward(grad_y)``, timed like ``__call__`` when a recorder is open.

        ``input_grad=False``: parameter gradients only, None returned (the
        input gradient is left out where the layer can, else dropped).
        """
        if input_grad is not True and input_grad is not False:
            # Unreachable for a type checker; callers are not checked, and a non-bool is refused by name.
            input_grad = check_input_grad(input_grad)  # type: ignore[unreachable]
        recorder = _timing.current_recorder()
        if recorder is None or self._modules:
            return self._backward(grad_y, input_grad)
        timer = _timing.timer_for(grad_y)
        timer.start()
        out = self._backward(grad_y, input_grad)
        recorder.add(self, "backward", timer.stop())
        return out

    def _backward(self, grad_y: Any, input_grad: bool) -> Any:
        if input_grad:
            return self.backward(grad_y)
        if self.skips_input_grad:  # such a layer's backward takes input_grad (see skips_input_grad)
            backward: Callable[..., Any] = self.backward
            return backward(grad_y, input_grad=False)
        self.backward(grad_y)
        return None

    def _need_cache(self) -> bool:
        """Whether forward should keep what backward needs."""
        return grad_enabled()

    # --- traversal -------------------------------------------------------

    def children(self) -> Iterator[Module]:
        """Direct sub-modules, in assignment order."""
        return iter(self._modules.values())

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        """Yield this module and every descendant with its dotted name (``""`` for this one)."""
        yield prefix, self
        for name, child in self._modules.items():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """Every parameter with its dotted name."""
        for module_name, module in self.named_modules(prefix):
            for name, param in module._parameters.items():
                yield (f"{module_name}.{name}" if module_name else name), param

    def parameters(self) -> list[Parameter]:
        """Every learnable :class:`Parameter` of this module and its descendants."""
        return [p for _, p in self.named_parameters()]

    def _state_items(self) -> Iterator[tuple[str, Module, str, str]]:
        """(key, owner, attribute, kind) for every parameter and buffer."""
        for module_name, module in self.named_modules():
            for kind, table in (("parameter", module._parameters), ("buffer", module._buffers)):
                for name in table:
                    yield (f"{module_name}.{name}" if module_name else name), module, name, kind

    # --- state -----------------------------------------------------------

    def state_dict(self) -> OrderedDict:
        """Parameters and buffers by dotted name (the arrays themselves, not copies)."""
        out = OrderedDict()
        for key, owner, name, kind in self._state_items():
            value = getattr(owner, name)
            out[key] = value.data if kind == "parameter" else value
        return out

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Copy values from ``state`` (anything ``asarray`` accepts) into this module.

        Keys and shapes must match :meth:`state_dict` exactly; values are cast
        to each parameter's dtype and device. Values must be real numbers
        (integer or floating point) that fit that dtype: a finite float64
        value past float32's range is refused rather than stored as ``inf``.
        Nothing is changed unless every value passes.

        Raises
        ------
        TypeError
            ``state`` is not a mapping, or a value is not an array of real
            numbers (bool, complex, string, object): the message names its key.
        KeyError
            Keys are missing or unexpected (both lists are in the message).
        ValueError
            A value has the wrong shape, or is finite but overflows the
            parameter's dtype (the message names its key).
        """
        if not isinstance(state, Mapping):
            raise TypeError(f"`state` must be a mapping of name -> array; got {type(state).__name__}")
        items = {key: (owner, name, kind) for key, owner, name, kind in self._state_items()}
        missing = [k for k in items if k not in state]
        unexpected = [k for k in state if k not in items]
        if missing or unexpected:
            raise KeyError(
                f"load_state_dict: keys do not match {type(self).__name__}: "
                f"missing {missing or 'none'}; unexpected {unexpected or 'none'}"
            )
        converted = {}
        for key, (owner, name, kind) in items.items():
            current = getattr(owner, name)
            current = current.data if kind == "parameter" else current
            xp = array_module(current)
            value = state[key]
            if is_cupy_array(value) and xp is np:
                value = to_numpy(value)
            value = self._converted(key, value, current, xp)
            if tuple(value.shape) != tuple(current.shape):
                raise ValueError(
                    f"load_state_dict: {key!r} must have shape {tuple(current.shape)}; got {tuple(value.shape)}"
                )
            converted[key] = value
        for key, (owner, name, kind) in items.items():  # all checked: now change the module
            value = converted[key].copy()
            if kind == "parameter":
                getattr(owner, name).data = value
            else:
                object.__setattr__(owner, name, value)

    @staticmethod
    def _converted(key: str, value: Any, current: Any, xp: Any) -> Any:
        """``value`` as an array of ``current``'s dtype on ``xp``, or an error naming ``key``.

        Read first in its own dtype, so what cannot be a parameter is refused by
        name instead of being cast: complex values would lose their imaginary
        part (with only a ComplexWarning), an object array of None would become
        NaN, strings would fail inside NumPy with a message naming no key.
        """
        try:
            raw = xp.asarray(value)
        except (TypeError, ValueError) as exc:  # ragged lists, unconvertible objects
            raise TypeError(
                f"load_state_dict: {key!r} must be an array of real numbers; got {_show(value)} ({exc})"
            ) from None
        if raw.dtype.kind not in "iuf":
            raise TypeError(
                f"load_state_dict: {key!r} must be an array of real numbers (integer or floating point); "
                f"got dtype {raw.dtype}"
            )
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below, by key
            converted = raw.astype(current.dtype, copy=False)
        if raw.dtype.kind == "f" and raw.dtype.itemsize > converted.dtype.itemsize:
            # Narrowing (float64 -> float32) turns finite values past the range into inf.
            if bool((xp.isfinite(raw) & ~xp.isfinite(converted)).any()):
                raise ValueError(
                    f"load_state_dict: {key!r} has finite values outside the range of {current.dtype} "
                    f"(largest magnitude {float(xp.abs(raw[xp.isfinite(raw)]).max()):g}); they would become inf"
                )
        return converted

    # --- modes and devices ----------------------------------------------

    def train(self, mode: bool = True) -> Module:
        """Training mode for this module and its descendants; returns self."""
        for _, module in self.named_modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self) -> Module:
        """Evaluation mode (``train(False)``); returns self."""
        return self.train(False)

    def to(self, device: str) -> Module:
        """Move parameters and buffers to ``"cpu"`` (NumPy) or ``"gpu"`` (CuPy); returns self."""
        if device not in ("cpu", "gpu"):
            raise ValueError(f"`device` must be 'cpu' or 'gpu'; got {device!r}")
        if device == "gpu":
            try:
                import cupy
            except ImportError as exc:
                raise ImportError("to('gpu') needs CuPy: pip install 'convsuite[cuda]' (cupy-cuda13x)") from exc
            move = cupy.asarray
        else:
            move = to_numpy
        for _, owner, name, kind in self._state_items():
            if kind == "parameter":
                param = getattr(owner, name)
                param.data = move(param.data)
                param.grad = None if param.grad is None else move(param.grad)
            else:
                object.__setattr__(owner, name, move(getattr(owner, name)))
        for _, module in self.named_modules():
            module._moved(device)
        return self

    def _moved(self, device: str) -> None:
        """Hook for layers that keep device-specific state (dropped caches etc.)."""

    def extra_repr(self) -> str:
        """Settings shown inside this module's repr."""
        return ""

    def __repr__(self) -> str:
        if not self._modules:
            return f"{type(self).__name__}({self.extra_repr()})"
        lines = [f"{type(self).__name__}("]
        for name, child in self._modules.items():
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        return "\n".join(lines) + "\n)"


class Sequential(Module):
    """Layers applied in order; children are named ``"0"``, ``"1"``, ... like PyTorch's.

    Parameters
    ----------
    *layers : Module
    fuse_activations : bool, default True
        Run a convolution followed by ``ReLU`` or ``ReLU6`` as one call with
        ``activation="relu"`` / ``"relu6"`` (fused into the kernel where the
        backend can, see :func:`convsuite.conv2d`), and its backward with the
        activation's gradient mask applied once. ``Identity`` layers between
        the two (a BatchNorm folded into the convolution) do not prevent it.
        Results are those of the separate layers; the activation's (and the
        skipped ``Identity`` layers') timing rows are then empty.
    """

    fuse_activations: bool
    _fused: dict[int, int]  # last layer of a fused run -> its convolution (the last forward's)

    def __init__(self, *layers: Module, fuse_activations: bool = True) -> None:
        super().__init__()
        for index, layer in enumerate(layers):
            if not isinstance(layer, Module):
                raise TypeError(f"Sequential takes Module objects; argument {index} is {type(layer).__name__}")
            setattr(self, str(index), layer)
        if not isinstance(fuse_activations, bool):
            raise TypeError(f"`fuse_activations` must be True or False; got {fuse_activations!r}")
        object.__setattr__(self, "fuse_activations", fuse_activations)
        object.__setattr__(self, "_fused", {})

    def __len__(self) -> int:
        return len(self._modules)

    def __getitem__(self, index: int | slice) -> Module:
        layers = list(self._modules.values())
        if isinstance(index, slice):  # as PyTorch: a Sequential of those layers (shared, not copied)
            return Sequential(*layers[index], fuse_activations=self.fuse_activations)
        return layers[index]

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))

    def _fusable(self, layers: list[Module], index: int) -> tuple[str, int] | None:
        """``(activation, end)`` if layer ``index`` can take, fused, the activation of layer ``end``:
        the next layer, or the first after only ``Identity`` layers.
        """
        fusable = getattr(layers[index], "fusable_activations", ())
        if not self.fuse_activations or not fusable:
            return None
        end = index + 1
        while end < len(layers) and getattr(layers[end], "fusion_transparent", False):
            end += 1
        if end >= len(layers):
            return None
        activation = getattr(layers[end], "fusable_activation", None)
        if activation is not None and activation in fusable:
            return activation, end
        return None

    @staticmethod
    def _record_fused(layer: Module, direction: str) -> None:
        """A fused activation layer's timing row: zero, its work is in the convolution's row."""
        recorder = _timing.current_recorder()
        if recorder is not None:
            recorder.add(layer, direction, 0.0)

    def _runs(self, layers: list[Module]) -> list[tuple[int, str | None, int]]:
        """``(first, activation, last)`` per call of a forward pass: a layer alone (``activation``
        None, ``first == last``) or a convolution with the activation of layer ``last`` fused.

        Kept until a module attribute or parameter is replaced (``state_generation``) or the
        fusion setting changes: at batch 1 the walk cost ~1 us per layer on every pass.
        """
        key = (_generation[0], self.fuse_activations, len(layers))
        cached = self.__dict__.get("_runs_cache")
        if cached is not None and cached[0] == key:
            return cached[1]
        runs: list[tuple[int, str | None, int]] = []
        index = 0
        while index < len(layers):
            found = self._fusable(layers, index)
            if found is None:
                runs.append((index, None, index))
                index += 1
            else:
                activation, end = found
                runs.append((index, activation, end))
                index = end + 1
        object.__setattr__(self, "_runs_cache", (key, runs))
        return runs

    def forward(self, x: Any) -> Any:
        """Apply the layers in order, fusing a convolution with a following activation where possible."""
        layers = list(self._modules.values())
        fused = {}  # last layer of a fused run -> its convolution
        for first, activation, last in self._runs(layers):
            if activation is None:
                x = layers[first](x)
            else:  # conv + activation as one call; the layers up to the activation are skipped
                x = layers[first](x, activation=activation)
                for skipped in layers[first + 1 : last + 1]:
                    self._record_fused(skipped, "forward")
                fused[last] = first
        object.__setattr__(self, "_fused", fused)
        return x

    skips_input_grad = True

    def backward(self, grad_y: Any, input_grad: bool = True) -> Any:
        """Gradient through the layers in reverse order, honouring the fusions of the last forward.

        ``input_grad=False``: the first layer leaves out the gradient with
        respect to the network's input (None is returned); see the module doc.
        """
        if input_grad is not True and input_grad is not False:
            # Unreachable for a type checker; callers are not checked, and a non-bool is refused by name.
            input_grad = check_input_grad(input_grad)  # type: ignore[unreachable]
        layers = list(self._modules.values())
        index = len(layers) - 1
        while index >= 0:
            start = self._fused.get(index)
            first = index if start is None else start
            wanted = input_grad or first > 0
            if start is not None:  # the conv applies the activation's gradient mask itself
                for skipped in layers[start + 1 : index + 1]:
                    self._record_fused(skipped, "backward")
            grad_y = layers[first].run_backward(grad_y, wanted)
            index = first - 1
        return grad_y
