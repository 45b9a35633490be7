"""convsuite.testing: the reference every other test trusts, and its checks.

The float64 reference is compared with a loop definition written here (every
output, every tap that exists, Python floats, so IEEE specials propagate as
in the definition), on random cases with NaN, +inf, -inf and zeros injected,
strides and dilations above 1, groups and asymmetric padding; with torch
float64 too when it is installed. ``assert_within`` and the operand checks
are tested on the inputs that once slipped through.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

import convsuite as cs
from convsuite.testing import (
    assert_within,
    backward_tolerances,
    forward_tolerance,
    reference_backward,
    reference_forward,
)

NAN, INF = float("nan"), float("inf")


def _spec(x, w, bias=None, **keywords):
    return cs.explain(x, w, bias, **keywords).spec


# --- NaN and inf meet only the products the definition forms ----------------


def test_dilated_forward_never_reads_the_sample_between_taps():
    # y[0] = x[0] * w[0] + x[2] * w[1]: x[1] = inf lies between the taps.
    x, w = np.array([[[1.0, INF, 1.0]]]), np.array([[[1.0, 1.0]]])
    y = reference_forward(_spec(x, w, dilation=2), x, w)
    np.testing.assert_array_equal(y, [[[2.0]]])
    np.testing.assert_array_equal(y, cs.conv1d(x, w, dilation=2))


def test_two_dimensional_dilation_skips_the_rows_and_columns_between_taps():
    x = np.ones((1, 1, 3, 3))
    x[0, 0, 1, :] = INF  # the middle row: between the taps of a dilation-2 kernel
    x[0, 0, :, 1] = NAN  # the middle column
    w = np.ones((1, 1, 2, 2))
    y = reference_forward(_spec(x, w, dilation=2), x, w)
    np.testing.assert_array_equal(y, [[[[4.0]]]])


def test_strided_grad_x_pairs_each_input_with_the_taps_that_read_it():
    # stride 2, kernel 2: input i is read by exactly one (output, tap) pair,
    # tap i % 2; the NaN tap 0 reaches inputs 0 and 2 only.
    x, w, grad_y = np.zeros((1, 1, 4)), np.array([[[NAN, 1.0]]]), np.ones((1, 1, 2))
    grad_x, _, _ = reference_backward(_spec(x, w, stride=2), grad_y, x, w)
    np.testing.assert_array_equal(grad_x, [[[NAN, 1.0, NAN, 1.0]]])
    np.testing.assert_array_equal(grad_x, cs.conv1d_backward(grad_y, x, w, stride=2)[0])


def test_strided_grad_w_never_reads_an_input_no_output_reads():
    # stride 2, kernel 1: outputs read x[0] and x[2]; x[1] = inf is never read.
    x, w, grad_y = np.array([[[1.0, INF, 1.0]]]), np.array([[[1.0]]]), np.ones((1, 1, 2))
    _, grad_w, grad_b = reference_backward(_spec(x, w, stride=2), grad_y, x, w)
    np.testing.assert_array_equal(grad_w, [[[2.0]]])
    np.testing.assert_array_equal(grad_b, [2.0])


def test_dilated_grad_x_is_finite_where_no_special_tap_reaches():
    # dilation 2, kernel 2 over 3 inputs: one output reads x[0] and x[2];
    # x[1] is read by no tap, so its gradient is an empty sum, 0.
    x, w, grad_y = np.zeros((1, 1, 3)), np.array([[[1.0, 1.0]]]), np.array([[[INF]]])
    grad_x, grad_w, _ = reference_backward(_spec(x, w, dilation=2), grad_y, x, w)
    np.testing.assert_array_equal(grad_x, [[[INF, 0.0, INF]]])
    np.testing.assert_array_equal(grad_w, [[[NAN, NAN]]])  # inf * x = inf * 0


def test_a_padding_tap_is_still_a_product():
    # The suite's rule (test_reliability_nonfinite): the zero-padded input is
    # multiplied like any other, so inf * 0 at the halo is NaN, as in torch.
    x, w = np.array([1.0, 2.0, 3.0]), np.array([INF, 1.0])
    spec = _spec(x, w, padding=1)
    np.testing.assert_array_equal(reference_forward(spec, x, w), [[[NAN, INF, INF, INF]]])
    grad_y = np.array([INF, 1.0, 1.0, 1.0])
    grad_x, grad_w, grad_b = reference_backward(spec, grad_y, x, np.array([1.0, 1.0]))
    np.testing.assert_array_equal(grad_w, [[[NAN, INF]]])
    np.testing.assert_array_equal(grad_x, [[[INF, 2.0, 2.0]]])
    np.testing.assert_array_equal(grad_b, [INF])


def test_specials_raise_no_floating_point_warnings():
    x, w = np.array([[[1.0, INF, -INF, NAN]]]), np.array([[[0.0, 1e308]]])
    spec = _spec(x, w, padding=2, dilation=2, stride=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reference_forward(spec, x, w)
        forward_tolerance(spec, x, w)
        reference_backward(spec, np.full(spec.y_shape, 1e308), x, w)


# --- differential: a loop over the definition --------------------------------


def _loop_forward(x, w, bias, stride, pads, dilation, groups):
    """y[b, m, oh, ow] = bias[m] + sum_{c, p, q} x_padded[b, c, oh*sh + p*dh, ow*sw + q*dw] * w[m, c, p, q].

    Python floats: IEEE arithmetic without NumPy's warnings.
    """
    B, C, H, W = x.shape
    M, Cg, KH, KW = w.shape
    (sh, sw), (dh, dw), ((pt, pb), (pl, pr)) = stride, dilation, pads
    Ho = (H + pt + pb - (dh * (KH - 1) + 1)) // sh + 1
    Wo = (W + pl + pr - (dw * (KW - 1) + 1)) // sw + 1
    xl, wl = x.tolist(), w.tolist()

    def padded(b, c, i, j):
        inside = 0 <= i - pt < H and 0 <= j - pl < W
        return xl[b][c][i - pt][j - pl] if inside else 0.0

    y = np.zeros((B, M, Ho, Wo))
    for b in range(B):
        for m in range(M):
            g = m // (M // groups)
            for oh in range(Ho):
                for ow in range(Wo):
                    acc = 0.0
                    for c in range(Cg):
                        for p in range(KH):
                            for q in range(KW):
                                acc += padded(b, g * Cg + c, oh * sh + p * dh, ow * sw + q * dw) * wl[m][c][p][q]
                    y[b, m, oh, ow] = acc if bias is None else acc + float(bias[m])
    return y


def _loop_backward(grad_y, x, w, stride, pads, dilation, groups):
    """The three gradients, one (output, tap) pair at a time, in Python floats."""
    B, C, H, W = x.shape
    M, Cg, KH, KW = w.shape
    _, _, Ho, Wo = grad_y.shape
    (sh, sw), (dh, dw), ((pt, _), (pl, _)) = stride, dilation, pads
    xl, wl, gl = x.tolist(), w.tolist(), grad_y.tolist()
    grad_x, grad_w, grad_b = np.zeros(x.shape).tolist(), np.zeros(w.shape).tolist(), [0.0] * M
    for b in range(B):
        for m in range(M):
            g = m // (M // groups)
            for oh in range(Ho):
                for ow in range(Wo):
                    gy = gl[b][m][oh][ow]
                    grad_b[m] += gy
                    for c in range(Cg):
                        ci = g * Cg + c
                        for p in range(KH):
                            for q in range(KW):
                                i, j = oh * sh + p * dh - pt, ow * sw + q * dw - pl
                                inside = 0 <= i < H and 0 <= j < W
                                # grad_w reads the padded input (0.0 at the halo);
                                # grad_x has no element for a halo position.
                                grad_w[m][c][p][q] += gy * (xl[b][ci][i][j] if inside else 0.0)
                                if inside:
                                    grad_x[b][ci][i][j] += gy * wl[m][c][p][q]
    return np.array(grad_x), np.array(grad_w), np.array(grad_b)


def _inject(rng, array, rate=0.12):
    """A copy with some elements set to NaN, +inf, -inf or 0."""
    out = np.array(array, dtype=np.float64)
    flat = out.reshape(-1)
    hits = rng.random(flat.size) < rate
    flat[hits] = rng.choice([NAN, INF, -INF, 0.0], size=int(hits.sum()))
    return out


def _random_case(seed: int):
    """A small case with specials: strides and dilations up to 3, groups, asymmetric padding."""
    rng = np.random.default_rng(seed)
    ndim = 1 + seed % 2
    groups, cg, mg, batch = (int(v) for v in rng.integers(1, [4, 3, 3, 3]))
    kernel = tuple(int(v) for v in rng.integers(1, 4, ndim))
    stride = tuple(int(v) for v in rng.integers(1, 4, ndim))
    dilation = tuple(int(v) for v in rng.integers(1, 4, ndim))
    pads = tuple((int(a), int(b)) for a, b in rng.integers(0, 3, (ndim, 2)))
    in_size = tuple(
        max(1, d * (k - 1) + 1 - a - b) + int(rng.integers(0, 6)) for k, d, (a, b) in zip(kernel, dilation, pads)
    )
    x = _inject(rng, rng.standard_normal((batch, groups * cg, *in_size)))
    w = _inject(rng, rng.standard_normal((groups * mg, cg, *kernel)))
    bias = _inject(rng, rng.standard_normal(groups * mg)) if seed % 3 else None
    keywords = dict(stride=stride, padding=pads, dilation=dilation, groups=groups)
    spec = _spec(x, w, bias, **keywords)
    grad_y = _inject(rng, rng.standard_normal(spec.y_shape))
    return spec, x, w, bias, grad_y


def _as_2d(spec, *arrays):
    """The loop definition's 2-D geometry and operands (a unit height axis for 1-D)."""
    s = spec.as_2d()
    shapes = (s.x_shape, s.w_shape, s.y_shape)
    return s, [a.reshape(shape) for a, shape in zip(arrays, shapes)]


