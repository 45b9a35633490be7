"""GPU-only tests of the cupy backend: run on a GPU machine with `pytest -m gpu`.

Without cupy or a CUDA device every test here is skipped with that reason;
the cross-backend suite covers `cupy` automatically where it is available.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings

import convsuite as cs
from convsuite.backends.cupy._catalog import FUSED_ACTIVATION
from convsuite.backends.cupy_backend import ALGORITHMS, ONE_D_ALGORITHMS
from convsuite.testing import (
    assert_within,
    backward_tolerances,
    forward_tolerance,
    reference_backward,
    reference_forward,
)

from .cases import cases
from .test_agreement import _spec

INFO = {b.name: b for b in cs.list_backends()}["cupy"]
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not INFO.available, reason=f"cupy backend unavailable: {INFO.reason}"),
]


def _cupy():
    import cupy

    return cupy


def _can_run(spec, algorithm, direction="forward"):
    return cs._registry.get_backend("cupy").can_run(spec, algorithm, direction)


BACKWARD_ALGORITHMS = tuple(
    name
    for name, record in cs._registry.get_backend("cupy").algorithm_table().items()
    if "backward" in record.directions
)


def _check_backward(x, w, algorithm, kw, seed=0):
    """Gradients of one case through ``algorithm`` against the float64 reference (outputs poisoned)."""
    one_d = w.ndim in (1, 3)  # a plain kernel (K,) or (M, Cg, K)
    fwd, bwd = (cs.conv1d, cs.conv1d_backward) if one_d else (cs.conv2d, cs.conv2d_backward)
    spec = cs.explain(x, w, **kw).spec
    gy = np.random.default_rng(seed).standard_normal(fwd(x, w, backend="numpy", **kw).shape).astype(x.dtype)
    with cs.testing.poisoned_outputs():
        got = bwd(gy, x, w, backend="cupy", algorithm=algorithm, **kw)
    for name, g, ref, tol in zip("xwb", got, reference_backward(spec, gy, x, w), backward_tolerances(spec, gy, x, w)):
        assert g.dtype == x.dtype
        assert_within(np.reshape(g, ref.shape), ref, tol, f"{algorithm} grad_{name}")


FORWARD_ALGORITHMS = tuple(
    name for name in ALGORITHMS if "forward" in cs._registry.get_backend("cupy").algorithm_table()[name].directions
)


@pytest.mark.parametrize("algorithm", FORWARD_ALGORITHMS)
def test_every_algorithm_matches_reference(algorithm):
    ran = []
    # 1-D algorithms draw 1-D cases only; some algorithms still reject many
    # draws (stride 1 only, shared-memory limits), which is expected here.
    # The tensor-core ones decline reductions under 32 products: they draw
    # 4-12 channels per group, or too few draws could run (hypothesis:
    # Unsatisfiable, 459 of 459 rejected for tf32x3_image on one seed).
    channels = (4, 12) if algorithm in ("tf32x3", "tf32x3_image") else (1, 3)
    if algorithm in ONE_D_ALGORITHMS:
        strategy = cases(1)
    else:
        strategy = cases(1, channels=channels) | cases(2, channels=channels)

    @settings(max_examples=40, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
    @given(case=strategy)
    def run(case):
        x, w, b = case.arrays()
        spec = _spec(case, x, w, b)
        assume(_can_run(spec, algorithm) is True)
        fn = cs.conv1d if case.ndim == 1 else cs.conv2d
        with cs.testing.poisoned_outputs():
            y = fn(x, w, b, backend="cupy", algorithm=algorithm, **case.keywords)
        assert isinstance(y, np.ndarray) and y.dtype == case.dtype
        assert_within(
            np.reshape(y, spec.y_shape), reference_forward(spec, x, w, b), forward_tolerance(spec, x, w, b), algorithm
        )
        ran.append(1)

    run()
    assert ran, f"no random case could run {algorithm!r}"


@pytest.mark.parametrize("algorithm", BACKWARD_ALGORITHMS)
def test_every_backward_algorithm_matches_reference(algorithm):
    ran = []

    channels = (4, 12) if algorithm == "tf32x3" else (1, 3)  # as the forward test: long enough reductions

    @settings(max_examples=40, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
    @given(case=cases(1, channels=channels) | cases(2, channels=channels))
    def run(case):
        x, w, _ = case.arrays()
        spec = _spec(case, x, w, None)
        assume(_can_run(spec, algorithm, "backward") is True)
        _check_backward(np.ascontiguousarray(x), w, algorithm, case.keywords, seed=case.seed)
        ran.append(1)

    run()
    assert ran, f"no random case could run {algorithm!r} backward"


# Layer classes the dedicated kernels are for, with the awkward edges: every
# compile-time (kernel, stride) instantiation and the general path (odd
# kernels, dilation, asymmetric padding, channel multipliers), sizes that do
# not divide the per-thread output blocks.
DEPTHWISE_CASES = [
    ((2, 6, 13, 11), (6, 1, 3, 3), dict(padding=1, groups=6)),
    ((2, 6, 14, 15), (6, 1, 3, 3), dict(stride=2, padding=1, groups=6)),
    ((1, 4, 17, 9), (4, 1, 5, 5), dict(padding="same", groups=4)),
    ((2, 4, 17, 19), (4, 1, 5, 5), dict(stride=2, padding=2, groups=4)),
    ((1, 3, 16, 16), (3, 1, 7, 7), dict(padding=3, groups=3)),
    ((1, 3, 21, 20), (3, 1, 7, 7), dict(stride=2, padding="same", groups=3)),
    ((2, 4, 12, 13), (8, 1, 3, 2), dict(stride=(2, 1), padding=((1, 0), (2, 1)), dilation=(1, 2), groups=4)),
    ((2, 5, 9, 10), (10, 1, 3, 3), dict(stride=3, dilation=2, padding="full", groups=5)),
    ((3, 4, 50), (4, 1, 5), dict(padding="same", groups=4)),
]
POINTWISE_CASES = [
    ((2, 12, 7, 9), (5, 12, 1, 1), {}),
    ((3, 8, 6, 5), (6, 4, 1, 1), dict(groups=2)),
    ((2, 6, 31), (8, 3, 1), dict(groups=2)),
    ((1, 96, 14, 14), (24, 96, 1, 1), dict(padding="same")),
    ((2, 70, 33, 32), (40, 70, 1, 1), {}),  # two channel blocks, chunks of 32 input channels, float4 rows
    ((3, 40, 1025), (33, 40, 1), {}),  # 1-D, pixels past one block, an odd row length (no float4)
]
GENERAL_BACKWARD_CASES = [
    ((2, 5, 11, 10), (7, 5, 3, 3), dict(padding=1)),
    ((2, 6, 13, 12), (4, 3, 3, 2), dict(stride=2, padding="same", dilation=(2, 1), groups=2)),
    ((1, 70, 9, 9), (66, 70, 3, 3), dict(stride=(1, 3), padding=((2, 0), (1, 1)))),
    ((3, 3, 40), (5, 3, 4), dict(stride=3, padding="full")),
    ((2, 5, 8, 9), (6, 5, 3, 3), dict(padding=3)),  # padding beyond the kernel's reach: dX as a conv pads negatively
    ((2, 30, 9, 8), (20, 30, 3, 3), dict(padding=(3, 1))),  # > 24 input channels: dX on the GEMM kernel
    ((2, 40, 10, 11), (30, 40, 3, 3), dict(padding=2, dilation=(1, 2))),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, w_shape, kw", DEPTHWISE_CASES)
def test_depthwise_forward_and_backward(x_shape, w_shape, kw, dtype):
    rng = np.random.default_rng(len(x_shape) + sum(x_shape))
    x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
    bias = rng.standard_normal(w_shape[0]).astype(dtype)
    fn = cs.conv1d if x.ndim == 3 else cs.conv2d
    spec = cs.explain(x, w, bias, **kw).spec
    assert _can_run(spec, "depthwise") is True and _can_run(spec, "depthwise", "backward") is True
    with cs.testing.poisoned_outputs():
        y = fn(x, w, bias, backend="cupy", algorithm="depthwise", **kw)
    assert_within(y, reference_forward(spec, x, w, bias), forward_tolerance(spec, x, w, bias), "depthwise")
    _check_backward(x, w, "depthwise", kw)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, w_shape, kw", POINTWISE_CASES)
def test_pointwise_forward_and_backward(x_shape, w_shape, kw, dtype):
    rng = np.random.default_rng(sum(x_shape))
    x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
    bias = rng.standard_normal(w_shape[0]).astype(dtype)
    fn = cs.conv1d if x.ndim == 3 else cs.conv2d
    spec = cs.explain(x, w, bias, **kw).spec
    for algorithm in ("pointwise", "pointwise_gemm"):
        with cs.testing.poisoned_outputs():
            y = fn(x, w, bias, backend="cupy", algorithm=algorithm, **kw)
            y_nobias = fn(x, w, backend="cupy", algorithm=algorithm, **kw)
        assert_within(y, reference_forward(spec, x, w, bias), forward_tolerance(spec, x, w, bias), algorithm)
        assert_within(y_nobias, reference_forward(spec, x, w), forward_tolerance(spec, x, w), algorithm)
    _check_backward(x, w, "pointwise_gemm", kw)


@pytest.mark.parametrize("algorithm", ["fused_gemm", "igemm_big", "im2col_gemm"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, w_shape, kw", GENERAL_BACKWARD_CASES)
def test_general_backward(x_shape, w_shape, kw, dtype, algorithm):
    rng = np.random.default_rng(sum(x_shape))
    x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
    spec = cs.explain(x, w, **kw).spec
    if algorithm == "igemm_big" and dtype == np.float64:
        assert "float32 only" in _can_run(spec, algorithm, "backward")
        return
    _check_backward(x, w, algorithm, kw)


# Several block tiles in every direction, partial tiles at the edges, both
# tile heights (64 rows for <= 64 output channels per group, else 128; tf32x3's
# weight gradient also 16 and 32).
BIG_TILE_CASES = [
    ((8, 16, 48, 48), (40, 16, 3, 3), dict(padding=1)),
    ((4, 8, 33, 35), (130, 8, 3, 3), dict(padding=(2, 1), dilation=(2, 1))),
    ((3, 24, 20, 21), (20, 12, 5, 5), dict(padding="same", groups=2)),
    ((4, 20, 30, 30), (70, 20, 3, 3), dict(stride=2, padding=1)),
    ((4, 48, 30, 30), (40, 48, 3, 3), dict(padding=1)),  # dX on the big-tile kernel itself
    # tf32x3's weight gradient on 32- and 16-row tiles (<= 32 and <= 16 output channels per group),
    # two tap columns per thread, a partial column tile, stride in one direction
    ((6, 12, 26, 25), (24, 12, 3, 3), dict(padding=1)),
    ((5, 18, 23, 22), (16, 18, 3, 3), dict(padding=(1, 0), stride=(1, 2))),
    ((64, 40, 4, 4), (24, 40, 3, 3), dict(stride=2, padding=1)),  # 2x2 planes: a slice of 8 spans two images
    ((2, 64, 20, 21), (150, 32, 3, 3), dict(padding=((2, 0), (1, 1)), groups=2)),
]


@pytest.mark.parametrize("algorithm", ["igemm_big", "tf32x3"])
@pytest.mark.parametrize("x_shape, w_shape, kw", BIG_TILE_CASES)
def test_big_tile_gemm_forward_and_backward(x_shape, w_shape, kw, algorithm):
    rng = np.random.default_rng(sum(x_shape))
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    bias = rng.standard_normal(w_shape[0]).astype(np.float32)
    spec = cs.explain(x, w, bias, **kw).spec
    with cs.testing.poisoned_outputs():
        y = cs.conv2d(x, w, bias, backend="cupy", algorithm=algorithm, **kw)
        y_relu = cs.conv2d(x, w, bias, backend="cupy", algorithm=algorithm, activation="relu", **kw)
    ref = reference_forward(spec, x, w, bias)
    assert_within(y, ref, forward_tolerance(spec, x, w, bias), algorithm)
    assert_within(y_relu, np.where(ref < 0, 0, ref), forward_tolerance(spec, x, w, bias), f"{algorithm}+relu")
    _check_backward(x, w, algorithm, kw)


# --- tf32x3: error-compensated TF32 on the tensor cores (issue 11) -------------------


def test_tf32x3_keeps_float32_accuracy_over_a_wide_dynamic_range():
    """Operands spanning 2^-12..2^12: the big/small split keeps every product to ~2^-21, inside the float32 bound.

    Plain TF32 may be off by up to 2^-11 of each product, about 7x this 576-long
    reduction's relative tolerance (577 * 2^-23); the wide range of magnitudes
    keeps such errors from cancelling, so the test tells the two apart.
    """
    rng = np.random.default_rng(21)
    x = rng.standard_normal((4, 64, 30, 30)) * 2.0 ** rng.integers(-12, 13, (4, 64, 30, 30))
    w = rng.standard_normal((96, 64, 3, 3)) * 2.0 ** rng.integers(-12, 13, (96, 64, 3, 3))
    x, w = x.astype(np.float32), w.astype(np.float32)
    spec = cs.explain(x, w, padding=1).spec
    with cs.testing.poisoned_outputs():
        y = cs.conv2d(x, w, padding=1, backend="cupy", algorithm="tf32x3")
    assert_within(y, reference_forward(spec, x, w), forward_tolerance(spec, x, w), "tf32x3")


@pytest.mark.parametrize("where", ["x", "w"])
def test_tf32x3_nonfinite_and_huge_operands_fall_back_to_float32(where):
    """inf, NaN and |v| >= 2^126 cannot be split: their blocks are recomputed in float32, IEEE as elsewhere.

    Specials in x flag only the blocks whose tiles read them (the others stay
    on the tensor cores); an infinite weight flags every block of its row.
    """
    rng = np.random.default_rng(22)
    x = rng.standard_normal((2, 40, 24, 24)).astype(np.float32)
    w = rng.standard_normal((70, 40, 3, 3)).astype(np.float32)
    if where == "x":
        x[0, 3, 5, 7], x[1, 0, 0, 0], x[1, 39, 23, 23] = np.inf, np.nan, -np.inf
        x[0, 10, 20, 2] = 3.0e38  # finite, but big*small may overflow where the exact product does not
    else:
        w[5, 1, 0, 0] = np.inf
    _assert_specials_as_numpy("tf32x3", x, w, padding=1)


def _assert_specials_as_numpy(algorithm, x, w, padding):
    """``algorithm``'s forward on operands holding inf, NaN or a huge value, outputs poisoned: the
    same non-finite pattern as the numpy backend, and every other output within the float32 bound."""
    spec = cs.explain(x, w, padding=padding).spec
    want = cs.conv2d(x, w, padding=padding, backend="numpy")
    with cs.testing.poisoned_outputs():
        got = _cupy().asnumpy(cs.conv2d(x, w, padding=padding, backend="cupy", algorithm=algorithm))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    assert (~np.isfinite(want)).any() and np.isfinite(want).mean() > 0.5
    plain_x = np.where(np.isfinite(x) & (np.abs(x) < 1e38), x, 0).astype(np.float32)
    plain_w = np.where(np.isfinite(w), w, 0).astype(np.float32)
    ref, tol = reference_forward(spec, plain_x, plain_w), forward_tolerance(spec, plain_x, plain_w)
    clean = np.isfinite(want) & (np.abs(want) < 1e30)  # windows without a special or the huge value
    assert_within(np.where(clean, got, 0), np.where(clean, ref, 0), tol, f"{algorithm} next to specials")


@pytest.mark.parametrize("out_channels", [70, 12])  # dW on 64-row tiles (two row blocks), on one 16-row tile
def test_tf32x3_weight_gradient_with_special_values_in_grad_y(out_channels):
    """inf/NaN in grad_y reach the split-K weight gradient through the float32 recomputation, as in numpy."""
    rng = np.random.default_rng(23)
    x = rng.standard_normal((3, 40, 20, 20)).astype(np.float32)
    w = rng.standard_normal((out_channels, 40, 3, 3)).astype(np.float32)
    spec = cs.explain(x, w, padding=1).spec
    gy = rng.standard_normal(spec.y_shape).astype(np.float32)
    gy[0, 2, 5, 5], gy[2, out_channels - 3, 19, 0] = np.inf, np.nan
    want = cs.conv2d_backward(gy, x, w, padding=1, backend="numpy")
    with cs.testing.poisoned_outputs():
        got = cs.conv2d_backward(gy, x, w, padding=1, backend="cupy", algorithm="tf32x3")
    for name, g, v in zip("xwb", got, want):
        g = _cupy().asnumpy(g)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(v), err_msg=f"grad_{name}")
        np.testing.assert_array_equal(np.isinf(g), np.isinf(v), err_msg=f"grad_{name}")
    clean = np.where(np.isfinite(gy), gy, 0).astype(np.float32)
    ref, tol = reference_backward(spec, clean, x, w), backward_tolerances(spec, clean, x, w)
    gw = _cupy().asnumpy(got[1])
    rows = np.isfinite(want[1]).all(axis=(1, 2, 3))  # the output channels no special reached
    assert rows.sum() == out_channels - 2
    assert_within(gw[rows], ref[1][rows], tol[1][rows], "tf32x3 grad_w next to specials")


def test_tf32x3_declines_what_it_cannot_do_in_float32_accuracy():
    short = cs.explain(np.ones((1, 3, 8, 8), np.float32), np.ones((4, 3, 3, 3), np.float32)).spec
    why = _can_run(short, "tf32x3")
    assert "reduction of 27 products" in why and "igemm_big" in why
    double = cs.explain(np.ones((1, 8, 8, 8)), np.ones((4, 8, 3, 3))).spec
    assert "float64" in _can_run(double, "tf32x3")


# --- tf32x3_image: a whole image in shared memory (narrow layers, issue 11) ------------

# One to four 8-channel MMA column tiles, partial last tiles of pixels and channels,
# stride, dilation and asymmetric padding (zeros in the shared image), kernels of 1x5
# to 7x7, a reduction that ends mid-step, several pixel-tile pairs per warp (40 x 40
# outputs), a 1-D signal, and the ECE408 fa19 conv2 layer.
TF32X3_IMAGE_CASES = [
    ((3, 12, 22, 22), (24, 12, 5, 5), {}),
    ((2, 4, 9, 11), (1, 4, 3, 3), dict(padding=1)),
    ((2, 5, 17, 19), (13, 5, 3, 3), dict(stride=2, dilation=2, padding=((2, 0), (1, 3)))),
    ((2, 3, 46, 46), (32, 3, 7, 7), {}),
    ((1, 7, 12, 30), (9, 7, 1, 5), dict(stride=(1, 3), padding=(0, 2))),
    ((2, 8, 300), (16, 8, 5), dict(padding="same")),
]


@pytest.mark.parametrize("case", range(len(TF32X3_IMAGE_CASES)))
@pytest.mark.parametrize("bias", [False, True])
def test_tf32x3_image_matches_reference(case, bias):
    x_shape, w_shape, kw = TF32X3_IMAGE_CASES[case]
    rng = np.random.default_rng(40 + case)
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32) if bias else None
    spec = cs.explain(x, w, b, **kw).spec
    assert _can_run(spec, "tf32x3_image") is True, _can_run(spec, "tf32x3_image")
    fwd = cs.conv1d if x.ndim == 3 else cs.conv2d
    with cs.testing.poisoned_outputs():
        y = fwd(x, w, b, backend="cupy", algorithm="tf32x3_image", **kw)
    assert_within(
        np.reshape(y, spec.y_shape), reference_forward(spec, x, w, b), forward_tolerance(spec, x, w, b), "tf32x3_image"
    )


def test_tf32x3_image_blocks_walk_over_more_images_than_the_gpu_holds():
    """Persistent blocks: a batch several times the resident blocks, each block taking many images."""
    from convsuite.backends import _cupy_runtime as rt
    from convsuite.backends.cupy.algorithms.tf32x3_image import tf32x3_image_geometry

    rng = np.random.default_rng(47)
    image, w = (8, 20, 20), rng.standard_normal((24, 8, 3, 3)).astype(np.float32)
    spec = cs.explain(np.empty((1, *image), np.float32), w, padding=1).spec
    geo = tf32x3_image_geometry(spec)
    fn = rt.kernel("tf32x3_image.cu", f"conv2d_tf32x3_image@{geo['nt']},0", "float32")
    resident = rt.resident_blocks(fn, 32 * geo["warps"], geo["smem"]) * rt.sm_count()
    assert resident >= 1
    x = rng.standard_normal((2 * resident + 3, *image)).astype(np.float32)  # every block loops twice or more
    spec = cs.explain(x, w, padding=1).spec
    with cs.testing.poisoned_outputs():
        y = cs.conv2d(x, w, padding=1, backend="cupy", algorithm="tf32x3_image")
    assert_within(y, reference_forward(spec, x, w), forward_tolerance(spec, x, w), "tf32x3_image")


@pytest.mark.parametrize("where", ["x", "w"])
def test_tf32x3_image_special_values_recompute_in_float32(where):
    """inf, NaN and |v| >= 2^126 cannot be split: the images that hold one (every image, for a weight)
    are recomputed in float32 from global memory, IEEE as elsewhere; the others stay on the tensor cores."""
    rng = np.random.default_rng(48)
    x = rng.standard_normal((6, 12, 14, 14)).astype(np.float32)
    w = rng.standard_normal((24, 12, 5, 5)).astype(np.float32)
    if where == "x":
        x[1, 3, 5, 7], x[4, 0, 0, 0], x[4, 11, 13, 13] = np.inf, np.nan, -np.inf
        x[2, 10, 8, 2] = 3.0e38
    else:
        w[5, 1, 0, 0] = np.inf
    _assert_specials_as_numpy("tf32x3_image", x, w, padding=2)


def test_tf32x3_image_declines_what_it_does_not_cover():
    def verdict(x_shape, w_shape, dtype=np.float32, **kw):
        spec = cs.explain(np.ones(x_shape, dtype), np.ones(w_shape, dtype), **kw).spec
        return _can_run(spec, "tf32x3_image")

    assert "groups=1" in verdict((2, 8, 10, 10), (8, 4, 3, 3), groups=2)
    assert "at most 32 output channels" in verdict((2, 8, 10, 10), (33, 8, 3, 3))
    assert "float64" in verdict((2, 8, 10, 10), (8, 8, 3, 3), dtype=np.float64)
    assert "reduction of 27" in verdict((2, 3, 10, 10), (8, 3, 3, 3))
    assert "shared memory" in verdict((2, 64, 56, 56), (32, 64, 3, 3), padding=1)
    assert "forward" in cs._registry.get_backend("cupy").can_run(
        cs.explain(np.ones((2, 8, 10, 10), np.float32), np.ones((8, 8, 3, 3), np.float32)).spec,
        "tf32x3_image",
        "backward",
    )


@pytest.mark.parametrize("algorithm", ["fused_gemm", "igemm_big", "tf32x3", "depthwise", "pointwise_gemm"])
def test_weight_gradients_are_reproducible(algorithm):
    """No atomics: the same inputs give bit-identical gradients (split-K and per-channel reductions)."""
    cp = _cupy()
    rs = cp.random.RandomState(7)
    shapes = {
        "fused_gemm": ((16, 32, 28, 28), (48, 32, 3, 3), dict(padding=1)),
        "igemm_big": ((16, 32, 28, 28), (48, 32, 3, 3), dict(padding=1)),
        "tf32x3": ((16, 32, 28, 28), (48, 32, 3, 3), dict(padding=1)),
        "depthwise": ((16, 32, 28, 28), (32, 1, 3, 3), dict(padding=1, groups=32)),
        "pointwise_gemm": ((16, 32, 28, 28), (48, 32, 1, 1), {}),
    }
    x_shape, w_shape, kw = shapes[algorithm]
    x, w = rs.standard_normal(x_shape, dtype=cp.float32), rs.standard_normal(w_shape, dtype=cp.float32)
    gy = rs.standard_normal(cs.conv2d(x, w, backend="cupy", **kw).shape, dtype=cp.float32)
    first = cs.conv2d_backward(gy, x, w, backend="cupy", algorithm=algorithm, **kw)
    for _ in range(3):
        again = cs.conv2d_backward(gy, x, w, backend="cupy", algorithm=algorithm, **kw)
        for a, b in zip(first, again):
            assert bool(cp.all(a == b))


def test_declines_say_why():
    backend = cs._registry.get_backend("cupy")
    spec = cs.explain(np.ones((1, 4, 20, 20)), np.ones((4, 1, 9, 9)), groups=4).spec
    assert "7x7" in backend.can_run(spec, "depthwise", "backward")
    assert backend.can_run(spec, "depthwise", "forward") is True
    spec = cs.explain(np.ones((1, 4, 20, 20)), np.ones((4, 4, 1, 1)), stride=2).spec
    assert "stride 1" in backend.can_run(spec, "pointwise_gemm", "forward")
    spec = cs.explain(np.ones((1, 4, 20, 20)), np.ones((4, 4, 3, 3))).spec
    assert "implements forward only" in backend.can_run(spec, "register_tiled", "backward")


@pytest.mark.parametrize("algorithm", ["direct", "fused_gemm", "im2col_gemm", "register_tiled", "tiled_shared"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_seed_like_layers(algorithm, dtype):
    rng = np.random.default_rng(0)
    for B, C, M, H, K, stride, padding, groups in [
        (3, 1, 12, 48, 5, 1, 0, 1),
        (2, 4, 16, 40, 7, 1, 0, 1),
        (2, 12, 24, 22, 5, 1, "same", 1),
        (2, 8, 8, 17, 3, 2, "same", 2),
    ]:
        x = rng.standard_normal((B, C, H, H)).astype(dtype)
        w = rng.standard_normal((M, C // groups, K, K)).astype(dtype)
        bias = rng.standard_normal(M).astype(dtype)
        kw = dict(stride=stride, padding=padding, groups=groups)
        spec = cs.explain(x, w, bias, **kw).spec
        if _can_run(spec, algorithm) is not True:
            continue
        y = cs.conv2d(x, w, bias, backend="cupy", algorithm=algorithm, **kw)
        assert_within(y, reference_forward(spec, x, w, bias), forward_tolerance(spec, x, w, bias), algorithm)


@pytest.mark.parametrize("algorithm", ONE_D_ALGORITHMS + ("direct",))
@pytest.mark.parametrize("n, k, pad", [(1_000_003, 3, "same"), (250_001, 31, "same"), (99_999, 4, (5,))])
def test_long_signals_every_1d_algorithm(algorithm, n, k, pad):
    """Many blocks, unaligned lengths and offsets: catches tile, halo and vector-load edge bugs."""
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    w = rng.standard_normal(k).astype(np.float32)
    spec = cs.explain(x, w, padding=pad).spec
    if _can_run(spec, algorithm) is not True:
        pytest.skip(str(_can_run(spec, algorithm)))
    with cs.testing.poisoned_outputs():
        y = cs.conv1d(x, w, padding=pad, backend="cupy", algorithm=algorithm)
    assert_within(y.reshape(spec.y_shape), reference_forward(spec, x, w), forward_tolerance(spec, x, w), algorithm)


@pytest.mark.parametrize(
    "x_shape, w_shape, kw, dtype",
    [
        # more (row, tile) items than the persistent grid holds: each block's run crosses
        # tiles, output channels, groups and images; rows not 16-byte aligned (odd W)
        ((5, 6, 30001), (40, 3, 7), dict(padding="same", groups=2), np.float32),
        # every row aligned, the window starting one element after an aligned address (shift 1)
        ((4, 6, 30000), (40, 3, 7), dict(padding="same", groups=2), np.float32),
        # a compiled width (31) over two input channels: the channel stages of one item
        ((16, 2, 50000), (6, 2, 31), dict(padding=15), np.float32),
        # float64: 16-byte pieces of two elements
        ((4, 4, 20001), (36, 2, 5), dict(padding="same", groups=2), np.float64),
        # a long dilated mask in float64: two stages exceed 48 KiB, so one stage (load, then compute)
        # (short rows: one tile each, 1200 items)
        ((300, 2, 600), (4, 1, 301), dict(dilation=10, padding="same", groups=2), np.float64),
    ],
)
@pytest.mark.parametrize("persistent", [0, 1])
def test_blocked_persistent_runs(x_shape, w_shape, kw, dtype, persistent):
    """conv1d_blocked_pipelined's persistent grid: each block walks a run of items, stage by stage
    (and the one-tile-per-block kernel on the same cases)."""
    from convsuite.backends.cupy.algorithms import conv1d as algs

    rng = np.random.default_rng(x_shape[-1])
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    bias = rng.standard_normal(w_shape[0]).astype(dtype)
    spec = cs.explain(x, w, bias, **kw).spec
    plan = cs.plan(x, w, bias, backend="cupy", algorithm="blocked", params={"persistent": persistent}, **kw)
    v = plan.params["v"]
    # more items than the persistent grid's blocks on any current GPU (8 blocks on 132 or 148 SMs at most)
    items = math.ceil(spec.out_size[0] / (algs.THREADS * v)) * spec.batch * spec.out_channels
    assert items > 8 * 148
    if persistent:
        stage = algs._blocked_stage_elements(spec, v) * spec.itemsize
        two = 2 * stage <= algs.SMEM_LIMIT
        assert algs._blocked_smem(spec, v, 1) == (2 * stage if two else stage)
        assert two == (dtype == np.float32 or w_shape[-1] < 301), "the cases cover both pipelines"
    with cs.testing.poisoned_outputs():
        y = plan(x, w, bias)
    assert_within(y, reference_forward(spec, x, w, bias), forward_tolerance(spec, x, w, bias), "blocked")


def test_arrays_in_arrays_out():
    cp = _cupy()
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 10, 10), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    y_np = cs.conv2d(x, w, backend="cupy")
    assert isinstance(y_np, np.ndarray)
    y_cp = cs.conv2d(cp.asarray(x), cp.asarray(w), backend="cupy")
    assert isinstance(y_cp, cp.ndarray) and y_cp.device.id == cp.cuda.Device().id
    np.testing.assert_allclose(y_cp.get(), y_np, rtol=1e-6, atol=1e-6)
    # CuPy input on a CPU backend comes back as CuPy too.
    assert isinstance(cs.conv2d(cp.asarray(x), cp.asarray(w), backend="numpy"), cp.ndarray)
    gx, gw, gb = cs.conv2d_backward(cp.asarray(y_np), cp.asarray(x), cp.asarray(w), backend="cupy")
    assert all(isinstance(g, cp.ndarray) for g in (gx, gw, gb))
    with pytest.raises(TypeError, match="all be NumPy arrays or all be CuPy"):
        cs.conv2d(cp.asarray(x), w, backend="cupy")


@pytest.mark.parametrize("backend", ["cupy", "numpy"])
def test_plans_built_from_device_arrays(backend):
    """A plan built from CuPy operands (forward and backward) runs them and equals the function's result."""
    cp = _cupy()
    rng = np.random.default_rng(3)
    x = cp.asarray(rng.standard_normal((2, 3, 10, 10), dtype=np.float32))
    w = cp.asarray(rng.standard_normal((4, 3, 3, 3), dtype=np.float32))
    gy = cp.asarray(rng.standard_normal((2, 4, 10, 10), dtype=np.float32))
    forward = cs.plan(x, w, padding=1, backend=backend)
    cp.testing.assert_array_equal(forward(x, w), cs.conv2d(x, w, padding=1, backend=backend))
    backward = cs.plan(x, w, padding=1, backend=backend, direction="backward")
    got = backward(gy, x, w)
    want = cs.conv2d_backward(gy, x, w, padding=1, backend=backend)
    for g, h in zip(got, want):
        assert isinstance(g, cp.ndarray)
        cp.testing.assert_array_equal(g, h)


