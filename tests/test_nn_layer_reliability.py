"""Reliability of the pooling, element-wise and shape layers (``convsuite/nn/pooling.py``, ``layers.py``).

What a reviewer found: arg-max tap codes that wrapped past ``2**31`` taps
(a heap overwrite in the backward pass), a NumPy path whose work grew with
the kernel (a hang for ``2**32`` taps), integer input pooled in integers,
backward passes that broadcast a wrong ``grad_y`` or ran before any forward,
``Flatten`` on an empty batch, ``AdaptiveAvgPool2D`` on an empty image or
with an array for ``output_size``, 1-D layers speaking of their 2-D helper,
and ``Dropout`` refusing NumPy scalars. Anything that could crash the
interpreter runs in a subprocess, so a crash fails a test instead of pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

from convsuite import nn
from convsuite.nn import pooling

ROOT = Path(__file__).resolve().parents[1]


def _in_subprocess(code: str, timeout: float = 240) -> str:
    """Run ``code`` in a fresh interpreter (a crash or hang fails the caller's test); return its stdout."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        run = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the subprocess ran past {timeout} s (a hang)")
    assert run.returncode == 0, f"exit status {run.returncode}\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    return run.stdout


@pytest.fixture(params=["numba kernels", "numpy expressions"])
def pool_path(request, monkeypatch):
    """Each max-pooling path for NumPy arrays: numba's kernels, and the ufuncs used without numba."""
    if request.param == "numba kernels":
        pytest.importorskip("numba")
        if pooling._host_kernels() is None:
            pytest.skip("numba's pooling kernels are unavailable")
    else:
        monkeypatch.setattr(pooling, "_host_module", False)
    return request.param


# --- plain NumPy references (torch's rules, one window at a time) --------------------------------


def _windows(x_shape, kernel, stride, padding):
    """``(i, j, rows, cols)`` per output: the window's input rows and columns (padding left out)."""
    (H, W), (kh, kw), (sh, sw), (ph, pw) = x_shape[2:], kernel, stride, padding
    ho, wo = (H + 2 * ph - kh) // sh + 1, (W + 2 * pw - kw) // sw + 1
    for i in range(ho):
        for j in range(wo):
            top, left = i * sh - ph, j * sw - pw
            rows = range(max(top, 0), min(top + kh, H))
            cols = range(max(left, 0), min(left + kw, W))
            yield i, j, rows, cols, (ho, wo)


def reference_max_pool(x, grad_y, kernel, stride, padding):
    """Values and input gradient of max pooling: taps in raster order, the first maximum of a tie,
    the last NaN, a window of ``-inf`` keeps its first input (padding never wins).
    """
    y = grad_x = None
    for i, j, rows, cols, out in _windows(x.shape, kernel, stride, padding):
        if y is None:
            y = np.empty((*x.shape[:2], *out), dtype=x.dtype)
            grad_x = np.zeros(x.shape, dtype=np.float64)
        for b in range(x.shape[0]):
            for c in range(x.shape[1]):
                best = where = None
                for r in rows:
                    for q in cols:
                        v = x[b, c, r, q]
                        if best is None or v > best or np.isnan(v):
                            best, where = v, (r, q)
                y[b, c, i, j] = best
                grad_x[(b, c, *where)] += grad_y[b, c, i, j]
    return y, grad_x


def reference_avg_pool(x, grad_y, kernel, stride, padding):
    """Values and input gradient of average pooling, padding zeros counted (in float64)."""
    taps = kernel[0] * kernel[1]
    y = grad_x = None
    for i, j, rows, cols, out in _windows(x.shape, kernel, stride, padding):
        if y is None:
            y = np.empty((*x.shape[:2], *out))
            grad_x = np.zeros(x.shape)
        window = (slice(None), slice(None), slice(rows.start, rows.stop), slice(cols.start, cols.stop))
        y[:, :, i, j] = x[window].astype(np.float64).sum(axis=(2, 3)) / taps
        grad_x[window] += grad_y[:, :, i, j, None, None] / taps
    return y, grad_x


def _filled(shape, fill, dtype, seed):
    """Random input with ties, NaN or ``-inf`` (whole windows of them) mixed in."""
    rng = np.random.default_rng(seed)
    if fill == "ties":
        return np.maximum(rng.integers(-3, 3, shape), 0).astype(dtype)
    x = rng.standard_normal(shape).astype(dtype)
    if fill in ("nan", "-inf"):
        special = np.nan if fill == "nan" else -np.inf
        x[rng.random(shape) < 0.3] = special
        x[0, 0] = special
    return x


#: Kernels much larger than the input (most taps read only padding), and ordinary ones.
_GEOMETRIES = {
    "3x3 s2 p1": ((3, 3), (2, 2), (1, 1), (2, 3, 7, 6)),
    "5x5 p2 on 3x3 (taps skipped)": ((5, 5), (2, 1), (2, 2), (2, 2, 3, 3)),
    "(3, 17) s(2, 5) p(1, 8)": ((3, 17), (2, 5), (1, 8), (1, 2, 4, 6)),
    "300x300 p150 (int32 codes, 4x5 input)": ((300, 300), (1, 2), (150, 150), (1, 2, 4, 5)),
    "1x70001 p35000 (int32 codes)": ((1, 70001), (1, 3), (0, 35000), (2, 1, 1, 9)),
}


@pytest.mark.parametrize("fill", ["ties", "nan", "-inf", "random"])
@pytest.mark.parametrize("geometry", sorted(_GEOMETRIES))
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_maxpool_matches_a_plain_reference_on_both_paths(geometry, fill, dtype, pool_path):
    if dtype == "float16" and pool_path == "numba kernels":
        pytest.skip("float16 takes the NumPy path whether numba is installed or not")
    kernel, stride, padding, shape = _GEOMETRIES[geometry]
    x = _filled(shape, fill, dtype, seed=len(geometry) + len(fill))
    pool = nn.MaxPool2D(kernel, stride, padding)
    y = pool(x)
    G = np.random.default_rng(1).standard_normal(y.shape).astype(dtype)
    want_y, want_grad = reference_max_pool(x, G, kernel, stride, padding)
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y, want_y)
    grad = pool.backward(G)
    assert grad.dtype == x.dtype
    # Overlapping windows sum gradients in another order than the reference: a few ulps apart.
    tol = 8 * np.finfo(dtype).eps
    np.testing.assert_allclose(grad, want_grad.astype(dtype), rtol=tol, atol=tol * np.abs(G).max())
    assert pool._cache[2].dtype == (np.uint8 if kernel[0] * kernel[1] <= 256 else np.int32)


