"""Every bad input gets a clear TypeError/ValueError naming the parameter, on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import convsuite as cs

rng = np.random.default_rng(0)
X = rng.standard_normal((2, 4, 8, 8)).astype(np.float32)
W = rng.standard_normal((6, 2, 3, 3)).astype(np.float32)
X1 = rng.standard_normal((2, 4, 16)).astype(np.float32)
W1 = rng.standard_normal((6, 4, 3)).astype(np.float32)


def _call(fn, args, backend):
    kw = dict(args)
    return fn(kw.pop("x"), kw.pop("w"), kw.pop("bias"), backend=backend, **kw)


def c2(**kw):
    args = dict(x=X, w=W, bias=None, groups=2)
    args.update(kw)
    return lambda backend: _call(cs.conv2d, args, backend)


def c1(**kw):
    args = dict(x=X1, w=W1, bias=None)
    args.update(kw)
    return lambda backend: _call(cs.conv1d, args, backend)


# The layouts, in words, that a rank error states first.
LAYOUTS_2D = (
    "conv2d: x must have shape (B, C, H, W) (batch, channels, height, width) or (C, H, W) (one sample), "
    "with w of shape (M, C/groups, KH, KW) (output channels, input channels per group, kernel size); "
    "or x must be a plain image (H, W) with a plain kernel w (KH, KW); got "
)
LAYOUTS_1D = (
    "conv1d: x must have shape (B, C, W) (batch, channels, width) or (C, W) (one sample), "
    "with w of shape (M, C/groups, K) (output channels, input channels per group, kernel size); "
    "or x must be a plain signal (W) with a plain kernel w (K); got "
)

# (call, exception type, fragments the message must contain)
BAD_INPUTS = {
    # wrong ndim
    "x-rank-2-for-conv2d": (c2(x=X[0, 0]), ValueError, [LAYOUTS_2D, "x.ndim=2", "so x needs a channel axis"]),
    "x-rank-2-for-conv2d-one-channel-w": (
        c2(x=X[0, 0], w=W[:, :1], groups=1),
        ValueError,
        [LAYOUTS_2D, "x.ndim=2", "pass x[None, None] (1, 1, H, W)"],
    ),
    "w-rank-3-for-conv2d": (c2(w=W[0]), ValueError, [LAYOUTS_2D, "w.ndim=3", "w needs 4 dimensions"]),
    "x-rank-4-for-conv1d": (c1(x=X), ValueError, [LAYOUTS_1D, "x.ndim=4"]),
    "scalar-x": (c2(x=3.0), ValueError, [LAYOUTS_2D, "x.ndim=0"]),
    # channels and groups
    "channel-mismatch": (c2(groups=1), ValueError, ["channel mismatch", "C=4", "(axis 1 of x)", "w.shape[1]"]),
    "channel-mismatch-1d": (c1(w=W1[:, :3]), ValueError, ["channel mismatch"]),
    "groups-not-dividing-C": (c2(groups=3, w=np.ones((6, 1, 3, 3), np.float32)), ValueError, ["groups", "C=4"]),
    "groups-not-dividing-M": (c2(w=np.ones((5, 2, 3, 3), np.float32)), ValueError, ["groups", "M=5"]),
    "groups-zero": (c2(groups=0), ValueError, ["`groups`", "got 0"]),
    "groups-float": (c2(groups=2.0), TypeError, ["`groups`", "positive int"]),
    "groups-string": (c2(groups="2"), TypeError, ["`groups`"]),
    # stride / dilation
    "stride-zero": (c2(stride=0), ValueError, ["`stride`", ">= 1"]),
    "stride-negative": (c2(stride=(1, -2)), ValueError, ["`stride`", "(1, -2)"]),
    "stride-float": (c2(stride=1.5), TypeError, ["`stride`", "1.5"]),
    "stride-bool": (c2(stride=True), TypeError, ["`stride`"]),
    "stride-wrong-length": (c2(stride=(1, 2, 3)), TypeError, ["`stride`", "tuple of 2 ints"]),
    "dilation-zero": (c2(dilation=0), ValueError, ["`dilation`"]),
    "dilation-none": (c1(dilation=None), TypeError, ["`dilation`", "None"]),
    # padding
    "padding-negative": (c2(padding=-1), ValueError, ["`padding`", "non-negative"]),
    "padding-negative-pair": (c2(padding=((1, -1), (0, 0))), ValueError, ["`padding`", "non-negative"]),
    "padding-typo": (c2(padding="vald"), ValueError, ["`padding`", "'same'", "'vald'"]),
    "padding-float": (c2(padding=1.5), TypeError, ["`padding`", "1.5"]),
    "padding-wrong-length": (c2(padding=(1, 1, 1)), TypeError, ["`padding`"]),
    "padding-bad-pair": (c1(padding=((1, 2, 3),)), TypeError, ["`padding`"]),
    # kernel vs input
    "kernel-larger-than-input": (c2(w=np.ones((6, 2, 9, 3), np.float32)), ValueError, ["kernel is larger", "along H"]),
    "dilated-kernel-larger": (c1(dilation=8), ValueError, ["kernel is larger", "dilation 8"]),
    # bias
    "bias-wrong-length": (c2(bias=np.ones(5, np.float32)), ValueError, ["`bias`", "(6,)", "(5,)"]),
    "bias-wrong-rank": (c2(bias=np.ones((6, 1), np.float32)), ValueError, ["`bias`", "(6, 1)"]),
    "bias-complex": (c2(bias=np.ones(6, complex)), TypeError, ["`bias`", "complex"]),
    # dtypes
    "x-complex": (c2(x=X.astype(np.complex64)), TypeError, ["`x`", "complex"]),
    "w-bool": (c2(w=W > 0), TypeError, ["`w`", "bool"]),
    "x-object": (c2(x=X.astype(object)), TypeError, ["`x`", "object"]),
    "x-strings": (c2(x=np.full(X.shape, "a")), TypeError, ["`x`", "string"]),
    # empty
    "x-empty-batch": (c2(x=X[:0]), ValueError, ["`x`", "empty"]),
    "w-empty": (c2(w=W[:0]), ValueError, ["`w`", "empty"]),
    # not arrays
    "x-none": (c2(x=None), TypeError, ["`x`"]),
    "x-string": (c2(x="abc"), TypeError, ["`x`", "string"]),
    "x-dict": (c2(x={"a": 1}), TypeError, ["`x`", "dict"]),
    "x-ragged-list": (c1(x=[[1.0, 2.0], [3.0]], w=[1.0]), TypeError, ["`x`"]),
    # memory: an output of ~10^19 bytes is refused before anything is allocated
    "output-too-large": (c2(padding=10**9), MemoryError, ["output", "GiB", "padding"]),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_rejected(backend, name):
    call, error, fragments = BAD_INPUTS[name]
    with pytest.raises(error) as info:
        call(backend)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_unknown_backend_lists_valid_names():
    with pytest.raises(ValueError, match=r"'numpy'.*got 'nunpy'"):
        cs.conv2d(X, W, groups=2, backend="nunpy")


def test_unknown_algorithm(backend):
    with pytest.raises(ValueError, match=r"`algorithm` must be one of .*got 'winograd'"):
        cs.conv2d(X, W, groups=2, backend=backend, algorithm="winograd")
    with pytest.raises(TypeError, match="`algorithm`"):
        cs.conv2d(X, W, groups=2, backend=backend, algorithm=3)


def test_bad_grad_y(backend):
    y = cs.conv2d(X, W, groups=2, backend=backend)
    with pytest.raises(ValueError, match=r"`grad_y` must have the shape of the forward output"):
        cs.conv2d_backward(y[:, :3], X, W, groups=2, backend=backend)
    with pytest.raises(TypeError, match="`grad_y`"):
        cs.conv2d_backward(y.astype(complex), X, W, groups=2, backend=backend)


def test_inputs_may_be_readonly_and_strided(backend):
    x = np.asfortranarray(X)
    x.setflags(write=False)
    w = W[:, :, ::-1, :]  # negative strides
    expected = cs.conv2d(np.ascontiguousarray(X), np.ascontiguousarray(w), groups=2, backend="numpy")
    np.testing.assert_allclose(cs.conv2d(x, w, groups=2, backend=backend), expected, rtol=1e-5, atol=1e-5)


# A channels-last input: the message says so and names the transpose that fixes it, which then works.
CHANNELS_LAST = {
    "NHWC": (cs.conv2d, (2, 9, 7, 5), (4, 5, 3, 3), "(NHWC); convsuite takes (B, C, H, W)", (0, 3, 1, 2)),
    "HWC": (cs.conv2d, (9, 7, 5), (4, 5, 3, 3), "(HWC); convsuite takes (C, H, W)", (2, 0, 1)),
    "NWC": (cs.conv1d, (2, 11, 5), (4, 5, 3), "(NWC); convsuite takes (B, C, W)", (0, 2, 1)),
    "WC": (cs.conv1d, (11, 5), (4, 5, 3), "(WC); convsuite takes (C, W)", (1, 0)),
}


@pytest.mark.parametrize("name", sorted(CHANNELS_LAST))
def test_channels_last_input_gets_the_transpose_that_fixes_it(name):
    fn, x_shape, w_shape, layout, order = CHANNELS_LAST[name]
    x = rng.standard_normal(x_shape)
    w = rng.standard_normal(w_shape)
    with pytest.raises(ValueError) as info:
        fn(x, w)
    message = str(info.value)
    assert message.startswith(f"channel mismatch: x has C={x_shape[-len(w_shape) + 1]} channels")
    order_text = ", ".join(map(str, order))
    assert message.endswith(
        f"; x looks channels-last {layout}: pass x.transpose({order_text}) (a torch tensor: x.permute({order_text}))"
    )
    # The suggested call gives the layout convsuite takes: the result is the reference's (channels moved by hand).
    moved = np.moveaxis(x, -1, len(x_shape) - len(w_shape) + 1)
    np.testing.assert_array_equal(x.transpose(order), moved)
    np.testing.assert_allclose(fn(x.transpose(order), w), fn(np.ascontiguousarray(moved), w, backend="numpy"))


def test_channels_last_hint_with_groups_that_do_not_divide_the_height():
    x = rng.standard_normal((1, 7, 6, 4))  # NHWC, 4 channels; H=7 read as C, which groups=2 does not divide
    with pytest.raises(
        ValueError,
        match=r"`groups` must divide the input channels C=7; got groups=2; x looks "
        r"channels-last \(NHWC\).*pass x\.transpose\(0, 3, 1, 2\)",
    ):
        cs.conv2d(x, rng.standard_normal((6, 2, 3, 3)), groups=2)


@pytest.mark.parametrize(
    "x_shape, w_shape",
    [((2, 4, 8, 8), (6, 3, 3, 3)), ((2, 3, 8, 3), (6, 4, 3, 3))],  # moving the last axis first fixes nothing
)
def test_no_channels_last_hint_where_moving_the_last_axis_does_not_help(x_shape, w_shape):
    with pytest.raises(ValueError, match="channel mismatch") as info:
        cs.conv2d(np.ones(x_shape), np.ones(w_shape))
    assert "channels-last" not in str(info.value)


def test_channels_last_torch_tensor_gets_a_permute_that_fixes_it():
    torch = pytest.importorskip("torch")
    x = torch.randn(2, 9, 7, 5, dtype=torch.float64)
    w = torch.randn(4, 5, 3, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"\(a torch tensor: x\.permute\(0, 3, 1, 2\)\)$"):
        cs.conv2d(x, w)
    torch.testing.assert_close(
        cs.conv2d(x.permute(0, 3, 1, 2), w), torch.nn.functional.conv2d(x.permute(0, 3, 1, 2), w)
    )