def test_layer_keeps_weights_on_device():
    cp = _cupy()
    layer = cs.Conv2D(3, 8, 3, padding=1, backend="cupy", seed=0)
    assert isinstance(layer.weight.data, cp.ndarray) and isinstance(layer.bias.data, cp.ndarray)
    x = np.random.default_rng(2).standard_normal((2, 3, 9, 9), dtype=np.float32)
    y = layer(x)
    assert isinstance(y, np.ndarray)
    expected = cs.conv2d(x, layer.weight.get(), layer.bias.get(), padding=1, backend="numpy")
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    assert isinstance(layer(cp.asarray(x)), cp.ndarray)
    gx, gw, gb = layer.backward(np.ones_like(y), x)
    assert isinstance(gx, np.ndarray) and gw.shape == layer.weight.shape


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_backward_matches_reference(dtype):
    from convsuite.testing import backward_tolerances, reference_backward

    rng = np.random.default_rng(3)
    for kw, x_shape, w_shape in [
        (dict(padding=1), (2, 4, 9, 9), (6, 4, 3, 3)),
        (dict(stride=2, padding="same", groups=2, dilation=2), (2, 4, 11, 10), (6, 2, 3, 2)),
        (dict(padding="full"), (3, 2, 30), (5, 2, 4)),
    ]:
        x = rng.standard_normal(x_shape).astype(dtype)
        w = rng.standard_normal(w_shape).astype(dtype)
        fwd, bwd = (cs.conv1d, cs.conv1d_backward) if x.ndim == 3 else (cs.conv2d, cs.conv2d_backward)
        y = fwd(x, w, backend="numpy", **kw)
        gy = rng.standard_normal(y.shape).astype(dtype)
        spec = cs.explain(x, w, **kw).spec
        got = bwd(gy, x, w, backend="cupy", **kw)
        for name, g, ref, tol in zip(
            "xwb", got, reference_backward(spec, gy, x, w), backward_tolerances(spec, gy, x, w)
        ):
            assert_within(np.reshape(g, ref.shape), ref, tol, f"grad_{name}")


