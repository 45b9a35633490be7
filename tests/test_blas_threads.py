"""One BLAS thread while a compiled kernel that calls BLAS runs, and the user's setting after."""

from __future__ import annotations

import threading

import pytest

threadpoolctl = pytest.importorskip("threadpoolctl")
pytest.importorskip("scipy")

from convsuite.backends._blas_threads import one_blas_thread  # noqa: E402


def _blas_threads() -> list[int]:
    return [info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"]


def test_limit_is_one_inside_and_the_callers_setting_after():
    import scipy.linalg.cython_blas  # noqa: F401  (the BLAS the kernels call)

    for setting in (2, 1, 2):
        with threadpoolctl.threadpool_limits(limits=setting, user_api="blas"):
            before = _blas_threads()
            assert before
            with one_blas_thread():
                assert set(_blas_threads()) == {1}
                with one_blas_thread():  # nested: one shared limit
                    assert set(_blas_threads()) == {1}
                assert set(_blas_threads()) == {1}
            assert _blas_threads() == before


def test_concurrent_launches_share_one_limit_lifted_by_the_last():
    import scipy.linalg.cython_blas  # noqa: F401

    before = _blas_threads()
    inside, release = threading.Barrier(3), threading.Event()
    seen = []

    def launch():
        with one_blas_thread():
            inside.wait()
            release.wait()
            seen.append(set(_blas_threads()))

    threads = [threading.Thread(target=launch) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()  # both launches are in flight
    assert set(_blas_threads()) == {1}
    release.set()
    for t in threads:
        t.join()
    assert seen == [{1}, {1}]
    assert _blas_threads() == before


def test_a_worker_thread_gets_the_limit_after_the_main_thread_launched():
    """threadpoolctl obeys one "controlling" thread; a launch from a Dask/joblib worker must still limit."""
    import scipy.linalg.cython_blas  # noqa: F401

    before = _blas_threads()
    with one_blas_thread():
        pass
    seen = []

    def launch():
        with one_blas_thread():
            seen.append(set(_blas_threads()))

    worker = threading.Thread(target=launch)
    worker.start()
    worker.join()
    assert seen == [{1}]
    assert _blas_threads() == before


def test_the_last_launch_out_restores_even_when_another_thread_set_the_limit():
    import scipy.linalg.cython_blas  # noqa: F401

    before = _blas_threads()
    first_in, second_in, first_out, release_first = (threading.Event() for _ in range(4))

    def first():
        with one_blas_thread():
            first_in.set()
            second_in.wait()
        first_out.set()
        release_first.wait()  # stays alive while the second launch lifts the limit

    def second():
        first_in.wait()
        with one_blas_thread():
            second_in.set()
            first_out.wait()
            assert set(_blas_threads()) == {1}

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    threads[1].join()
    assert _blas_threads() == before
    release_first.set()
    threads[0].join()
