"""Issue 9, class 6, and differential fuzzing: non-finite values, every CPU backend.

The rule (``convsuite._nonfinite``): IEEE arithmetic on the zero-padded input,
as in PyTorch. A padding tap is a product like any other, so ``inf * 0`` and
``NaN * 0`` at a halo tap give NaN, forward and in the weight gradient.
Checked here by hand on a spelled-out case, against the float64 reference of
``convsuite.testing`` (which forms exactly the definition's products, padding
taps included) on random cases with NaN, +inf, -inf and zeros injected, and
against torch when it is installed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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

CPU_BACKENDS = [n for n, info in sorted(BACKENDS.items()) if info.available and info.device == "cpu"]
FORWARD = {1: cs.conv1d, 2: cs.conv2d}
BACKWARD = {1: cs.conv1d_backward, 2: cs.conv2d_backward}
NAN, INF = float("nan"), float("inf")


def assert_same_ieee(actual, expected, tolerance, name: str) -> None:
    """NaN where NaN, +-inf where +-inf, finite elements within ``tolerance``; ``actual`` in any layout."""
    assert_within(np.reshape(actual, np.shape(expected)), expected, tolerance, name)


# --- the rule, spelled out -------------------------------------------------
# x = [1, 2, 3], padding 1: the padded input is [0, 1, 2, 3, 0] and
# y[o] = xp[o] * w[0] + xp[o + 1] * w[1] for o = 0..3.


@pytest.mark.parametrize(
    "w, expected",
    [
        # o = 0 meets the left halo zero with inf: 0 * inf + 1 = NaN; others inf.
        ([INF, 1.0], [NAN, INF, INF, INF]),
        # o = 3 meets the right halo zero with -inf: 3 + 0 * -inf = NaN.
        ([1.0, -INF], [-INF, -INF, -INF, NAN]),
        # NaN reaches every output, halo or not.
        ([NAN, 0.0], [NAN, NAN, NAN, NAN]),
    ],
)
def test_forward_rule_by_hand(backend, w, expected):
    y = cs.conv1d(np.array([1.0, 2.0, 3.0]), np.array(w), padding=1, backend=backend)
    np.testing.assert_array_equal(y, expected)  # assert_array_equal matches NaN with NaN


def test_backward_rule_by_hand(backend):
    # grad_w[k] = sum_o gy[o] * xp[o + k]: with gy[0] = inf, tap 0 meets the
    # halo zero (inf * 0 = NaN); tap 1 only meets real inputs: inf.
    # grad_x[i] = sum of gy[o] * w[k] over o + k - 1 = i: only real positions.
    gx, gw, gb = cs.conv1d_backward(
        np.array([INF, 1.0, 1.0, 1.0]), np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0]), padding=1, backend=backend
    )
    np.testing.assert_array_equal(gw, [NAN, INF])
    np.testing.assert_array_equal(gx, [INF, 2.0, 2.0])
    np.testing.assert_array_equal(gb, [INF])


def test_two_dimensional_rule_by_hand(backend):
    # A 2x2 input, 2x2 kernel, padding 1: 3x3 outputs. Only tap (0, 0) is
    # infinite; it reads padding at the first row and the first column.
    x = np.ones((1, 1, 2, 2))
    w = np.ones((1, 1, 2, 2))
    w[0, 0, 0, 0] = INF
    y = cs.conv2d(x, w, padding=1, backend=backend)[0, 0]
    expected = np.array([[NAN, NAN, NAN], [NAN, INF, INF], [NAN, INF, INF]])
    np.testing.assert_array_equal(y, expected)


# --- differential fuzzing: random specs with non-finite values -------------


def _inject(rng: np.random.Generator, array, rate: float):
    """A writable copy with some elements set to NaN, +inf, -inf or 0."""
    if array is None:
        return None
    out = np.array(array)
    flat = out.reshape(-1)
    hits = rng.random(flat.size) < rate
    flat[hits] = rng.choice([NAN, INF, -INF, 0.0], size=int(hits.sum()))
    return out


def _tolerance_operands(*arrays):
    """Operands with non-finite values zeroed: finite outputs never met them."""
    return [None if a is None else np.where(np.isfinite(a), a, 0.0) for a in arrays]


@settings(max_examples=40)
@given(case=st.one_of(cases(1), cases(2)), rate=st.sampled_from([0.0, 0.05, 0.3]), data=st.data())
def test_fuzz_every_cpu_backend_against_the_ieee_reference(case: Case, rate, data):
    rng = np.random.default_rng(case.seed)
    x, w, b = case.arrays()
    x, w, b = (_inject(rng, a, rate * data.draw(st.sampled_from([0, 1]))) for a in (x, w, b))
    spec = prepare_forward(f"conv{case.ndim}d", case.ndim, x, w, b, convert=False, **case.keywords).spec
    expected = reference_forward(spec, x, w, b)
    tolerance = forward_tolerance(spec, *_tolerance_operands(x, w, b))
    y_shape = {"batched": spec.y_shape, "unbatched": spec.y_shape[1:], "signal": spec.out_size}[case.layout]
    grad_y = _inject(rng, rng.standard_normal(y_shape).astype(case.dtype), rate * data.draw(st.sampled_from([0, 1])))
    expected_grads = reference_backward(spec, grad_y, x, w)
    grad_tolerances = backward_tolerances(spec, *_tolerance_operands(grad_y, x, w))
    for backend in CPU_BACKENDS:
        y = FORWARD[case.ndim](x, w, b, backend=backend, **case.keywords)
        assert y.dtype == case.dtype and y.shape == y_shape
        assert_same_ieee(y, expected, tolerance, f"{backend} forward")
        grads = BACKWARD[case.ndim](grad_y, x, w, backend=backend, **case.keywords)
        for name, got, want, tol in zip(("grad_x", "grad_w", "grad_b"), grads, expected_grads, grad_tolerances):
            assert_same_ieee(got, want, tol, f"{backend} {name}")


def test_auto_does_not_depend_on_which_backends_are_installed():
    """Every CPU backend gives the same NaN/inf pattern on the issue's kind of case."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 4, 4))
    w = rng.standard_normal((3, 2, 3, 3))
    w[1, 0, 0, 2] = NAN
    w[2, 1, 2, 0] = -INF
    patterns = {
        backend: (np.isnan(y), np.isinf(y))
        for backend in CPU_BACKENDS
        for y in [cs.conv2d(x, w, padding="same", backend=backend)]
    }
    first = next(iter(patterns.values()))
    for backend, (nan, inf) in patterns.items():
        np.testing.assert_array_equal(nan, first[0], err_msg=backend)
        np.testing.assert_array_equal(inf, first[1], err_msg=backend)
    assert first[0][0, 1].sum() == 16 and first[0][0, 2].sum() > 0  # channel 1: NaN everywhere