@pytest.mark.parametrize(
    "algorithm, x_shape, w_shape, kw",
    [
        ("naive", (2, 3, 50), (4, 3, 5), dict(padding="same")),
        ("const_mask", (2, 3, 50), (4, 3, 5), dict(stride=2)),
        ("direct", (2, 3, 11, 9), (4, 3, 3, 3), dict(padding=1)),
        ("const_weights", (2, 3, 11, 9), (4, 3, 3, 3), dict(stride=2)),
        ("im2col_gemm", (2, 3, 11, 9), (4, 3, 3, 3), dict(padding=1, dilation=2)),
        ("depthwise", (2, 6, 14, 15), (6, 1, 3, 3), dict(stride=2, padding=1, groups=6)),
        ("depthwise", (1, 4, 12, 13), (8, 1, 3, 2), dict(padding=(1, 0), dilation=(1, 2), groups=4)),
    ],
)
def test_64_bit_index_instantiations_agree_with_the_reference(monkeypatch, algorithm, x_shape, w_shape, kw):
    """The long long instantiations of the ``|I`` kernels (taken for loops past 2^31 - 1, too large to
    run in a test) forced on small cases: the same results as the reference."""
    from convsuite.backends import _cupy_runtime as rt

    cp = _cupy()
    monkeypatch.setattr(rt, "needs_wide_index", lambda total, stride: True)
    monkeypatch.setattr(rt, "_functions", {})  # handles of the int instantiations were cached
    backend = cs._registry.get_backend("cupy")
    monkeypatch.setattr(backend, "_plans", type(backend._plans)())
    rng = np.random.default_rng(sum(x_shape))
    x, w = rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)
    bias = rng.standard_normal(w_shape[0]).astype(np.float32)
    spec = cs.explain(x, w, bias, **kw).spec
    assert backend.can_run(spec, algorithm, "forward") is True
    launch = backend.plan(spec, algorithm, "forward")
    assert any(name[2].endswith("|I") and name[4] for name in rt._functions), "no 64-bit instantiation was taken"
    out = cp.full(spec.y_shape, cp.nan, cp.float32)
    launch(*(cp.asarray(a.reshape(s)) for a, s in ((x, spec.x_shape), (w, spec.w_shape))), cp.asarray(bias), out)
    want, tol = reference_forward(spec, x, w, bias), forward_tolerance(spec, x, w, bias)
    assert_within(cp.asnumpy(out).reshape(want.shape), want, tol, f"{algorithm} long long")