def _same(got, want, what):
    """NaN where NaN, +-inf where +-inf, finite values to rounding."""
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10, err_msg=what)


@pytest.mark.parametrize("seed", range(48))
def test_reference_matches_the_loop_definition_with_specials(seed):
    spec, x, w, bias, grad_y = _random_case(seed)
    s, (x4, w4, g4) = _as_2d(spec, x, w, grad_y)
    geometry = (s.stride, s.padding, s.dilation, s.groups)
    want = _loop_forward(x4, w4, bias, *geometry)
    _same(reference_forward(spec, x, w, bias).reshape(want.shape), want, f"forward {spec}")
    grads = reference_backward(spec, grad_y, x, w)
    for name, got, expected in zip(("grad_x", "grad_w", "grad_b"), grads, _loop_backward(g4, x4, w4, *geometry)):
        _same(got.reshape(expected.shape), expected, f"{name} {spec}")


def test_the_random_cases_exercise_specials_strides_and_dilations():
    cases = [_random_case(seed) for seed in range(48)]
    specs = [spec for spec, *_ in cases]
    assert any(max(spec.stride) > 1 and max(spec.dilation) > 1 for spec in specs)
    assert any(spec.groups > 1 for spec in specs) and any(spec.ndim == 1 for spec in specs)
    outputs = [reference_forward(spec, x, w, b) for spec, x, w, b, _ in cases]
    assert sum(np.isfinite(y).any() and not np.isfinite(y).all() for y in outputs) > 10


