"""GPU tests of the packed kernel launch (``_cupy_runtime.PackedLaunch``): `pytest -m gpu`.

The packed block must pass exactly the arguments CuPy's ``RawKernel.__call__``
would: every argument type and alignment the kernels use (pointers, int32,
an int64 after int32s, a fixed device array), on the caller's current stream,
from several threads at once, and through CuPy's path where the driver
cannot take the launch.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import convsuite as cs
from convsuite.testing import assert_within, forward_tolerance, reference_forward

INFO = {b.name: b for b in cs.list_backends()}["cupy"]
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not INFO.available, reason=f"cupy backend unavailable: {INFO.reason}"),
]

SOURCE = r"""
extern "C" __global__ void mixed(const float* a, float* out, int n, long long big, int k, const float* fixed,
                                 double scale) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (float)((a[i] * k + fixed[i] + (float)(big >> 33)) * scale);
}
"""


def _check(y, x, w, **kw):
    """``y`` (a CuPy array) against the float64 reference of conv2d(x, w, **kw), within the float32 tolerance."""
    spec = cs.explain(x.get(), w.get(), backend="numpy", **kw).spec
    xh, wh = x.get(), w.get()
    assert_within(y.get(), reference_forward(spec, xh, wh), forward_tolerance(spec, xh, wh))


def _in_threads(work, n: int) -> list:
    """``[work(0), ..., work(n - 1)]``, each in a thread of its own, all at once; a thread's error is raised."""
    results, errors = [None] * n, []

    def run(i):
        try:
            results[i] = work(i)
        except BaseException as exc:  # raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def _kernel():
    import cupy as cp

    return cp.RawKernel(SOURCE, "mixed")


def test_packed_arguments_match_the_kernel_signature():
    """int32, an int64 after an int32 (8-byte aligned), a fixed array and a double reach the kernel intact."""
    import cupy as cp

    from convsuite.backends import _cupy_runtime as rt

    n = 1000
    rng = np.random.default_rng(0)
    a = cp.asarray(rng.standard_normal(n, dtype=np.float32))
    fixed = cp.asarray(rng.standard_normal(n, dtype=np.float32))
    out = cp.full(n, np.nan, dtype=cp.float32)
    big = np.int64(5 << 33)
    launch = rt.bind(_kernel(), (4,), (256,), (rt.ARG, rt.ARG, np.int32(n), big, np.int32(3), fixed, np.float64(0.5)))
    launch(a, out)
    cp.cuda.get_current_stream().synchronize()
    expected = (a.get().astype(np.float64) * 3 + fixed.get() + 5) * 0.5
    # float32 arithmetic in the kernel: a wrong argument would be off by orders of magnitude, not ulps
    np.testing.assert_allclose(out.get(), expected, rtol=1e-6, atol=4e-6)


def test_packed_launch_refuses_other_argument_types():
    from convsuite.backends import _cupy_runtime as rt

    with pytest.raises(TypeError, match="NumPy scalar or a CuPy array"):
        rt.bind(_kernel(), (1,), (1,), (rt.ARG, rt.ARG, 3, np.int64(0), np.int32(1), rt.ARG, np.float64(1)))


def test_packed_launch_runs_on_the_current_stream():
    """A launch inside ``with stream:`` is ordered on that stream (not the default one)."""
    import cupy as cp

    rng = np.random.default_rng(1)
    x = cp.asarray(rng.standard_normal((2, 8, 32, 32), dtype=np.float32))
    w = cp.asarray(rng.standard_normal((16, 8, 3, 3), dtype=np.float32))
    plan = cs.plan(x, w, padding=1, backend="cupy")
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        y = plan(x, w)
        done = cp.cuda.Event()
        done.record(stream)
    done.synchronize()
    _check(y, x, w, padding=1)


