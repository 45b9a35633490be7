"""The ReLU mask read inside the cupy backward kernels (``relu_output=``): GPU only, ``pytest -m gpu``.

For every algorithm of ``FUSED_RELU_MASK`` and every route its backward takes
(stride-1 dX through register_tiled or the implicit GEMM, the gather dX of
other strides, depthwise, the dW ladder), the gradients through the ReLU
computed with the mask inside the kernels must equal the unfused path (the
same algorithm on a masked copy of grad_y) to a few rounding errors, and the
float64 reference within its tolerance, with relu_output holding exact
zeros, negatives and NaN (NaN passes the gradient, as
``torch.threshold_backward``). Outputs are poisoned (conftest). Without cupy
or a CUDA device every test here is skipped with the reason.
"""

from __future__ import annotations

import numpy as np
import pytest

import convsuite as cs
from convsuite import _epilogue
from convsuite.backends.cupy._catalog import FUSED_RELU_MASK, RECORDS
from convsuite.testing import assert_within, backward_tolerances, reference_backward

INFO = {b.name: b for b in cs.list_backends()}["cupy"]
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not INFO.available, reason=f"cupy backend unavailable: {INFO.reason}"),
]

LADDER = ("wgrad_atomic", "wgrad_shuffle", "wgrad_registers", "wgrad_padded")

# Each route of the masked backward: stride-1 dX as register_tiled (<= 24
# input channels per group) or as the implicit GEMM (more; 72 output channels
# take igemm_big's 128-row dW tiles and its chunked gather, 36 its table
# gather), the gather dX of strides > 1, groups with dilation and asymmetric
# padding, depthwise (compiled K and S, and the general kernel), the ECE408
# 5x5 valid layer, a 1-D case (run as height 1), sizes that divide no tile (the
# tests below pick cases by index: new ones go last).
CASES = [
    ((2, 8, 15, 17), (12, 8, 3, 3), dict(padding=1)),
    ((2, 40, 11, 13), (72, 40, 3, 3), dict(padding=1)),
    ((2, 6, 15, 16), (10, 6, 3, 3), dict(stride=2, padding=1)),
    ((2, 4, 15, 16), (6, 2, 3, 3), dict(stride=2, dilation=2, padding=((2, 0), (1, 3)), groups=2)),
    ((2, 6, 13, 14), (8, 3, 3, 3), dict(padding=1, groups=2)),
    ((2, 6, 15, 13), (12, 1, 3, 3), dict(groups=6, padding=1)),
    ((1, 4, 16, 17), (4, 1, 5, 5), dict(groups=4, stride=2, padding=2)),
    ((1, 3, 11, 12), (3, 1, 3, 2), dict(groups=3, dilation=2, padding=1)),
    ((2, 12, 11, 11), (24, 12, 5, 5), {}),
    ((2, 3, 40), (5, 3, 4), dict(padding="full")),
    ((2, 30, 9, 10), (36, 30, 3, 3), dict(padding=1)),
]


def _ops(w):
    return (cs.conv1d, cs.conv1d_backward) if w.ndim == 3 else (cs.conv2d, cs.conv2d_backward)


@pytest.fixture(autouse=True)
def _masked_kernels(monkeypatch):
    """These tests exercise the masked kernels, which the backend runs only when asked (see
    ``CupyBackend.relu_mask_in_kernels``); plans made under either setting are dropped."""
    backend = cs._registry.get_backend("cupy")
    monkeypatch.setattr(backend, "relu_mask_in_kernels", True, raising=False)
    cs.clear_plan_cache()
    yield
    cs.clear_plan_cache()


def test_by_default_relu_output_masks_a_copy_of_grad_y(monkeypatch):
    """Default: the masked copy (faster on the measured layers), with the same result as the masked kernels."""
    backend = cs._registry.get_backend("cupy")
    rng = np.random.default_rng(31)
    x, w = rng.standard_normal((2, 8, 13, 12)).astype(np.float32), rng.standard_normal((16, 8, 3, 3))
    w = w.astype(np.float32)
    y = _relu_output(rng, x, w, dict(padding=1))
    gy = rng.standard_normal(y.shape).astype(np.float32)
    in_kernels = cs.conv2d_backward(gy, x, w, padding=1, backend="cupy", algorithm="igemm_big", relu_output=y)
    monkeypatch.setattr(backend, "relu_mask_in_kernels", False)
    cs.clear_plan_cache()
    spec = cs.explain(x, w, padding=1).spec
    assert not backend.fuses_relu_mask(spec, "igemm_big")
    copies = []
    real = _epilogue.mask_relu_gradient
    monkeypatch.setattr(_epilogue, "mask_relu_gradient", lambda *a: copies.append(1) or real(*a))
    by_copy = cs.conv2d_backward(gy, x, w, padding=1, backend="cupy", algorithm="igemm_big", relu_output=y)
    assert copies
    masked = np.where(y <= 0, 0, gy).astype(np.float32)
    refs, tols = reference_backward(spec, masked, x, w), backward_tolerances(spec, masked, x, w)
    for name, a, b, ref, tol in zip("xwb", in_kernels, by_copy, refs, tols):
        assert_within(a, ref, tol, f"grad_{name} (mask in the kernels)")
        assert_within(b, ref, tol, f"grad_{name} (masked copy)")


