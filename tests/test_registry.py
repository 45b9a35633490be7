"""Backend selection: precedence levels, fallback rules, isolation, lazy loading."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading

import numpy as np
import pytest

import convsuite
import convsuite as cs
from convsuite._registry import ENV_VAR
from convsuite.backends.base import Backend

X = np.ones((1, 2, 5, 5), dtype=np.float32)
W = np.ones((3, 2, 3, 3), dtype=np.float32)


class MockBackend(Backend):
    """Writes a recognisable constant so the test can tell who ran."""

    device = "cpu"
    algorithms = ("alpha", "beta")

    def __init__(self, name, priority=100, unavailable=None, refuse=None, marker=0.0):
        self.name = name
        self.priority = priority
        self._unavailable = unavailable
        self._refuse = refuse  # algorithm name -> reason
        self.marker = marker
        self.calls = []

    def available(self):
        return True if self._unavailable is None else self._unavailable

    def can_run(self, spec, algorithm, direction):
        return (self._refuse or {}).get(algorithm, True)

    def forward(self, spec, x, w, bias, out, algorithm):
        self.calls.append(algorithm)
        out[...] = self.marker

    def backward(self, spec, grad_y, x, w, grad_x, grad_w, grad_b, algorithm):
        self.calls.append(algorithm)
        grad_x[...] = grad_w[...] = grad_b[...] = self.marker


@pytest.fixture
def mocks(monkeypatch):
    """Two mock backends above every real one; cleaned up afterwards.

    The fitted rule is switched off (as on a device without fitted data), so
    ``auto`` walks backends by priority: these tests are about precedence.
    """
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setitem(convsuite._rule._tables, "cpu", None)
    made = {
        "mock_a": MockBackend("mock_a", priority=1000, marker=1.0),
        "mock_b": MockBackend("mock_b", priority=900, marker=2.0),
    }
    for backend in made.values():
        cs.register_backend(backend)
    yield made
    cs.set_backend(None)
    for name in made:
        cs.unregister_backend(name)


def who_ran(**kw) -> float:
    return float(cs.conv2d(X, W, **kw)[0, 0, 0, 0])


def test_auto_takes_highest_priority(mocks):
    assert who_ran() == 1.0
    explanation = cs.explain(X, W)
    assert explanation.backend == "mock_a" and explanation.source == "the default"


def test_precedence_levels(mocks, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "mock_b")
    assert who_ran() == 2.0  # env beats auto
    monkeypatch.setenv(ENV_VAR, "numpy")
    cs.set_backend("mock_b")
    assert who_ran() == 2.0  # set_backend beats env
    with cs.use_backend("mock_a"):
        assert who_ran() == 1.0  # use_backend beats set_backend
        with cs.use_backend("mock_b"):
            assert who_ran() == 2.0  # innermost wins
            assert who_ran(backend="mock_a") == 1.0  # argument beats everything
            assert cs.explain(X, W, backend="mock_a").source == "the backend= argument"
            assert cs.explain(X, W).source == "use_backend()"
        assert who_ran() == 1.0
    assert cs.explain(X, W).source == "set_backend()"
    cs.set_backend(None)
    assert who_ran() == 18.0  # numpy, from $CONVSUITE_BACKEND: 2 channels x 3x3 ones
    assert cs.explain(X, W).source == f"${ENV_VAR}"


def test_auto_inside_use_backend_restores_auto(mocks):
    cs.set_backend("mock_b")
    with cs.use_backend("auto"):
        assert who_ran() == 1.0


def test_auto_skips_unavailable_and_unable(mocks):
    mocks["mock_a"]._unavailable = "needs the frobnicator: pip install frob"
    assert who_ran() == 2.0
    mocks["mock_b"]._refuse = {"alpha": "alpha only does stride 3", "beta": "beta neither"}
    explanation = cs.explain(X, W)
    assert explanation.backend not in mocks  # a real backend took over
    skipped = dict(explanation.considered)
    assert "frobnicator" in skipped["mock_a"] and "stride 3" in skipped["mock_b"]
    assert "frobnicator" in str(explanation)


def test_explicit_unavailable_raises_with_reason(mocks):
    mocks["mock_a"]._unavailable = "needs the frobnicator: pip install frob"
    with pytest.raises(cs.BackendUnavailableError, match="pip install frob"):
        who_ran(backend="mock_a")
    with cs.use_backend("mock_a"):
        with pytest.raises(cs.BackendUnavailableError, match=r"use_backend\(\).*pip install frob"):
            who_ran()
    cs.set_backend("mock_a")
    with pytest.raises(cs.BackendUnavailableError, match="pip install frob"):
        who_ran()
    assert mocks["mock_b"].calls == []  # never fell back


def test_explicit_cannot_run_raises_with_reason(mocks):
    mocks["mock_a"]._refuse = {"alpha": "alpha only does stride 3"}
    with pytest.raises(cs.UnsupportedCaseError, match="stride 3"):
        who_ran(backend="mock_a", algorithm="alpha")
    # auto algorithm on an explicit backend takes the next algorithm that can run
    assert who_ran(backend="mock_a") == 1.0
    assert mocks["mock_a"].calls[-1] == "beta"


def test_pinned_algorithm_with_auto_backend(mocks):
    mocks["mock_a"]._refuse = {"beta": "no beta today"}
    assert who_ran(algorithm="beta") == 2.0
    assert who_ran(algorithm="im2col") == 18.0  # only numpy has it
    with pytest.raises(ValueError, match="got 'nope'"):
        who_ran(algorithm="nope")


def test_no_backend_can_run(mocks):
    for name in ("mock_a", "mock_b"):
        mocks[name]._refuse = {"alpha": "no", "beta": "no"}
    with pytest.raises(cs.UnsupportedCaseError, match="no backend can run"):
        who_ran(algorithm="alpha")


def test_unknown_names_are_value_errors(monkeypatch):
    with pytest.raises(ValueError, match="got 'gpu9000'"):
        with cs.use_backend("gpu9000"):
            pass
    with pytest.raises(ValueError, match="got 'gpu9000'"):
        cs.set_backend("gpu9000")
    monkeypatch.setenv(ENV_VAR, "gpu9000")
    with pytest.raises(ValueError, match=f"{ENV_VAR}.*got 'gpu9000'"):
        cs.conv2d(X, W)


def test_register_rules(mocks):
    with pytest.raises(ValueError, match="already registered"):
        cs.register_backend(MockBackend("mock_a"))
    with pytest.raises(ValueError, match="'auto'"):
        cs.register_backend(MockBackend("auto"))
    with pytest.raises(TypeError):
        cs.register_backend(42, name="x")
    with pytest.raises(ValueError, match="no backend named"):
        cs.unregister_backend("never-registered")


def test_broken_import_path_becomes_a_reason():
    cs.register_backend("convsuite.no_such_module:Nothing", name="broken")
    try:
        row = {b.name: b for b in cs.list_backends()}["broken"]
        assert not row.available and "failed to import" in row.reason
        with pytest.raises(cs.BackendUnavailableError, match="failed to import"):
            cs.conv2d(X, W, backend="broken")
    finally:
        cs.unregister_backend("broken")


def test_use_backend_is_private_to_a_thread(mocks):
    barrier = threading.Barrier(2)
    seen = {}

    def worker(name, choice):
        with cs.use_backend(choice):
            barrier.wait()  # both blocks are open at the same time
            seen[name] = who_ran()
            barrier.wait()

    threads = [threading.Thread(target=worker, args=(n, c)) for n, c in (("t1", "mock_a"), ("t2", "mock_b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"t1": 1.0, "t2": 2.0}


def test_use_backend_is_private_to_an_asyncio_task(mocks):
    async def task(choice, gate):
        with cs.use_backend(choice):
            await gate.wait()
            return who_ran()

    async def main():
        gate = asyncio.Event()
        jobs = [asyncio.create_task(task(c, gate)) for c in ("mock_a", "mock_b")]
        await asyncio.sleep(0)
        gate.set()
        return await asyncio.gather(*jobs)

    assert asyncio.run(main()) == [1.0, 2.0]


def test_list_backends_rows():
    rows = {b.name: b for b in cs.list_backends()}
    assert {"python", "numpy"} <= set(rows)
    for row in rows.values():
        assert row.device in ("cpu", "gpu")
        assert row.available == (row.reason is None)
        assert row.algorithms and row.description
        assert row.name in str(row)


def test_import_loads_no_optional_dependency():
    code = (
        "import sys, convsuite;"
        "bad = {'numba', 'cupy', 'scipy', 'torch', 'platformdirs', 'convsuite.backends.numpy_backend',"
        " 'convsuite._cython'} & set(sys.modules);"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_environment_reader_follows_every_change(monkeypatch):
    """The per-call reader of an environment variable sees sets, changes and deletes made through
    ``os.environ`` after it was made, and a wholly replaced ``os.environ`` through its public lookup."""
    import os

    from convsuite._environ import environment_reader

    name = "CONVSUITE_TEST_ENVIRONMENT_READER"
    monkeypatch.delenv(name, raising=False)
    read = environment_reader(name)
    assert read() is None
    monkeypatch.setenv(name, "numpy")
    assert read() == "numpy"
    os.environ[name] = "cython ünïcode"
    assert read() == "cython ünïcode"
    del os.environ[name]
    assert read() is None
    monkeypatch.setattr(os, "environ", {name: "replaced"})
    assert read() == "replaced"


def test_numba_thread_limit_follows_the_environment(monkeypatch):
    """``max_threads`` reads NUMBA_NUM_THREADS on every call; a task's own count is private to its thread."""
    import threading

    from convsuite import _threads

    monkeypatch.setenv("NUMBA_NUM_THREADS", "3")
    assert _threads.max_threads() == 3
    monkeypatch.delenv("NUMBA_NUM_THREADS")
    assert _threads.max_threads() == _threads._CPU_COUNT
    seen = []
    with _threads.task_threads(1):
        assert _threads.get_num_threads() == 1
        worker = threading.Thread(target=lambda: seen.append(_threads._local.n))
        worker.start()
        worker.join()
    assert seen == [None] and _threads._local.n is None


def test_select_with_a_source_but_no_name_follows_the_settings():
    # The source names who asked for a backend; without a name there is nothing it asked for, so the
    # settings decide (it once looked up the backend None).
    from convsuite import _registry

    spec = cs.plan(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3))).spec
    with cs.use_backend("numpy"):
        chosen = _registry.select(spec, None, "auto", "forward", source="the backend= argument")
    assert chosen.backend.name == "numpy" and chosen.source == "use_backend()"