@pytest.mark.parametrize(
    "algorithm, x_shape, w_shape",
    [
        ("naive", (1100, 1, 2_000_000), (1, 1, 3)),
        ("blocked", (1100, 1, 2_000_000), (1, 1, 3)),
        ("direct", (160, 1, 3700, 3700), (1, 1, 3, 3)),
        ("register_tiled", (160, 1, 3700, 3700), (1, 1, 3, 3)),
        ("fused_gemm", (160, 1, 3700, 3700), (1, 1, 3, 3)),
        # more than 2^31 outputs in fewer than 2^31 tiles: the int tile index, 64-bit element offsets
        ("depthwise", (160, 1, 3700, 3700), (1, 1, 3, 3)),
    ],
)
def test_indexing_beyond_2_to_the_31(algorithm, x_shape, w_shape):
    """Tensors of more than 2^31 elements: every linear index is computed in 64 bits.

    (A single dimension of 2^31 or more is refused by can_run with a reason.)
    """
    cp = _cupy()
    n = math.prod(x_shape)
    assert n > 2**31
    free, _ = cp.cuda.Device().mem_info
    if free < 3 * 4 * n:
        pytest.skip(f"needs {3 * 4 * n / 2**30:.0f} GiB of free GPU memory; {free / 2**30:.0f} GiB free")
    x = cp.random.RandomState(0).standard_normal(x_shape, dtype=cp.float32)
    w = cp.random.RandomState(1).standard_normal(w_shape, dtype=cp.float32)
    fn = cs.conv1d if len(x_shape) == 3 else cs.conv2d
    y = fn(x, w, padding="same", backend="cupy", algorithm=algorithm)
    assert y.shape == x.shape
    # The last batch item lives entirely past element 2^31; check it (and the first).
    for item in (x_shape[0] - 1, 0):
        xs, ys = x[item : item + 1].get(), y[item : item + 1].get()
        spec = cs.explain(xs, w.get(), padding="same").spec
        assert_within(ys, reference_forward(spec, xs, w.get()), forward_tolerance(spec, xs, w.get()), algorithm)
    del x, y
    cp.get_default_memory_pool().free_all_blocks()


