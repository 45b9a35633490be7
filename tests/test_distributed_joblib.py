"""The joblib rung: batch and row pieces, under whatever joblib backend is configured.

The agreement suite already runs this backend on random cases (batches of 1
and 2 with two workers: row and batch pieces). Here: more workers than the
batch, pure-padding pieces, worker processes (loky), and which joblib backend
is used when nothing is configured.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import convsuite as cs
from convsuite.testing import assert_within, backward_tolerances, reference_backward

from .cases import cases
from .test_agreement import check_backward, check_forward

joblib = pytest.importorskip("joblib")
pytestmark = pytest.mark.skipif(
    next(b for b in cs.list_backends() if b.name == "joblib").available is not True,
    reason="the joblib backend is unavailable here (joblib or the Cython extension missing)",
)


@pytest.mark.parametrize("n_jobs", [3, 5])
@pytest.mark.parametrize("ndim", [1, 2])
def test_many_workers_cut_rows_and_segments(ndim, n_jobs):
    # More workers than any batch here: every call is cut into rows/segments,
    # many of them shorter than the kernel's reach.
    @settings(max_examples=15)
    @given(case=cases(ndim, max_extra=16))
    def run(case):
        with joblib.parallel_config(backend="threading", n_jobs=n_jobs):
            check_forward(case, "joblib")
            check_backward(case, "joblib")

    run()


def _pair(shape, w_shape, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)


def test_pieces_of_pure_padding_get_the_bias_and_only_the_bias_gradient():
    x, w = _pair((1, 2, 9), (3, 2, 2))
    b = np.arange(3.0)
    keywords = dict(padding=((0, 30),), stride=2)
    with joblib.parallel_config(backend="threading", n_jobs=4):
        y = cs.conv1d(x, w, b, backend="joblib", **keywords)
        grads = cs.conv1d_backward(np.ones_like(y), x, w, backend="joblib", **keywords)
    np.testing.assert_allclose(y, cs.conv1d(x, w, b, backend="numpy", **keywords), rtol=1e-12)
    for got, want in zip(grads, cs.conv1d_backward(np.ones_like(y), x, w, backend="numpy", **keywords)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("batch", [1, 6])  # rows, then batch slices
def test_worker_processes_under_loky_give_the_same_result(batch):
    x, w = _pair((batch, 3, 20, 18), (4, 3, 3, 3), np.float32)
    keywords = dict(stride=2, padding="same")
    with joblib.parallel_config(backend="loky", n_jobs=2):
        y = cs.conv2d(x, w, backend="joblib", **keywords)
        grads = cs.conv2d_backward(np.ones_like(y), x, w, backend="joblib", **keywords)
    np.testing.assert_array_equal(y, cs.conv2d(x, w, backend="cython", **keywords))
    spec = cs.explain(x, w, **keywords).spec
    grad_y = np.ones_like(y)
    expected = reference_backward(spec, grad_y, x, w)
    for got, want, tol, name in zip(grads, expected, backward_tolerances(spec, grad_y, x, w), ("gx", "gw", "gb")):
        assert_within(np.reshape(got, np.shape(want)), want, tol, f"joblib under loky, {name}")


def test_threads_by_default_and_the_configured_backend_otherwise():
    from convsuite.backends.joblib_backend import _parallel, _shares_memory

    assert type(_parallel()._backend).__name__ == "ThreadingBackend"
    assert _shares_memory(_parallel())  # batch pieces write straight into the output
    assert _parallel().n_jobs == cs.get_num_threads()
    with joblib.parallel_config(backend="loky", n_jobs=2):
        assert type(_parallel()._backend).__name__ == "LokyBackend"
        assert not _shares_memory(_parallel())  # worker processes return their pieces
        assert _parallel().n_jobs == 2
    with joblib.parallel_config(n_jobs=3):  # workers without a backend: still threads
        assert type(_parallel()._backend).__name__ == "ThreadingBackend"
        assert _parallel().n_jobs == 3
