"""Issue 9, class 1: index arithmetic past 64 bits, on every backend.

Validation bounds every stride, dilation and padding, and every derived
extent, below 2**62 (``convsuite._validation.INDEX_LIMIT``); within it the
compiled kernels' 64-bit index arithmetic is exact. The property is drawn
by hypothesis in ``tests/_extreme_geometry.py``; the compiled backends run it
in a subprocess, so a segfault or an abort fails the test instead of pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import convsuite as cs

from ._extreme_geometry import check_case, extreme_cases
from .conftest import BACKENDS

ROOT = Path(__file__).resolve().parents[1]
COMPILED = [name for name in ("cython", "numba") if BACKENDS[name].available]


@settings(max_examples=150, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(extreme_cases())
def test_extreme_geometry_in_process_backends(case):
    check_case(case, ["numpy"])


@pytest.mark.skipif(not COMPILED, reason="no compiled CPU backend is available")
def test_extreme_geometry_compiled_backends_in_a_subprocess():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "tests._extreme_geometry", "150", *COMPILED],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, f"exit status {run.returncode}\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    assert "ok: 150 extreme-geometry cases" in run.stdout


X = np.arange(32, dtype=np.float64).reshape(1, 1, 4, 8)
W = np.ones((1, 1, 2, 2))


@pytest.mark.parametrize(
    "keywords, parameter",
    [
        (dict(padding=((0, 0), (2**62, 0)), stride=(1, 3 * 2**61)), "stride"),
        (dict(padding=((0, 0), (2**62, 0))), "padding"),
        (dict(padding=((0, 0), (2**61, 2**61))), "padding"),
        (dict(stride=2**63), "stride"),
        (dict(dilation=(1, 2**62)), "dilation"),
        (dict(dilation=(1, 2**61), padding="full"), "padding"),
    ],
)
def test_issue_examples_are_refused_before_any_kernel(backend, keywords, parameter):
    with pytest.raises(ValueError, match=f"`{parameter}`.*2\\*\\*62"):
        cs.conv2d(X, W, backend=backend, **keywords)
    with pytest.raises(ValueError, match=f"`{parameter}`"):
        cs.conv2d_backward(np.ones((1, 1, 3, 7)), X, W, backend=backend, **keywords)


def test_largest_accepted_geometry_computes_exactly(backend):
    """Just under the bound: padding and stride near 2**61 give the python backend's values."""
    keywords = dict(padding=((0, 0), (2**61, 0)), stride=(1, 2**61 - 1))
    expected = cs.conv2d(X, W, backend="python", **keywords)
    np.testing.assert_array_equal(cs.conv2d(X, W, backend=backend, **keywords), expected)
    grad_y = np.arange(expected.size, dtype=np.float64).reshape(expected.shape)
    for got, want in zip(
        cs.conv2d_backward(grad_y, X, W, backend=backend, **keywords),
        cs.conv2d_backward(grad_y, X, W, backend="python", **keywords),
    ):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("direction", ["forward", "backward"])
@pytest.mark.parametrize(
    "keywords",
    [
        dict(padding="same", dilation=2**35),
        dict(padding="full", dilation=(3, 2**40), stride=(1, 2**40)),
        dict(padding=((2**50, 3), (1, 2**55)), stride=(2**49, 2**54)),
    ],
)
def test_numpy_computes_huge_padding_without_materialising_it(keywords, direction):
    """Class 2: cases whose padded copy would not fit run tap by tap, equal to python."""
    w3 = np.arange(1, 10, dtype=np.float64).reshape(1, 1, 3, 3)
    if direction == "forward":
        expected = cs.conv2d(X, w3, backend="python", **keywords)
        np.testing.assert_array_equal(cs.conv2d(X, w3, backend="numpy", **keywords), expected)
        return
    y_shape = cs.explain(X, w3, **keywords).spec.y_shape
    grad_y = np.arange(np.prod(y_shape), dtype=np.float64).reshape(y_shape) % 7 - 3
    expected = cs.conv2d_backward(grad_y, X, w3, backend="python", **keywords)
    for got, want in zip(cs.conv2d_backward(grad_y, X, w3, backend="numpy", **keywords), expected):
        np.testing.assert_array_equal(got, want)


def test_huge_dilation_with_same_padding_reads_only_the_centre_tap():
    w3 = np.ones((1, 1, 3, 3))
    for backend in ("numpy", None):
        np.testing.assert_array_equal(cs.conv2d(X, w3, padding="same", dilation=2**35, backend=backend), X)


@pytest.mark.parametrize(
    "keywords",
    [
        dict(stride=(1, 2**31)),
        dict(dilation=(2**30, 1), padding="same"),
        dict(padding=((0, 0), (2**30, 0)), stride=(1, 2**29)),
    ],
)
def test_cupy_declines_geometry_past_its_32_bit_kernels(keywords):
    """cupy's kernels take int geometry: its can_run (pure Python, no GPU needed) says no."""
    from convsuite.backends.cupy_backend import CupyBackend

    gpu = CupyBackend()
    spec = cs.explain(X, W, backend="python", **keywords).spec
    for algorithm in gpu.algorithms:
        verdict = gpu.can_run(spec, algorithm, "forward")
        assert isinstance(verdict, str) and "32-bit" in verdict, (algorithm, verdict)
    assert "32-bit" in gpu.can_run(spec, "im2col_gemm", "backward")
    ordinary = cs.explain(X, W, backend="python", stride=(1, 3)).spec
    assert gpu.can_run(ordinary, "direct", "forward") is True
