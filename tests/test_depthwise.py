"""The CPU rungs' ``depthwise`` algorithm: phase planes and flat AXPYs, held to the float64 reference.

The agreement suite draws depthwise cases among others; here every case is
depthwise (one input channel per group), the planes are larger, strides go
to 4 and dilations to 3, and the band budget is pinned small so that items
split rows and columns (the band edges are where a phase-plane kernel goes
wrong). Outputs start as NaN (conftest), so an unwritten element fails.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import convsuite as cs
from convsuite._registry import get_backend
from convsuite._validation import prepare_forward
from convsuite.backends._depthwise_bands import MAX_MULTIPLIER, MAX_PHASES, bands
from convsuite.testing import assert_within, forward_tolerance, reference_forward

AVAILABLE = {b.name for b in cs.list_backends() if b.available}
BACKENDS = [
    pytest.param(b.name, marks=() if b.available else pytest.mark.skip(reason=b.reason))
    for b in cs.list_backends()
    if b.name in ("numba", "cython")
]


@st.composite
def depthwise_cases(draw):
    ndim = draw(st.sampled_from([1, 2]))
    channels = draw(st.integers(1, 4))
    multiplier = draw(st.integers(1, 3))
    kernel = tuple(draw(st.integers(1, 5)) for _ in range(ndim))
    stride = tuple(draw(st.integers(1, 4)) for _ in range(ndim))
    dilation = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    padding = tuple((draw(st.integers(0, 4)), draw(st.integers(0, 4))) for _ in range(ndim))
    size = []
    for k, d, (lo, hi) in zip(kernel, dilation, padding):
        span = d * (k - 1) + 1
        size.append(max(1, span - lo - hi) + draw(st.integers(0, 90 if ndim == 2 else 700)))
    return dict(
        x_shape=(draw(st.integers(1, 2)), channels, *size),
        w_shape=(channels * multiplier, 1, *kernel),
        stride=stride,
        dilation=dilation,
        padding=padding,
        groups=channels,
        bias=draw(st.booleans()),
        dtype=draw(st.sampled_from([np.float32, np.float64])),
        band_kib=draw(st.sampled_from([16, 32, 128])),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def _operands(case):
    rng = np.random.default_rng(case["seed"])
    x = rng.standard_normal(case["x_shape"]).astype(case["dtype"])
    w = rng.standard_normal(case["w_shape"]).astype(case["dtype"])
    b = rng.standard_normal(case["w_shape"][0]).astype(case["dtype"]) if case["bias"] else None
    return x, w, b


def _spec(case, x, w, b):
    ndim = len(case["x_shape"]) - 2
    keywords = {k: case[k] for k in ("stride", "padding", "dilation", "groups")}
    return prepare_forward(f"conv{ndim}d", ndim, x, w, b, **keywords).spec


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_the_reference_with_small_bands(backend):
    @settings(max_examples=60)
    @given(case=depthwise_cases())
    def run(case):
        x, w, b = _operands(case)
        spec = _spec(case, x, w, b)
        params = {"band_kib": case["band_kib"]}
        record = get_backend(backend).algorithm_table()["depthwise"]
        verdict = record.can_run(spec, "forward")
        if verdict is not True:  # only the stride product can decline here
            assert spec.stride[0] * (spec.stride[1] if spec.ndim == 2 else 1) > MAX_PHASES, verdict
            return
        launch = get_backend(backend).plan(spec, "depthwise", "forward", params)
        out = np.full(spec.as_2d().y_shape, np.nan, dtype=spec.dtype)
        launch(x, w, b, out)
        expected = reference_forward(spec, x, w, b)
        assert_within(out.reshape(spec.y_shape), expected, forward_tolerance(spec, x, w, b), f"{backend} depthwise")

    run()


@pytest.mark.parametrize("backend", BACKENDS)
def test_public_call_pinned_to_depthwise(backend):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, 31, 29)).astype(np.float32)
    w = rng.standard_normal((12, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32)
    y = cs.conv2d(x, w, b, stride=2, padding=1, groups=6, backend=backend, algorithm="depthwise")
    spec = prepare_forward("conv2d", 2, x, w, b, stride=2, padding=1, dilation=1, groups=6).spec
    assert_within(y, reference_forward(spec, x, w, b), forward_tolerance(spec, x, w, b), "depthwise")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "x_shape, w_shape, keywords, reason",
    [
        ((1, 4, 9, 9), (4, 2, 3, 3), dict(groups=2), "one input channel per group"),
        ((1, 4, 9, 9), (4, 4, 3, 3), dict(), "one input channel per group"),
        ((1, 2, 40, 40), (2, 1, 3, 3), dict(groups=2, stride=(5, 4)), "phase planes, at most 16"),
        ((1, 1, 2, 4), (1, 1, 1, 3), dict(dilation=(1, 2**25), padding=((0, 0), (2**26, 2**26))), "bytes of planes"),
    ],
)
def test_declines_with_the_reason(backend, x_shape, w_shape, keywords, reason):
    x = np.ones(x_shape, np.float32)
    w = np.ones(w_shape, np.float32)
    with pytest.raises(cs.UnsupportedCaseError, match=reason):
        cs.conv2d(x, w, backend=backend, algorithm="depthwise", **keywords)


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_only_backward_goes_elsewhere(backend):
    record = get_backend(backend).algorithm_table()["depthwise"]
    assert record.directions == ("forward",)
    x = np.ones((1, 3, 6, 6))
    w = np.ones((3, 1, 3, 3))
    spec = prepare_forward("conv2d", 2, x, w, None, 1, 1, 1, 3).spec
    algorithm, _ = get_backend(backend).choose_algorithm(spec, "backward")
    assert algorithm != "depthwise"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "x_shape, w_shape, groups, chosen",
    [
        ((1, 960, 7, 7), (960, 1, 3, 3), 960, True),  # MobileNetV2's last depthwise layer
        ((2, 1, 32, 32), (6, 1, 5, 5), 1, True),  # LeNet-5 conv1 at batch 2: one channel, six filters
        ((200, 1, 48, 48), (12, 1, 5, 5), 1, False),  # ECE408 fa19 conv1: a wide multiplier goes to gemm
        ((1, 8, 9, 9), (8, 4, 3, 3), 2, False),  # grouped, not depthwise
    ],
)
def test_rule(backend, x_shape, w_shape, groups, chosen):
    spec = prepare_forward("conv2d", 2, np.ones(x_shape), np.ones(w_shape), None, 1, 1, 1, groups).spec
    algorithm, why = get_backend(backend).choose_algorithm(spec, "forward")
    assert (algorithm == "depthwise") is chosen, (algorithm, why)
    assert w_shape[0] // groups <= MAX_MULTIPLIER or not chosen


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("x_shape", "w_shape", "groups", "chosen"),
    [
        ((64, 1, 32, 32), (6, 1, 5, 5), 1, "gemm"),  # LeNet-5 conv1 at batch 64: BLAS wins (measured, both)
        ((1000, 1, 86, 86), (4, 1, 7, 7), 1, "gemm"),  # ECE408 fa21 conv1: four filters re-read the planes
        ((8, 96, 56, 56), (96, 1, 3, 3), 96, "depthwise"),  # one filter per channel stays depthwise
    ],
)
def test_large_single_channel_batches(backend, x_shape, w_shape, groups, chosen):
    """Few filters per input channel and much work: gemm (numba: LARGE_SINGLE_CHANNEL_OUTPUTS, cython:
    MULTIPLIER_GEMM_OUTPUTS); one filter per channel: depthwise."""
    if backend not in AVAILABLE:
        pytest.skip(f"{backend} unavailable")
    spec = prepare_forward("conv2d", 2, np.ones(x_shape), np.ones(w_shape), None, 1, 0, 1, groups).spec
    assert get_backend(backend).choose_algorithm(spec, "forward")[0] == chosen


def test_bands_fit_the_budget_and_split_for_threads():
    x, w = np.ones((1, 1, 300, 5000)), np.ones((1, 1, 3, 3))
    spec = prepare_forward("conv2d", 2, x, w, None, 1, 1, 1, 1).spec
    rows, cols = bands(spec, 16, 1)
    assert (rows + 2) * (cols + 2) + 2 <= 16 * 1024 // 8  # float64 planes within 16 KiB
    assert cols < 5000  # a row this long is split into column bands
    small = prepare_forward("conv2d", 2, np.ones((1, 1, 40, 40)), w, None, 1, 1, 1, 1).spec
    rows, cols = bands(small, 4096, 4)
    assert cols == 40 and -(-40 // rows) >= 8  # one plane, 4 threads: at least 2 row bands per thread


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernel_refuses_a_grouped_case_called_directly(backend):
    # Planned without the algorithm's check (the backend's plan() trusts its caller), the
    # kernel itself still refuses to run a case with several channels per group: with
    # one it would index output channels past M and write outside `out`.
    x, w = np.ones((1, 3, 13, 10), np.float32), np.ones((5, 3, 3, 2), np.float32)
    spec = prepare_forward("conv2d", 2, x, w, None, 2, 1, 1, 1).spec
    launch = get_backend(backend).plan(spec, "depthwise", "forward")
    out = np.full(spec.y_shape, np.nan, np.float32)
    with pytest.raises(ValueError, match="one input channel per group"):
        launch(x, w, None, out)


@pytest.mark.parametrize("backend", BACKENDS)
def test_band_budget_is_checked(backend):
    x, w = np.ones((1, 4, 9, 9), np.float32), np.ones((4, 1, 3, 3), np.float32)
    with pytest.raises(ValueError, match=r"'band_kib' accepts 16, 32, .*; got 100"):
        cs.plan(x, w, groups=4, backend=backend, algorithm="depthwise", params={"band_kib": 100})
    with pytest.raises(ValueError, match=r"'depthwise' has no tunable parameter 'tile_w'"):
        cs.plan(x, w, groups=4, backend=backend, algorithm="depthwise", params={"tile_w": 256})