@pytest.mark.parametrize("seed", range(24))
def test_reference_matches_torch_float64_with_specials(seed):
    torch = pytest.importorskip("torch")
    spec, x, w, bias, grad_y = _random_case(seed)
    s, (x4, w4, g4) = _as_2d(spec, x, w, grad_y)
    (pt, pb), (pl, pr) = s.padding
    tx = torch.from_numpy(x4.copy()).requires_grad_()
    tw = torch.from_numpy(w4.copy()).requires_grad_()
    padded = torch.nn.functional.pad(tx, (pl, pr, pt, pb))  # zeros, as the definition pads
    tb = None if bias is None else torch.from_numpy(bias)
    ty = torch.nn.functional.conv2d(padded, tw, tb, stride=s.stride, dilation=s.dilation, groups=s.groups)
    ty.backward(torch.from_numpy(g4))
    _same(reference_forward(spec, x, w, bias), ty.detach().numpy().reshape(spec.y_shape), "forward")
    grad_x, grad_w, grad_b = reference_backward(spec, grad_y, x, w)
    _same(grad_x, tx.grad.numpy().reshape(spec.x_shape), "grad_x")
    _same(grad_w, tw.grad.numpy().reshape(spec.w_shape), "grad_w")
    with np.errstate(invalid="ignore"):  # inf + -inf in grad_y
        _same(grad_b, g4.sum(axis=(0, 2, 3)), "grad_b")


