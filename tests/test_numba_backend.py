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
TABLE = cs.get_backend("numba").algorithm_table() if INFO.available else {}


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
@pytest.mark.parametrize("algorithm", ["direct", "gemm", "blocked", "depthwise", "line1d"])
def test_dynamic_schedule_keeps_bits_and_the_callers_chunk_size(monkeypatch, algorithm):
    """line1d takes its chunks one at a time (numba's chunk size 1 while it runs; opt-in: the gemm
    backward ran 3x slower so), with the bits of the static schedule; no other kernel's schedule
    is touched; the caller's own chunk size comes back after every call, and after a failing one."""
    import numba

    from convsuite.backends import _numba_gemm, _numba_kernels, _numba_line

    assert _numba_line.forward in _numba_kernels._dynamic_kernels
    assert _numba_gemm.backward not in _numba_kernels._dynamic_kernels
    setter, seen = _numba_kernels._set_chunksize, []

    def recording(n):
        seen.append(n)
        return setter(n)

    monkeypatch.setattr(_numba_kernels, "_set_chunksize", recording)
    rng = np.random.default_rng(3)
    if algorithm == "line1d":
        x, w, conv, grad = rng.standard_normal((2, 3, 5001)), rng.standard_normal((3, 1, 31)), cs.conv1d, None
        kw = dict(groups=3, padding="same")
    else:
        groups = 4 if algorithm == "depthwise" else 1
        x = rng.standard_normal((3, 4, 23, 29))
        w = rng.standard_normal((8, 4 // groups, 3, 3))
        kw, conv, grad = dict(groups=groups, padding=1, stride=(1, 2)), cs.conv2d, cs.conv2d_backward
    runs = []
    try:
        numba.set_parallel_chunksize(5)
        for chunk in (0, _numba_kernels.DYNAMIC_CHUNK):
            monkeypatch.setattr(_numba_kernels, "DYNAMIC_CHUNK", chunk)
            seen.clear()
            y = conv(x, w, backend="numba", algorithm=algorithm, **kw)
            # line1d: set to the chunk size, then back to the caller's 5; any other kernel: untouched.
            assert seen == ([chunk, 5] if algorithm == "line1d" else []), seen
            assert numba.get_parallel_chunksize() == 5
            if grad is not None and "backward" in TABLE[algorithm].directions:
                gy = np.ones_like(y)
                runs.append((y, *grad(gy, x, w, backend="numba", algorithm=algorithm, **kw)))
            else:
                runs.append((y,))

        def failing(*args):
            raise RuntimeError("from inside a kernel")

        monkeypatch.setattr(_numba_kernels, "_dynamic_kernels", {failing})
        with pytest.raises(RuntimeError, match="inside a kernel"):
            _numba_kernels.run_serialised(failing)
        assert numba.get_parallel_chunksize() == 5
    finally:
        numba.set_parallel_chunksize(0)
    for static, dynamic in zip(*runs):
        np.testing.assert_array_equal(static, dynamic)


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


def _run_fresh(code: str, env: dict, done: str, timeout: int = 300) -> None:
    """Run ``code`` in a fresh interpreter under ``env``: it must exit 0 and print ``done`` (a crash, a
    traceback or an early exit fails the test with the child's stderr)."""
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    assert done in run.stdout, run.stdout[-3000:]


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
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS")
def test_a_process_held_to_one_cpu_computes_on_one_thread(tmp_path):
    """Under taskset or a container's CPU set numba's pool has fewer threads than the machine has
    CPUs; asking it for os.cpu_count() threads raised ValueError from every numba call, auto's too."""
    code = (
        "import os\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "import numpy as np, convsuite as cs, numba\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.standard_normal((8, 16, 32, 32)); w = rng.standard_normal((32, 16, 3, 3))\n"
        "assert cs.get_num_threads() == 1, cs.get_num_threads()\n"
        "expected = cs.conv2d(x, w, padding=1, backend='numpy')\n"
        "for backend in ('numba', 'joblib', 'auto'):\n"
        "    got = cs.conv2d(x, w, padding=1, backend=backend)\n"
        "    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)\n"
        "with cs.use_autotune(True):\n"
        "    np.testing.assert_allclose(cs.conv2d(x, w, padding=1), expected, rtol=1e-10, atol=1e-10)\n"
        "assert numba.get_num_threads() == 1\n"
        "print('one cpu ok')\n"
    )
    env = dict(os.environ, CONVSUITE_CACHE_DIR=str(tmp_path))  # the autotuned call's cache: not the user's
    env.pop("NUMBA_NUM_THREADS", None)
    _run_fresh(code, env, "one cpu ok")


@needs_numba
def test_kernels_compile_in_memory_where_no_cache_folder_is_writable(tmp_path):
    """A read-only install with a read-only home: numba's njit(cache=True) raised RuntimeError ("no locator
    available") at import, and every numba call, auto's too, failed. The patch makes every location numba
    tries refuse, as those file systems do (running as root here, permissions alone cannot)."""
    code = (
        "import warnings\n"
        "import numba.core.caching as caching\n"
        "def read_only(self):\n"
        "    raise OSError(30, 'Read-only file system')\n"
        "caching._CacheLocator.ensure_cache_path = read_only\n"
        "import numpy as np, convsuite as cs\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.standard_normal((4, 8, 20, 20)); w = rng.standard_normal((16, 8, 3, 3))\n"
        "expected = cs.conv2d(x, w, padding=1, backend='numpy')\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    for backend in ('numba', 'auto'):\n"
        "        got = cs.conv2d(x, w, padding=1, backend=backend)\n"
        "        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)\n"
        "from convsuite.backends import _numba_cache\n"
        "assert _numba_cache.CACHE is False\n"
        "assert any('NUMBA_CACHE_DIR' in str(w.message) for w in caught), [str(w.message) for w in caught]\n"
        "print('in memory ok')\n"
    )
    env = dict(os.environ, CONVSUITE_CACHE_DIR=str(tmp_path))
    _run_fresh(code, env, "in memory ok", timeout=600)


@needs_numba
def test_a_numba_that_refuses_to_import_leaves_the_other_backends_working():
    """NUMBA_NUM_THREADS=0 makes numba's own import raise ValueError; that escaped from every call,
    auto's too, where only ImportError meant "unavailable"."""
    code = (
        "import numpy as np, convsuite as cs\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.standard_normal((4, 8, 20, 20)); w = rng.standard_normal((16, 8, 3, 3))\n"
        "expected = cs.conv2d(x, w, padding=1, backend='numpy')\n"
        "np.testing.assert_allclose(cs.conv2d(x, w, padding=1), expected, rtol=1e-10, atol=1e-10)\n"
        "info = {b.name: b for b in cs.list_backends()}['numba']\n"
        "assert not info.available and 'ValueError' in info.reason and 'NUMBER OF THREADS' in info.reason.upper()\n"
        "try:\n"
        "    cs.conv2d(x, w, padding=1, backend='numba')\n"
        "except cs.BackendUnavailableError as exc:\n"
        "    assert 'numba' in str(exc) and 'cannot be imported' in str(exc), exc\n"
        "else:\n"
        "    raise AssertionError('numba ran with a numba that cannot be imported')\n"
        "print('others ok')\n"
    )
    env = dict(os.environ, NUMBA_NUM_THREADS="0")
    _run_fresh(code, env, "others ok")


@needs_numba
def test_numba_with_its_compiler_off_is_unavailable_and_auto_uses_the_others(tmp_path):
    """NUMBA_DISABLE_JIT=1 (a user debugging their own numba code): the kernels would run as Python and
    numba.threading_layer() raised ValueError from every call, auto's too."""
    code = (
        "import numpy as np, convsuite as cs\n"
        "rng = np.random.default_rng(0)\n"
        "x = rng.standard_normal((4, 8, 20, 20)); w = rng.standard_normal((16, 8, 3, 3))\n"
        "expected = cs.conv2d(x, w, padding=1, backend='numpy')\n"
        "np.testing.assert_allclose(cs.conv2d(x, w, padding=1), expected, rtol=1e-10, atol=1e-10)\n"
        "with cs.use_autotune(True):\n"
        "    np.testing.assert_allclose(cs.conv2d(x, w, padding=1), expected, rtol=1e-10, atol=1e-10)\n"
        "info = {b.name: b for b in cs.list_backends()}['numba']\n"
        "assert not info.available and 'NUMBA_DISABLE_JIT' in info.reason, info.reason\n"
        "pooled = cs.nn.MaxPool2D(2)(x)\n"  # max pooling's numba kernels too: NumPy's path instead
        "np.testing.assert_array_equal(pooled, x.reshape(4, 8, 10, 2, 10, 2).max(axis=(3, 5)))\n"
        "print('others ok')\n"
    )
    env = dict(os.environ, NUMBA_DISABLE_JIT="1", CONVSUITE_CACHE_DIR=str(tmp_path))
    _run_fresh(code, env, "others ok")


@needs_numba
def test_warm_up_reports_compile_or_cache_load_time():
    seconds = cs._registry.get_backend("numba").warm_up("float64")
    assert seconds >= 0.0


def test_info_reports_threads(capsys):
    from convsuite import cli

    cli.main(["info"])
    assert "threads" in capsys.readouterr().out


@needs_numba
def test_algorithm_table_matches_the_names():
    backend = cs._registry.get_backend("numba")
    table = backend.algorithm_table()
    assert tuple(table) == backend.algorithms
    for record in table.values():
        assert record.summary and set(record.directions) <= {"forward", "backward"}


@needs_numba
def test_auto_rule_and_its_reasons():
    backend = cs._registry.get_backend("numba")

    def choice(x_shape, w_shape, direction="forward", **kw):
        x, w = np.zeros(x_shape, np.float32), np.zeros(w_shape, np.float32)
        return backend.choose_algorithm(cs.explain(x, w, backend="numba", **kw).spec, direction)

    assert choice((10**5,), (31,), padding="same")[0] == "line1d"
    assert choice((8, 64, 56, 56), (64, 64, 3, 3), padding=1) == (
        "gemm",
        "64 output channels per group, reduction 576: BLAS wins",
    )
    assert choice((4, 96, 56, 56), (24, 96, 1, 1))[0] == "gemm"
    # One input channel per group, few filters each: the phase-plane kernel, until the batch is large.
    assert choice((2, 1, 86, 86), (4, 1, 7, 7))[0] == "depthwise"
    assert choice((64, 1, 32, 32), (6, 1, 5, 5))[0] == "gemm"  # LeNet-5 conv1 at batch 64
    assert choice((4, 96, 56, 56), (96, 1, 3, 3), groups=96, padding=1)[0] == "depthwise"  # depthwise proper
    assert choice((8, 1, 48, 48), (12, 1, 5, 5))[0] == "gemm"  # 12 filters: past depthwise's multiplier bound
    # 4 output channels: too thin for BLAS on a small problem (register-blocked), not on a large one.
    assert choice((2, 2, 40, 40), (4, 2, 7, 7)) == (
        "blocked",
        "4 output channels per group (< 8): too thin a product for BLAS; the register-blocked direct kernel",
    )
    assert choice((8, 2, 86, 86), (4, 2, 7, 7))[0] == "gemm"
    assert choice((2, 4, 8, 8), (2, 4, 1, 1), stride=2)[0] == "direct"  # tiny, reduction 4: nothing to block
    assert choice((8, 6, 56, 56), (16, 6, 1, 1), stride=2)[0] == "gemm"  # short reduction, many outputs
    assert choice((64, 16, 86, 86), (2, 16, 7, 7))[0] == "blocked"  # two filters: blocked whatever the size
    assert choice((1, 4, 86, 86), (4, 4, 5, 5), stride=2, padding=2)[0] == "gemm"  # stride 2: blocked runs scalar
    # Backward: one im2col tile for dW and dX, thin products included.
    assert choice((4, 96, 56, 56), (96, 1, 3, 3), "backward", groups=96, padding=1)[0] == "gemm"
    assert choice((64, 1, 32, 32), (6, 1, 5, 5), "backward")[0] == "gemm"
    assert choice((4, 32, 64, 64), (64, 32, 3, 3), "backward", padding=1)[0] == "gemm"
    # One output row whose im2col would exceed the workspace bound: gemm declines, with the reason.
    name, why = choice((1, 64, 4 * 10**5), (64, 64, 9), padding=4)
    assert name == "direct" and "MiB" in why


@needs_numba
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_gemm_row_blocks_and_partials(monkeypatch, direction):
    """A tiny workspace forces one output row per im2col tile; results still match numpy's."""
    from convsuite.backends import _tiles

    monkeypatch.setattr(_tiles, "WORKSPACE_BYTES", 64)
    monkeypatch.setattr(_tiles, "MIN_GEMM_COLUMNS", 1)  # else the default budget grows to 256 columns
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4, 13, 11))
    w = rng.standard_normal((6, 2, 3, 2))
    kw = dict(groups=2, padding=((2, 1), (0, 1)), stride=(2, 1), dilation=(1, 2))
    if direction == "forward":
        got = cs.conv2d(x, w, backend="numba", algorithm="gemm", **kw)
        want = cs.conv2d(x, w, backend="numpy", **kw)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    else:
        gy = rng.standard_normal(cs.conv2d(x, w, backend="numpy", **kw).shape)
        got = cs.conv2d_backward(gy, x, w, backend="numba", algorithm="gemm", **kw)
        want = cs.conv2d_backward(gy, x, w, backend="numpy", **kw)
        for g, e in zip(got, want):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


