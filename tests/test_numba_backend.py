"""The numba backend: thread control, concurrency safety, compile time kept apart."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import convsuite as cs

INFO = {b.name: b for b in cs.list_backends()}["numba"]
needs_numba = pytest.mark.skipif(not INFO.available, reason=f"numba unavailable: {INFO.reason}")


def test_thread_count_setting():
    try:
        cs.set_num_threads(1)
        assert cs.get_num_threads() == 1
        cs.set_num_threads(None)
        assert cs.get_num_threads() >= 1
        with pytest.raises(ValueError, match="`n` must be between 1 and"):
            cs.set_num_threads(10_000)
        with pytest.raises(ValueError, match="`n`"):
            cs.set_num_threads(0)
        with pytest.raises(TypeError, match="`n`"):
            cs.set_num_threads(1.5)
    finally:
        cs.set_num_threads(None)


@needs_numba
def test_results_do_not_depend_on_thread_count():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 6, 21, 19))
    w = rng.standard_normal((9, 2, 3, 4))
    runs = []
    try:
        for n in (1, cs.get_num_threads()):
            cs.set_num_threads(n)
            runs.append(cs.conv2d(x, w, groups=3, padding="same", stride=2, backend="numba"))
    finally:
        cs.set_num_threads(None)
    # Every output is computed by one iteration in one fixed order: bit-identical.
    np.testing.assert_array_equal(runs[0], runs[1])


@needs_numba
def test_concurrent_calls_from_python_threads():
    """joblib/Dask threaded workers call the backend at once: no abort, right answers."""
    rng = np.random.default_rng(1)
    cases = [
        (rng.standard_normal((4, 3, 30, 30), dtype=np.float32), rng.standard_normal((8, 3, 3, 3), dtype=np.float32))
        for _ in range(8)
    ]
    expected = [cs.conv2d(x, w, padding=1, backend="numpy") for x, w in cases]
    with ThreadPoolExecutor(max_workers=4) as pool:
        for _ in range(3):
            got = list(pool.map(lambda xw: cs.conv2d(*xw, padding=1, backend="numba"), cases))
            for g, e in zip(got, expected):
                np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


@needs_numba
def test_concurrent_calls_under_workqueue_are_serialised():
    """With the non-thread-safe layer forced, concurrent calls still succeed (lock)."""
    code = (
        "import numpy as np, convsuite as cs\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from convsuite.backends import _numba_kernels as k\n"
        "assert k.threading_layer().startswith('workqueue (calls serialised'), k.threading_layer()\n"
        "x = np.ones((2, 2, 40, 40)); w = np.ones((4, 2, 3, 3))\n"
        "with ThreadPoolExecutor(4) as p:\n"
        "    ys = list(p.map(lambda _: cs.conv2d(x, w, backend='numba'), range(16)))\n"
        "assert all((y == 18).all() for y in ys)\n"
    )
    env = dict(os.environ, NUMBA_THREADING_LAYER="workqueue")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)


@needs_numba
def test_warm_up_reports_compile_or_cache_load_time():
    seconds = cs._registry.get_backend("numba").warm_up("float64")
    assert seconds >= 0.0


def test_info_reports_threads(capsys):
    from convsuite import cli

    cli.main(["info"])
    assert "threads" in capsys.readouterr().out
