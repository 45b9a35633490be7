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


# (call, exception type, fragments the message must contain)
BAD_INPUTS = {
    # wrong ndim
    "x-rank-2-for-conv2d": (c2(x=X[0, 0]), ValueError, ["conv2d expects", "x.ndim=2"]),
    "w-rank-3-for-conv2d": (c2(w=W[0]), ValueError, ["conv2d expects", "w.ndim=3"]),
    "x-rank-4-for-conv1d": (c1(x=X), ValueError, ["conv1d expects", "x.ndim=4"]),
    "scalar-x": (c2(x=3.0), ValueError, ["conv2d expects", "x.ndim=0"]),
    # channels and groups
    "channel-mismatch": (c2(groups=1), ValueError, ["channel mismatch", "C=4", "w.shape[1]"]),
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