@needs_numba
def test_gemm_backward_does_not_depend_on_thread_count():
    """dW and db are reduced from partials fixed by the problem, in a fixed order: same bits."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 8, 12, 12), dtype=np.float32)
    w = rng.standard_normal((16, 8, 3, 3), dtype=np.float32)
    gy = rng.standard_normal((6, 16, 12, 12), dtype=np.float32)
    runs = []
    try:
        for n in (1, cs.get_num_threads()):
            cs.set_num_threads(n)
            runs.append(cs.conv2d_backward(gy, x, w, padding=1, backend="numba", algorithm="gemm"))
    finally:
        cs.set_num_threads(None)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


#: name -> (x shape, w shape, keywords, whether the rule takes wide tiles)
_TILE_GEOMETRIES = {
    "valid 5x5 (in place)": ((3, 6, 14, 14), (16, 6, 5, 5), {}, True),
    "pad 1": ((2, 3, 9, 11), (4, 3, 3, 3), dict(padding=1), True),
    "same, even kernel (asymmetric)": ((2, 4, 7, 12), (8, 4, 2, 3), dict(padding="same"), True),
    "dilation 2, groups 2, pad 2": ((3, 8, 10, 9), (8, 4, 3, 3), dict(padding=2, dilation=2, groups=2), True),
    "pad on the right only": ((2, 4, 6, 7), (8, 4, 3, 3), dict(padding=((0, 0), (0, 2))), True),
    "full, dilation 2": ((2, 3, 5, 9), (5, 3, 2, 3), dict(padding="full", dilation=2), True),
    "one row (1-D as 2-D)": ((2, 3, 1, 40), (5, 3, 1, 7), dict(padding="full", dilation=2), False),
    "rows wider than 32": ((2, 2, 4, 40), (3, 2, 3, 3), dict(padding=1), False),
    "stride 2": ((2, 4, 11, 10), (6, 4, 3, 3), dict(stride=2, padding=1), False),
}


@needs_numba
@pytest.mark.parametrize("wide", [True, False], ids=["wide tiles", "compact tiles"])
@pytest.mark.parametrize("nonfinite", [False, True], ids=["finite", "inf and NaN in one image"])
@pytest.mark.parametrize("geometry", sorted(_TILE_GEOMETRIES))
def test_gemm_tile_layouts_follow_the_ieee_reference(monkeypatch, geometry, nonfinite, wide):
    """numba ``gemm``'s wide tiles (stride 1, short rows) and compact ones: forward and backward, IEEE results.

    A wide tile computes unused columns; with an inf or NaN in an image (or the weights)
    its item must fall back to compact tiles, or ``0 * inf`` would reach real gradients.
    """
    from convsuite._validation import prepare_forward
    from convsuite.backends import numba_backend
    from convsuite.testing import (
        assert_within,
        backward_tolerances,
        forward_tolerance,
        reference_backward,
        reference_forward,
    )

    def assert_same_ieee(actual, expected, tolerance, name):  # specials identical, finite within tolerance
        assert_within(np.reshape(actual, np.shape(expected)), expected, tolerance, name)

    choose = numba_backend._wide_tiles
    monkeypatch.setattr(numba_backend, "_wide_tiles", lambda s: wide and choose(s))
    cs.clear_plan_cache()
    try:
        x_shape, w_shape, kw, rule_takes_wide = _TILE_GEOMETRIES[geometry]
        rng = np.random.default_rng(len(geometry))
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = rng.standard_normal(w_shape).astype(np.float32)
        if nonfinite:
            x[1, 0, 0, -1], x[1, -1, -1, 0] = np.inf, np.nan
        geometry_args = [kw.get(k, d) for k, d in (("stride", 1), ("padding", 0), ("dilation", 1), ("groups", 1))]
        spec = prepare_forward("conv2d", 2, x, w, None, *geometry_args, convert=False).spec
        assert choose(spec.as_2d()) == rule_takes_wide
        assert numba_backend._gemm_extra(spec.as_2d(), "backward", {"tile_kib": 256, "max_partials": 32})[2] == int(
            wide and rule_takes_wide
        )
        finite = [np.where(np.isfinite(a), a, 0) for a in (x, w)]
        y = cs.conv2d(x, w, backend="numba", algorithm="gemm", **kw)
        assert_same_ieee(y, reference_forward(spec, x, w), forward_tolerance(spec, *finite), "forward")
        grad_y = rng.standard_normal(y.shape).astype(np.float32)
        expected = reference_backward(spec, grad_y, x, w)
        tolerances = backward_tolerances(spec, grad_y, *finite)
        got = cs.conv2d_backward(grad_y, x, w, backend="numba", algorithm="gemm", **kw)
        for name, g, e, t in zip(("grad_x", "grad_w", "grad_b"), got, expected, tolerances):
            assert_same_ieee(g, e, t, name)
        if nonfinite:  # NaN weights too: dX's unused columns would be NaN * 0
            w[0, 0, 0, 0] = np.nan
            got = cs.conv2d_backward(grad_y, x, w, backend="numba", algorithm="gemm", **kw)
            expected = reference_backward(spec, grad_y, x, w)
            assert_same_ieee(got[0], expected[0], tolerances[0], "grad_x with a NaN weight")
        weights_only = cs.conv2d_backward(grad_y, x, w, backend="numba", algorithm="gemm", input_grad=False, **kw)
        assert weights_only[0] is None
        assert_same_ieee(weights_only[1], expected[1], tolerances[1], "grad_w without grad_x")
    finally:
        cs.clear_plan_cache()


@needs_numba
def test_rule_leaves_blocked_where_its_row_copies_would_be_huge():
    """A thin forward goes to 'blocked', whose row copies span the dilated kernel; past its limit (here
    a width dilation of 2**21: 48 MiB of rows per item) the rule must pick an algorithm that runs."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 16, 3, 3)).astype(np.float32)
    assert cs.explain(x, w, padding=1, backend="numba").algorithm == "blocked"
    keywords = dict(dilation=(1, 2**21), padding=(1, 2**21))
    decision = cs.explain(x, w, backend="numba", **keywords)
    assert decision.algorithm != "blocked" and "'blocked' copies" in decision.reason
    expected = cs.conv2d(x.astype(np.float64), w.astype(np.float64), backend="numpy", **keywords)
    np.testing.assert_allclose(cs.conv2d(x, w, backend="numba", **keywords), expected, rtol=1e-5, atol=1e-5)