def test_packed_launch_is_captured_on_the_current_stream():
    """Captured on the capturing stream: a replay computes the conv of whatever x holds then."""
    import cupy as cp

    rng = np.random.default_rng(8)
    x = cp.asarray(rng.standard_normal((2, 8, 16, 16), dtype=np.float32))
    w = cp.asarray(rng.standard_normal((16, 8, 3, 3), dtype=np.float32))
    plan = cs.plan(x, w, padding=1, backend="cupy", algorithm="tiled_shared")
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        plan(x, w)
        stream.begin_capture()
        y = plan(x, w)
        graph = stream.end_capture()
        x[...] = cp.asarray(rng.standard_normal(x.shape, dtype=np.float32))
        graph.launch()
    stream.synchronize()
    _check(y, x, w, padding=1)


def test_packed_launch_goes_through_cupy_without_a_context_and_raises_other_driver_errors(monkeypatch):
    """No context current (driver status 201): launched once, by CuPy's path; any other status is raised."""
    import cupy as cp

    rng = np.random.default_rng(9)
    x = cp.asarray(rng.standard_normal((1, 3, 12, 12), dtype=np.float32))
    w = cp.asarray(rng.standard_normal((4, 3, 3, 3), dtype=np.float32))
    plan = cs.plan(x, w, padding=1, backend="cupy", algorithm="direct")
    launch = plan._launch
    packed = next(c.cell_contents for c in launch.__closure__ if type(c.cell_contents).__name__ == "PackedLaunch")
    calls = []
    original_call = type(packed)._cupy_call

    def counted(self, arrays):
        calls.append(len(arrays))
        return original_call(self, arrays)

    def refuse(status):
        def driver_launch(*args):
            raise cp.cuda.driver.CUDADriverError(status)

        return driver_launch

    monkeypatch.setattr(type(packed), "_cupy_call", counted)
    monkeypatch.setattr(packed, "_driver_launch", refuse(201))
    _check(plan(x, w), x, w, padding=1)
    assert calls == [4]
    monkeypatch.setattr(packed, "_driver_launch", refuse(1))  # CUDA_ERROR_INVALID_VALUE
    with pytest.raises(cp.cuda.driver.CUDADriverError):
        plan(x, w)
    assert calls == [4]


def test_packed_launch_counts_its_arrays():
    import cupy as cp

    from convsuite.backends import _cupy_runtime as rt

    launch = rt.bind(
        _kernel(), (1,), (32,), (rt.ARG, rt.ARG, np.int32(1), np.int64(0), np.int32(1), rt.ARG, np.float64(1))
    )
    a = cp.zeros(32, dtype=cp.float32)
    with pytest.raises(TypeError, match="takes 3 arrays; got 2"):
        launch(a, a)


def test_packed_launch_from_many_threads_at_once():
    """Threads share one plan (one packed block): every result is its own input's convolution."""
    import cupy as cp

    rng = np.random.default_rng(2)
    w = cp.asarray(rng.standard_normal((8, 4, 3, 3), dtype=np.float32))
    inputs = [cp.asarray(rng.standard_normal((1, 4, 16, 16), dtype=np.float32)) for _ in range(8)]

    def work(i):
        with cp.cuda.Stream(non_blocking=True) as stream:
            for _ in range(50):
                y = cs.conv2d(inputs[i], w, padding=1, backend="cupy")
            stream.synchronize()
        return y

    results = _in_threads(work, len(inputs))
    for i, x in enumerate(inputs):
        _check(results[i], x, w, padding=1)