def test_out_of_memory_is_a_clear_error():
    cp = _cupy()
    total = cs._registry.get_backend("cupy").memory_limit()
    batch = 40_000
    pad = total // 4 // batch // 2 + 10  # an output larger than the device's memory
    with pytest.raises(MemoryError, match="this gpu has"):
        cs.conv1d(
            cp.ones((batch, 1, 1000), cp.float32), cp.ones((1, 1, 3), cp.float32), padding=int(pad), backend="cupy"
        )


def test_only_host_operands_pay_the_per_call_memory_check(monkeypatch):
    """A large warm call counts host copies per call: NumPy operands do; device operands on the
    GPU have no host buffers to count, and skip it (host time before the launch)."""
    from convsuite import _validation

    cp = _cupy()
    x = np.ones(5 * 2**20, np.float32)  # 20 MiB in, 20 MiB out: past SMALL_CALL_BYTES
    w = np.ones(3, np.float32)
    for operands in ((x, w), (cp.asarray(x), cp.asarray(w))):
        cs.conv1d(*operands, padding=1, backend="cupy")  # the plan (its first call reserves memory)
    checked = []
    monkeypatch.setattr(_validation, "_check_buffers", lambda *args: checked.append(type(args[-1][0])))
    cs.conv1d(cp.asarray(x), cp.asarray(w), padding=1, backend="cupy")
    assert checked == []
    cs.conv1d(x, w, padding=1, backend="cupy")
    assert checked == [np.ndarray]


def test_one_huge_dimension_is_refused_with_a_reason():
    explanation_error = None
    try:
        cs.explain(
            np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), (2**31 + 8,), (0,)),
            np.ones(3, np.float32),
            backend="cupy",
        )
    except cs.UnsupportedCaseError as exc:
        explanation_error = str(exc)
    assert explanation_error and "2^31" in explanation_error


def test_gpu_comparison_taxonomy(tmp_path):
    """compare on the GPU: transfers and CUDA-event kernel time apart from end to end."""
    from convsuite.bench.compare import run_comparison

    results, meta = run_comparison(workload="default", repeat=2, out=tmp_path, progress=False, device="gpu")
    assert meta["ceilings"]["device"] == "gpu"
    ours = [r for r in results if r.contender == "cupy" and r.status == "ok"]
    assert ours and all(r.error_ok for r in ours)
    for r in ours:
        assert r.h2d_s > 0 and r.d2h_s > 0 and 0 < r.kernel_s <= r.end_to_end_s
    cudnn = [r for r in results if r.contender.startswith("cuDNN") and r.status == "ok"]
    assert cudnn and all(r.error_ok for r in cudnn)
    assert (tmp_path / "report.md").is_file()


_NONFINITE_CASES = [
    # (x shape, w shape, keywords): padded 2-D cases, a grouped one, a depthwise one (compiled K and general)
    ((2, 4, 9, 11), (6, 4, 3, 3), dict(padding=1)),
    ((1, 6, 8, 8), (6, 2, 3, 3), dict(padding=(2, 1), groups=3, stride=2)),
    ((2, 8, 10, 10), (8, 1, 3, 3), dict(padding=1, groups=8)),
    ((1, 4, 9, 9), (4, 1, 5, 3), dict(padding="same", groups=4, dilation=2)),
    ((1, 3, 40), (5, 3, 7), dict(padding="full")),
    # 1-D "same" with dilation (blocked's strided window) and with stride (the tiled kernels only)
    ((2, 2, 37), (3, 2, 5), dict(padding="same", dilation=2)),
    ((1, 2, 50), (4, 2, 3), dict(padding=1, stride=2)),
]


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize("case", range(len(_NONFINITE_CASES)))
def test_nonfinite_follow_ieee_on_every_algorithm(case, direction):
    """NaN/inf weights (forward) and grad_y (backward) meeting padding give torch's NaN pattern.

    The numpy backend's im2col multiplies padding zeros (IEEE); every cupy
    algorithm, whether its kernel multiplies zeros (``ieee_padding``) or gets
    the front end's fix-up, must give the same non-finite pattern.
    """
    x_shape, w_shape, kw = _NONFINITE_CASES[case]
    rng = np.random.default_rng(case)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    fwd, bwd = (cs.conv1d, cs.conv1d_backward) if len(x_shape) == 3 else (cs.conv2d, cs.conv2d_backward)
    spec = cs.explain(x, w, backend="numpy", **kw).spec
    if direction == "forward":
        w.flat[0], w.flat[-1] = np.nan, np.inf
        want = fwd(x, w, backend="numpy", **kw)
    else:
        gy = rng.standard_normal(spec.y_shape).astype(np.float32)
        gy.flat[0], gy.flat[-1] = np.inf, np.nan
        want = bwd(gy, x, w, backend="numpy", **kw)[1]
    backend = cs._registry.get_backend("cupy")
    ran = 0
    for algorithm in backend.algorithms:
        if backend.can_run(spec, algorithm, direction) is not True:
            continue
        with cs.testing.poisoned_outputs():
            if direction == "forward":
                got = fwd(x, w, backend="cupy", algorithm=algorithm, **kw)
            else:
                got = bwd(gy, x, w, backend="cupy", algorithm=algorithm, **kw)[1]
        got = _cupy().asnumpy(got) if not isinstance(got, np.ndarray) else got
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{algorithm} {direction}")
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=f"{algorithm} {direction}")
        ran += 1
    assert ran >= 1


