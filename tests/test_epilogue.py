"""activation='relu' / 'relu6' and relu_output=: every backend, against the float64 reference."""

from __future__ import annotations

import re

import numpy as np
import pytest

import convsuite as cs
from convsuite import _epilogue
from convsuite.testing import (
    assert_within,
    backward_tolerances,
    forward_tolerance,
    reference_backward,
    reference_forward,
)

CASES = [
    ((2, 4, 9, 8), (6, 4, 3, 3), dict(padding=1)),
    ((1, 4, 11, 10), (6, 2, 3, 2), dict(stride=2, padding="same", groups=2, dilation=(1, 2))),
    ((2, 3, 17), (5, 3, 4), dict(padding="full")),
    ((13,), (3,), dict(padding=1)),
]


def _ops(w):
    one_d = w.ndim in (1, 3)
    return (cs.conv1d, cs.conv1d_backward) if one_d else (cs.conv2d, cs.conv2d_backward)


def _relu(a):
    return np.where(a < 0, 0, a)


#: The activations as the float64 reference applies them (both are 1-Lipschitz, so the
#: convolution's tolerance holds after them).
ACTIVATIONS = {"relu": _relu, "relu6": lambda a: np.clip(a, 0, 6)}


@pytest.mark.parametrize("x_shape, w_shape, kw", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_forward_activation_matches_reference(backend, x_shape, w_shape, kw, dtype, activation):
    rng = np.random.default_rng(len(x_shape) + sum(w_shape))
    x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
    x *= 4  # outputs beyond 6 too, so relu6's upper bound is exercised
    bias = rng.standard_normal(w_shape[0]).astype(dtype) if w.ndim > 2 else None
    fwd, _ = _ops(w)
    spec = cs.explain(x, w, bias, **kw).spec
    y = np.asarray(fwd(x, w, bias, backend=backend, activation=activation, **kw))
    assert y.dtype == dtype and (y >= 0).all()
    ref = reference_forward(spec, x, w, bias)
    assert (ref < 0).any() and (ref > 6).any()  # the case exercises every piece of the activation
    if activation == "relu6":
        assert (y <= 6).all()
    tol = forward_tolerance(spec, x, w, bias)
    assert_within(y.reshape(spec.y_shape), ACTIVATIONS[activation](ref), tol, f"{backend} {activation}")


@pytest.mark.parametrize("x_shape, w_shape, kw", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_backward_through_relu_matches_reference(backend, x_shape, w_shape, kw, dtype):
    rng = np.random.default_rng(7 + len(x_shape))
    x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
    fwd, bwd = _ops(w)
    spec = cs.explain(x, w, **kw).spec
    y = fwd(x, w, backend="numpy", activation="relu", **kw)
    gy = rng.standard_normal(y.shape).astype(dtype)
    got = bwd(gy, x, w, backend=backend, relu_output=y, **kw)
    masked = np.where(y <= 0, 0, gy).reshape(spec.y_shape)
    for name, g, ref, tol in zip(
        "xwb", got, reference_backward(spec, masked, x, w), backward_tolerances(spec, masked, x, w)
    ):
        g = np.asarray(g)
        assert g.dtype == dtype
        assert_within(g.reshape(ref.shape), ref, tol, f"{backend} grad_{name} through relu")


def test_relu_keeps_nan_and_masks_like_torch():
    out = np.array([-1.0, -0.0, 0.0, 2.0, np.nan])
    _epilogue.apply_activation("relu", out, np)
    np.testing.assert_array_equal(out[:4], [0.0, 0.0, 0.0, 2.0])
    assert np.isnan(out[4])
    out = np.array([-np.inf, -1.0, 0.0, 2.5, 6.0, 7.0, np.inf, np.nan], dtype=np.float32)
    _epilogue.apply_activation("relu6", out, np)  # torch.nn.functional.relu6 (hardtanh(0, 6))
    np.testing.assert_array_equal(out[:7], [0.0, 0.0, 0.0, 2.5, 6.0, 6.0, 6.0])
    assert np.isnan(out[7]) and out.dtype == np.float32
    # threshold_backward: the gradient passes where the output is not <= 0 (NaN outputs pass it)
    y = np.array([0.0, 3.0, np.nan, -0.0])
    np.testing.assert_array_equal(_epilogue.mask_relu_gradient(np.ones(4), y, np), [0.0, 1.0, 1.0, 0.0])


def test_no_activation_is_the_plain_convolution():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((3, 2, 3, 3))
    np.testing.assert_array_equal(cs.conv2d(x, w, activation=None), cs.conv2d(x, w))
    gy = rng.standard_normal((1, 3, 4, 4))
    for a, b in zip(cs.conv2d_backward(gy, x, w, relu_output=None), cs.conv2d_backward(gy, x, w)):
        np.testing.assert_array_equal(a, b)


FUSED_CASES = [
    ((2, 6, 9, 8), (10, 6, 3, 3), dict(padding=1, stride=(1, 2))),
    ((1, 8, 3, 4), (40, 8, 1, 1), {}),  # 1x1 with more output channels than pixels: split by channels
    ((1, 8, 3, 4), (44, 8, 1, 1), {}),  # ... with a partial last channel block
    ((2, 8, 2, 3), (42, 4, 1, 1), dict(groups=2)),  # ... per group
    ((2, 8, 12, 11), (16, 8, 1, 1), {}),
    ((2, 6, 13, 12), (12, 1, 3, 3), dict(padding=1, groups=6)),
    ((1, 4, 15, 14), (4, 1, 5, 5), dict(stride=2, padding=2, groups=4)),
    ((2, 3, 40), (6, 3, 5), dict(padding="same")),
]


@pytest.mark.parametrize("name", ["numba", "cython", "numpy", "python", "joblib"])
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_kernels_that_fuse_the_epilogue_match_the_reference(name, activation):
    """Every CPU algorithm that applies the activation inside its kernel, pinned, on every case it runs."""
    info = {b.name: b for b in cs.list_backends()}.get(name)
    if info is None or not info.available:
        pytest.skip(f"backend {name!r} unavailable")
    backend = cs._registry.get_backend(name)
    rng = np.random.default_rng(11)
    fused = set()
    for x_shape, w_shape, kw in FUSED_CASES:
        x = 4 * rng.standard_normal(x_shape).astype(np.float32)
        w, bias = rng.standard_normal(w_shape).astype(np.float32), rng.standard_normal(w_shape[0]).astype(np.float32)
        fwd, _ = _ops(w)
        spec = cs.explain(x, w, bias, backend=name, **kw).spec
        ref = reference_forward(spec, x, w, bias)
        for algorithm in backend.algorithms:
            if backend.can_run(spec, algorithm, "forward") is not True:
                continue
            if not _epilogue.backend_fuses(backend, spec, algorithm, activation):
                continue
            with cs.testing.poisoned_outputs():
                y = fwd(x, w, bias, backend=name, algorithm=algorithm, activation=activation, **kw)
            tol = forward_tolerance(spec, x, w, bias)
            assert_within(y, ACTIVATIONS[activation](ref), tol, f"{name} {algorithm} {activation} {x_shape}")
            fused.add(algorithm)
    # The kernels with an epilogue (each run on some case); every other CPU algorithm applies it after.
    assert fused == ({"gemm", "depthwise"} if name == "numba" else set())


def test_a_kernel_module_backend_refuses_epilogues_its_kernels_lack():
    """Direct plan requests name the algorithm and the refused direction; bad parameters name the accepted ones."""
    info = {b.name: b for b in cs.list_backends()}["numba"]
    if not info.available:
        pytest.skip(f"numba unavailable: {info.reason}")
    backend = cs._registry.get_backend("numba")
    spec = cs.explain(np.ones((1, 2, 5, 5), np.float32), np.ones((4, 1, 3, 3), np.float32), groups=2, padding=1).spec
    assert backend.fuses_activation(spec, "depthwise", "relu6") and not backend.fuses_activation(spec, "direct", "relu")
    assert not backend.fuses_activation(spec, "gemm", "tanh") and not backend.fuses_activation(spec, "gemm", None)
    refused = (
        ("gemm", "forward+tanh"),
        ("direct", "forward+relu"),
        ("gemm", "backward+relu6"),
        ("gemm", "forward+weights"),
        ("direct", "backward+weights"),
        ("direct", "backward+relu"),
        ("gemm", "backward+relu+sideways"),
    )
    for algorithm, direction in refused:
        with pytest.raises(
            ValueError, match=rf"'{algorithm}' of backend 'numba' does not plan '{re.escape(direction)}'"
        ):
            backend.plan(spec, algorithm, direction)
    with pytest.raises(ValueError, match=r"'gemm' has no tunable parameter 'nope' \(its parameters: tile_kib"):
        backend.plan(spec, "gemm", "forward+relu", {"nope": 1})


def test_cpu_backends_apply_the_epilogue_after_their_kernel():
    for name in ("python", "numpy"):
        backend = cs._registry.get_backend(name)
        spec = cs.explain(np.ones((1, 1, 4, 4)), np.ones((1, 1, 3, 3))).spec
        assert _epilogue.backend_fuses(backend, spec, "auto", "relu") is False


@pytest.mark.parametrize(
    "value, error, words",
    [
        ("tanh", ValueError, ["`activation`", "'relu'", "'relu6'", "'tanh'"]),
        ("relu7", ValueError, ["`activation`", "'relu6'", "'relu7'"]),
        ("ReLU", ValueError, ["`activation`", "'relu'", "'ReLU'"]),
        (1, TypeError, ["`activation`", "None", "1"]),
        (np.array([1.0]), TypeError, ["`activation`", "ndarray"]),
    ],
)
def test_bad_activation_is_named(value, error, words):
    with pytest.raises(error) as info:
        cs.conv2d(np.ones((1, 1, 4, 4)), np.ones((1, 1, 3, 3)), activation=value)
    for word in words:
        assert word in str(info.value)


def test_bad_relu_output_is_named():
    x, w = np.ones((1, 2, 5, 5)), np.ones((3, 2, 3, 3))
    gy = np.ones((1, 3, 3, 3))
    with pytest.raises(
        ValueError, match=r"`relu_output` must have the shape of the forward output.*\(1, 3, 3, 3\).*\(3, 3\)"
    ):
        cs.conv2d_backward(gy, x, w, relu_output=np.ones((3, 3)))
    with pytest.raises(TypeError, match="relu_output"):
        cs.conv2d_backward(gy, x, w, relu_output="not an array")
    with pytest.raises(TypeError, match="relu_output"):
        cs.conv2d_backward(gy, x, w, relu_output=np.ones((1, 3, 3, 3), dtype=complex))