def _relu_output(rng, x, w, kw):
    """A ReLU output with exact zeros (from the ReLU), planted negatives and NaN."""
    fwd, _ = _ops(w)
    y = np.asarray(fwd(x, w, backend="numpy", activation="relu", **kw)).copy()
    flat = y.reshape(-1)
    picks = rng.choice(flat.size, size=max(2, flat.size // 10), replace=False)
    flat[picks[::2]] = -1.5  # a negative "ReLU output": masked like 0
    flat[picks[1::2]] = np.nan  # NaN passes the gradient
    assert (y == 0).any() and (y < 0).any() and np.isnan(y).any() and (y > 0).any()
    return y


def _no_masked_copy(*args, **kwargs):
    raise AssertionError("the fused path made a masked copy of grad_y")


def _check(algorithm, x, w, kw, monkeypatch, relu_output=None):
    """Fused vs unfused vs reference for one case; False when the algorithm declines it."""
    backend = cs._registry.get_backend("cupy")
    spec = cs.explain(x, w, **kw).spec
    if backend.can_run(spec, algorithm, "backward") is not True:
        return False
    assert backend.fuses_relu_mask(spec, algorithm)
    rng = np.random.default_rng(sum(x.shape) + sum(w.shape))
    y = _relu_output(rng, x, w, kw) if relu_output is None else relu_output
    gy = rng.standard_normal(y.shape).astype(x.dtype)
    masked = np.where(y <= 0, 0, gy).astype(x.dtype)  # torch.threshold_backward
    _, bwd = _ops(w)
    with monkeypatch.context() as m:
        m.setattr(_epilogue, "mask_relu_gradient", _no_masked_copy)
        fused = bwd(gy, x, w, backend="cupy", algorithm=algorithm, relu_output=y, **kw)
    unfused = bwd(masked, x, w, backend="cupy", algorithm=algorithm, **kw)
    masked = masked.reshape(spec.y_shape)
    references = reference_backward(spec, masked, x, w)
    tolerances = backward_tolerances(spec, masked, x, w)
    magnitudes = reference_backward(spec, np.abs(masked), np.abs(x), np.abs(w))
    eps = np.finfo(x.dtype).eps
    for name, f, u, ref, tol, mag in zip("xwb", fused, unfused, references, tolerances, magnitudes):
        f, u = np.asarray(f).reshape(ref.shape), np.asarray(u).reshape(ref.shape)
        assert f.dtype == x.dtype
        assert_within(f, ref, tol, f"{algorithm} grad_{name} through relu (fused)")
        # The fused dX, dW and db kernels read the values the unfused ones read,
        # in the same order: a few roundings apart at most. The ladder's atomics
        # add in any order: they get the reference bound for their length.
        loose = algorithm in LADDER
        tight = tol if loose else 8 * eps * mag + np.finfo(np.float64).tiny
        assert_within(f, u.astype(np.float64), tight, f"{algorithm} grad_{name}: fused vs masked copy")
    return True


FUSED_CASES = [
    (algorithm, dtype)
    for algorithm in FUSED_RELU_MASK
    for dtype in (np.float32, np.float64)
    if not (algorithm == "igemm_big" and dtype == np.float64)  # float32 only (its can_run says why)
]


@pytest.mark.parametrize("algorithm, dtype", FUSED_CASES)
def test_fused_mask_matches_unfused_and_reference(algorithm, dtype, monkeypatch):
    rng = np.random.default_rng(3)
    ran = []
    for x_shape, w_shape, kw in CASES:
        x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
        if _check(algorithm, x, w, kw, monkeypatch):
            ran.append((x_shape, w_shape))
    assert ran, f"no case ran {algorithm!r}"
    if algorithm in ("fused_gemm", "igemm_big"):  # every dX route: register_tiled, implicit GEMM, gather
        assert len(ran) >= 5, ran


@pytest.mark.parametrize("algorithm", ["fused_gemm", "igemm_big", "depthwise"])
def test_relu_output_of_another_dtype_keeps_its_sign_test(algorithm, monkeypatch):
    """A float64 relu_output of float32 operands: 1e-50 > 0 passes (a cast to float32 would make it 0)."""
    rng = np.random.default_rng(8)
    x_shape, w_shape, kw = CASES[5] if algorithm == "depthwise" else CASES[0]
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    y = _relu_output(rng, x, w, kw).astype(np.float64)
    y.reshape(-1)[rng.choice(y.size, size=y.size // 5, replace=False)] = 1e-50
    assert np.float32(1e-50) == 0
    assert _check(algorithm, x, w, kw, monkeypatch, relu_output=y)
    ints = np.where(np.isnan(y), 1, np.sign(y) * 3).astype(np.int64)
    assert _check(algorithm, x, w, kw, monkeypatch, relu_output=ints)


def test_cupy_operands_and_the_backend_call(monkeypatch):
    """cupy arrays in, cupy arrays out; ``backend.backward(..., relu_output=)`` runs the same kernels."""
    import cupy as cp

    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((2, 8, 15, 17)).astype(np.float32), rng.standard_normal((12, 8, 3, 3))
    w = w.astype(np.float32)
    y = _relu_output(rng, x, w, dict(padding=1))
    gy = rng.standard_normal(y.shape).astype(np.float32)
    with monkeypatch.context() as m:
        m.setattr(_epilogue, "mask_relu_gradient", _no_masked_copy)
        got = cs.conv2d_backward(
            cp.asarray(gy), cp.asarray(x), cp.asarray(w), padding=1, backend="cupy", relu_output=cp.asarray(y)
        )
    assert all(isinstance(g, cp.ndarray) for g in got)
    spec = cs.explain(x, w, padding=1).spec
    backend = cs._registry.get_backend("cupy")
    algorithm = backend.choose_algorithm(spec, "backward")[0]
    assert algorithm in FUSED_RELU_MASK
    outs = [cp.full(shape, cp.nan, dtype=cp.float32) for shape in (spec.x_shape, spec.w_shape, (spec.out_channels,))]
    backend.backward(spec, cp.asarray(gy), cp.asarray(x), cp.asarray(w), *outs, algorithm, relu_output=cp.asarray(y))
    masked = np.where(y <= 0, 0, gy)
    for name, g, d, ref, tol in zip(
        "xwb", got, outs, reference_backward(spec, masked, x, w), backward_tolerances(spec, masked, x, w)
    ):
        assert_within(g.get(), ref, tol, f"grad_{name} (cupy operands)")
        assert_within(d.get(), ref, tol, f"grad_{name} (backend.backward)")


@pytest.mark.parametrize(
    "algorithm, kernel", [("pointwise_gemm", 1), ("im2col_gemm", 1), ("im2col_gemm", 3), ("tf32x3", 3)]
)
def test_non_fusing_algorithms_mask_a_copy_first(algorithm, kernel):
    """pointwise_gemm and im2col_gemm multiply inside cuBLAS, tf32x3 has no masked kernels: they say so,
    and the masked copy keeps them right."""
    backend = cs._registry.get_backend("cupy")
    backward = [name for name, r in RECORDS.items() if "backward" in r.directions]
    assert set(backward) - set(FUSED_RELU_MASK) == {"pointwise_gemm", "im2col_gemm", "tf32x3"}
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((2, 8, 9, 10)).astype(np.float32), rng.standard_normal((12, 8, kernel, kernel))
    w = w.astype(np.float32)
    kw = dict(padding=kernel // 2)
    spec = cs.explain(x, w, **kw).spec
    y = _relu_output(rng, x, w, kw)
    gy = rng.standard_normal(y.shape).astype(np.float32)
    masked = np.where(y <= 0, 0, gy)
    assert not backend.fuses_relu_mask(spec, algorithm)
    with cs.testing.poisoned_outputs():
        got = cs.conv2d_backward(gy, x, w, backend="cupy", algorithm=algorithm, relu_output=y, **kw)
    refs, tols = reference_backward(spec, masked, x, w), backward_tolerances(spec, masked, x, w)
    for name, g, ref, tol in zip("xwb", got, refs, tols):
        assert_within(g, ref, tol, f"{algorithm} grad_{name} through relu (masked copy)")


def test_nonfinite_grad_y_under_the_mask_in_padding():
    """An inf of grad_y where the ReLU output is 0, at a border output: masked, so no NaN taps (as torch)."""
    rng = np.random.default_rng(12)
    x, w = rng.standard_normal((1, 3, 8, 9)).astype(np.float32), rng.standard_normal((4, 3, 3, 3))
    w = w.astype(np.float32)
    y = _relu_output(rng, x, w, dict(padding=1))
    y = np.nan_to_num(y, nan=1.0)
    gy = rng.standard_normal(y.shape).astype(np.float32)
    y[0, 0, 0, 0], gy[0, 0, 0, 0] = 0.0, np.inf  # masked: contributes nothing
    y[0, 1, 0, 0], gy[0, 1, 0, 0] = 2.0, np.inf  # passes: channel 1's border taps are NaN
    want = cs.conv2d_backward(gy, x, w, padding=1, backend="numpy", relu_output=y)[1]
    assert np.isnan(want[1]).any() and not np.isnan(want[0]).any()
    for algorithm in ("fused_gemm", "igemm_big"):
        got = cs.conv2d_backward(gy, x, w, padding=1, backend="cupy", algorithm=algorithm, relu_output=y)[1]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=algorithm)
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=algorithm)