def test_against_torch_when_installed():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 2, 5, 6))
    w = rng.standard_normal((3, 2, 3, 2))
    w[0, 1, 0, 0], w[2, 0, 2, 1] = INF, NAN
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=(2, 1)).numpy()
    for backend in CPU_BACKENDS:
        y = cs.conv2d(x, w, padding=(2, 1), backend=backend)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(expected), err_msg=backend)
        np.testing.assert_array_equal(np.isinf(y), np.isinf(expected), err_msg=backend)


@settings(max_examples=30)
@given(case=st.one_of(cases(1), cases(2)), rate=st.sampled_from([0.0, 0.1]))
def test_fuzz_numpy_tap_path_against_the_ieee_reference(case: Case, rate):
    """The tap-by-tap path numpy takes for huge padding, forced on ordinary cases."""
    from convsuite.backends import numpy_backend

    rng = np.random.default_rng(case.seed)
    x, w, b = (_inject(rng, a, rate) for a in case.arrays())
    spec = prepare_forward(f"conv{case.ndim}d", case.ndim, x, w, b, convert=False, **case.keywords).spec
    y_shape = {"batched": spec.y_shape, "unbatched": spec.y_shape[1:], "signal": spec.out_size}[case.layout]
    grad_y = _inject(rng, rng.standard_normal(y_shape).astype(case.dtype), rate)
    with pytest.MonkeyPatch.context() as patch:
        # Plans are built once per problem: start and end with an empty cache.
        cs.clear_plan_cache()
        patch.setattr(numpy_backend, "_padding_too_large", lambda s: True)
        y = FORWARD[case.ndim](x, w, b, backend="numpy", **case.keywords)
        grads = BACKWARD[case.ndim](grad_y, x, w, backend="numpy", **case.keywords)
        cs.clear_plan_cache()
    tolerance = forward_tolerance(spec, *_tolerance_operands(x, w, b))
    assert_same_ieee(y, reference_forward(spec, x, w, b), tolerance, "numpy taps forward")
    expected = reference_backward(spec, grad_y, x, w)
    tolerances = backward_tolerances(spec, *_tolerance_operands(grad_y, x, w))
    for name, got, want, tol in zip(("grad_x", "grad_w", "grad_b"), grads, expected, tolerances):
        assert_same_ieee(got, want, tol, f"numpy taps {name}")