def test_finite_reference_and_tolerance_shapes_and_bounds():
    rng = np.random.default_rng(5)
    x, w, b = rng.standard_normal((2, 4, 7, 6)), rng.standard_normal((6, 2, 3, 2)), rng.standard_normal(6)
    spec = _spec(x, w, b, stride=(2, 1), padding="same", dilation=(1, 2), groups=2)
    y, tol = reference_forward(spec, x, w, b), forward_tolerance(spec, x, w, b)
    assert y.shape == tol.shape == spec.y_shape and y.dtype == np.float64
    assert (tol > 0).all()
    assert_within(cs.conv2d(x, w, b, stride=(2, 1), padding="same", dilation=(1, 2), groups=2), y, tol)
    grad_y = rng.standard_normal(spec.y_shape)
    for got, bound, shape in zip(
        reference_backward(spec, grad_y, x, w), backward_tolerances(spec, grad_y, x, w), (x.shape, w.shape, (6,))
    ):
        assert got.shape == bound.shape == shape and (bound > 0).all()


# --- assert_within ----------------------------------------------------------


def test_assert_within_scalar_tolerance():
    y = np.arange(3.0)
    assert_within(y + 1e-10, y, 1e-9)
    with pytest.raises(AssertionError, match="3 of 3 elements out of tolerance"):
        assert_within(y + 1, y, 1e-9)


def test_assert_within_reads_array_likes_as_arrays():
    assert_within([1.0, 2.0], [1.0, 2.05], np.array([0.1, 0.1]))
    with pytest.raises(AssertionError, match=r"1 of 2 elements.*\(1,\).*got 2.0, expected 3.0"):
        assert_within([1.0, 2.0], [1.0, 3.0], np.array([0.1, 0.1]))
    with pytest.raises(AssertionError, match="out of tolerance"):
        assert_within([[1.0, 2.0]], [[1.0, 3.0]], [[0.1, 0.1]])


def test_assert_within_equal_infinities_pass_whatever_the_tolerance():
    assert_within(np.array([INF, -INF, 1.0]), np.array([INF, -INF, 1.0]), np.array([1.0, 0.0, 0.0]))
    assert_within(np.array([INF]), np.array([INF]), 0.0)


@pytest.mark.parametrize(
    "actual, expected",
    [([INF], [-INF]), ([INF], [1.0]), ([1.0], [INF]), ([NAN], [INF]), ([INF], [NAN])],
)
def test_assert_within_specials_must_be_identical(actual, expected):
    with pytest.raises(AssertionError, match="out of tolerance"):
        assert_within(actual, expected, INF)  # not even an infinite tolerance excuses them


def test_assert_within_nan_positions_must_match():
    assert_within([NAN, 1.0], [NAN, 1.0], 0.0)
    # A poisoned (never written) element where a number is expected fails...
    with pytest.raises(AssertionError, match=r"first at \(0,\): got nan, expected 1.0"):
        assert_within([NAN, 1.0], [1.0, 1.0], 1.0)
    # ... and so does a number where the definition gives NaN.
    with pytest.raises(AssertionError, match=r"got 1.0, expected nan"):
        assert_within([1.0], [NAN], 1.0)


def test_assert_within_a_nan_tolerance_fails_a_finite_element():
    with pytest.raises(AssertionError, match="tolerance nan"):
        assert_within([1.0], [1.0], [NAN])


@pytest.mark.parametrize("which", ["actual", "expected", "tolerance"])
def test_assert_within_refuses_complex(which):
    arguments = dict(actual=np.zeros(3), expected=np.zeros(3), tolerance=np.zeros(3))
    arguments[which] = arguments[which] + 1e6j
    with pytest.raises(TypeError, match=f"`{which}` must have a real numeric dtype.*complex"):
        assert_within(**arguments)


@pytest.mark.parametrize("bad", [np.array(["a", "b"]), np.array([True, False]), [[1.0], [1.0, 2.0]]])
def test_assert_within_refuses_what_is_not_real_numbers(bad):
    with pytest.raises(TypeError, match="`actual` must"):
        assert_within(bad, np.zeros(2), 0.0)