# --- the dW ladder (issue 17) ------------------------------------------------------

LADDER = ("wgrad_atomic", "wgrad_shuffle", "wgrad_registers", "wgrad_padded")
# The seed's 3x3 "same" training layers (small batch), the ECE408 5x5 and 7x7
# valid layers, sizes that do not divide the 256-thread blocks or the padded
# step's row bands, groups, and (steps 1-3) stride, dilation and asymmetric padding.
LADDER_CASES = [
    ((3, 8, 20, 19), (16, 8, 3, 3), dict(padding=1)),
    ((2, 16, 17, 23), (8, 16, 3, 3), dict(padding="same")),
    ((4, 1, 24, 24), (12, 1, 5, 5), {}),
    ((2, 12, 11, 11), (24, 12, 5, 5), {}),
    ((3, 4, 22, 21), (16, 4, 7, 7), {}),
    ((2, 6, 13, 14), (8, 3, 3, 3), dict(padding=1, groups=2)),
    ((2, 4, 9, 10), (6, 4, 1, 1), {}),
    ((2, 4, 15, 16), (6, 2, 3, 3), dict(stride=2, dilation=2, padding=((2, 0), (1, 3)), groups=2)),
    ((1, 3, 12, 11), (5, 3, 4, 2), dict(stride=(1, 2), padding=1)),
]


