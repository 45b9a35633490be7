"""Every backend against the independent float64 reference, on random cases.

Outputs are poisoned (conftest), inputs are read-only and sometimes strided,
and the tolerance is the worst-case bound for the dtype and reduction length.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import convsuite as cs
from convsuite._validation import prepare_forward
from convsuite.testing import (
    assert_within,
    backward_tolerances,
    forward_tolerance,
    reference_backward,
    reference_forward,
)

from .cases import Case, cases
from .conftest import BACKENDS

FORWARD = {1: cs.conv1d, 2: cs.conv2d}
BACKWARD = {1: cs.conv1d_backward, 2: cs.conv2d_backward}


def _spec(case: Case, x, w, b):
    spec = prepare_forward(f"conv{case.ndim}d", case.ndim, x, w, b, **case.keywords).spec
    # convsuite's geometry against the textbook rules computed by the test.
    assert spec.padding == case.pads, (spec.padding, case.pads)
    return spec


#: Every algorithm of every backend, pinned with ``algorithm=``.
ALGORITHMS = [(name, algorithm) for name in sorted(BACKENDS) for algorithm in BACKENDS[name].algorithms]


@pytest.fixture(params=ALGORITHMS, ids=[f"{b}-{a}" for b, a in ALGORITHMS])
def backend_algorithm(request) -> tuple[str, str]:
    """(backend, algorithm) for every algorithm; unavailable backends skip with their reason."""
    info = BACKENDS[request.param[0]]
    if not info.available:
        pytest.skip(f"backend {info.name!r} unavailable: {info.reason}")
    return request.param


def _declines(spec, backend: str, algorithm: str, direction: str, call) -> bool:
    """True (after checking the call is refused with the reason) when the algorithm declines the case."""
    if algorithm == "auto":
        return False
    verdict = cs._registry.get_backend(backend).can_run(spec, algorithm, direction)
    if verdict is True:
        return False
    with pytest.raises(cs.UnsupportedCaseError, match="cannot run"):
        call()
    return True


def check_forward(case: Case, backend: str, algorithm: str = "auto") -> None:
    x, w, b = case.arrays()
    before = x.copy()
    spec = _spec(case, x, w, b)

    def call():
        return FORWARD[case.ndim](x, w, b, backend=backend, algorithm=algorithm, **case.keywords)

    if _declines(spec, backend, algorithm, "forward", call):
        return
    y = call()
    assert isinstance(y, np.ndarray) and y.dtype == case.dtype
    expected = reference_forward(spec, x, w, b)
    tolerance = forward_tolerance(spec, x, w, b)
    shape = {"batched": spec.y_shape, "unbatched": spec.y_shape[1:], "signal": spec.out_size}[case.layout]
    assert y.shape == shape
    assert_within(y.reshape(spec.y_shape), expected, tolerance, f"{backend} forward")
    np.testing.assert_array_equal(x, before)  # inputs untouched


def check_backward(case: Case, backend: str, algorithm: str = "auto") -> None:
    x, w, _ = case.arrays()
    spec = _spec(case, x, w, None)
    rng = np.random.default_rng(case.seed + 1)
    y_user_shape = {"batched": spec.y_shape, "unbatched": spec.y_shape[1:], "signal": spec.out_size}[case.layout]
    grad_y = rng.standard_normal(y_user_shape).astype(case.dtype)

    def call():
        return BACKWARD[case.ndim](grad_y, x, w, backend=backend, algorithm=algorithm, **case.keywords)

    if _declines(spec, backend, algorithm, "backward", call):
        return
    gx, gw, gb = call()
    assert gx.shape == x.shape and gw.shape == w.shape and gb.shape == (spec.out_channels,)
    assert gx.dtype == gw.dtype == gb.dtype == case.dtype
    expected = reference_backward(spec, grad_y, x, w)
    tolerances = backward_tolerances(spec, grad_y, x, w)
    for name, got, want, tol in zip(("grad_x", "grad_w", "grad_b"), (gx, gw, gb), expected, tolerances):
        assert_within(np.reshape(got, np.shape(want)), want, tol, f"{backend} {name}")


@pytest.mark.parametrize("ndim", [1, 2])
def test_forward_matches_reference_random(backend_algorithm, ndim):
    @settings(max_examples=80)
    @given(case=cases(ndim))
    def run(case):
        check_forward(case, *backend_algorithm)

    run()


@pytest.mark.parametrize("ndim", [1, 2])
def test_backward_matches_reference_random(backend_algorithm, ndim):
    @settings(max_examples=40)
    @given(case=cases(ndim))
    def run(case):
        check_backward(case, *backend_algorithm)

    run()


def _case(ndim, **kw) -> Case:
    base = dict(
        ndim=ndim,
        layout="batched",
        batch=2,
        groups=1,
        channels_per_group=3,
        out_per_group=2,
        in_size=(9,) * ndim,
        kernel=(3,) * ndim,
        stride=(1,) * ndim,
        dilation=(1,) * ndim,
        padding=0,
        dtype=np.float32,
        bias=True,
        noncontiguous=False,
        seed=7,
    )
    base.update(kw)
    return Case(**base)


# Hand-picked edge cases the issue names, run on every backend in both dtypes.
EDGE_CASES = {
    "stride2-same": dict(stride=(2, 2), padding="same"),
    "stride3-same-even-kernel": dict(stride=(3, 3), padding="same", kernel=(4, 4)),
    "dilation2-full": dict(dilation=(2, 2), padding="full"),
    "dilation3-stride2-pairs": dict(dilation=(3, 2), stride=(2, 1), padding=((0, 2), (3, 1))),
    "groups3": dict(groups=3, channels_per_group=2, out_per_group=2),
    "depthwise": dict(groups=4, channels_per_group=1, out_per_group=1, padding="same"),
    "depthwise-multiplier2-stride2": dict(groups=5, channels_per_group=1, out_per_group=2, stride=(2, 2), padding=1),
    "one-by-one": dict(kernel=(1, 1)),
    "kernel-equals-input": dict(kernel=(9, 9)),
    "even-kernel-same": dict(kernel=(2, 4), padding="same"),
    "unbatched": dict(layout="unbatched", batch=1),
    "noncontiguous": dict(noncontiguous=True, padding="full"),
    "no-bias": dict(bias=False, padding=2),
    "stride-larger-than-kernel": dict(stride=(4, 5), kernel=(2, 2)),
    "rows-longer-than-a-tile": dict(in_size=(3, 700), padding="same", out_per_group=6),
    "channel-blocks-and-leftovers": dict(out_per_group=7, groups=2, channels_per_group=2, padding=1),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ndim", [1, 2])
@pytest.mark.parametrize("name", sorted(EDGE_CASES))
def test_edge_cases(backend_algorithm, ndim, dtype, name):
    kw = dict(EDGE_CASES[name])
    for key in ("stride", "dilation", "kernel", "in_size"):
        if key in kw:
            kw[key] = kw[key][-ndim:] if key == "in_size" else kw[key][:ndim] if ndim == 1 else kw[key]
    if isinstance(kw.get("padding"), tuple):
        kw["padding"] = kw["padding"][-ndim:]
    case = _case(ndim, dtype=dtype, **kw)
    check_forward(case, *backend_algorithm)
    check_backward(case, *backend_algorithm)


@pytest.mark.parametrize("mode", ["valid", "same", "full"])
@pytest.mark.parametrize("K", [1, 3, 5, 31])
def test_plain_signal_matches_numpy_correlate(backend, mode, K):
    """The 1-D report's shorthand, against numpy.correlate (a wholly separate oracle)."""
    rng = np.random.default_rng(K)
    signal, mask = rng.standard_normal(200), rng.standard_normal(K)
    y = cs.conv1d(signal, mask, padding=mode, backend=backend)
    expected = np.correlate(signal, mask, mode=mode)
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12 * K)


