"""The BLAS the compiled rungs' ``gemm`` calls: which one, the override, and that either gives the same results."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

import convsuite as cs
from convsuite.backends._blas_routines import BLAS_ENV, gemm_routines
from convsuite.backends._tiles import MAX_BLAS_EXTENT, gemm_check

HAS_OPENBLAS32 = importlib.util.find_spec("scipy_openblas32") is not None
INFO = {b.name: b for b in cs.list_backends()}
COMPILED = [name for name in ("cython", "numba") if INFO[name].available]

# Forward and backward through each compiled rung's gemm, printed as JSON (run in a child
# process: the routines are found once per process, so CONVSUITE_BLAS needs a fresh one).
_CHILD = """
import json, sys
import numpy as np
import convsuite as cs
from convsuite.backends._blas_routines import gemm_routines

rng = np.random.default_rng(7)
out = {"source": gemm_routines().source}
cases = [
    ((2, 6, 9, 11), (8, 3, 3, 3), dict(padding=1, groups=2)),
    ((3, 5, 7, 7), (4, 5, 1, 1), {}),
    ((2, 4, 12, 10), (6, 4, 3, 2), dict(stride=(2, 1), dilation=(1, 2), padding=((1, 2), (0, 1)))),
]
for backend in sys.argv[1:]:
    for dtype in ("float32", "float64"):
        for i, (xs, ws, kw) in enumerate(cases):
            x = rng.standard_normal(xs).astype(dtype)
            w = rng.standard_normal(ws).astype(dtype)
            y = cs.conv2d(x, w, backend=backend, algorithm="gemm", **kw)
            gy = rng.standard_normal(y.shape).astype(dtype)
            grads = cs.conv2d_backward(gy, x, w, backend=backend, algorithm="gemm", **kw)
            out[f"{backend}-{dtype}-{i}"] = [a.ravel().tolist() for a in (y, *grads)]
print(json.dumps(out))
"""


def _child(env_value: str | None, *backends: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop(BLAS_ENV, None)
    if env_value is not None:
        env[BLAS_ENV] = env_value
    return subprocess.run(
        [sys.executable, "-c", _CHILD, *backends], env=env, capture_output=True, text=True, timeout=600
    )


def test_routines_are_found_and_named():
    routines = gemm_routines()
    assert routines.sgemm and routines.dgemm and routines.sgemm != routines.dgemm
    assert routines.address(np.float32) == routines.sgemm and routines.address("float64") == routines.dgemm
    if os.environ.get(BLAS_ENV, "") == "scipy":
        assert routines.source.startswith("SciPy")
    elif HAS_OPENBLAS32:
        assert routines.source.startswith("scipy-openblas32") and routines.why == ""
    else:
        assert routines.source.startswith("SciPy") and "scipy-openblas32 unavailable" in routines.why


@pytest.mark.skipif(not COMPILED, reason="neither the cython nor the numba backend is available")
def test_scipy_blas_gives_the_same_results_as_the_default():
    """Both BLAS builds, the same kernels: results agree to the dtype's rounding, forward and backward."""
    default, forced = _child(None, *COMPILED), _child("scipy", *COMPILED)
    assert default.returncode == 0, default.stderr
    assert forced.returncode == 0, forced.stderr
    a, b = json.loads(default.stdout), json.loads(forced.stdout)
    assert b.pop("source").startswith("SciPy")
    source = a.pop("source")
    assert source.startswith("scipy-openblas32" if HAS_OPENBLAS32 else "SciPy")
    assert a.keys() == b.keys() and len(a) == 2 * 3 * len(COMPILED)
    for key in a:
        rtol = 1e-5 if "float32" in key else 1e-12
        for got, want in zip(a[key], b[key]):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol, err_msg=key)


@pytest.mark.skipif(not COMPILED, reason="neither the cython nor the numba backend is available")
def test_a_bad_blas_setting_is_a_clear_error_on_use_not_a_crash():
    """The error names the variable, the accepted values and the value given; other algorithms still run."""
    script = (
        "import numpy as np, convsuite as cs, sys\n"
        "x = np.ones((1, 4, 6, 6), np.float32); w = np.ones((8, 4, 3, 3), np.float32)\n"
        "for backend in sys.argv[1:]:\n"
        "    y = cs.conv2d(x, w, backend=backend, algorithm='direct')\n"
        "    assert float(y[0, 0, 2, 2]) == 36.0\n"
        "    try:\n"
        "        cs.conv2d(x, w, backend=backend, algorithm='gemm')\n"
        "    except ValueError as exc:\n"
        "        print(backend, exc)\n"
        "    else:\n"
        "        print(backend, 'no error')\n"
    )
    env = {**os.environ, BLAS_ENV: "mkl"}
    done = subprocess.run(
        [sys.executable, "-c", script, *COMPILED], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == len(COMPILED)
    for line in lines:
        assert BLAS_ENV in line and "scipy-openblas32" in line and "'mkl'" in line, line


def test_gemm_declines_extents_past_32_bit_blas():
    def spec(reduction=9, out_channels=4, in_size=(8, 8), out_size=(8, 8)):
        return SimpleNamespace(
            reduction_length=reduction, out_channels=out_channels, in_size=in_size, out_size=out_size, itemsize=4
        )

    assert gemm_check(spec(), "forward") is True
    too_big = MAX_BLAS_EXTENT + 1
    for kwargs, what in (
        (dict(in_size=(2**16, 2**15 + 1)), "input plane"),
        (dict(out_size=(too_big, 1)), "output plane"),
        (dict(out_channels=too_big), "output channels"),
    ):
        verdict = gemm_check(spec(**kwargs), "backward")
        assert isinstance(verdict, str) and what in verdict and "32-bit" in verdict and "'direct'" in verdict


_PICKLED_PLANS = """
import sys
import cloudpickle
import numpy as np
fwd, bwd, x, w, gy, want_y, want_grads = cloudpickle.loads(sys.stdin.buffer.read())
np.testing.assert_allclose(fwd(x, w), want_y, rtol=1e-5, atol=1e-5)
for got, want in zip(bwd(gy, x, w), want_grads):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
print("ok")
"""


@pytest.mark.skipif(not INFO["numba"].available, reason=f"numba unavailable: {INFO['numba'].reason}")
def test_a_plan_sent_to_another_process_calls_that_process_blas():
    """Dask ships tasks with cloudpickle: a held numba gemm plan must not carry this process's BLAS address."""
    cloudpickle = pytest.importorskip("cloudpickle")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, 9, 9)).astype(np.float32)
    w = rng.standard_normal((8, 6, 3, 3)).astype(np.float32)
    fwd = cs.plan(x, w, padding=1, backend="numba", algorithm="gemm")
    bwd = cs.plan(x, w, padding=1, backend="numba", algorithm="gemm", direction="backward")
    gy = rng.standard_normal(fwd(x, w).shape).astype(np.float32)
    blob = cloudpickle.dumps((fwd, bwd, x, w, gy, fwd(x, w), bwd(gy, x, w)))
    done = subprocess.run([sys.executable, "-c", _PICKLED_PLANS], input=blob, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    assert done.stdout.decode().strip() == "ok"