@pytest.mark.parametrize("algorithm", LADDER)
@pytest.mark.parametrize("x_shape, w_shape, kw", LADDER_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weight_gradient_ladder(algorithm, x_shape, w_shape, kw, dtype):
    """Each step against the float64 reference, outputs poisoned (grad_w is zeroed by the plan, then summed into).

    The steps add block partial sums with atomicAdd, so their last bits depend
    on the order blocks finish in. The tolerance of :func:`backward_tolerances`
    bounds the rounding error of a sum of that length in any order, so it holds
    for every order; bit-identity across calls is not claimed (and not tested).
    """
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
    spec = cs.explain(x, w, **kw).spec
    verdict = _can_run(spec, algorithm, "backward")
    expected = algorithm in ("wgrad_atomic", "wgrad_shuffle") or (
        w_shape[2] == w_shape[3]
        and (algorithm == "wgrad_registers" or (kw.get("stride", 1), kw.get("dilation", 1)) == (1, 1))
    )
    assert (verdict is True) == expected, verdict
    if verdict is not True:
        assert algorithm in verdict or "stride" in verdict
        return
    _check_backward(x, w, algorithm, kw, seed=len(x_shape))


def test_ladder_declines_say_why_and_auto_never_picks_it():
    backend = cs._registry.get_backend("cupy")
    square = cs.explain(np.ones((2, 4, 20, 20)), np.ones((8, 4, 3, 3)), stride=2, padding=1).spec
    assert "stride 1" in backend.can_run(square, "wgrad_padded", "backward")
    assert backend.can_run(square, "wgrad_registers", "backward") is True
    wide = cs.explain(np.ones((2, 4, 20, 20)), np.ones((8, 4, 3, 5))).spec
    assert "square kernels" in backend.can_run(wide, "wgrad_registers", "backward")
    assert "backward only" in backend.can_run(square, "wgrad_atomic", "forward")
    for x_shape, w_shape, kw in LADDER_CASES:
        spec = cs.explain(np.ones(x_shape, np.float32), np.ones(w_shape, np.float32), **kw).spec
        assert backend.choose_algorithm(spec, "backward")[0] not in LADDER


def test_ladder_agrees_with_the_deterministic_default():
    """Seed-sized 3x3 layer, float32: every step within tolerance of fused_gemm's reproducible dW."""
    cp = _cupy()
    rs = cp.random.RandomState(11)
    x, w = rs.standard_normal((8, 32, 32, 32), dtype=cp.float32), rs.standard_normal((64, 32, 3, 3), dtype=cp.float32)
    gy = rs.standard_normal((8, 64, 32, 32), dtype=cp.float32)
    spec = cs.explain(x, w, padding=1).spec
    _, tol_w, _ = backward_tolerances(spec, gy.get(), x.get(), w.get())
    _, reference_w, _ = cs.conv2d_backward(gy, x, w, padding=1, backend="cupy", algorithm="fused_gemm")
    for algorithm in LADDER:
        gx, gw, gb = cs.conv2d_backward(gy, x, w, padding=1, backend="cupy", algorithm=algorithm)
        assert_within(gw.get(), reference_w.get().astype(np.float64), 2 * tol_w, algorithm)


# --- fused epilogues (issue 17) -----------------------------------------------------


@pytest.mark.parametrize(
    "algorithm, dtype",
    [
        (a, d)
        for a in FORWARD_ALGORITHMS
        for d in (np.float32, np.float64)
        if not (a in ("igemm_big", "tf32x3", "tf32x3_image") and d == np.float64)  # float32 only (can_run says why)
    ],
)
def test_forward_relu_every_algorithm(algorithm, dtype):
    """activation='relu' and 'relu6': fused in the epilogue of FUSED_ACTIVATION's kernels, applied after
    every other kernel; outputs on every piece of both (x scaled so that some exceed 6)."""
    backend = cs._registry.get_backend("cupy")
    rng = np.random.default_rng(5)
    ran = []
    for x_shape, w_shape, kw in [
        ((2, 8, 19, 21), (16, 8, 3, 3), dict(padding=1)),
        ((2, 6, 14, 13), (6, 1, 3, 3), dict(padding=1, groups=6)),
        ((2, 6, 15, 14), (12, 1, 3, 3), dict(padding=1, stride=2, groups=6)),
        ((2, 8, 9, 10), (12, 8, 1, 1), {}),
        ((1, 96, 7, 7), (40, 96, 1, 1), {}),  # pointwise_splitk: several slices, partial tiles
        ((2, 3, 300), (4, 3, 5), dict(padding="same")),
    ]:
        x, w = 3 * rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
        bias = rng.standard_normal(w_shape[0]).astype(dtype)
        spec = cs.explain(x, w, bias, **kw).spec
        if _can_run(spec, algorithm) is not True:
            continue
        ref = reference_forward(spec, x, w, bias)
        assert (ref < 0).any() and (ref > 6).any()
        for activation, applied in (("relu", np.where(ref < 0, 0, ref)), ("relu6", np.clip(ref, 0, 6))):
            assert backend.fuses_activation(spec, algorithm, activation) == (algorithm in FUSED_ACTIVATION)
            fwd = cs.conv1d if x.ndim == 3 else cs.conv2d
            with cs.testing.poisoned_outputs():
                y = fwd(x, w, bias, backend="cupy", algorithm=algorithm, activation=activation, **kw)
            assert (y >= 0).all() and (activation == "relu" or (y <= 6).all())
            assert_within(y, applied, forward_tolerance(spec, x, w, bias), f"{algorithm} + {activation}")
        ran.append(x_shape)
    assert ran, f"no case ran {algorithm!r}"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_backward_through_relu_on_the_ladder(dtype):
    rng = np.random.default_rng(9)
    x, w = rng.standard_normal((2, 8, 15, 17)).astype(dtype), rng.standard_normal((12, 8, 3, 3)).astype(dtype)
    spec = cs.explain(x, w, padding=1).spec
    y = cs.conv2d(x, w, padding=1, backend="cupy", activation="relu")
    gy = rng.standard_normal(y.shape).astype(dtype)
    masked = np.where(y <= 0, 0, gy)
    for algorithm in (*LADDER, "fused_gemm"):
        with cs.testing.poisoned_outputs():
            got = cs.conv2d_backward(gy, x, w, padding=1, backend="cupy", algorithm=algorithm, relu_output=y)
        for name, g, ref, tol in zip(
            "xwb", got, reference_backward(spec, masked, x, w), backward_tolerances(spec, masked, x, w)
        ):
            assert_within(g, ref, tol, f"{algorithm} grad_{name} through relu")


# --- tunable parameters (issue 16) ---------------------------------------------------
# Every tunable record, run through the backend's plan with explicit params
# (the front end's params= is the integrator's), against the float64
# reference with the outputs poisoned. Each case runs the extremes of every
# parameter together and every value of every parameter once (the others at
# the case's defaults, or at their smallest values where the defaults refuse
# the combination), so every value is exercised and a refusal is never silent.

TUNABLE_CASES = {
    "tiled_shared": [
        ((2, 3, 13, 11), (5, 3, 3, 3), dict(padding=1)),
        ((1, 4, 17, 19), (6, 2, 3, 5), dict(stride=2, dilation=(2, 1), padding=2, groups=2)),
        ((2, 2, 40), (3, 2, 5), dict(padding="same")),
        ((1, 1, 28, 30), (12, 1, 5, 5), {}),
    ],
    "depthwise": [
        ((2, 6, 15, 13), (12, 1, 3, 3), dict(groups=6, padding=1)),
        ((1, 4, 16, 17), (4, 1, 5, 5), dict(groups=4, stride=2, padding=2)),
        ((1, 3, 11, 12), (3, 1, 3, 2), dict(groups=3, dilation=2, padding=1)),
    ],
    "pointwise": [
        ((2, 40, 9, 7), (33, 40, 1, 1), {}),
        ((1, 6, 13), (20, 3, 1), dict(groups=2)),
    ],
    # gather: each case runs both; the chunked gather's last chunk is full on the first,
    # partial on the others (6 and 20 channels, 70 and 36 in the transposed dX); a 2x3 kernel
    # with dilation, stride and padding beyond the kernel's reach.
    "igemm_big": [
        ((2, 8, 13, 12), (70, 8, 3, 3), dict(padding=1)),
        ((2, 12, 11, 10), (40, 6, 3, 3), dict(stride=2, padding=1, groups=2)),
        ((2, 20, 9, 11), (36, 20, 2, 3), dict(dilation=(2, 1), padding=(1, 3))),
        ((1, 20, 10, 9), (16, 20, 2, 3), dict(stride=(1, 2), padding=(2, 1))),
    ],
    "tf32x3": [
        ((2, 8, 13, 12), (70, 8, 3, 3), dict(padding=1)),
        ((2, 12, 11, 10), (40, 6, 3, 3), dict(stride=2, padding=1, groups=2)),
        ((2, 20, 9, 11), (36, 20, 2, 3), dict(dilation=(2, 1), padding=(1, 3))),
        ((1, 20, 10, 9), (16, 20, 2, 3), dict(stride=(1, 2), padding=(2, 1))),
        # Reductions of four 8-deep steps, the shortest tf32x3 takes: at 5 and 6 stages the pipeline's
        # prologue has fewer steps than stages to fill (empty commit groups); chunked, then the table.
        ((2, 32, 7, 9), (24, 32, 1, 1), {}),
        ((2, 2, 9, 8), (10, 2, 4, 4), dict(padding=1)),
    ],
}
TUNABLE_CASES["register_tiled"] = TUNABLE_CASES["tiled_shared"]
TUNABLE_CASES["blocked"] = [
    ((2, 3, 3001), (4, 3, 7), dict(padding="same")),  # a compiled width; rows not 16-byte aligned past the first
    ((1, 2, 1024), (2, 2, 5), dict(padding=2)),  # every row aligned: float4 loads and stores
    ((1, 2, 999), (3, 2, 4), dict(dilation=3, padding=2)),  # dilation: the window read in place
]


def _tunable_configurations(record, spec, direction):
    """The extremes together, then each value of each parameter: those the constraint admits on ``spec``.

    Returns the configurations and ``{(name, value): reason}`` for the values
    no tried combination admits on ``spec``.
    """
    extremes = record.configurations({t.name: (t.values[0], t.values[-1]) for t in record.tunables})
    defaults, smallest = record.defaults(spec, direction), {t.name: t.values[0] for t in record.tunables}
    chosen = [p for p in extremes if record.can_run(spec, direction, p) is True]
    refused = {}
    for t in record.tunables:
        for v in t.values:
            for base in (defaults, smallest):
                params = {**base, t.name: v}
                verdict = record.can_run(spec, direction, params)
                if verdict is True:
                    chosen.append(params)
                    break
                assert isinstance(verdict, str) and verdict, (params, verdict)
                refused[(t.name, v)] = verdict
            else:
                continue
            refused.pop((t.name, v), None)
    unique = {tuple(sorted(p.items())): p for p in chosen}
    return list(unique.values()), refused


def _run_plan(spec, algorithm, direction, params, *operands):
    """Run the backend's plan for ``params`` on host operands; outputs start as NaN; returns them on the host."""
    cp = _cupy()
    backend = cs._registry.get_backend("cupy")
    dev = [None if a is None else cp.asarray(a) for a in operands]
    dtype = spec.dtype
    if direction == "backward":
        outs = [cp.full(shape, np.nan, dtype) for shape in (spec.x_shape, spec.w_shape, (spec.out_channels,))]
    else:
        outs = [cp.full(spec.y_shape, np.nan, dtype)]
    backend.plan(spec, algorithm, direction, params)(*dev, *outs)
    return [cp.asnumpy(o) for o in outs]


@pytest.mark.parametrize("algorithm", sorted(TUNABLE_CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tunable_configurations_match_reference(algorithm, dtype):
    """Every value of every tunable (and the extremes together) agrees with the reference, forward and backward."""
    backend = cs._registry.get_backend("cupy")
    record = backend.algorithm_table()[algorithm]
    covered, ran, never = set(), 0, None
    for i, (x_shape, w_shape, kw) in enumerate(TUNABLE_CASES[algorithm]):
        rng = np.random.default_rng(100 + i)
        x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
        bias = rng.standard_normal(w_shape[0]).astype(dtype)
        spec = cs.explain(x, w, bias, **kw).spec
        if algorithm in ("igemm_big", "tf32x3") and dtype == np.float64:
            assert "float32 only" in _can_run(spec, algorithm) or "float64" in _can_run(spec, algorithm)
            return
        assert _can_run(spec, algorithm) is True, (algorithm, spec)
        ref, tol = reference_forward(spec, x, w, bias), forward_tolerance(spec, x, w, bias)
        xs, ws = x.reshape(spec.x_shape), w.reshape(spec.w_shape)
        configs, refused = _tunable_configurations(record, spec, "forward")
        never = set(refused) if never is None else never & set(refused)
        for params in configs:
            (y,) = _run_plan(spec, algorithm, "forward", params, xs, ws, bias)
            assert_within(y, ref.reshape(spec.y_shape), tol.reshape(spec.y_shape), f"{algorithm} {params} {spec}")
            covered.update(params.items())
            ran += 1
            if algorithm in FUSED_ACTIVATION:
                (y,) = _run_plan(spec, algorithm, "forward+relu", params, xs, ws, bias)
                relu = np.where(ref < 0, 0, ref).reshape(spec.y_shape)
                assert_within(y, relu, tol.reshape(spec.y_shape), f"{algorithm}+relu {params}")
                # The bias shifted by 5: many outputs beyond 6, so the upper clamp is exercised too.
                shifted = ref + 5
                assert (shifted > 6).any() and (shifted < 6).any()
                (y,) = _run_plan(spec, algorithm, "forward+relu6", params, xs, ws, bias + 5)
                relu6 = np.clip(shifted, 0, 6).reshape(spec.y_shape)
                tol6 = forward_tolerance(spec, x, w, bias + 5).reshape(spec.y_shape)  # the larger bias's rounding
                assert_within(y, relu6, tol6, f"{algorithm}+relu6 {params}")
        if "backward" not in record.directions:
            continue
        gy = rng.standard_normal(spec.y_shape).astype(dtype)
        refs, tols = reference_backward(spec, gy, xs, ws), backward_tolerances(spec, gy, xs, ws)
        for params in _tunable_configurations(record, spec, "backward")[0]:
            got = _run_plan(spec, algorithm, "backward", params, gy, xs, ws)
            for name, g, r, t in zip("xwb", got, refs, tols):
                assert_within(g, r, t, f"{algorithm} backward {params} grad_{name}")
            ran += 1
    every = {(t.name, v) for t in record.tunables for v in t.values}
    # a value may be refused on every case only with a reason (e.g. float64 mt=32: registers)
    assert every - covered <= never, f"values never run nor refused: {sorted(every - covered - never)}"
    assert ran > len(every)


def test_tunable_plans_share_modules_and_record_compile_times():
    """Defaults spelled out share the default plan and module; a -D configuration compiles once, timed."""
    from convsuite.backends import _cupy_runtime as rt
    from convsuite.backends.cupy.algorithms.conv2d import REGISTER_PX

    backend = cs._registry.get_backend("cupy")
    record = backend.algorithm_table()["register_tiled"]
    # A grid too small for the GPU: the hand rule's px is below the module's -D default, and
    # spelling the defaults out still gives the default plan.
    tiny = cs.explain(np.ones((1, 2, 9, 9), np.float32), np.ones((4, 2, 3, 3), np.float32)).spec
    small = record.defaults(tiny, "forward")
    assert small["px"] < REGISTER_PX
    assert backend.plan(tiny, "register_tiled", "forward") is backend.plan(tiny, "register_tiled", "forward", small)
    # 256 blocks: the module's own px.
    x, w = np.ones((64, 2, 64, 64), np.float32), np.ones((4, 2, 3, 3), np.float32)
    spec = cs.explain(x, w).spec
    defaults = record.defaults(spec, "forward")
    assert defaults["px"] == REGISTER_PX
    assert backend.plan(spec, "register_tiled", "forward") is backend.plan(spec, "register_tiled", "forward", defaults)
    tile = f"conv2d_register_tiled@{defaults['mt']}"
    assert rt.module("conv2d.cu", {"CS_RT_PX": defaults["px"]}, kernel=tile) is rt.module("conv2d.cu", kernel=tile)
    other = 2 if defaults["px"] != 2 else 1
    plan = backend.plan(spec, "register_tiled", "forward", {"px": other})
    assert plan is not backend.plan(spec, "register_tiled", "forward")
    assert rt.module("conv2d.cu", {"CS_RT_PX": other}, kernel=tile) is not rt.module("conv2d.cu", kernel=tile)
    seconds = rt.compile_seconds()
    assert seconds[("conv2d.cu", (("CS_RT_PX", other),))] > 0
    assert seconds[("conv2d.cu", ())] > 0


def test_tune_searches_cupy_parameters_and_the_result_is_correct(tmp_path, monkeypatch):
    """cs.tune on device arrays: the search (guarded first calls, confirmation, the check against the
    default's result on the GPU) runs, its winner persists, and the tuned call agrees with the reference."""
    from convsuite import _tuning

    cp = _cupy()
    monkeypatch.setenv(_tuning.CACHE_DIR_ENV, str(tmp_path))
    cs.clear_tuning_cache()
    rng = np.random.default_rng(16)
    x = rng.standard_normal((4, 8, 23, 29)).astype(np.float32)
    w = rng.standard_normal((12, 8, 3, 3)).astype(np.float32)
    xd, wd = cp.asarray(x), cp.asarray(w)
    try:
        result = cs.tune(xd, wd, padding=1, stride=2, backend="cupy", algorithm="register_tiled", budget_s=5.0)
        assert result.param_table and set(result.params) == {"mt", "block_w", "px"}
        assert all(row[0] == "cupy/register_tiled" for row in result.param_table)
        with cs.use_autotune(True):
            e = cs.explain(xd, wd, padding=1, stride=2, backend="cupy", algorithm="register_tiled")
            y = cs.conv2d(xd, wd, padding=1, stride=2, backend="cupy", algorithm="register_tiled")
        assert e.decided_by == "measurement" and e.params == result.params
    finally:
        cs.clear_tuning_cache()
    spec = cs.explain(x, w, padding=1, stride=2).spec
    assert_within(cp.asnumpy(y), reference_forward(spec, x, w), forward_tolerance(spec, x, w), "tuned register_tiled")


_CACHE_CHILD = """
import json, sys, numpy as np, convsuite as cs
from convsuite.backends import _cupy_runtime as rt
from convsuite.testing import forward_tolerance, reference_forward, assert_within
import cupy as cp
rng = np.random.default_rng(7)
x = rng.standard_normal((2, 6, 17, 19)).astype(np.float32)
w = rng.standard_normal((10, 6, 3, 3)).astype(np.float32)
plan = cs.plan(cp.asarray(x), cp.asarray(w), padding=1, backend="cupy", algorithm="fused_gemm", params={"bk": 8})
y = cp.asnumpy(plan(cp.asarray(x), cp.asarray(w)))
spec = plan.spec
assert_within(y, reference_forward(spec, x, w), forward_tolerance(spec, x, w), "fused_gemm bk=8")
seconds = rt.compile_seconds()[("implicit_gemm.cu", (("CS_GEMM_BK", 8),))]
print(json.dumps({"seconds": seconds, "cache": rt.disk_cache()}))
"""


def test_compiled_configurations_persist_across_processes(tmp_path):
    """A -D configuration compiled by one process is loaded from CuPy's disk cache by the next:
    the second process writes no cache entry (nothing compiled) and gets a correct result."""
    import json
    import subprocess
    import sys

    env = {**__import__("os").environ, "CUPY_CACHE_DIR": str(tmp_path), "CUPY_CACHE_IN_MEMORY": "0"}

    def child():
        out = subprocess.run([sys.executable, "-c", _CACHE_CHILD], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = child()
    if not first["cache"]["reads_templates"]:
        pytest.fail(f"CuPy {first['cache']['cupy']} does not read template modules back (needs >= 14.2)")
    entries = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert entries, "the first process wrote nothing to the disk cache"
    second = child()
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == entries, "the second process compiled"
    print(f"compile {first['seconds']:.3f} s, load from disk {second['seconds']:.3f} s")
    assert second["seconds"] < first["seconds"]


_ONE_KERNEL_CHILD = """
import json, numpy as np, convsuite as cs
from convsuite.backends import _cupy_runtime as rt
from convsuite.testing import forward_tolerance, reference_forward, assert_within
rng = np.random.default_rng(8)
x = rng.standard_normal((2, 16, 12, 12)).astype(np.float32)
w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
y = cs.conv2d(x, w, padding=1, backend="cupy", algorithm="tf32x3")
spec = cs.explain(x, w, padding=1).spec
assert_within(y, reference_forward(spec, x, w), forward_tolerance(spec, x, w), "tf32x3")
print(json.dumps(sorted([k[1], k[3]] for k in rt._modules)))
"""


def test_a_first_call_compiles_the_modules_of_its_kernels_only(tmp_path):
    """A tf32x3 forward call in a fresh process (empty disk cache) builds the modules of its forward
    kernel and its weight split, not the file's weight-gradient kernels nor its other tiles and epilogues.

    The forward kernel is the rule's: the wgmma kernel (its own file) on compute capability 9.0,
    the mma.sync kernel elsewhere."""
    import json
    import subprocess
    import sys

    from convsuite.backends import _cupy_runtime as rt
    from convsuite.backends.cupy.algorithms.implicit_gemm import TF32X3_WGMMA_CAPABILITY

    env = {**__import__("os").environ, "CUPY_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", _ONE_KERNEL_CHILD], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    built = json.loads(out.stdout.strip().splitlines()[-1])
    if rt.compute_capability() == TF32X3_WGMMA_CAPABILITY:
        expected = [["implicit_gemm_tf32x3.cu", "tf32x3_split_weights@1"], ["tf32x3_wgmma.cu", "conv2d_tf32x3_wgmma@0"]]
    else:
        expected = [
            ["implicit_gemm_tf32x3.cu", "conv2d_tf32x3_fwd@64,0,1"],
            ["implicit_gemm_tf32x3.cu", "tf32x3_split_weights@1"],
        ]
    assert [pair for pair in built if pair[0] in ("implicit_gemm_tf32x3.cu", "tf32x3_wgmma.cu")] == expected, built


def test_device_name_tells_the_model_for_the_tuning_cache_and_the_records():
    import cupy

    from convsuite import _registry, _tuning
    from convsuite.bench.crossover import _machine

    backend = _registry.get_backend("cupy")
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    model = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    name = _tuning.device_name("gpu", backend)
    assert name == backend.device_name()
    assert model in name and f"sm_{cupy.cuda.Device().compute_capability}" in name
    assert _machine("gpu").startswith(name)  # the crossover and regret records name the GPU