def test_mixed_and_integer_dtypes(backend):
    x = np.arange(2 * 3 * 6 * 6).reshape(2, 3, 6, 6) % 7  # int64
    w32 = np.ones((2, 3, 3, 3), dtype=np.float32)
    assert cs.conv2d(x, w32, backend=backend).dtype == np.float64
    assert cs.conv2d(x.astype(np.float32), w32, backend=backend).dtype == np.float32
    assert cs.conv2d(x.astype(np.float32), w32.astype(np.float64), backend=backend).dtype == np.float64
    assert cs.conv2d(x.astype(np.float16), w32, backend=backend).dtype == np.float32  # NumPy promotion
    assert cs.conv2d(x.astype(np.float16), w32.astype(np.float16), backend=backend).dtype == np.float16
    y = cs.conv2d(x, w32, backend=backend)
    expected = np.array([[x[b, :, i : i + 3, j : j + 3].sum() for j in range(4)] for b in range(2) for i in range(4)])
    np.testing.assert_array_equal(y[:, 0].reshape(-1, 4), expected.reshape(-1, 4))


def test_lists_are_arrays(backend):
    y = cs.conv1d([1.0, 2.0, 3.0, 4.0], [1.0, -1.0], backend=backend)
    np.testing.assert_array_equal(y, [-1.0, -1.0, -1.0])


# Long signals and kernels cross the compiled kernels' tiles (line1d's 4096
# outputs, the 4-tap groups of long masks, the im2col row blocks).
LONG_CASES = {
    "signal-K31-same": dict(ndim=1, layout="signal", in_size=(5000,), kernel=(31,), padding="same"),
    "signal-K3-full": dict(ndim=1, layout="signal", in_size=(4500,), kernel=(3,), padding="full"),
    "depthwise-K13-stride2-dil3": dict(
        ndim=1,
        groups=2,
        channels_per_group=1,
        out_per_group=1,
        in_size=(4200,),
        kernel=(13,),
        stride=(2,),
        dilation=(3,),
        padding=((5, 1),),
    ),
    "depthwise-K6-dil2-same": dict(
        ndim=1,
        groups=3,
        channels_per_group=1,
        out_per_group=1,
        in_size=(600,),
        kernel=(6,),
        dilation=(2,),
        padding="same",
    ),
    "rows-K5-stride2": dict(ndim=2, in_size=(40, 33), kernel=(5, 5), stride=(2, 1), padding=2, out_per_group=9),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(LONG_CASES))
def test_long_rows_and_kernels(backend_algorithm, name, dtype):
    kw = dict(LONG_CASES[name])
    ndim = kw.pop("ndim")
    base = _case(ndim, dtype=dtype, in_size=kw.pop("in_size"), kernel=kw.pop("kernel"))
    case = Case(**{**base.__dict__, **kw})
    if case.layout == "signal":
        case.batch = case.groups = case.channels_per_group = case.out_per_group = 1
    check_forward(case, *backend_algorithm)
    check_backward(case, *backend_algorithm)
