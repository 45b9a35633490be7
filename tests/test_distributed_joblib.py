"""The joblib rung: batch and row pieces, under whatever joblib backend is configured.

The agreement suite already runs every algorithm of this backend on random
cases (batches of 1 and 2 with two workers: row and batch pieces). Here, for
every algorithm (each a Cython algorithm run per piece): more workers than
the batch, pure-padding pieces, worker processes (loky), the very kernels of
the single-core rung (bitwise equal on batch pieces), one BLAS thread inside
``gemm`` pieces, the Cython rule for ``"auto"``, and which joblib backend is
used when nothing is configured.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import convsuite as cs
from convsuite._registry import get_backend
from convsuite.testing import (
    assert_within,
    backward_tolerances,
    forward_tolerance,
    reference_backward,
    reference_forward,
)

from .cases import cases
from .test_agreement import check_backward, check_forward

joblib = pytest.importorskip("joblib")
pytestmark = pytest.mark.skipif(
    next(b for b in cs.list_backends() if b.name == "joblib").available is not True,
    reason="the joblib backend is unavailable here (joblib or the Cython extension missing)",
)


ALGORITHMS = ("direct", "gemm", "depthwise")
#: The algorithms with both directions that take every case (depthwise: forward, one channel per group;
#: tested on its own cases below).
GENERAL = ("direct", "gemm")


def test_every_cython_algorithm_is_a_joblib_algorithm():
    cython, ours = get_backend("cython"), get_backend("joblib")
    assert tuple(ours.algorithm_table()) == tuple(cython.algorithm_table()) == ALGORITHMS
    for name, record in ours.algorithm_table().items():
        kernel = cython.algorithm_table()[name]
        assert record.directions == kernel.directions
        assert record.directions == (("forward",) if name == "depthwise" else ("forward", "backward"))
        assert [t.name for t in record.tunables] == [t.name for t in kernel.tunables] + ["pieces_per_worker"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("n_jobs", [3, 5])
@pytest.mark.parametrize("ndim", [1, 2])
def test_many_workers_cut_rows_and_segments(ndim, n_jobs, algorithm):
    # More workers than any batch here: every call is cut into rows/segments,
    # many of them shorter than the kernel's reach.
    @settings(max_examples=15)
    @given(case=cases(ndim, max_extra=16))
    def run(case):
        with joblib.parallel_config(backend="threading", n_jobs=n_jobs):
            check_forward(case, "joblib", algorithm)
            check_backward(case, "joblib", algorithm)

    run()


@pytest.mark.parametrize("algorithm", GENERAL)
@pytest.mark.parametrize(
    ("x_shape", "w_shape", "keywords"),
    [
        ((1, 4, 23, 19), (6, 2, 3, 2), dict(groups=2, stride=(2, 1), dilation=(1, 2), padding="same")),
        ((1, 3, 17, 21), (3, 1, 4, 3), dict(groups=3, stride=3, padding=((2, 0), (1, 3)))),  # depthwise
        ((1, 2, 9, 30), (4, 2, 1, 1), dict()),  # 1x1: gemm's product without im2col, on row slabs
        ((1, 2, 301), (6, 1, 7), dict(groups=2, stride=2, dilation=3, padding="full")),
        ((5, 3, 11, 12), (4, 3, 3, 3), dict(padding=2, dilation=2)),  # batch pieces
    ],
)
def test_each_algorithm_on_row_and_batch_pieces_matches_the_reference(x_shape, w_shape, keywords, algorithm):
    rng = np.random.default_rng(14)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    ndim = len(x_shape) - 2
    forward, backward = (cs.conv1d, cs.conv1d_backward) if ndim == 1 else (cs.conv2d, cs.conv2d_backward)
    spec = cs.explain(x, w, b, **keywords).spec
    with joblib.parallel_config(backend="threading", n_jobs=2):
        y = forward(x, w, b, backend="joblib", algorithm=algorithm, **keywords)
        grad_y = rng.standard_normal(y.shape).astype(np.float32)
        grads = backward(grad_y, x, w, backend="joblib", algorithm=algorithm, **keywords)
    assert_within(y, reference_forward(spec, x, w, b), forward_tolerance(spec, x, w, b), f"joblib/{algorithm}")
    expected = reference_backward(spec, grad_y, x, w)
    for got, want, tol, name in zip(grads, expected, backward_tolerances(spec, grad_y, x, w), ("gx", "gw", "gb")):
        assert_within(np.reshape(got, np.shape(want)), want, tol, f"joblib/{algorithm} {name}")


@pytest.mark.parametrize("algorithm", GENERAL)
def test_batch_pieces_run_the_single_core_kernels_bitwise(algorithm):
    # Each image is computed by the same Cython kernel with the same tiles
    # as on one core: the joblib rung differs only in who runs which images.
    rng = np.random.default_rng(5)
    x = rng.standard_normal((7, 6, 14, 13)).astype(np.float32)
    w = rng.standard_normal((10, 6, 3, 3)).astype(np.float32)
    with joblib.parallel_config(backend="threading", n_jobs=2):
        y = cs.conv2d(x, w, padding=1, backend="joblib", algorithm=algorithm)
        grads = cs.conv2d_backward(np.ones_like(y), x, w, padding=1, backend="joblib", algorithm=algorithm)
    np.testing.assert_array_equal(y, cs.conv2d(x, w, padding=1, backend="cython", algorithm=algorithm))
    single = cs.conv2d_backward(np.ones_like(y), x, w, padding=1, backend="cython", algorithm=algorithm)
    np.testing.assert_array_equal(grads[0], single[0])  # grad_x: per image; grad_w, grad_b: summed in another order


def test_depthwise_on_row_and_batch_pieces():
    """Forward only, one channel per group: row slabs (batch 1) and batch pieces, threads and processes."""
    rng = np.random.default_rng(9)
    cases = [
        ((1, 6, 41, 37), (12, 1, 3, 3), dict(groups=6, stride=2, padding=1)),  # batch 1: row pieces
        ((5, 4, 15, 16), (4, 1, 5, 5), dict(groups=4, padding="same", dilation=2)),  # batch pieces
        ((1, 1, 3001), (3, 1, 9), dict(padding=4)),  # a signal, three filters: segments
    ]
    for x_shape, w_shape, keywords in cases:
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        forward = cs.conv1d if x.ndim == 3 else cs.conv2d
        spec = cs.explain(x, w, **keywords).spec
        single = forward(x, w, backend="cython", algorithm="depthwise", **keywords)
        for config in (dict(backend="threading", n_jobs=3), dict(backend="loky", n_jobs=2)):
            with joblib.parallel_config(**config):
                y = forward(x, w, backend="joblib", algorithm="depthwise", **keywords)
            assert_within(y, reference_forward(spec, x, w), forward_tolerance(spec, x, w), f"joblib/depthwise {config}")
            if x_shape[0] > 1:  # batch pieces: the single-core kernel on each image, same bits
                np.testing.assert_array_equal(y, single)


@pytest.mark.parametrize(
    ("x_shape", "w_shape"),
    [((1000, 12, 22, 22), (24, 12, 5, 5)), ((1000, 1, 86, 86), (4, 1, 7, 7)), ((2, 4, 9, 9), (8, 4, 1, 1))],
)
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_auto_follows_the_cython_rule(x_shape, w_shape, direction):
    spec = cs.explain(np.zeros(x_shape, np.float32), np.zeros(w_shape, np.float32)).spec
    name, why = get_backend("joblib").choose_algorithm(spec, direction)
    assert (name, why) == (
        get_backend("cython").choose_algorithm(spec, direction)[0],
        "the Cython rule: " + get_backend("cython").choose_algorithm(spec, direction)[1],
    )


@pytest.mark.parametrize("batch", [1, 6])  # rows, then batch slices
def test_gemm_pieces_call_blas_on_one_thread(batch, monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from convsuite.backends import joblib_backend

    seen = []
    run_piece = joblib_backend.forward_piece

    def spy(*args, **kwargs):
        seen.append([p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"])
        return run_piece(*args, **kwargs)

    monkeypatch.setattr(joblib_backend, "forward_piece", spy)
    x, w = _pair((batch, 3, 20, 18), (8, 3, 3, 3), np.float32)
    with joblib.parallel_config(backend="threading", n_jobs=2):
        cs.conv2d(x, w, backend="joblib", algorithm="gemm")
    assert len(seen) >= 2 and all(threads and set(threads) == {1} for threads in seen), seen


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


@pytest.mark.parametrize("algorithm", GENERAL)
@pytest.mark.parametrize("batch", [1, 6])  # rows, then batch slices
def test_worker_processes_under_loky_give_the_same_result(batch, algorithm):
    x, w = _pair((batch, 3, 20, 18), (4, 3, 3, 3), np.float32)
    keywords = dict(stride=2, padding="same")
    with joblib.parallel_config(backend="loky", n_jobs=2):
        y = cs.conv2d(x, w, backend="joblib", algorithm=algorithm, **keywords)
        grads = cs.conv2d_backward(np.ones_like(y), x, w, backend="joblib", algorithm=algorithm, **keywords)
    if batch > 1:  # batch pieces: the single-core kernel on each image
        np.testing.assert_array_equal(y, cs.conv2d(x, w, backend="cython", algorithm=algorithm, **keywords))
    spec = cs.explain(x, w, **keywords).spec
    assert_within(y, reference_forward(spec, x, w), forward_tolerance(spec, x, w), f"joblib/{algorithm} under loky")
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


@pytest.mark.parametrize("backend", ["threading", "loky"])
def test_the_runner_uses_the_configured_backend_and_raises_a_pieces_error(backend, monkeypatch):
    from convsuite.backends import joblib_backend

    with joblib.parallel_config(backend=backend, n_jobs=2):
        run = joblib_backend._Runner()
        assert run.workers == 2
        # joblib's threads run on a persistent pool; any other backend through joblib.Parallel.
        assert run.threads == run.shares_memory == (backend == "threading")
        assert run([joblib.delayed(pow)(i, 2) for i in range(5)]) == [0, 1, 4, 9, 16]
        with pytest.raises(ZeroDivisionError):
            run([joblib.delayed(divmod)(1, i) for i in (1, 0, 2)])


def test_thread_pools_are_shared_per_purpose_and_size():
    """One long-lived pool per (purpose, worker count): the joblib rung and the GPU fan-out never share one."""
    from convsuite._thread_pools import shared_pool

    assert shared_pool("joblib", 2) is shared_pool("joblib", 2)
    assert shared_pool("joblib", 2) is not shared_pool("joblib", 3)
    assert shared_pool("joblib", 2) is not shared_pool("gpu", 2)
    assert shared_pool("joblib", 3)._max_workers == 3