@pytest.mark.parametrize(
    "algorithm", ["direct", "tiled_shared", "register_tiled", "fused_gemm", "igemm_big", "depthwise"]
)
def test_packed_and_cupy_paths_give_identical_outputs(algorithm):
    """The same plan through the packed block and through RawKernel.__call__: bit-identical outputs."""
    import cupy as cp

    from convsuite.backends import _cupy_runtime as rt

    rng = np.random.default_rng(3)
    groups = 8 if algorithm == "depthwise" else 1
    x = cp.asarray(rng.standard_normal((2, 8, 20, 20), dtype=np.float32))
    w = cp.asarray(rng.standard_normal((8, 8 // groups, 3, 3), dtype=np.float32))
    b = cp.asarray(rng.standard_normal(8, dtype=np.float32))
    plan = cs.plan(x, w, b, padding=1, groups=groups, backend="cupy", algorithm=algorithm)
    packed = plan(x, w, b)
    original = rt.PackedLaunch.__call__
    try:
        rt.PackedLaunch.__call__ = lambda self, *arrays: self._cupy_call(arrays)
        through_cupy = plan(x, w, b)
    finally:
        rt.PackedLaunch.__call__ = original
    assert bool(cp.array_equal(packed, through_cupy))


def test_packed_launch_in_a_fresh_thread_without_prior_cuda_calls():
    """A thread whose first CUDA work is a convsuite call still launches (the driver path or CuPy's)."""
    import cupy as cp

    rng = np.random.default_rng(4)
    x = cp.asarray(rng.standard_normal((1, 3, 12, 12), dtype=np.float32))
    w = cp.asarray(rng.standard_normal((4, 3, 3, 3), dtype=np.float32))
    expected = cs.conv2d(x, w, padding=1, backend="cupy").get()
    got = {}
    thread = threading.Thread(target=lambda: got.setdefault("y", cs.conv2d(x, w, padding=1, backend="cupy").get()))
    thread.start()
    thread.join()
    np.testing.assert_array_equal(got["y"], expected)


# --- pointwise_splitk: one fused launch with partial sums kept per stream ------------------------

SPLITK_CASES = [
    ((1, 100, 7, 7), (70, 100, 1, 1), 1),  # several slices, partial 32x32 tiles
    ((2, 384, 14, 14), (96, 384, 1, 1), 1),
    ((3, 64, 5, 9), (40, 32, 1, 1), 2),  # groups, odd pixel count
    ((2, 256, 7, 9), (64, 128, 1, 1), 2),  # groups with several slices each (the tile counters per group)
    ((1, 1280, 1, 1), (1000, 1280, 1, 1), 1),  # the classifier
]


def _splitk_two_launches(plan, x, w, b):
    """The same plan's result through the two-launch path (what a graph capture runs)."""
    from convsuite.backends import _cupy_runtime as rt

    original = rt.PerStream.get
    try:
        rt.PerStream.get = lambda self, stream=None: None
        return plan(x, w, b)
    finally:
        rt.PerStream.get = original


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("xs", "ws", "groups"), SPLITK_CASES)
def test_splitk_fused_launch_matches_two_launches_bit_for_bit(xs, ws, groups, dtype):
    """Repeated fused calls (the counters must come back to zero) give the two-launch bits, and the reference."""
    import cupy as cp

    rng = np.random.default_rng(5)
    x = cp.asarray(rng.standard_normal(xs).astype(dtype))
    w = cp.asarray(rng.standard_normal(ws).astype(dtype))
    b = cp.asarray(rng.standard_normal(ws[0]).astype(dtype))
    plan = cs.plan(x, w, b, groups=groups, backend="cupy", algorithm="pointwise_splitk")
    expected = _splitk_two_launches(plan, x, w, b)
    with cs.testing.poisoned_outputs():
        for _ in range(3):
            assert bool(cp.array_equal(plan(x, w, b), expected))
    spec = cs.explain(x.get(), w.get(), b.get(), groups=groups, backend="numpy").spec
    xh, wh, bh = x.get(), w.get(), b.get()
    assert_within(expected.get(), reference_forward(spec, xh, wh, bh), forward_tolerance(spec, xh, wh, bh))


def test_splitk_fused_launch_on_concurrent_streams():
    """Two streams running one plan at once each get their own partial sums and counters."""
    import cupy as cp

    rng = np.random.default_rng(6)
    w = cp.asarray(rng.standard_normal((96, 384, 1, 1), dtype=np.float32))
    xs = [cp.asarray(rng.standard_normal((1, 384, 14, 14), dtype=np.float32)) for _ in range(2)]
    plan = cs.plan(xs[0], w, backend="cupy", algorithm="pointwise_splitk")
    expected = [_splitk_two_launches(plan, x, w, None) for x in xs]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in xs]
    results = [[], []]
    for _ in range(20):
        for i, (x, stream) in enumerate(zip(xs, streams)):
            with stream:
                results[i].append(plan(x, w))
    for stream in streams:
        stream.synchronize()
    for i in range(2):
        assert all(bool(cp.array_equal(y, expected[i])) for y in results[i])


def test_per_stream_buffers_follow_the_current_stream():
    """Each stream gets its own buffers, whatever order calls come in: runs on one stream (the
    last-served fast path), switches back and forth, a stream made after one was collected; while
    a stream captures a graph, none."""
    import gc

    import cupy as cp

    from convsuite.backends import _cupy_runtime as rt

    made = []

    def make():
        made.append(object())
        return made[-1]

    per = rt.PerStream(make)
    a, b = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with a:
        on_a = per.get()
        assert per.get() is on_a and per.get() is on_a
    with b:
        on_b = per.get()
        assert per.get() is on_b
    assert on_a is not on_b
    for _ in range(3):
        with a:
            assert per.get() is on_a
        with b:
            assert per.get() is on_b
    with a:
        a.begin_capture()
        try:
            assert per.get() is None
        finally:
            a.end_capture()
        assert per.get() is on_a
    del b
    gc.collect()
    with cp.cuda.Stream(non_blocking=True):
        fresh = per.get()
    assert fresh is not on_a and fresh is not on_b
    assert len(made) == 3


def _splitk_from_threads(seed: int, stream_of_thread, calls: int) -> None:
    """Four threads run one pointwise_splitk plan at once, each on the stream ``stream_of_thread()`` gives
    it, ``calls`` times; every result must equal the two-launch path's (shared partial sums would mix
    the threads' sums)."""
    import cupy as cp

    rng = np.random.default_rng(seed)
    w = cp.asarray(rng.standard_normal((96, 384, 1, 1), dtype=np.float32))
    xs = [cp.asarray(rng.standard_normal((1, 384, 14, 14), dtype=np.float32)) for _ in range(4)]
    plan = cs.plan(xs[0], w, backend="cupy", algorithm="pointwise_splitk")
    expected = [_splitk_two_launches(plan, x, w, None) for x in xs]
    cp.cuda.Device().synchronize()

    def work(i):
        stream = stream_of_thread()
        with stream:
            ys = [plan(xs[i], w) for _ in range(calls)]
            stream.synchronize()
        return ys

    results = _in_threads(work, len(xs))
    for i in range(len(xs)):
        assert all(bool(cp.array_equal(y, expected[i])) for y in results[i])


def test_splitk_fused_launch_on_per_thread_default_streams():
    """The per-thread default stream is one handle but a stream per thread: each thread keeps its own buffers."""
    import cupy as cp

    ptds = getattr(cp.cuda.Stream, "ptds", None)
    if ptds is None:
        pytest.skip("this CuPy has no per-thread default stream (cupy.cuda.Stream.ptds)")
    _splitk_from_threads(10, lambda: ptds, 30)


def test_splitk_fused_launch_from_threads_on_their_own_streams():
    """Threads on streams of their own, at once: the plan's PerStream serves each thread's stream in
    turn (its last-served fast path replaced by every thread), and each call must still get its own
    stream's partial sums and counters."""
    import cupy as cp

    _splitk_from_threads(12, lambda: cp.cuda.Stream(non_blocking=True), 40)


def test_splitk_under_graph_capture_replays_correctly():
    """A captured call takes the two launches with its own buffers; replays and eager calls agree."""
    import cupy as cp

    rng = np.random.default_rng(7)
    x = cp.asarray(rng.standard_normal((1, 160, 7, 7), dtype=np.float32))
    w = cp.asarray(rng.standard_normal((960, 160, 1, 1), dtype=np.float32))
    plan = cs.plan(x, w, backend="cupy", algorithm="pointwise_splitk")
    eager = plan(x, w)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        plan(x, w)  # warm: nothing compiled or allocated for the first time while capturing
        stream.begin_capture()
        captured = plan(x, w)
        graph = stream.end_capture()
        for _ in range(3):
            graph.launch()
            again = plan(x, w)
    stream.synchronize()
    assert bool(cp.array_equal(captured, eager))
    assert bool(cp.array_equal(again, eager))