def test_assert_within_shape_mismatch_names_both_shapes():
    with pytest.raises(AssertionError, match=r"shape \(3,\) != expected shape \(1, 3\)"):
        assert_within(np.zeros(3), np.zeros((1, 3)), 1.0)
    with pytest.raises(AssertionError, match=r"shape \(2,\) != expected shape \(3,\)"):
        assert_within([1.0, 2.0], [1.0, 2.0, 3.0], 1.0)


def test_assert_within_tolerance_must_broadcast_and_be_non_negative():
    with pytest.raises(ValueError, match=r"`tolerance` must be a scalar or an array.*\(2, 3\).*\(2,\)"):
        assert_within(np.zeros((2, 3)), np.zeros((2, 3)), np.ones(2))
    with pytest.raises(ValueError, match="`tolerance` must be >= 0"):
        assert_within(np.zeros(2), np.zeros(2), -1.0)
    assert_within(np.zeros((2, 3)), np.full((2, 3), 0.5), np.ones(3))  # broadcasts


def test_assert_within_empty_arrays_pass():
    assert_within(np.zeros((0, 3)), np.zeros((0, 3)), 0.0)


# --- operand checks ------------------------------------------------------------

RNG = np.random.default_rng(9)
X = RNG.standard_normal((2, 3, 5))
W = RNG.standard_normal((4, 3, 2))
B = RNG.standard_normal(4)
SPEC = _spec(X, W, B)
GY = RNG.standard_normal(SPEC.y_shape)


@pytest.mark.parametrize(
    "call",
    [
        lambda: reference_forward(SPEC, X.transpose(0, 2, 1).copy(), W),
        lambda: reference_forward(SPEC, X.reshape(-1), W),
        lambda: forward_tolerance(SPEC, X.transpose(0, 2, 1).copy(), W),
        lambda: reference_backward(SPEC, GY, X.transpose(0, 2, 1).copy(), W),
        lambda: backward_tolerances(SPEC, GY, X.transpose(0, 2, 1).copy(), W),
    ],
)
def test_x_of_the_right_size_but_the_wrong_shape_is_refused(call):
    with pytest.raises(ValueError, match=r"`x` must have shape \(2, 3, 5\); got shape \((2, 5, 3|30,)\)"):
        call()


def test_w_and_grad_y_of_the_wrong_shape_are_refused():
    with pytest.raises(ValueError, match=r"`w` must have shape \(4, 3, 2\); got shape \(4, 2, 3\)"):
        reference_forward(SPEC, X, W.transpose(0, 2, 1).copy())
    with pytest.raises(ValueError, match=r"`grad_y` must have shape \(2, 4, 4\); got shape \(2, 4, 2, 2\)"):
        reference_backward(SPEC, GY.reshape(2, 4, 2, 2), X, W)
    with pytest.raises(ValueError, match=r"`grad_y` must have shape"):
        backward_tolerances(SPEC, GY[:, :2], X, W)


@pytest.mark.parametrize("bias", [B[:1], B[:3], B.reshape(4, 1), np.float64(1.0)])
def test_bias_must_have_one_value_per_output_channel(bias):
    for function in (reference_forward, forward_tolerance):
        with pytest.raises(ValueError, match=r"`bias` must have shape \(4,\)"):
            function(SPEC, X, W, bias)


@pytest.mark.parametrize("name", ["x", "w", "bias"])
def test_complex_or_non_numeric_forward_operands_are_refused(name):
    for bad in (lambda a: a + 1e-3j, lambda a: a.astype(str), lambda a: a > 0):
        operands = dict(x=X, w=W, bias=B)
        operands[name] = bad(operands[name])
        for function in (reference_forward, forward_tolerance):
            with pytest.raises(TypeError, match=f"`{name}` must have a real numeric dtype"):
                function(SPEC, **operands)


@pytest.mark.parametrize("name", ["grad_y", "x", "w"])
def test_complex_backward_operands_are_refused(name):
    operands = dict(grad_y=GY, x=X, w=W)
    operands[name] = operands[name] + 1e-3j
    for function in (reference_backward, backward_tolerances):
        with pytest.raises(TypeError, match=f"`{name}` must have a real numeric dtype.*complex"):
            function(SPEC, **operands)


