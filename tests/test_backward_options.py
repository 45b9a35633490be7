"""Backward options on the CPU backends: ``input_grad=False`` and the ReLU mask inside numba's gemm.

``conv*_backward(..., input_grad=False)`` returns ``(None, grad_w, grad_b)``:
the same parameter gradients as the full backward on every backend, with
dX's work left out where the backend plans ``"backward+weights"`` (numba's
``gemm``). That kernel also reads ``grad_y`` through a ReLU's output itself
(``"backward+relu"``); both are checked against the float64 reference.
"""

from __future__ import annotations

import numpy as np
import pytest

import convsuite as cs
from convsuite import nn
from convsuite.testing import assert_within, backward_tolerances, reference_backward

AVAILABLE = {b.name for b in cs.list_backends() if b.available}
CPU_BACKENDS = [name for name in ("python", "numpy", "cython", "numba", "joblib") if name in AVAILABLE]

# (x shape, w shape, keywords): 2-D and 1-D, stride, padding, dilation, groups, batch 1.
GEOMETRIES = [
    ((3, 2, 9, 8), (4, 2, 3, 3), dict(padding=1)),
    ((2, 4, 11, 10), (6, 2, 3, 2), dict(stride=(2, 1), padding=((2, 0), (1, 1)), groups=2)),
    ((1, 3, 12, 12), (5, 3, 3, 3), dict(dilation=2, padding=2)),
    ((2, 6, 7, 9), (6, 1, 5, 5), dict(padding=2, groups=6)),
    ((4, 1, 16, 16), (6, 1, 5, 5), {}),
    ((2, 3, 40), (4, 3, 7), dict(stride=3, padding=4)),
]