@pytest.mark.parametrize("geometry", sorted(_GEOMETRIES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_avgpool_matches_a_plain_reference(geometry, dtype):
    kernel, stride, padding, shape = _GEOMETRIES[geometry]
    x = _filled(shape, "random", dtype, seed=3)
    pool = nn.AvgPool2D(kernel, stride, padding)
    y = pool(x)
    G = np.random.default_rng(2).standard_normal(y.shape).astype(dtype)
    want_y, want_grad = reference_avg_pool(x, G, kernel, stride, padding)
    tol = 8 * np.finfo(dtype).eps
    np.testing.assert_allclose(y, want_y, rtol=tol, atol=tol * np.abs(x).max() / 2)
    np.testing.assert_allclose(pool.backward(G), want_grad, rtol=tol, atol=tol * np.abs(G).max())


def test_tap_codes_are_wide_enough():
    assert pooling._code_dtype(256) == np.uint8
    assert pooling._code_dtype(257) == np.int32
    assert pooling._code_dtype(2**31) == np.int32  # codes up to 2**31 - 1
    assert pooling._code_dtype(2**31 + 1) == np.int64
    nn.MaxPool2D((2**31, 2**31 - 1), padding=0)  # just under 2**62 taps: accepted
    with pytest.raises(ValueError, match=r"`kernel_size` must have fewer than 2\*\*62 taps"):
        nn.MaxPool2D(2**31)


_HUGE_KERNEL_SCRIPT = """
import numpy as np
from convsuite import nn
from convsuite.nn import pooling
from tests.test_nn_layer_reliability import reference_max_pool

if {numpy_path}:
    pooling._host_module = False
for dtype in {dtypes}:
    x = np.array([[[3.0, 5.0]]], dtype)
    m = nn.MaxPool1D(2**32, stride=1, padding=2**31)
    y = m(x)
    grad = m.backward(np.ones_like(y))
    assert y.tolist() == [[[5.0, 5.0, 5.0]]], y
    assert grad.tolist() == [[[0.0, 3.0]]], grad
    assert m._pool._cache[2].dtype == np.int64
    m = nn.MaxPool2D((1, 2**32), 1, (0, 2**31))
    y = m(x[:, :, None, :])
    assert m.backward(np.ones_like(y)).tolist() == [[[[0.0, 3.0]]]]
    # Past 2**32 taps, ties and NaN on a wider input: the plain reference.
    rng = np.random.default_rng(0)
    x = np.maximum(rng.integers(-2, 3, (2, 2, 3, 7)), 0).astype(dtype)
    x[0, 1, 1, 2:5] = np.nan
    kernel, stride, padding = (3, 2**33 + 1), (2, 5), (1, 2**32)
    m = nn.MaxPool2D(kernel, stride, padding)
    y = m(x)
    G = rng.standard_normal(y.shape).astype(dtype)
    want_y, want_grad = reference_max_pool(x, G, kernel, stride, padding)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_allclose(m.backward(G), want_grad.astype(dtype), rtol=1e-3)
    m = nn.AvgPool2D((1, 2**32), 1, (0, 2**31))
    assert m(np.ones((1, 1, 1, 2), dtype)).shape == (1, 1, 1, 3)
print("ok")
"""


@pytest.mark.parametrize("path", ["numba kernels", "numpy expressions"])
def test_maxpool_with_more_than_2_to_the_31_taps_neither_corrupts_nor_hangs(path):
    """Before: int32 codes wrapped (gradient [0, 1], then ``free(): invalid next size``), and the
    NumPy path (float16, or no numba) visited all 2**32 taps.
    """
    if path == "numba kernels" and pooling._host_kernels() is None:
        pytest.skip("numba's pooling kernels are unavailable")
    numpy_path = path == "numpy expressions"
    # float16 always takes the NumPy path; float32/64 take numba's kernels when available.
    dtypes = "('float16', 'float32', 'float64')" if numpy_path else "('float32', 'float64')"
    out = _in_subprocess(_HUGE_KERNEL_SCRIPT.format(numpy_path=numpy_path, dtypes=dtypes))
    assert out.strip().endswith("ok")


def test_pooling_an_empty_image_is_refused_in_a_subprocess():
    """A window of padding alone (H = 0 with padding = kernel / 2) has no input to route its gradient to."""
    out = _in_subprocess(
        """
        import numpy as np
        from convsuite import nn
        for layer, x in [
            (nn.MaxPool2D(2, padding=1), np.ones((1, 1, 0, 4), np.float32)),
            (nn.MaxPool2D(2, padding=1), np.ones((1, 1, 4, 0), np.float16)),
            (nn.AvgPool2D(2, padding=1), np.ones((1, 1, 0, 4), np.float32)),
            (nn.MaxPool1D(2, padding=1), np.ones((1, 1, 0), np.float32)),
        ]:
            try:
                y = layer(x)
                layer.backward(np.ones_like(y))
            except ValueError as exc:
                assert "at least 1" in str(exc), exc
            else:
                raise AssertionError(f"{layer!r} took an empty image")
        print("ok")
        """
    )
    assert out.strip() == "ok"


# --- integer and other dtypes ------------------------------------------------------------------


def test_integer_input_is_pooled_in_float64():
    x = np.arange(16).reshape(1, 1, 4, 4)
    xf = x.astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # before: -inf cast into int64 (RuntimeWarning)
        avg = nn.AvgPool2D(2)(x)
        adaptive = nn.AdaptiveAvgPool2D()(x)
        biggest = nn.MaxPool2D(2, padding=1)(x)
        line = nn.MaxPool1D(3, stride=1, padding=1)(x[:, :, 0].astype(np.uint8))
    assert avg.dtype == adaptive.dtype == biggest.dtype == line.dtype == np.float64
    np.testing.assert_array_equal(avg, [[[[2.5, 4.5], [10.5, 12.5]]]])  # before: zeros
    assert adaptive.item() == 7.5  # before: 7
    np.testing.assert_array_equal(biggest, nn.MaxPool2D(2, padding=1)(xf))
    np.testing.assert_array_equal(line, [[[1.0, 2.0, 3.0, 3.0]]])


@pytest.mark.parametrize(
    "make, x",
    [
        (lambda: nn.MaxPool2D(2), np.ones((1, 1, 4, 4), bool)),
        (lambda: nn.AvgPool2D(2), np.ones((1, 1, 4, 4), np.complex64)),
        (lambda: nn.AdaptiveAvgPool2D(), np.ones((1, 1, 4, 4), object)),
        (lambda: nn.MaxPool1D(2), np.ones((1, 1, 4), bool)),
    ],
)
def test_bool_complex_and_object_input_are_refused(make, x):
    layer = make()
    with pytest.raises(TypeError, match=rf"{type(layer).__name__} input `x` must have a real numeric dtype.*{x.dtype}"):
        layer(x)


# --- backward: a forward first, and a grad_y of the output's shape ----------------------------


def _linear():
    return nn.Linear(4, 3, seed=0)


#: (name, layer factory, forward input(s), a grad_y of the wrong shape)
_BACKWARD_CASES = [
    ("MaxPool2D", lambda: nn.MaxPool2D(2), (np.ones((1, 1, 4, 4)),), np.ones((1, 1, 1, 1))),
    ("MaxPool1D", lambda: nn.MaxPool1D(2), (np.ones((1, 2, 4)),), np.ones((1, 2, 1))),
    ("AvgPool2D", lambda: nn.AvgPool2D(2), (np.ones((1, 1, 4, 4)),), np.ones((1, 1, 1, 1))),
    ("AdaptiveAvgPool2D", lambda: nn.AdaptiveAvgPool2D(), (np.ones((1, 1, 4, 4)),), np.ones((1, 1, 1))),
    ("Flatten", lambda: nn.Flatten(), (np.ones((2, 3, 4, 4)),), np.ones((3, 32))),
    ("ReLU", lambda: nn.ReLU(), (np.ones((2, 2)),), np.ones(2)),
    ("ReLU6", lambda: nn.ReLU6(), (np.ones((2, 2)),), np.ones((1, 2))),
    ("Identity", lambda: nn.Identity(), (np.ones((2, 2)),), np.ones(2)),
    ("Dropout", lambda: nn.Dropout(0.5, seed=0), (np.ones((2, 2)),), np.ones(2)),
    ("Dropout", lambda: nn.Dropout(0.5).eval(), (np.ones((2, 2)),), np.ones(2)),
    ("Add", lambda: nn.Add(), (np.ones((2, 2)), np.ones((2, 2))), np.ones(2)),
    ("Linear", _linear, (np.ones((2, 4), np.float32),), np.ones((1, 3), np.float32)),
]


@pytest.mark.parametrize("name, make, inputs, wrong", _BACKWARD_CASES)
def test_backward_refuses_a_grad_y_of_another_shape(name, make, inputs, wrong):
    layer = make()
    y = layer(*inputs)
    pattern = rf"{name}\.backward expects `grad_y` of shape {tuple(y.shape)}.*got {tuple(wrong.shape)}"
    with pytest.raises(ValueError, match=pattern.replace("(", r"\(").replace(")", r"\)")):
        layer.backward(wrong)
    layer.backward(np.ones_like(y))  # the right shape still works


@pytest.mark.parametrize("name, make, inputs, wrong", _BACKWARD_CASES)
def test_backward_before_forward_is_a_clear_error(name, make, inputs, wrong):
    with pytest.raises(RuntimeError, match=rf"^{name}\.backward needs a forward pass"):
        make().backward(np.ones((2, 2)))


# --- shapes and settings -----------------------------------------------------------------------


def test_flatten_takes_an_empty_batch():
    flatten = nn.Flatten()
    y = flatten(np.zeros((0, 3, 2, 2), np.float32))
    assert y.shape == (0, 12)
    assert flatten.backward(np.zeros((0, 12), np.float32)).shape == (0, 3, 2, 2)


@pytest.mark.parametrize("shape", [(1, 2, 0, 3), (1, 2, 3, 0)])
def test_adaptive_avgpool_refuses_an_empty_image(shape):
    with pytest.raises(ValueError, match=r"AdaptiveAvgPool2D needs an input of at least 1 row and 1 column"):
        nn.AdaptiveAvgPool2D()(np.ones(shape, np.float32))


@pytest.mark.parametrize(
    "output_size, error, message",
    [
        (np.array([1, 1]), TypeError, r"`output_size` must be an int or a tuple of 2 ints; got ndarray"),
        (True, TypeError, r"`output_size` must be an int or a tuple of 2 ints; got True"),
        ((1, True), TypeError, r"`output_size` must be an int or a tuple of 2 ints"),
        (1.0, TypeError, r"`output_size` must be an int"),
        (0, ValueError, r"`output_size` must be >= 1"),
        (2, ValueError, r"`output_size` must be 1 or \(1, 1\) \(only global pooling is implemented\); got 2"),
        ((1, 2), ValueError, r"`output_size` must be 1 or \(1, 1\)"),
    ],
)
def test_adaptive_avgpool_validates_output_size(output_size, error, message):
    with pytest.raises(error, match=message):
        nn.AdaptiveAvgPool2D(output_size)


@pytest.mark.parametrize("output_size", [1, (1, 1), [1, 1], np.int64(1)])
def test_adaptive_avgpool_takes_the_global_forms(output_size):
    assert nn.AdaptiveAvgPool2D(output_size)(np.ones((1, 2, 3, 3))).shape == (1, 2, 1, 1)


def test_maxpool1d_messages_speak_of_maxpool1d():
    with pytest.raises(ValueError, match=r"^`padding` must be at most half of kernel_size=2; got 2$"):
        nn.MaxPool1D(2, padding=2)
    with pytest.raises(RuntimeError, match=r"^MaxPool1D\.backward needs a forward pass"):
        nn.MaxPool1D(2).backward(np.ones((1, 1, 2)))
    with pytest.raises(ValueError, match=r"^MaxPool1D with kernel_size=5, padding=1 needs .* got length 2$"):
        nn.MaxPool1D(5, padding=1)(np.ones((1, 1, 2)))
    pool = nn.MaxPool1D(2)
    pool(np.ones((1, 2, 6)))
    with pytest.raises(ValueError, match=r"^MaxPool1D\.backward expects `grad_y` of shape \(1, 2, 3\).*\(1, 2, 4\)$"):
        pool.backward(np.ones((1, 2, 4)))


@pytest.mark.parametrize("p", [np.float32(0.5), np.float64(0.25), np.int64(0), np.float16(0.125)])
def test_dropout_takes_numpy_real_scalars(p):
    layer = nn.Dropout(p, seed=0)
    assert layer.p == float(p) and type(layer.p) is float
    x = np.ones((4, 4), np.float32)
    assert layer(x).shape == x.shape


@pytest.mark.parametrize("p", [True, np.bool_(False), np.float32(np.nan), np.float64(1.0), "0.5", None])
def test_dropout_refuses_bools_and_values_outside_0_1(p):
    with pytest.raises(ValueError, match=r"`p` must be a number in \[0, 1\)"):
        nn.Dropout(p)
