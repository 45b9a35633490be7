"""Operands are read once per call, results come back in the caller's kind, and dtypes follow one rule.

- An operand that is not an array (``__array__``, a list, DLPack, a torch tensor) is read exactly once
  per call, and everything after (validation, the plan's key, the kernels) uses that one read.
- Layers, plans and the functions key on the arrays they compute with, never on an object's ``.shape``.
- torch tensors in give torch tensors out (zero-copy); float16/bfloat16 keep their dtype (computed in
  float32); mixed widths follow NumPy's promotion (float32 with float64 gives float64).
"""

from __future__ import annotations

import numpy as np
import pytest

import convsuite as cs
from convsuite.testing import reference_forward

CPU_BACKENDS = [info.name for info in cs.list_backends() if info.device == "cpu" and info.available is True]
RNG = np.random.default_rng(7)


class Shifty:
    """An array-like whose data changes at every read: a live source, or a list another thread edits."""

    def __init__(self, *arrays):
        self.arrays = list(arrays)
        self.reads = 0

    def __array__(self, dtype=None, copy=None):
        array = self.arrays[min(self.reads, len(self.arrays) - 1)]
        self.reads += 1
        return array if dtype is None else array.astype(dtype)


class Liar:
    """An array-like whose ``.shape`` attribute disagrees with its data."""

    def __init__(self, array, shape):
        self.array, self.shape, self.dtype = array, shape, array.dtype

    def __array__(self, dtype=None, copy=None):
        return self.array if dtype is None else self.array.astype(dtype)


def _reference(x, w, bias=None, **kw):
    """The float64 reference of the call ``cs.conv*(x, w, bias, **kw)``."""
    spec = cs.explain(x, w, bias, backend="numpy", **kw).spec
    return reference_forward(spec, x.astype(np.float64), w.astype(np.float64), bias)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_an_operand_is_read_once_per_call_forward(backend):
    first = RNG.standard_normal((1, 2, 5, 5)).astype(np.float32)
    second = RNG.standard_normal((1, 2, 7, 7)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 3)).astype(np.float32)
    for _ in range(2):  # a plan-cache miss, then a hit
        x = Shifty(first, second)
        y = cs.conv2d(x, w, padding=1, backend=backend)
        assert x.reads == 1
        np.testing.assert_allclose(y, _reference(first, w, padding=1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_every_operand_is_read_once_per_call_backward(backend):
    x = RNG.standard_normal((2, 2, 9)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3)).astype(np.float32)
    gy = RNG.standard_normal((2, 3, 7)).astype(np.float32)
    shifting = [Shifty(a, a[..., :-1] * 5) for a in (gy, x, w)]
    gx, gw, gb = cs.conv1d_backward(*shifting, backend=backend)
    assert [s.reads for s in shifting] == [1, 1, 1]
    want = cs.conv1d_backward(gy, x, w, backend="numpy")
    for got, expected in zip((gx, gw, gb), want):
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_a_list_changed_between_calls_is_read_afresh():
    w = np.ones((1, 1, 2), dtype=np.float64)
    data = [[[1.0, 2.0, 3.0]]]
    assert cs.conv1d(data, w).tolist() == [[[3.0, 5.0]]]
    data[0][0].append(4.0)
    assert cs.conv1d(data, w).tolist() == [[[3.0, 5.0, 7.0]]]


def test_layers_functions_and_plans_use_the_data_not_a_shape_attribute():
    real = RNG.standard_normal((2, 4, 8, 8)).astype(np.float32)
    x = Liar(real, (2, 4, 64, 64))
    layer = cs.Conv2D(4, 4, 3, seed=0)
    expected = _reference(real, np.asarray(layer.weight), np.asarray(layer.bias))
    for _ in range(2):
        np.testing.assert_allclose(layer(x), expected, rtol=1e-4, atol=1e-4)
        assert layer(x).shape == (2, 4, 6, 6)
    w = np.asarray(layer.weight)
    assert cs.conv2d(x, w).shape == (2, 4, 6, 6)
    plan = cs.plan(x, w)
    assert plan.spec.x_shape == (2, 4, 8, 8)
    gx, _, _ = layer.backward(np.ones((2, 4, 6, 6), np.float32), x)
    assert gx.shape == (2, 4, 8, 8)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_float16_keeps_its_dtype_and_computes_in_float32(backend):
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float16)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float16)
    y = cs.conv2d(x, w, padding=1, backend=backend)
    assert y.dtype == np.float16
    want = _reference(x.astype(np.float32), w.astype(np.float32), padding=1)
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-3, atol=2e-2)
    grads = cs.conv2d_backward(np.ones_like(y), x, w, padding=1, backend=backend)
    assert [g.dtype for g in grads] == [np.float16] * 3
    with pytest.raises(ValueError, match="`out`"):
        cs.plan(x, w, padding=1, backend=backend)(x, w, out=np.empty(y.shape, np.float32))