def _operands(x_shape, w_shape, kw, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    conv = cs.conv1d if len(x_shape) == 3 else cs.conv2d
    y = conv(x, w, activation="relu", backend="numpy", **kw)
    y[(rng.random(y.shape) < 0.05)] = np.nan  # a NaN output passes its gradient (torch)
    grad_y = rng.standard_normal(y.shape).astype(dtype)
    return x, w, y, grad_y


def _backward_fn(x_shape):
    return cs.conv1d_backward if len(x_shape) == 3 else cs.conv2d_backward


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("through_relu", [False, True])
@pytest.mark.parametrize("geometry", range(len(GEOMETRIES)))
def test_input_grad_false_gives_the_same_parameter_gradients(backend, geometry, through_relu):
    x_shape, w_shape, kw = GEOMETRIES[geometry]
    x, w, y, grad_y = _operands(x_shape, w_shape, kw, np.float32)
    backward = _backward_fn(x_shape)
    relu = dict(relu_output=y) if through_relu else {}
    full = backward(grad_y, x, w, backend=backend, **kw, **relu)
    grad_x, grad_w, grad_b = backward(grad_y, x, w, backend=backend, input_grad=False, **kw, **relu)
    assert grad_x is None and full[0] is not None
    # The weight gradient's arithmetic does not depend on whether dX is computed: same bits.
    np.testing.assert_array_equal(grad_w, full[1])
    np.testing.assert_array_equal(grad_b, full[2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("input_grad", [True, False])
@pytest.mark.parametrize("geometry", range(len(GEOMETRIES)))
def test_numba_gemm_masks_grad_y_in_its_kernel(geometry, input_grad, dtype):
    """The fused mask against the float64 reference of the masked gradient (zeros, negatives, NaN outputs)."""
    if "numba" not in AVAILABLE:
        pytest.skip("numba unavailable")
    x_shape, w_shape, kw = GEOMETRIES[geometry]
    x, w, y, grad_y = _operands(x_shape, w_shape, kw, dtype, seed=geometry)
    got = _backward_fn(x_shape)(
        grad_y, x, w, backend="numba", algorithm="gemm", relu_output=y, input_grad=input_grad, **kw
    )
    masked = np.where(y <= 0, 0, grad_y)
    spec = cs.explain(x, w, **kw).spec
    expected = reference_backward(spec, masked, x, w)
    tolerance = backward_tolerances(spec, masked, x, w)
    names = ("grad_x", "grad_w", "grad_b")
    for name, g, e, t, shape in zip(names, got, expected, tolerance, (spec.x_shape, spec.w_shape, None)):
        if name == "grad_x" and not input_grad:
            assert g is None
            continue
        assert_within(g if shape is None else np.reshape(g, shape), e, t, name)


def test_numba_gemm_plans_the_options_it_runs(monkeypatch):
    """The launches asked of the backend: dW only without input gradient, the mask inside with relu_output."""
    if "numba" not in AVAILABLE:
        pytest.skip("numba unavailable")
    backend = cs._registry.get_backend("numba")
    planned = []
    original = type(backend).plan

    def spy(self, spec, algorithm, direction, params=None):
        planned.append((algorithm, direction))
        return original(self, spec, algorithm, direction, params)

    monkeypatch.setattr(type(backend), "plan", spy)
    cs.clear_plan_cache()
    x, w, y, grad_y = _operands((2, 3, 10, 10), (4, 3, 3, 3), {}, np.float32)
    for options in ({}, dict(input_grad=False), dict(relu_output=y), dict(relu_output=y, input_grad=False)):
        cs.conv2d_backward(grad_y, x, w, backend="numba", algorithm="gemm", **options)
    assert planned == [
        ("gemm", "backward"),
        ("gemm", "backward+weights"),
        ("gemm", "backward+relu"),
        ("gemm", "backward+relu+weights"),
    ]
    spec = cs.explain(x, w).spec
    assert backend.skips_input_grad(spec, "gemm") and not backend.skips_input_grad(spec, "direct")
    assert backend.fuses_relu_mask(spec, "gemm") and not backend.fuses_relu_mask(spec, "depthwise")


@pytest.mark.parametrize("value", ["no", None, 0, 1.0, np.array([True])])
def test_input_grad_must_be_a_bool(value):
    x, w = np.ones((1, 1, 5, 5), np.float32), np.ones((1, 1, 3, 3), np.float32)
    with pytest.raises(TypeError, match=r"`input_grad` must be True or False; got"):
        cs.conv2d_backward(np.ones((1, 1, 3, 3), np.float32), x, w, input_grad=value)


def test_input_grad_accepts_numpy_bools():
    x, w = np.ones((1, 1, 5, 5), np.float32), np.ones((1, 1, 3, 3), np.float32)
    grads = cs.conv2d_backward(np.ones((1, 1, 3, 3), np.float32), x, w, input_grad=np.False_)
    assert grads[0] is None and float(grads[2][0]) == 9.0


def test_input_grad_false_on_dask_stays_lazy_and_returns_none():
    da = pytest.importorskip("dask.array")
    x, w, _, grad_y = _operands((4, 2, 9, 8), (3, 2, 3, 3), {}, np.float64)
    lazy = cs.conv2d_backward(da.from_array(grad_y, chunks=(2, 3, 7, 6)), da.from_array(x, chunks=(2, 2, 9, 8)), w)
    grad_x, grad_w, grad_b = cs.conv2d_backward(
        da.from_array(grad_y, chunks=(2, 3, 7, 6)), da.from_array(x, chunks=(2, 2, 9, 8)), w, input_grad=False
    )
    assert grad_x is None
    np.testing.assert_allclose(np.asarray(grad_w), np.asarray(lazy[1]), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(grad_b), np.asarray(lazy[2]), rtol=1e-12)


# --- nn: a network's backward without the input gradient -------------------------------------------


def _small_net(first: str, backend: str):
    torch_like = dict(backend=backend, dtype="float64", seed=0)
    head = {
        "conv": [nn.Conv2D(2, 4, 3, padding=1, **torch_like), nn.ReLU()],
        "relu": [nn.ReLU(), nn.Conv2D(2, 4, 3, padding=1, **torch_like)],
        "batchnorm": [nn.BatchNorm2D(2, dtype="float64"), nn.Conv2D(2, 4, 3, padding=1, **torch_like)],
        "nested": [nn.Sequential(nn.Conv2D(2, 4, 3, padding=1, **torch_like), nn.ReLU())],
    }[first]
    return nn.Sequential(
        *head, nn.MaxPool2D(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 5, dtype="float64", seed=1), nn.ReLU()
    )


@pytest.mark.parametrize("backend", [name for name in ("numpy", "numba") if name in AVAILABLE])
@pytest.mark.parametrize("first", ["conv", "relu", "batchnorm", "nested"])
def test_network_backward_without_input_grad(first, backend):
    """None back, the same parameter gradients as the full backward, whatever the first layer."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 2, 6, 6))
    grads = {}
    for input_grad in (True, False):
        net = _small_net(first, backend)
        out = net(x)
        returned = net.backward(np.ones_like(out), input_grad=input_grad)
        assert (returned is None) == (not input_grad)
        grads[input_grad] = {k: p.grad.copy() for k, p in net.named_parameters()}
    assert grads[True].keys() == grads[False].keys()
    for key in grads[True]:
        np.testing.assert_allclose(grads[False][key], grads[True][key], rtol=1e-12, atol=1e-14, err_msg=key)


def test_the_first_convolution_is_asked_for_no_input_gradient(monkeypatch):
    from convsuite import _api

    asked = []
    original = _api.conv2d_backward

    def spy(*args, input_grad=True, **kwargs):
        asked.append(input_grad)
        return original(*args, input_grad=input_grad, **kwargs)

    monkeypatch.setattr(_api, "conv2d_backward", spy)
    net = nn.Sequential(
        nn.Conv2D(1, 2, 3, backend="numpy", seed=0), nn.ReLU(), nn.Conv2D(2, 2, 3, backend="numpy", seed=1)
    )
    out = net(np.ones((1, 1, 7, 7), np.float32))
    assert net.backward(np.ones_like(out), input_grad=False) is None
    assert asked == [True, False]  # the second conv's input gradient feeds the first; the first's is not needed


def test_layer_without_the_option_computes_and_drops():
    class Doubling(nn.Module):
        def forward(self, x):
            return 2 * x

        def backward(self, grad_y):  # no input_grad keyword: run_backward drops its result
            return 2 * grad_y

    assert Doubling().run_backward(np.ones(3), input_grad=False) is None
    np.testing.assert_array_equal(Doubling().run_backward(np.ones(3)), 2 * np.ones(3))


@pytest.mark.parametrize("value", ["no", None, 1])
def test_network_backward_checks_input_grad(value):
    net = _small_net("conv", "numpy")
    out = net(np.ones((1, 2, 6, 6)))
    with pytest.raises(TypeError, match=r"`input_grad` must be True or False"):
        net.backward(np.ones_like(out), input_grad=value)
    with pytest.raises(TypeError, match=r"`input_grad` must be True or False"):
        net[0].run_backward(np.ones((1, 4, 6, 6)), input_grad=value)
