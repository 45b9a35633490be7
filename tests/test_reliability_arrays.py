"""Issue 9, classes 3, 5 and 7: memory accounting, array kinds and messages."""

from __future__ import annotations

import numpy as np
import pytest

import convsuite as cs
from convsuite import _validation

rng = np.random.default_rng(0)
X = rng.standard_normal((2, 3, 6, 7))
W = rng.standard_normal((4, 3, 3, 3))
B = rng.standard_normal(4)


class ArrayInterfaceOnly:
    """An array-like that only offers ``__array__`` (like many tensor types)."""

    def __init__(self, array):
        self._array = array

    def __array__(self, dtype=None, copy=None):
        return self._array if dtype is None else self._array.astype(dtype)


class DLPackOnly:
    """An array-like that only speaks DLPack (no ``__array__``)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class RequiresGrad(ArrayInterfaceOnly):
    """Stands for a torch tensor in an autograd graph (torch need not be installed)."""

    requires_grad = True


# --- class 5: array kinds --------------------------------------------------


@pytest.mark.parametrize("name", ["x", "w", "bias"])
def test_masked_arrays_are_refused_with_the_fix(backend, name):
    operands = dict(x=X, w=W, bias=B)
    operands[name] = np.ma.masked_array(operands[name], mask=operands[name] > 0)
    with pytest.raises(TypeError, match=rf"`{name}` is a masked array.*filled\(0\)"):
        cs.conv2d(operands["x"], operands["w"], operands["bias"], backend=backend)


def test_masked_grad_y_is_refused(backend):
    gy = np.ma.masked_array(np.ones((2, 4, 4, 5)), mask=False)
    with pytest.raises(TypeError, match="`grad_y` is a masked array"):
        cs.conv2d_backward(gy, X, W, backend=backend)


@pytest.mark.parametrize("order", [">", "<"])
@pytest.mark.parametrize("kind", ["f4", "f8"])
def test_byte_order_keeps_dtype_and_values(backend, order, kind):
    native = np.dtype(kind)
    x, w = X.astype(order + kind), W.astype(order + kind)
    y = cs.conv2d(x, w, padding=1, backend=backend)
    assert y.dtype == native and y.dtype.isnative
    expected = cs.conv2d(X.astype(native), W.astype(native), padding=1, backend=backend)
    np.testing.assert_array_equal(y, expected)
    grads = cs.conv2d_backward(np.ones_like(expected).astype(order + kind), x, w, padding=1, backend=backend)
    assert all(g.dtype == native for g in grads)


@pytest.mark.parametrize("wrap", [ArrayInterfaceOnly, DLPackOnly], ids=["__array__", "dlpack"])
def test_array_likes_are_read_through_their_protocol(backend, wrap):
    x32, w32 = X.astype(np.float32), W.astype(np.float32)
    y = cs.conv2d(wrap(x32), wrap(w32), wrap(B.astype(np.float32)), padding=1, backend=backend)
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, cs.conv2d(x32, w32, B.astype(np.float32), padding=1, backend=backend))


def test_an_object_that_requires_grad_gets_a_convsuite_error():
    with pytest.raises(TypeError, match=r"`w` is a RequiresGrad that requires grad.*\.detach\(\)"):
        cs.conv2d(X, RequiresGrad(W))


def test_unconvertible_objects_name_the_parameter():
    class Broken:
        def __array__(self, dtype=None, copy=None):
            raise RuntimeError("device tensor")

    with pytest.raises(TypeError, match="`x` must be an array of real numbers.*device tensor"):
        cs.conv2d(Broken(), W)


def test_torch_tensors():
    torch = pytest.importorskip("torch")
    x, w = torch.from_numpy(X), torch.from_numpy(W)
    np.testing.assert_array_equal(cs.conv2d(x, w, padding=1), cs.conv2d(X, W, padding=1))
    with pytest.raises(TypeError, match="requires grad"):
        cs.conv2d(x, w.clone().requires_grad_(True))
    np.testing.assert_array_equal(
        cs.conv2d(x, w.clone().requires_grad_(True).detach(), padding=1), cs.conv2d(X, W, padding=1)
    )


# --- class 3: memory accounting -------------------------------------------


def test_a_broadcast_input_too_large_to_copy_is_refused_before_allocating():
    x = np.broadcast_to(np.float32(1), (4096, 64, 1024, 1024))  # a view; the copy is 1 TiB
    with pytest.raises(MemoryError, match="operand copies"):
        cs.conv2d(x, np.ones((1, 64, 1, 1), np.float32), backend="numpy")


def test_every_buffer_counts_against_available_memory(monkeypatch, backend):
    """A limit only the sum of copies, outputs and workspace exceeds refuses the call."""
    x = np.broadcast_to(np.float64(1), (2, 4, 48, 48))  # a view; its copy is 144 KiB
    w = np.ones((4, 4, 3, 3))
    needed = {}

    def fake_available():
        return needed["limit"]

    monkeypatch.setattr(_validation, "available_host_memory", fake_available)
    monkeypatch.setattr(_validation, "SMALL_CALL_BYTES", 0)
    copy, output = x.size * 8, 2 * 4 * 48 * 48 * 8
    needed["limit"] = copy + output - 1  # neither alone is too large, together they are
    with pytest.raises(MemoryError, match="operand copies.*outputs"):
        cs.conv2d(x, w, padding=1, backend=backend)
    needed["limit"] = 2**40
    assert cs.conv2d(x, w, padding=1, backend=backend).shape == (2, 4, 48, 48)


def test_numpy_declares_its_workspace():
    from convsuite._registry import get_backend

    numpy_backend = get_backend("numpy")
    spec = cs.explain(X, W, padding=1).spec
    forward = numpy_backend.workspace_bytes(spec, "im2col", "forward")
    backward = numpy_backend.workspace_bytes(spec, "im2col", "backward")
    padded = 2 * 3 * 8 * 9 * 8  # the zero-padded source it materialises
    assert forward >= padded and backward >= 2 * padded


# --- class 7: messages -----------------------------------------------------


@pytest.mark.parametrize(
    "keywords, fragment",
    [
        (dict(stride=np.int64(0)), "`stride` must be >= 1 in every dimension; got 0 (int64)"),
        (dict(groups=np.int32(0)), "`groups` must be a positive int (>= 1); got 0 (int32)"),
        (dict(padding=np.int64(-2)), "`padding` must be non-negative in every dimension; got -2 (int64)"),
        (dict(stride=np.float64(1.5)), "got 1.5 (float64)"),
    ],
)
def test_numpy_scalars_are_echoed_by_value(keywords, fragment):
    with pytest.raises((ValueError, TypeError)) as info:
        cs.conv2d(X, W, **keywords)
    assert fragment in str(info.value)
    assert "shape ()" not in str(info.value)


@pytest.mark.parametrize(
    "keywords, error, fragment",
    [
        (dict(seed=-1), ValueError, "`seed` must be None, an int >= 0 or a numpy Generator; got -1"),
        (dict(seed=np.int64(-5)), ValueError, "`seed`"),
        (dict(seed=True), TypeError, "`seed` must be None, an int >= 0 or a numpy Generator; got True"),
        (dict(seed=1.5), TypeError, "`seed`"),
        (dict(dtype=None), TypeError, "`dtype` must be 'float32' or 'float64'"),
        (dict(dtype=True), TypeError, "`dtype`"),
        (dict(dtype="int32"), TypeError, "got 'int32'"),
    ],
)
@pytest.mark.parametrize("layer", [cs.Conv1D, cs.Conv2D])
def test_layer_arguments(layer, keywords, error, fragment):
    with pytest.raises(error) as info:
        layer(2, 4, 3, **keywords)
    assert fragment in str(info.value)


@pytest.mark.parametrize("layer, kernel", [(cs.Conv1D, 10**6), (cs.Conv2D, 100)])
def test_layer_too_large_for_memory_names_its_arguments(layer, kernel):
    """NumPy's own MemoryError ("Unable to allocate 71.1 PiB") named none of the layer's arguments."""
    with pytest.raises(MemoryError) as info:
        layer(10**6, 10**6, kernel)
    message = str(info.value)
    assert "in_channels=1000000" in message and "out_channels=1000000" in message and "kernel_size" in message


@pytest.mark.parametrize("layer", [cs.Conv1D, cs.Conv2D])
def test_layer_weights_assigned_as_lists_are_read_as_arrays(layer):
    """A list assigned to ``weight`` or ``bias`` reached the plan's unchecked run (AttributeError: 'list'
    object has no attribute 'dtype'); it is read as conv2d reads a list."""
    conv = layer(4, 6, 3, padding=1, groups=2, seed=0)
    x = np.random.default_rng(0).standard_normal((2, 4) + (9,) * conv._ndim).astype(np.float32)
    y = conv(x)
    grads = conv.backward(np.ones_like(y), x)
    weight, bias = conv.weight, conv.bias
    for assigned in (dict(weight=weight.tolist()), dict(bias=list(bias)), dict(weight=weight.tolist(), bias=bias)):
        conv.weight, conv.bias = weight, bias
        for name, value in assigned.items():
            setattr(conv, name, value)
        np.testing.assert_allclose(conv(x), y, rtol=1e-5, atol=1e-6)
        for got, expected in zip(conv.backward(np.ones_like(y), x), grads):
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    conv.weight, conv.bias = weight, [1.0, 2.0]
    with pytest.raises(ValueError, match="bias"):
        conv(x)


def test_layer_accepts_numpy_seed_and_dtype_objects():
    a = cs.Conv2D(2, 4, 3, seed=np.int64(3), dtype=np.float64)
    b = cs.Conv2D(2, 4, 3, seed=3, dtype="float64")
    assert a.weight.dtype == np.float64
    np.testing.assert_array_equal(a.weight, b.weight)