@pytest.mark.parametrize(
    "dtypes, result",
    [
        (("float32", "float64"), np.float64),
        (("float64", "float32"), np.float64),
        (("float16", "float32"), np.float32),
        (("float32", "float16"), np.float32),
        (("int32", "float32"), np.float64),
        (("float16", "float64"), np.float64),
        (("int64", "int16"), np.float64),
    ],
)
def test_mixed_widths_follow_numpys_promotion(dtypes, result):
    x = RNG.integers(-3, 3, (1, 2, 5)).astype(dtypes[0])
    w = RNG.integers(-3, 3, (2, 2, 3)).astype(dtypes[1])
    assert cs.conv1d(x, w).dtype == result
    if not any("int" in d for d in dtypes):  # floats: exactly NumPy's promotion (integers read as float64)
        assert np.result_type(*dtypes) == result
    assert all(g.dtype == result for g in cs.conv1d_backward(np.ones((1, 2, 3), dtypes[0]), x, w))


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_torch_tensors_in_give_torch_tensors_out(backend):
    x = torch.randn(2, 3, 7, 7, dtype=torch.float64)
    w = torch.randn(5, 3, 3, 3, dtype=torch.float64)
    b = torch.randn(5, dtype=torch.float64)
    y = cs.conv2d(x, w, b, stride=2, padding=1, backend=backend)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float64
    torch.testing.assert_close(y, torch.nn.functional.conv2d(x, w, b, stride=2, padding=1))
    gy = torch.randn_like(y)
    gx, gw, gb = cs.conv2d_backward(gy, x, w, stride=2, padding=1, backend=backend)
    assert all(isinstance(g, torch.Tensor) for g in (gx, gw, gb))
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    torch.nn.functional.conv2d(xr, wr, stride=2, padding=1).backward(gy)
    torch.testing.assert_close(gx, xr.grad)
    torch.testing.assert_close(gw, wr.grad)


def test_torch_results_share_memory_with_what_convsuite_computed():
    x, w = torch.randn(1, 2, 9), torch.randn(3, 2, 3)
    y = cs.conv1d(x, w, backend="numpy")
    assert y.dtype == torch.float32
    y.numpy()[...] = 0  # a view of the result: zero-copy both ways
    assert float(y.abs().sum()) == 0.0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_torch_half_tensors_keep_their_dtype(dtype):
    dtype = getattr(torch, dtype)
    x, w = torch.randn(2, 3, 8, dtype=dtype), torch.randn(4, 3, 3, dtype=dtype)
    y = cs.conv1d(x, w, padding="same")
    assert y.dtype == dtype
    want = torch.nn.functional.conv1d(x.float(), w.float(), padding="same")
    torch.testing.assert_close(y.float(), want, rtol=2e-2, atol=5e-2)
    assert all(g.dtype == dtype for g in cs.conv1d_backward(torch.ones_like(y), x, w, padding="same"))


def test_a_tensor_that_requires_grad_is_refused_with_the_way_out():
    x = torch.randn(1, 1, 5, requires_grad=True)
    with pytest.raises(TypeError, match=r"`x`.*requires grad.*detach\(\).*convsuite\.torch"):
        cs.conv1d(x, torch.ones(1, 1, 2))