def test_masked_and_ragged_operands_are_refused():
    with pytest.raises(TypeError, match="`x` is a masked array"):
        reference_forward(SPEC, np.ma.masked_less(X, 0), W)
    with pytest.raises(TypeError, match="`w` must be a NumPy array or array-like"):
        reference_forward(SPEC, X, [[[1.0, 2.0]], [[1.0]]])


@pytest.mark.parametrize("function", [reference_forward, forward_tolerance])
@pytest.mark.parametrize("spec", [None, "conv1d", SPEC.__dict__])
def test_spec_must_be_a_convspec_forward(function, spec):
    with pytest.raises(TypeError, match=f"{function.__name__}: `spec` must be a convsuite ConvSpec"):
        function(spec, X, W)


@pytest.mark.parametrize("function", [reference_backward, backward_tolerances])
def test_spec_must_be_a_convspec_backward(function):
    with pytest.raises(TypeError, match="`spec` must be a convsuite ConvSpec.*got NoneType"):
        function(None, GY, X, W)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(in_size=(9,)), r"geometry gives out_size \(8,\), but out_size is \(4,\)"),
        (dict(out_size=(5,)), r"out_size \(4,\), but out_size is \(5,\)"),
        (dict(groups=2), "groups=2 must divide in_channels=3"),
        (dict(batch=0), "must all be >= 1"),
        (dict(padding=((-1, 0),)), "padding must be >= 0"),
        (dict(stride=(1, 1)), "must have 1 entries each"),
        # Fields of another kind named the problem only through a raw TypeError or unpacking error.
        (dict(stride=2), "not of the kinds a ConvSpec holds"),
        (dict(in_size=[9]), "not of the kinds a ConvSpec holds"),
        (dict(padding=((0,),)), "not of the kinds a ConvSpec holds"),
    ],
)
def test_an_inconsistent_spec_is_refused(change, message):
    spec = dataclasses.replace(SPEC, **change)
    with pytest.raises(ValueError, match=message):
        reference_forward(spec, X, W)


def test_tolerances_need_a_floating_spec_dtype():
    spec = dataclasses.replace(SPEC, dtype="int32")
    with pytest.raises(ValueError, match=r"`spec.dtype` must be a floating dtype.*'int32'"):
        forward_tolerance(spec, X, W)
    with pytest.raises(ValueError, match=r"`spec.dtype` must be a floating dtype"):
        backward_tolerances(spec, GY, X, W)


def test_the_library_layouts_of_the_same_data_are_accepted():
    # A plain signal and mask, as conv1d takes them: B = C = M = 1.
    x, w = RNG.standard_normal(9), RNG.standard_normal(3)
    spec = _spec(x, w, padding=1, stride=2)
    canonical = reference_forward(spec, x.reshape(1, 1, 9), w.reshape(1, 1, 3))
    np.testing.assert_array_equal(reference_forward(spec, x, w), canonical)
    np.testing.assert_array_equal(reference_forward(spec, x.reshape(1, 9), w), canonical)
    grad_y = RNG.standard_normal(spec.out_size)
    for got, want in zip(
        reference_backward(spec, grad_y, x, w), reference_backward(spec, grad_y.reshape(spec.y_shape), x, w)
    ):
        np.testing.assert_array_equal(got, want)
    # Without the batch axis (B = 1): x (C, W), grad_y (M, Wo).
    x1 = X[:1]
    spec1 = _spec(x1, W)
    np.testing.assert_array_equal(reference_forward(spec1, x1[0], W), reference_forward(spec1, x1, W))


def test_integer_lists_and_read_only_inputs_are_read_as_float64():
    x = X.copy()
    x.setflags(write=False)
    y = reference_forward(SPEC, x, W.tolist(), B.astype(np.float32))
    np.testing.assert_allclose(y, reference_forward(SPEC, X, W, B.astype(np.float32).astype(np.float64)))
    xi = np.arange(10).reshape(1, 2, 5)
    wi = np.ones((1, 2, 2), dtype=np.int64)
    np.testing.assert_array_equal(reference_forward(_spec(xi, wi), xi, wi), [[[12.0, 16.0, 20.0, 24.0]]])
