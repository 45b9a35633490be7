"""A process forked from one that used convsuite must be able to use it again.

``fork`` copies memory but only the calling thread: pools that lost their
threads, locks held by parent threads that do not exist in the child, device
handles of the parent. Every scenario runs in a fresh interpreter under a
timeout, so a child that hangs fails the test instead of hanging the suite,
and each child's results are compared with the parent's.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import BACKENDS

ROOT = Path(__file__).resolve().parents[1]

CPU_BACKENDS = ("python", "numpy", "cython", "numba", "joblib")

#: Operands and the parent's results, shared by every script (float64: the children must agree to 1e-12).
PRELUDE = textwrap.dedent(
    """
    import multiprocessing as mp
    import sys
    import threading

    import joblib
    import numpy as np

    import convsuite as cs

    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 9, 9))
    w = rng.standard_normal((4, 3, 3, 3))
    b = rng.standard_normal(4)
    gy = rng.standard_normal((4, 4, 9, 9))


    def run(backend):
        # Two joblib workers whatever the CPU count, so that its thread pool is used and started.
        with joblib.parallel_config(n_jobs=2):
            y = cs.conv2d(x, w, b, padding=1, backend=backend)
            g = cs.conv2d_backward(gy, x, w, padding=1, backend=backend)
        return y, g


    def agree(got, want, what):
        (y, g), (y0, g0) = got, want
        np.testing.assert_allclose(y, y0, rtol=1e-12, atol=1e-12, err_msg=f"{what}: forward")
        for name, a, a0 in zip(("grad_x", "grad_w", "grad_b"), g, g0):
            np.testing.assert_allclose(a, a0, rtol=1e-12, atol=1e-12, err_msg=f"{what}: {name}")
    """
)

ONE_BACKEND = PRELUDE + textwrap.dedent(
    """
    backend = sys.argv[1]
    parent = run(backend)  # starts what the backend keeps: thread pools, numba's threading layer
    if backend == "joblib":
        from convsuite import _thread_pools

        assert _thread_pools._pools, "the joblib call did not start the shared pool"


    def job(i):
        return run(backend)


    if __name__ == "__main__":
        with mp.get_context("fork").Pool(2) as pool:
            results = pool.map_async(job, range(4)).get(timeout=150)
        for child in results:
            agree(child, parent, backend)
        print("children ok")
    """
)


def _run(tmp_path, script: str, *args: str, timeout: float = 240, env=None) -> subprocess.CompletedProcess:
    """Run ``script`` in a fresh interpreter; a hang fails the test with what it printed."""
    path = tmp_path / "scenario.py"
    path.write_text(script)
    try:
        run = subprocess.run(
            [sys.executable, str(path), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the scenario hung (a forked child never finished)\n{exc.stdout}\n{exc.stderr}")
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_fork_children_use_the_backend_the_parent_used(tmp_path, backend):
    if not BACKENDS[backend].available:
        pytest.skip(f"backend {backend!r} unavailable: {BACKENDS[backend].reason}")
    run = _run(tmp_path, ONE_BACKEND, backend)
    assert "children ok" in run.stdout


HELD = PRELUDE + textwrap.dedent(
    """
    from convsuite import _thread_pools
    from convsuite.backends import _blas_threads

    backends = sys.argv[1:]
    parents = {name: run(name) for name in backends}
    from threadpoolctl import threadpool_info

    blas_before = sorted((i["filepath"], i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas")

    # A parent thread inside a joblib call: its pool's threads are busy when the child is forked.
    stop = threading.Event()
    big = rng.standard_normal((8, 8, 64, 64)), rng.standard_normal((8, 8, 3, 3))


    def busy():
        while not stop.is_set():
            with joblib.parallel_config(n_jobs=2):
                cs.conv2d(*big, padding=1, backend="joblib", algorithm="direct")


    # A parent thread inside a call that holds convsuite's locks: the one-BLAS-thread limit of a gemm
    # launch, the lock of the shared pools, and numba's launch lock where numba is loaded.
    held, release = threading.Event(), threading.Event()


    def holder():
        locks = [_thread_pools._lock, _blas_threads._lock]
        if "numba" in backends:
            from convsuite.backends import _numba_kernels

            locks.append(_numba_kernels._kernel_lock)
        with _blas_threads.one_blas_thread():
            for lock in locks:
                lock.acquire()
            held.set()
            release.wait()
            for lock in locks:
                lock.release()


    def job(i):
        results = {name: run(name) for name in backends}
        blas = sorted((i["filepath"], i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas")
        return results, blas


    if __name__ == "__main__":
        threads = [threading.Thread(target=busy), threading.Thread(target=holder)]
        for t in threads:
            t.start()
        assert held.wait(60)
        try:
            with mp.get_context("fork").Pool(1) as pool:
                results, blas = pool.apply_async(job, (0,)).get(timeout=180)
        finally:
            release.set()
            stop.set()
            for t in threads:
                t.join()
        for name in backends:
            agree(results[name], parents[name], name)
        # The child lifted the BLAS limit that the parent thread held when it was forked.
        assert blas == blas_before, (blas, blas_before)
        print("child ok")
    """
)


def test_child_forked_while_parent_threads_hold_locks_and_run_calls(tmp_path):
    names = [name for name in CPU_BACKENDS if BACKENDS[name].available]
    assert "joblib" in names and "cython" in names, "the scenario needs the compiled backends"
    run = _run(tmp_path, HELD, *names, timeout=400)
    assert "child ok" in run.stdout


WORKQUEUE = PRELUDE + textwrap.dedent(
    """
    import time

    from convsuite.backends import _numba_kernels

    parent = run("numba")
    assert _numba_kernels._serialise, "the workqueue layer serialises launches behind a lock"
    big = rng.standard_normal((16, 16, 96, 96)), rng.standard_normal((16, 16, 5, 5))
    cs.conv2d(*big, padding=2, backend="numba", algorithm="direct")  # compiled now: the lock is then a launch's
    stop = threading.Event()


    def busy():
        while not stop.is_set():
            cs.conv2d(*big, padding=2, backend="numba", algorithm="direct")


    def job(i):
        return run("numba")


    if __name__ == "__main__":
        t = threading.Thread(target=busy)
        t.start()
        deadline = time.monotonic() + 60
        while not _numba_kernels._kernel_lock.locked():  # fork while the launch lock is held
            assert time.monotonic() < deadline
            time.sleep(0.001)
        try:
            with mp.get_context("fork").Pool(1) as pool:
                child = pool.apply_async(job, (0,)).get(timeout=150)
        finally:
            stop.set()
            t.join()
        agree(child, parent, "numba")
        print("child ok")
    """
)


@pytest.mark.skipif(not BACKENDS["numba"].available, reason="numba is not installed")
def test_child_forked_during_a_serialised_numba_launch(tmp_path):
    import os

    env = {**os.environ, "NUMBA_THREADING_LAYER": "workqueue"}
    run = _run(tmp_path, WORKQUEUE, env=env)
    assert "child ok" in run.stdout


CUDA_PARENT = PRELUDE + textwrap.dedent(
    """
    import types

    # A CuPy whose device count answers: the parent "initialises CUDA" as the cupy backend's
    # availability check does on a GPU machine. No CUDA is needed to see what a child then says.
    fake = types.ModuleType("cupy")
    fake.__version__ = "14.2.0"
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 1))
    sys.modules["cupy"] = fake

    from convsuite._registry import get_backend

    assert get_backend("cupy").available() is True
    parent = run("numpy")


    def job(i):
        info = {b.name: b for b in cs.list_backends()}
        try:
            cs.conv2d(x, w, b, padding=1, backend="cupy")
        except cs.BackendUnavailableError as exc:
            refused = str(exc)
        else:
            refused = None
        y = cs.conv2d(x, w, b, padding=1)  # auto
        g = cs.conv2d_backward(gy, x, w, padding=1)
        return info["cupy"].available, info["cupy"].reason, refused, (y, g)


    if __name__ == "__main__":
        with mp.get_context("fork").Pool(1) as pool:
            available, reason, refused, auto = pool.apply_async(job, (0,)).get(timeout=150)
        assert available is False, reason
        assert "forked" in reason and "spawn" in reason, reason
        assert refused is not None and "forked" in refused, refused
        agree(auto, parent, "auto in the child")
        print("child ok:", reason)
    """
)


def test_cupy_is_unavailable_in_a_child_forked_after_cuda_and_auto_carries_on(tmp_path):
    run = _run(tmp_path, CUDA_PARENT)
    assert "child ok" in run.stdout


COMPILING = PRELUDE + textwrap.dedent(
    """
    from numba.core.compiler_lock import global_compiler_lock

    parent = run("numpy")
    run("numba")  # the numba backend loaded and used before the fork
    held, release = threading.Event(), threading.Event()


    def compiling():  # a parent thread inside a numba compile: it holds numba's compiler lock
        with global_compiler_lock:
            held.set()
            release.wait()


    def refusal(call):
        try:
            call()
        except (cs.BackendUnavailableError, RuntimeError) as exc:
            return str(exc)
        return None


    def job(i):
        info = {b.name: b for b in cs.list_backends()}
        refused = [
            refusal(lambda: cs.conv2d(x, w, b, padding=1, backend="numba")),  # the plan the parent made
            refusal(lambda: cs.conv1d(x[:, :, 0], w[:, :, 0], backend="numba")),  # a new plan
        ]
        y = cs.conv2d(x, w, b, padding=1)  # auto
        g = cs.conv2d_backward(gy, x, w, padding=1)
        return info["numba"].available, info["numba"].reason, refused, (y, g)


    if __name__ == "__main__":
        t = threading.Thread(target=compiling)
        t.start()
        assert held.wait(60)
        try:
            with mp.get_context("fork").Pool(1) as pool:
                available, reason, refused, auto = pool.apply_async(job, (0,)).get(timeout=150)
        finally:
            release.set()
            t.join()
        assert available is False and "compiling" in reason, reason
        assert all(r is not None and "compiling" in r for r in refused), refused
        agree(auto, parent, "auto in the child")
        print("child ok:", reason)
    """
)


@pytest.mark.skipif(not BACKENDS["numba"].available, reason="numba is not installed")
def test_numba_is_unavailable_in_a_child_forked_during_a_compile_and_auto_carries_on(tmp_path):
    run = _run(tmp_path, COMPILING)
    assert "child ok" in run.stdout


MECHANISM = textwrap.dedent(
    """
    import os
    import threading

    from convsuite import _forksafe

    plain, reentrant = _forksafe.lock(), _forksafe.rlock()
    ran = []


    class Holder:
        def reset(self):
            ran.append("collected object")


    gone = Holder()
    _forksafe.at_fork_in_child(gone.reset)
    del gone  # held weakly: its reset must not run, nor keep it alive


    @_forksafe.at_fork_in_child
    def first():
        ran.append("first")


    @_forksafe.at_fork_in_child
    def broken():
        raise ValueError("a reset that fails")


    @_forksafe.at_fork_in_child
    def last():
        ran.append("last")


    held, release = threading.Event(), threading.Event()


    def hold():
        with plain, reentrant:
            held.set()
            release.wait()


    t = threading.Thread(target=hold)
    t.start()
    held.wait()
    pid = os.fork()
    if pid == 0:
        ok = plain.acquire(timeout=5) and reentrant.acquire(timeout=5) and ran == ["first", "last"]
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    release.set()
    t.join()
    assert os.waitstatus_to_exitcode(status) == 0, ran
    assert plain.acquire(timeout=5)  # the parent's locks are the parent's: released by their holder
    print("mechanism ok")
    """
)


def test_forksafe_unlocks_every_lock_and_runs_every_reset_in_a_child(tmp_path):
    run = _run(tmp_path, MECHANISM, timeout=60)
    assert "mechanism ok" in run.stdout
    assert "a reset that fails" in run.stderr  # reported as a warning, the other resets still ran
