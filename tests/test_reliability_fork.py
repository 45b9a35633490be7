"""Issue 9, class 4: a fork after a numba call must not kill or hang the children.

GNU OpenMP (numba's ``omp`` layer) cannot run in a child forked after its
thread pool started; convsuite's fork handler makes such children run serial
builds of the kernels. The scenario runs in a fresh interpreter with a
timeout, so a hang or a killed child fails the test instead of hanging CI.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .conftest import BACKENDS

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import multiprocessing as mp
    import numpy as np
    import convsuite as cs

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 9, 9))
    w = rng.standard_normal((4, 3, 3, 3))
    gy = rng.standard_normal((2, 4, 9, 9))
    y = cs.conv2d(x, w, padding=1, backend="numba")  # starts numba's threading layer
    g = cs.conv2d_backward(gy, x, w, padding=1, backend="numba")

    def job(i):
        from convsuite.backends import _numba_kernels
        yc = cs.conv2d(x, w, padding=1, backend="numba")
        gc = cs.conv2d_backward(gy, x, w, padding=1, backend="numba")
        return yc, gc, _numba_kernels.threading_layer()

    if __name__ == "__main__":
        with mp.get_context("fork").Pool(2) as pool:
            results = pool.map_async(job, range(4)).get(timeout=240)
        for yc, gc, layer in results:
            np.testing.assert_allclose(yc, y, rtol=1e-12, atol=1e-12)
            for a, b in zip(gc, g):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        print("children ok:", results[0][2])
    """
)


@pytest.mark.skipif(not BACKENDS["numba"].available, reason="numba is not installed")
def test_fork_pool_after_a_numba_call_finishes_with_correct_results(tmp_path):
    script = tmp_path / "fork_after_numba.py"
    script.write_text(SCRIPT)
    try:
        run = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=280)
    except subprocess.TimeoutExpired as exc:  # the pool hung: children died
        pytest.fail(f"fork pool after a numba call hung\n{exc.stdout}\n{exc.stderr}")
    assert run.returncode == 0, f"exit {run.returncode}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    assert "children ok" in run.stdout
