"""The cython backend is really compiled and really releases the GIL."""

from __future__ import annotations

import importlib.machinery
import os
import threading

import numpy as np
import pytest

import convsuite as cs

INFO = {b.name: b for b in cs.list_backends()}["cython"]
needs_cython = pytest.mark.skipif(not INFO.available, reason=f"cython unavailable: {INFO.reason}")


def test_extension_built_when_required():
    """`make` sets CONVSUITE_REQUIRE_EXTENSION=1: there a missing build is a failure, not a skip."""
    if os.environ.get("CONVSUITE_REQUIRE_EXTENSION") == "1":
        assert INFO.available, INFO.reason
    else:
        assert INFO.available or "pip install ." in INFO.reason


@needs_cython
def test_module_is_a_compiled_extension():
    from convsuite._cython import _conv_cy

    assert _conv_cy.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    assert type(_conv_cy.forward).__name__ in ("fused_cython_function", "cython_function_or_method")


@needs_cython
def test_kernels_release_the_gil():
    """While one thread runs a long kernel, another thread finishes several kernels.

    If the kernel held the GIL, the second thread could not start a single call
    until the first kernel returned.
    """
    rng = np.random.default_rng(0)
    big_x = rng.standard_normal((8, 16, 96, 96), dtype=np.float32)
    big_w = rng.standard_normal((32, 16, 5, 5), dtype=np.float32)
    small_x = rng.standard_normal((1, 1, 16, 16), dtype=np.float32)
    small_w = rng.standard_normal((1, 1, 3, 3), dtype=np.float32)
    cs.conv2d(small_x, small_w, backend="cython")  # load the module first
    started, done = threading.Event(), threading.Event()
    completed_meanwhile = []

    def long_call():
        started.set()
        cs.conv2d(big_x, big_w, backend="cython")
        done.set()

    def short_calls():
        started.wait()
        while not done.is_set():
            cs.conv2d(small_x, small_w, backend="cython")
            if not done.is_set():
                completed_meanwhile.append(1)

    threads = [threading.Thread(target=long_call), threading.Thread(target=short_calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(completed_meanwhile) >= 3, len(completed_meanwhile)


@needs_cython
def test_algorithm_table_matches_the_names():
    backend = cs._registry.get_backend("cython")
    assert tuple(backend.algorithm_table()) == backend.algorithms == ("direct", "gemm", "depthwise")


@needs_cython
def test_gemm_calls_scipy_blas_and_is_compiled():
    from convsuite._cython import _gemm_cy

    assert _gemm_cy.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    w = np.ones((2, 3, 1, 1), dtype=np.float32)
    # Pointwise: no im2col copy, BLAS reads the image in place.
    np.testing.assert_array_equal(cs.conv2d(x, w, backend="cython", algorithm="gemm"), np.stack([x.sum(1)] * 2, 1))


@needs_cython
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_gemm_row_blocks(monkeypatch, direction):
    """A tiny workspace forces one output row per packed tile; results still match numpy's."""
    from convsuite.backends import _tiles

    monkeypatch.setattr(_tiles, "WORKSPACE_BYTES", 64)
    monkeypatch.setattr(_tiles, "MIN_GEMM_COLUMNS", 1)  # else the default budget grows to 256 columns
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 14, 9))
    w = rng.standard_normal((9, 2, 2, 3))
    kw = dict(groups=3, padding=((1, 2), (2, 0)), stride=(1, 2), dilation=(2, 1))
    if direction == "forward":
        got = cs.conv2d(x, w, backend="cython", algorithm="gemm", **kw)
        np.testing.assert_allclose(got, cs.conv2d(x, w, backend="numpy", **kw), rtol=1e-12, atol=1e-12)
    else:
        gy = rng.standard_normal(cs.conv2d(x, w, backend="numpy", **kw).shape)
        got = cs.conv2d_backward(gy, x, w, backend="cython", algorithm="gemm", **kw)
        for g, e in zip(got, cs.conv2d_backward(gy, x, w, backend="numpy", **kw)):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


@needs_cython
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    ("x_shape", "w_shape", "groups"),
    [
        ((2, 6, 7, 9), (5, 6, 1, 1), 1),  # 63 pixels: db's eight running sums and a tail
        ((3, 8, 5, 5), (8, 4, 1, 1), 2),  # grouped pointwise
        ((1, 16, 12, 12), (4, 16, 1, 1), 1),  # 144 pixels: no tail
        ((2, 3, 1, 3), (7, 3, 1, 1), 1),  # fewer pixels than running sums
    ],
)
def test_pointwise_backward_writes_every_gradient(dtype, x_shape, w_shape, groups):
    """The 1x1 backward writes grad_x by BLAS (no tile, no zero-fill): poisoned buffers catch a gap."""
    from convsuite.testing import assert_within, backward_tolerances, reference_backward

    rng = np.random.default_rng(11)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    spec = cs.explain(x, w, groups=groups).spec
    gy = rng.standard_normal(spec.y_shape).astype(dtype)
    assert cs.explain(x, w, groups=groups, backend="cython", direction="backward").algorithm == "gemm"
    with cs.testing.poisoned_outputs():
        got = cs.conv2d_backward(gy, x, w, groups=groups, backend="cython", algorithm="gemm")
    want = reference_backward(spec, gy, x, w)
    for name, g, e, tol in zip(("grad_x", "grad_w", "grad_b"), got, want, backward_tolerances(spec, gy, x, w)):
        assert_within(g, e, tol, name)
