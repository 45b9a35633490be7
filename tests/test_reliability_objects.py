"""Objects users keep and copy: layers and plans pickle and deep-copy; Dask through every entry point.

Layers pickle their configuration and parameters, plans the recipe that
builds them again; the copies compute bit for bit what the originals do.
Plans run in-memory arrays (a Dask array is refused with a pointer to
``cs.conv2d``), while layers and the functions take Dask arrays lazily,
whatever their chunks (zero-size ones included) and whatever array-likes
come with them.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import convsuite as cs
from convsuite.backends.numpy_backend import NumpyBackend

from .conftest import BACKENDS

da = pytest.importorskip("dask.array", reason="the dask extra is not installed")

RNG = np.random.default_rng(11)
X = RNG.standard_normal((2, 3, 9, 8)).astype(np.float32)
W = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
B = RNG.standard_normal(4).astype(np.float32)

#: The CPU backends whose copies must agree bit for bit with their originals.
EXACT_BACKENDS = ["numpy", "cython", "numba"]


def _available(name: str) -> str:
    """``name``, or a skip saying why that backend is unavailable here."""
    info = BACKENDS[name]
    if not info.available:
        pytest.skip(f"backend {name!r} unavailable: {info.reason}")
    return name


def _layer(cls, **keywords):
    """A seeded layer that has run forward and backward once (so it holds plans)."""
    layer = cls(3, 4, 3, padding=1, seed=0, **keywords)
    x = X if cls is cs.Conv2D else X[:, :, 0]
    y = layer(x)
    layer.backward(np.ones_like(y), x)
    return layer, x


def _assert_same_results(first, second, x):
    """Forward and backward of two layers agree bit for bit."""
    y = first(x)
    np.testing.assert_array_equal(second(x), y)
    for got, want in zip(second.backward(np.ones_like(y), x), first.backward(np.ones_like(y), x)):
        np.testing.assert_array_equal(got, want)


# --- 1. layers and plans pickle and deep-copy ------------------------------


@pytest.mark.parametrize("cls", [cs.Conv1D, cs.Conv2D])
def test_layer_deep_copy_after_a_call_has_independent_weights(cls):
    layer, x = _layer(cls)
    twin = copy.deepcopy(layer)
    _assert_same_results(layer, twin, x)
    before = layer.weight.copy()
    twin.weight += 1
    twin.bias[:] = 0
    np.testing.assert_array_equal(layer.weight, before)
    assert not np.array_equal(layer(x), twin(x))


@pytest.mark.parametrize("cls", [cs.Conv1D, cs.Conv2D])
@pytest.mark.parametrize("backend", [None, *EXACT_BACKENDS])
def test_layer_pickles_after_a_call_and_computes_the_same(cls, backend):
    if backend is not None:
        _available(backend)
    layer, x = _layer(cls, backend=backend, bias=backend != "cython", dtype="float64")
    loaded = pickle.loads(pickle.dumps(layer))
    assert repr(loaded) == repr(layer) and loaded.backend == backend
    _assert_same_results(layer, loaded, x)


def test_layer_pickle_holds_parameters_not_plans():
    layer, _ = _layer(cs.Conv2D)
    loaded = pickle.loads(pickle.dumps(layer))
    np.testing.assert_array_equal(loaded.weight, layer.weight)
    np.testing.assert_array_equal(loaded.bias, layer.bias)
    # The pickle is the parameters and the configuration: a plan would add kernels and closures.
    assert len(pickle.dumps(layer)) < layer.weight.nbytes + layer.bias.nbytes + 2048


def _plan_cases():
    """(x, w, bias, keywords) of the layouts and geometries a plan pickles."""
    signal = RNG.standard_normal(40)
    return [
        (X, W, B, dict(padding=1)),
        (X, W, None, dict(stride=2, padding="same", dilation=(1, 2))),
        (
            X.astype(np.float64),
            RNG.standard_normal((6, 1, 2, 3)),
            RNG.standard_normal(6),
            dict(groups=3, padding="full"),
        ),
        (X[0, :, 0], W[:, :, 0], B, dict(padding=((2, 0),))),  # unbatched 1-D
        (signal, np.ones(5) / 5, None, dict(padding="same")),  # a plain signal
    ]


@pytest.mark.parametrize("backend", EXACT_BACKENDS)
@pytest.mark.parametrize("case", range(5))
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_plan_pickles_as_its_recipe_and_computes_the_same(backend, case, direction):
    _available(backend)
    x, w, bias, keywords = _plan_cases()[case]
    if direction == "backward":
        bias = None
    try:
        original = cs.plan(x, w, bias, backend=backend, direction=direction, dtype=x.dtype, **keywords)
    except cs.UnsupportedCaseError:
        pytest.skip(f"{backend} does not run case {case} {direction}")
    for loaded in (pickle.loads(pickle.dumps(original)), copy.deepcopy(original)):
        assert loaded is not original and repr(loaded) == repr(original)
        assert (loaded.backend.name, loaded.algorithm, loaded.params) == (
            original.backend.name,
            original.algorithm,
            original.params,
        )
        assert loaded.spec == original.spec and loaded.decision == original.decision
        if direction == "forward":
            operands, extra = (x, w), {"bias": bias}
        else:
            y = cs.conv1d(x, w, **keywords) if w.ndim in (1, 3) else cs.conv2d(x, w, **keywords)
            operands, extra = (RNG.standard_normal(y.shape).astype(x.dtype), x, w), {}
        want, got = original(*operands, **extra), loaded(*operands, **extra)
        for a, b in zip(*((want, got) if direction == "backward" else ((want,), (got,)))):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", ["numba", "cython"])
def test_plan_pickle_keeps_pinned_parameters(backend):
    _available(backend)
    original = cs.plan(X, W, B, padding=1, backend=backend, algorithm="direct", params={"tile_w": 32})
    loaded = pickle.loads(pickle.dumps(original))
    assert loaded.params == original.params and loaded.params["tile_w"] == 32
    np.testing.assert_array_equal(loaded(X, W, B), original(X, W, B))


def test_plan_pickle_keeps_the_activation_epilogue():
    from convsuite import _planner

    original = _planner.planned(2, "forward", X, W, B, 1, 1, 1, 1, "numpy", "auto", activation="relu6")
    loaded = pickle.loads(pickle.dumps(original))
    want = original(X, W, B)
    assert want.min() == 0 and want.max() == 6  # the epilogue ran
    np.testing.assert_array_equal(loaded(X, W, B), want)


class _Flaky(NumpyBackend):
    """The numpy backend under another name, whose availability a test switches off."""

    name = "flaky_numpy"
    up = True

    def available(self):
        return True if self.up else "its device was unplugged (a test)"


def test_unpickling_a_plan_whose_backend_is_unavailable_says_why():
    flaky = _Flaky()
    cs.register_backend(flaky)
    try:
        pickled = pickle.dumps(cs.plan(X, W, B, padding=1, backend="flaky_numpy"))
        assert pickle.loads(pickled).backend is flaky
        flaky.up = False
        cs.clear_plan_cache()
        with pytest.raises(cs.BackendUnavailableError, match="unplugged"):
            pickle.loads(pickled)
    finally:
        cs.unregister_backend("flaky_numpy")
    with pytest.raises(ValueError, match="`backend` must be one of .*got 'flaky_numpy'"):
        pickle.loads(pickled)


# --- 2. plans are for in-memory arrays ----------------------------------


@pytest.mark.parametrize("which", ["x", "w", "bias"])
def test_plan_refuses_a_dask_operand_and_points_to_conv2d(which):
    operands = {"x": X, "w": W, "bias": B}
    operands[which] = da.from_array(operands[which], chunks=2)
    with pytest.raises(TypeError, match=rf"`{which}` must be an in-memory array .*got a Dask array.*cs\.conv2d"):
        cs.plan(operands["x"], operands["w"], operands["bias"], padding=1)


@pytest.mark.parametrize("function", [cs.explain, cs.tune])
def test_explain_and_tune_refuse_a_dask_operand_instead_of_computing_it(function):
    """Both speak of one in-memory problem; reading a Dask operand computed the whole array."""
    computed = []

    def block(chunk):
        computed.append(chunk.shape)
        return chunk

    x = da.from_array(X, chunks=1).map_blocks(block, dtype=X.dtype, meta=np.empty((0,) * X.ndim, X.dtype))
    with pytest.raises(TypeError, match=r"`x` must be an in-memory array .*for (explain|tune); got a Dask array"):
        function(x, W, padding=1)
    assert computed == []


# --- 3. layers: Dask in, Dask out ------------------------------------------


@pytest.mark.parametrize("cls", [cs.Conv1D, cs.Conv2D])
def test_layer_with_a_dask_input_is_lazy_and_agrees(cls):
    layer = cls(3, 4, 3, padding=1, stride=2, seed=0, dtype="float64")
    x = X.astype(np.float64) if cls is cs.Conv2D else X[:, :, 0].astype(np.float64)
    lazy = layer(da.from_array(x, chunks=(1, 3) + (4,) * (x.ndim - 2)))
    assert isinstance(lazy, da.Array)
    want = layer(x)
    np.testing.assert_allclose(lazy.compute(), want, rtol=1e-12, atol=1e-12)
    grad_y = RNG.standard_normal(want.shape)
    grads = layer.backward(da.from_array(grad_y, chunks=1), da.from_array(x, chunks=1))
    assert all(isinstance(g, da.Array) for g in grads)
    for got, expected in zip(grads, layer.backward(grad_y, x)):
        np.testing.assert_allclose(got.compute(), expected, rtol=1e-12, atol=1e-12)


def test_layer_without_bias_returns_no_lazy_bias_gradient():
    layer = cs.Conv2D(3, 4, 3, bias=False, seed=0)
    y = layer(da.from_array(X, chunks=1))
    assert isinstance(y, da.Array)
    _, _, grad_b = layer.backward(da.ones(y.shape, dtype=np.float32, chunks=1), da.from_array(X, chunks=1))
    assert grad_b is None


# --- 4. tune refuses what plan refuses ---------------------------------------


def test_tune_refuses_a_backward_bias_with_plans_message():
    with pytest.raises(ValueError) as planned:
        cs.plan(X, W, B, direction="backward")
    with pytest.raises(ValueError) as tuned:
        cs.tune(X, W, B, direction="backward", backend="numpy", budget_s=0)
    assert str(tuned.value) == str(planned.value)
    assert "`bias`" in str(tuned.value)


# --- 5. Dask operands with zero-size chunks ----------------------------------


def test_dask_kernel_with_a_zero_size_chunk():
    image, kernel = RNG.standard_normal((6, 6)), np.ones((3, 1))
    lazy = da.from_array(kernel, chunks=((3,), (0, 1)))
    got = cs.conv2d(da.from_array(image, chunks=3), lazy).compute()
    np.testing.assert_allclose(got, cs.conv2d(image, kernel), rtol=1e-12)


def test_dask_signal_mask_with_a_zero_size_chunk():
    signal = np.arange(6.0)
    got = cs.conv1d(da.from_array(signal, chunks=2), da.from_array(np.ones(1), chunks=((0, 1),))).compute()
    np.testing.assert_allclose(got, cs.conv1d(signal, np.ones(1)))


def _zero_chunked(array, chunks):
    """``array`` as a Dask array of ``chunks`` (zero-size ones included)."""
    return da.from_array(array, chunks=chunks)


def test_every_dask_operand_with_zero_size_chunks_agrees_with_numpy():
    x, w, bias = X.astype(np.float64), W.astype(np.float64), B.astype(np.float64)
    dx = _zero_chunked(x, ((0, 2), (1, 0, 2), (4, 0, 5), (0, 8)))
    dw = _zero_chunked(w, ((0, 4), (3, 0), (0, 3), (3,)))
    dbias = _zero_chunked(bias, ((0, 4, 0),))
    y = cs.conv2d(x, w, bias, padding=1)
    np.testing.assert_allclose(cs.conv2d(dx, dw, dbias, padding=1).compute(), y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cs.conv2d(dx[0], dw, dbias, padding=1).compute(), y[0], rtol=1e-12, atol=1e-12)
    grad_y, relu = RNG.standard_normal(y.shape), RNG.standard_normal(y.shape)
    dgy = _zero_chunked(grad_y, ((0, 2), (2, 0, 2), (0, 9), (8, 0)))
    drelu = _zero_chunked(relu, ((1, 1, 0), (0, 4), (9,), (2, 0, 6)))
    want = cs.conv2d_backward(grad_y, x, w, padding=1, relu_output=relu)
    got = cs.conv2d_backward(dgy, dx, dw, padding=1, relu_output=drelu)
    for lazy, expected in zip(got, want):
        np.testing.assert_allclose(lazy.compute(), expected, rtol=1e-12, atol=1e-12)


def test_dask_signal_backward_with_zero_size_chunks():
    signal, mask = RNG.standard_normal(6), np.ones(3)
    grad_y = RNG.standard_normal(4)
    want = cs.conv1d_backward(grad_y, signal, mask)
    got = cs.conv1d_backward(
        _zero_chunked(grad_y, ((0, 2, 2),)), _zero_chunked(signal, ((0, 3, 3, 0),)), _zero_chunked(mask, ((0, 3),))
    )
    for lazy, expected in zip(got, want):
        np.testing.assert_allclose(lazy.compute(), expected, rtol=1e-12, atol=1e-12)


# --- 6. array-likes beside a Dask operand -------------------------------------


def test_list_grad_y_with_a_dask_x_reads_as_with_a_numpy_x():
    want = cs.conv1d_backward([1.0] * 6, np.ones(8), np.ones(3))
    got = cs.conv1d_backward([1.0] * 6, da.ones(8, chunks=4), np.ones(3))
    for lazy, expected in zip(got, want):
        np.testing.assert_allclose(lazy.compute(), expected)


def test_lists_beside_dask_operands_read_as_in_memory():
    signal, grad_y = RNG.standard_normal(8), RNG.standard_normal(6)
    relu = [1.0, -1.0, 2.0, 0.0, 3.0, -2.0]
    want = cs.conv1d_backward(grad_y, signal, [1.0, 2.0, 3.0], relu_output=relu)
    beside_x = cs.conv1d_backward(list(grad_y), da.from_array(signal, chunks=4), [1, 2, 3], relu_output=relu)
    beside_gy = cs.conv1d_backward(da.from_array(grad_y, chunks=3), list(signal), [1.0, 2.0, 3.0], relu_output=relu)
    for got in (beside_x, beside_gy):
        for lazy, expected in zip(got, want):
            np.testing.assert_allclose(lazy.compute(), expected, rtol=1e-12, atol=1e-12)
    forward = cs.conv1d(da.from_array(signal, chunks=4), [1.0, 2.0, 3.0], [0.5])
    np.testing.assert_allclose(forward.compute(), cs.conv1d(signal, [1.0, 2.0, 3.0], [0.5]), rtol=1e-12)


def test_bad_array_likes_beside_dask_are_refused_naming_the_parameter():
    with pytest.raises(TypeError, match="`grad_y` must have a real numeric dtype"):
        cs.conv1d_backward([True] * 6, da.ones(8, chunks=4), np.ones(3))
    with pytest.raises(TypeError, match="`relu_output` must have a real numeric dtype"):
        cs.conv1d_backward(np.ones(6), da.ones(8, chunks=4), np.ones(3), relu_output=["a"] * 6)
