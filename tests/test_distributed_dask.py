"""Dask arrays in, Dask arrays out: same results as the single-array call, lazily.

Random cases (every padding form, strides, dilation, groups, layouts, odd
chunkings that cut through kernels) run on the synchronous scheduler, which
is fast; a fixed grid and the error path run on a LocalCluster with two
worker processes, as a real cluster would.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import convsuite as cs
from convsuite._validation import prepare_forward
from convsuite.testing import (
    assert_within,
    backward_tolerances,
    forward_tolerance,
    reference_backward,
    reference_forward,
)

from .cases import cases
from .distributed_helpers import ChunkFailure, CountingBackend

da = pytest.importorskip("dask.array", reason="the dask extra is not installed")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

FORWARD = {1: cs.conv1d, 2: cs.conv2d}
BACKWARD = {1: cs.conv1d_backward, 2: cs.conv2d_backward}


@pytest.fixture(scope="module")
def client():
    """Two worker processes of one thread each: chunks really travel between processes."""
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _spec(ndim, x, w, b, keywords):
    full = {**dict(stride=1, padding=0, dilation=1, groups=1), **keywords}
    return prepare_forward(f"conv{ndim}d", ndim, x, w, b, **full).spec


def _check_case(ndim, x, w, b, keywords, chunks, grad_seed, backend=None):
    """Forward and backward of a chunked Dask array against the float64 reference."""
    xd = da.from_array(x, chunks=chunks)
    y = FORWARD[ndim](xd, w, b, backend=backend, **keywords)
    assert isinstance(y, da.Array)
    spec = _spec(ndim, x, w, b, keywords)
    single = FORWARD[ndim](x, w, b, **keywords)
    got = y.compute()
    assert got.shape == single.shape and got.dtype == single.dtype
    assert_within(
        got.reshape(spec.y_shape), reference_forward(spec, x, w, b), forward_tolerance(spec, x, w, b), "dask forward"
    )

    grad_y = np.random.default_rng(grad_seed).standard_normal(single.shape).astype(single.dtype)
    grads = BACKWARD[ndim](grad_y, xd, w, backend=backend, **keywords)
    assert all(isinstance(g, da.Array) for g in grads)
    gx, gw, gb = dask.compute(*grads)
    assert gx.shape == x.shape and gw.shape == w.shape and gb.shape == (spec.out_channels,)
    assert grads[0].chunks == xd.chunks  # grad_x comes back chunked like x
    expected = reference_backward(spec, grad_y, x, w)
    for name, g, want, tol in zip(
        ("grad_x", "grad_w", "grad_b"), (gx, gw, gb), expected, backward_tolerances(spec, grad_y, x, w)
    ):
        assert g.dtype == single.dtype
        assert_within(np.reshape(g, np.shape(want)), want, tol, f"dask {name}")


@pytest.mark.parametrize("ndim", [1, 2])
def test_random_cases_and_chunkings_match_reference(ndim):
    @settings(max_examples=15)
    @given(case=cases(ndim), data=st.data())
    def run(case, data):
        x, w, b = case.arrays()
        # Chunks along every axis, often shorter than the kernel's reach or the
        # stride; at most about 6 per axis to keep the graph (and the test) small.
        chunks = data.draw(st.tuples(*[st.integers(max(1, n // 6), n) for n in x.shape]))
        with dask.config.set(scheduler="synchronous"):
            _check_case(case.ndim, x, w, b, case.keywords, chunks, case.seed + 1)

    run()


# A grid on the cluster: each row is one option the issue names, chunked so
# that chunks are shorter than the kernel reach or do not divide the stride.
GRID = [
    # 1-D signal of odd length, chunks of 7 under a 31-tap kernel
    (1, (1001,), (31,), dict(padding="same"), (23,)),
    (1, (3, 4, 50), (6, 4, 5), dict(stride=3, padding=2), (2, 4, 11)),  # stride does not divide chunk
    (1, (2, 4, 64), (4, 2, 3), dict(dilation=4, padding="full", groups=2), (1, 2, 9)),  # channel chunks
    (1, (4, 29), (8, 1, 4), dict(stride=4, padding="same", groups=4), (1, 5)),  # depthwise, unbatched
    (1, (2, 3, 40), (5, 3, 2), dict(padding=((0, 7),), stride=5), (2, 3, 6)),  # pure-padding tail
    (2, (2, 3, 21, 19), (4, 3, 3, 5), dict(stride=(2, 3), padding="same"), (1, 2, 5, 4)),
    (2, (1, 6, 17, 16), (6, 1, 3, 3), dict(groups=6, dilation=2, padding="full"), (1, 6, 3, 16)),
    (2, (2, 4, 12, 13), (6, 2, 2, 4), dict(groups=2, stride=(3, 2), padding=((1, 2), (0, 3))), (2, 1, 4, 13)),
    (2, (23, 22), (5, 5), dict(padding="valid", stride=2), (10, 6)),  # plain image
]


def _grid_case(ndim, x_shape, w_shape, keywords, chunks, dtype):
    """Forward bit-for-bit against the single-array call, then the full check."""
    rng = np.random.default_rng(abs(hash((x_shape, w_shape))) % 2**32)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype) if len(w_shape) == ndim + 2 else None
    # Pinned to the compiled single-core rung (the workers need no JIT warm-up),
    # the forward is bit-for-bit the single-array call.
    y = FORWARD[ndim](da.from_array(x, chunks=chunks), w, b, backend="cython", **keywords)
    np.testing.assert_array_equal(y.compute(), FORWARD[ndim](x, w, b, backend="cython", **keywords))
    _check_case(ndim, x, w, b, keywords, chunks, 7, backend="cython")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ndim, x_shape, w_shape, keywords, chunks", GRID)
def test_grid_equals_single_array_call(ndim, x_shape, w_shape, keywords, chunks, dtype):
    with dask.config.set(scheduler="synchronous"):
        _grid_case(ndim, x_shape, w_shape, keywords, chunks, dtype)


# Rows of the grid on the cluster: chunks pickled to worker processes, the
# weights fetched by each worker, halos cut from chunks held by another worker.
@pytest.mark.parametrize("row", [0, 3, 5])
def test_grid_on_local_cluster_equals_single_array_call(client, row):
    _grid_case(*GRID[row], np.float32)


def test_output_chunks_align_with_the_stride_and_read_only_their_halo():
    # Input chunks of 10, stride 3, padding 2: output j starts at padded 3j, so
    # the chunk starting at 10 (padded 12) owns outputs from ceil(12/3) = 4,
    # the one at 20 from ceil(22/3) = 8, the one at 30 from ceil(32/3) = 11.
    x = da.zeros((1, 1, 40), chunks=10)
    y = cs.conv1d(x, np.ones((1, 1, 5)), stride=3, padding=2)
    assert y.chunks[-1] == (4, 4, 3, 3)
    assert sum(y.chunks[-1]) == cs.conv1d(np.zeros((1, 1, 40)), np.ones((1, 1, 5)), stride=3, padding=2).shape[-1]


@pytest.mark.parametrize(
    "x_shape, chunks, w_shape, lead",
    [
        ((100,), (25,), (5,), ()),  # a plain signal
        ((3, 100), (3, 25), (4, 3, 5), ((4,),)),  # channels first, no batch
        ((20, 24), (5, 24), (3, 3), ()),  # a plain image, rows split
    ],
)
def test_forward_graph_reads_the_users_chunks_in_their_layout(x_shape, chunks, w_shape, lead):
    # One task per output block, one per halo cut and one for the weights: no task per chunk
    # to add the batch and channel axes, none per block to drop them (each a scheduler round trip).
    conv = cs.conv2d if len(w_shape) == 2 else cs.conv1d
    x = da.ones(x_shape, chunks=chunks)
    w = np.ones(w_shape)
    y = conv(x, w, padding="same")
    assert y.chunks[: len(lead)] == lead and len(y.chunks[len(lead)]) == 4  # the user's layout, four blocks
    own = dict(y.__dask_graph__().layers[y.name])
    blocks = [key for key in own if key[0] == y.name]
    cuts = [key for key in own if "-cut-" in key[0]]
    assert len(blocks) == y.npartitions == 4 and len(cuts) == 3  # one halo cut at each chunk boundary
    assert len(own) == len(blocks) + len(cuts) + 1
    assert set(y.__dask_graph__().layers) == {x.name, y.name}
    with dask.config.set(scheduler="synchronous"):
        np.testing.assert_array_equal(y.compute(), conv(np.ones(x_shape), w, padding="same"))


def test_result_is_lazy_and_computed_by_the_backend_the_settings_chose():
    counting = CountingBackend()
    cs.register_backend(counting)
    try:
        x = da.random.default_rng(0).standard_normal((2, 3, 64), chunks=(1, 3, 16))
        w = np.ones((4, 3, 5))
        with cs.use_backend("counting"):  # resolved when the graph is built
            y = cs.conv1d(x, w, padding="same")
        assert isinstance(y, da.Array) and counting.calls == 0  # a graph, nothing computed
        with dask.config.set(scheduler="synchronous"):
            y.compute()
        assert counting.calls == y.npartitions == 8
    finally:
        cs.unregister_backend("counting")


@pytest.mark.parametrize("activation", ["relu", "relu6"])
def test_activation_of_a_lazy_result_stays_lazy_and_equals_the_eager_call(activation):
    rng = np.random.default_rng(4)
    x = 4 * rng.standard_normal((2, 3, 12, 13))
    w, b = rng.standard_normal((5, 3, 3, 3)), rng.standard_normal(5)
    y = cs.conv2d(da.from_array(x, chunks=(1, 3, 6, 13)), w, b, padding=1, activation=activation)
    assert isinstance(y, da.Array)
    with dask.config.set(scheduler="synchronous"):
        got = y.compute()
    eager = cs.conv2d(x, w, b, padding=1, activation=activation)
    assert (eager == 0).any() and (activation == "relu" or (eager == 6).any())
    np.testing.assert_allclose(got, eager, rtol=1e-12, atol=1e-12)


def test_weights_are_one_graph_key_not_copied_into_every_task():
    w = np.random.default_rng(1).standard_normal((8, 3, 3, 3))
    x = da.ones((4, 3, 32, 32), chunks=(1, 3, 8, 8))
    y = cs.conv2d(x, w, padding=1)
    graph = dict(y.__dask_graph__())
    holders = [key for key, task in graph.items() if any(_holds(arg, w) for arg in _arguments(task))]
    assert len(holders) == 1  # one key holds the weights; 64 block tasks refer to it
    assert y.npartitions == 64


def _arguments(task):
    """The literal arguments of a graph task, old tuple form or new Task form."""
    if isinstance(task, tuple):
        return task[1:]
    args = getattr(task, "args", ())
    return [getattr(a, "value", a) for a in args]


def _holds(value, w):
    return isinstance(value, np.ndarray) and value.shape == w.shape and np.array_equal(value, w)


def test_a_failure_inside_a_task_surfaces_with_its_type_and_message(client):
    path = "tests.distributed_helpers:FailingBackend"
    cs.register_backend(path, name="failing")
    client.run(cs.register_backend, path, name="failing", replace=True)  # on every worker
    try:
        y = cs.conv1d(da.ones((2, 1, 30), chunks=(1, 1, 10)), np.ones((1, 1, 3)), backend="failing")
        with pytest.raises(ChunkFailure, match="deliberate failure on a chunk"):
            y.compute()
    finally:
        cs.unregister_backend("failing")


def test_dask_weights_and_grad_y_are_accepted_lazily():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((2, 2, 30)), rng.standard_normal((3, 2, 4))
    gy = rng.standard_normal((2, 3, 14))
    xd, wd, gyd = da.from_array(x, chunks=(1, 2, 7)), da.from_array(w, chunks=(1, 2, 4)), da.from_array(gy, chunks=5)
    with dask.config.set(scheduler="synchronous"):
        np.testing.assert_allclose(cs.conv1d(xd, wd, stride=2).compute(), cs.conv1d(x, w, stride=2), rtol=1e-12)
        for got, want in zip(
            dask.compute(*cs.conv1d_backward(gyd, xd, wd, stride=2)), cs.conv1d_backward(gy, x, w, stride=2)
        ):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_bad_input_is_refused_before_any_graph_is_built():
    x = da.ones((2, 3, 10), chunks=5)
    with pytest.raises(ValueError, match="channel mismatch"):
        cs.conv1d(x, np.ones((4, 2, 3)))
    with pytest.raises(ValueError, match="`padding` must be"):
        cs.conv1d(x, np.ones((4, 3, 3)), padding="vald")
    with pytest.raises(ValueError, match="grad_y"):
        cs.conv1d_backward(da.ones((2, 4, 9)), x, np.ones((4, 3, 3)))
    with pytest.raises(TypeError, match="`algorithm` must be a string"):
        cs.conv1d(x, np.ones((4, 3, 3)), algorithm=3)
    with pytest.raises(ValueError, match="`backend` must be one of"):
        cs.conv1d(x, np.ones((4, 3, 3)), backend="nonesuch")


def test_joblib_rung_runs_its_pieces_on_the_dask_cluster(client):
    joblib = pytest.importorskip("joblib")
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((1, 3, 30, 20)), rng.standard_normal((4, 3, 5, 3))
    with joblib.parallel_config(backend="dask", n_jobs=2):
        y = cs.conv2d(x, w, padding="same", stride=2, backend="joblib")
    np.testing.assert_array_equal(y, cs.conv2d(x, w, padding="same", stride=2, backend="cython"))


def test_unknown_chunk_sizes_are_refused_with_the_fix():
    x = da.ones((2, 3, 10), chunks=5)
    x = x[:, :, x[0, 0] > 0]  # boolean indexing: chunk sizes unknown until computed
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        cs.conv1d(x, np.ones((4, 3, 3)))


def test_empty_batch_chunks_and_outputs_larger_than_this_host_stay_lazy():
    x = da.concatenate([da.ones((0, 2, 12), chunks=(0, 2, 5)), da.ones((2, 2, 12), chunks=(1, 2, 5))])
    w = np.ones((3, 2, 3))
    with dask.config.set(scheduler="synchronous"):
        expected = cs.conv1d(np.ones((2, 2, 12)), w, padding=1)
        np.testing.assert_array_equal(cs.conv1d(x, w, padding=1).compute(), expected)
        gx, gw, gb = dask.compute(*cs.conv1d_backward(da.ones((2, 3, 12), chunks=(1, 3, 12)), x, w, padding=1))
        want = cs.conv1d_backward(np.ones((2, 3, 12)), np.ones((2, 2, 12)), w, padding=1)
        for got, expected in zip((gx, gw, gb), want):
            np.testing.assert_allclose(got, expected, rtol=1e-12)
    # Far more output than this machine's memory: still a graph (the host check is for in-memory outputs).
    huge = da.zeros((10**6, 1, 10**5), chunks=(10**5, 1, 10**4), dtype=np.float32)
    y = cs.conv1d(huge, np.ones((8, 1, 3), dtype=np.float32), padding="same")
    assert y.shape == (10**6, 8, 10**5) and y.dtype == np.float32 and y.npartitions == 100


def _task_threads_in_worker(user_count):
    """Run on a worker: the thread count a chunk's task gets, with or without the process's own setting."""
    from convsuite import _threads
    from convsuite.distributed import _blocks

    before = _threads._requested
    cs.set_num_threads(user_count)
    try:
        with _blocks._task_threads():
            return cs.get_num_threads()
    finally:
        cs.set_num_threads(before)


def test_a_task_on_a_worker_uses_one_thread_unless_the_worker_chose(client):
    # Dask's nanny starts workers with OMP_NUM_THREADS=1: one task per worker
    # thread, each single-threaded; the numba and joblib rungs follow it.
    assert client.submit(_task_threads_in_worker, None, pure=False).result() == 1
    # A count the worker process set itself (e.g. client.run(cs.set_num_threads, 2)) wins.
    assert client.submit(_task_threads_in_worker, 2, pure=False).result() == 2
    # Outside a worker nothing changes.
    assert _task_threads_in_worker(None) == cs.get_num_threads()


def test_chunks_run_under_the_task_thread_count(monkeypatch):
    from convsuite.distributed import _blocks

    seen = []

    def forward(*args, **kwargs):
        seen.append(cs.get_num_threads())
        return np.zeros((1, 1, 4))

    def in_place(*args):
        seen.append(cs.get_num_threads())
        return np.zeros((1, 1, 4))

    monkeypatch.setattr(_blocks, "_forward", forward)
    monkeypatch.setattr(_blocks, "_forward_in_place", in_place)
    monkeypatch.setattr(_blocks, "_in_dask_worker", lambda: True)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    geometry = _blocks.BlockGeometry(ndim=1, padding=((0, 0),), out_size=(4,), keywords={})
    glued = (_blocks.Operands(w=np.ones((1, 2, 1))), np.ones((1, 2, 4)))  # two channels: one glued call
    alone = (_blocks.Operands(w=np.ones((1, 1, 1))), np.ones((1, 1, 4)))  # one channel: in place
    for operands, x in (glued, alone):
        _blocks.forward_block([x], geometry, operands, 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # a cluster configured for two threads per task
    for operands, x in (glued, alone):
        _blocks.forward_block([x], geometry, operands, 1)
    two = min(2, cs._threads.max_threads())
    assert seen == [1, 1, two, two]
    assert cs.get_num_threads() == cs._threads.max_threads()  # only inside the task


# --- blocks computed in place (no glued slab) ---------------------------------------
# One batch element and one channel in and out, 1-D or rows-only 2-D: the block's
# interior is computed from a view of its chunk straight into its output, the edges
# from small glued slabs. Each row: (x shape, w shape, keywords, chunks, how many
# blocks take the in-place path: "all", "some" or "none").
IN_PLACE = [
    ((1001,), (31,), dict(padding="same"), (100,), "all"),  # the last chunk (1 sample) owns no output
    ((1, 1, 1000), (1, 1, 5), dict(stride=3, padding=2), (1, 1, 137), "all"),  # stride does not divide chunk
    ((500,), (7,), dict(dilation=3, padding="full", stride=2), (50,), "all"),
    ((400,), (9,), dict(padding="same", stride=4), ((90, 130, 7, 173),), "some"),  # uneven, a chunk < reach
    ((1, 1, 300), (1, 1, 3), dict(padding=((5, 9),), stride=2), (1, 1, 31), "all"),  # per-side pairs
    ((200,), (3,), dict(padding=((0, 7),), stride=5), (40,), "some"),  # a tail of pure padding
    ((64,), (3,), dict(padding=1), (4,), "all"),  # tiny chunks
    ((300,), (61,), dict(padding="same"), (20,), "none"),  # kernel wider than a chunk
    ((1, 1, 60, 17), (1, 1, 5, 3), dict(stride=(2, 1), padding="same"), (1, 1, 13, 17), "all"),
    ((61, 20), (3, 3), dict(dilation=(2, 1), padding="full", stride=(3, 2)), (9, 20), "all"),
    ((1, 1, 30, 20), (1, 1, 3, 3), dict(padding=1), (1, 1, 10, 10), "none"),  # columns split too
    ((1, 3, 100), (1, 3, 5), dict(padding=2), (1, 3, 25), "none"),  # three channels in
]


@pytest.fixture
def in_place_blocks(monkeypatch):
    """Count the blocks computed in place (``taken``) among those that tried (``tried``)."""
    from convsuite.distributed import _blocks

    counts = dict(taken=0, tried=0)
    original = _blocks._forward_in_place

    def counting(*args, **kwargs):
        out = original(*args, **kwargs)
        counts["tried"] += 1
        counts["taken"] += out is not None
        return out

    monkeypatch.setattr(_blocks, "_forward_in_place", counting)
    return counts


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, w_shape, keywords, chunks, expected", IN_PLACE)
def test_blocks_in_place_equal_the_single_array_call(
    x_shape, w_shape, keywords, chunks, expected, dtype, in_place_blocks
):
    ndim = len(w_shape) - 2 if len(w_shape) > 2 else len(w_shape)
    rng = np.random.default_rng(len(x_shape) * 1000 + x_shape[-1])
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype) if len(w_shape) == ndim + 2 else None
    with dask.config.set(scheduler="synchronous"):  # in this process: outputs are poisoned (NaN) here
        y = FORWARD[ndim](da.from_array(x, chunks=chunks), w, b, backend="cython", **keywords)
        # Bit for bit: the interior, the edges and the single call run the same kernel on the same taps.
        np.testing.assert_array_equal(y.compute(), FORWARD[ndim](x, w, b, backend="cython", **keywords))
        blocks = y.npartitions
        taken = in_place_blocks["taken"]
        assert {"all": taken == blocks, "some": 0 < taken < blocks, "none": taken == 0}[expected], (
            f"{taken} of {blocks} blocks in place, expected {expected}"
        )
        # The default settings ("auto" on each block) against the float64 reference.
        got = FORWARD[ndim](da.from_array(x, chunks=chunks), w, b, **keywords).compute()
    spec = _spec(ndim, x, w, b, keywords)
    assert_within(got.reshape(spec.y_shape), reference_forward(spec, x, w, b), forward_tolerance(spec, x, w, b), "auto")


def test_random_signals_in_place_equal_the_single_array_call(in_place_blocks):
    @settings(max_examples=40)
    @given(data=st.data())
    def run(data):
        n = data.draw(st.integers(1, 300), label="n")
        kernel = data.draw(st.integers(1, 40), label="kernel")
        stride, dilation = data.draw(st.integers(1, 4), label="stride"), data.draw(st.integers(1, 3), label="dilation")
        padding = data.draw(
            st.one_of(
                st.sampled_from(["valid", "same", "full"]),
                st.integers(0, 20),
                st.tuples(st.tuples(st.integers(0, 20), st.integers(0, 20))),
            ),
            label="padding",
        )
        cuts = sorted(data.draw(st.sets(st.integers(1, n - 1), max_size=8), label="cuts")) if n > 1 else []
        chunks = tuple(b - a for a, b in zip([0, *cuts], [*cuts, n]))
        rng = np.random.default_rng(n * 41 + kernel)
        x, w = rng.standard_normal(n).astype(np.float32), rng.standard_normal(kernel).astype(np.float32)
        keywords = dict(stride=stride, dilation=dilation, padding=padding)
        try:
            want = cs.conv1d(x, w, backend="cython", **keywords)
        except ValueError:  # a kernel longer than the padded signal: refused the same way for Dask
            with pytest.raises(ValueError):
                cs.conv1d(da.from_array(x, chunks=(chunks,)), w, backend="cython", **keywords)
            return
        with dask.config.set(scheduler="synchronous"):
            got = cs.conv1d(da.from_array(x, chunks=(chunks,)), w, backend="cython", **keywords).compute()
        np.testing.assert_array_equal(got, want)

    run()
    # The in-place path was exercised, not only the glued one.
    assert in_place_blocks["taken"] >= 10 and in_place_blocks["tried"] > in_place_blocks["taken"]


def test_blocks_in_place_on_the_cluster_equal_the_single_array_call(client):
    # The benchmark's shape, small: a plain signal, "same", chunks far longer than the kernel.
    rng = np.random.default_rng(8)
    x, w = rng.standard_normal(30_000).astype(np.float32), rng.standard_normal(31).astype(np.float32)
    y = cs.conv1d(da.from_array(x, chunks=4_000), w, padding="same", stride=3, backend="cython")
    np.testing.assert_array_equal(y.compute(), cs.conv1d(x, w, padding="same", stride=3, backend="cython"))


@pytest.mark.parametrize(
    "keywords", [dict(padding="same"), dict(padding="full", stride=2), dict(padding=((3, 11),), dilation=2)]
)
def test_blocks_in_place_keep_non_finite_values_where_the_single_call_has_them(keywords, in_place_blocks):
    # inf/NaN at chunk edges, in halos and at the signal's ends, and inf weights
    # meeting the padding (the IEEE fix-up runs on each part's own padding).
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(500).astype(np.float32), rng.standard_normal(9).astype(np.float32)
    x[[0, 3, 99, 100, 101, 250, 499]] = [np.inf, np.nan, -np.inf, np.nan, np.inf, np.nan, np.inf]
    w[[0, 8]] = [np.inf, -np.inf]
    want = cs.conv1d(x, w, backend="cython", **keywords)
    with dask.config.set(scheduler="synchronous"):
        got = cs.conv1d(da.from_array(x, chunks=100), w, backend="cython", **keywords).compute()
    np.testing.assert_array_equal(got, want)  # NaN where the single call has NaN, and only there
    assert in_place_blocks["taken"] == in_place_blocks["tried"] > 0


def test_in_place_parts_are_not_chosen_or_tuned_again(monkeypatch, in_place_blocks):
    """Under autotune only the block (on its slab's shape) may be measured; its parts reuse its pick."""
    from convsuite import _select

    calls = []
    original = _select.choose

    def recording(spec, direction, *args, measure=None, **kwargs):
        calls.append((spec.in_size[0], measure))
        return original(spec, direction, *args, measure=measure, **kwargs)

    monkeypatch.setattr(_select, "choose", recording)
    rng = np.random.default_rng(41)
    x, w = rng.standard_normal(1001).astype(np.float32), rng.standard_normal(31).astype(np.float32)
    cs.clear_plan_cache()
    with cs.use_autotune(True), dask.config.set(scheduler="synchronous"):
        got = cs.conv1d(da.from_array(x, chunks=100), w, padding="same", backend="cython").compute()
    # Which algorithm the block's measurement picks (direct or depthwise) is the machine's call:
    # the values agree to rounding; what this test pins is who chose it (below).
    np.testing.assert_allclose(got, cs.conv1d(x, w, padding="same", backend="cython"), rtol=1e-5, atol=1e-5)
    assert in_place_blocks["taken"] > 0
    assert any(measure is False for _, measure in calls)  # the parts: their parameters were given
    # Anything that may measure is a whole block's slab (a 100-sample chunk plus its halo), never a part.
    assert all(size > 100 for size, measure in calls if measure is not False), calls


def test_in_place_block_whose_part_is_declined_falls_back_to_the_glued_slab(monkeypatch, in_place_blocks):
    """A pinned algorithm that refuses a small edge part: the block is glued and computed in one call."""
    backend = cs.get_backend("cython")
    original = backend.can_run

    def refuses_small(spec, algorithm, direction, params=None):
        if spec.in_size[0] < 100:
            return "refused for the test: fewer than 100 samples"
        return original(spec, algorithm, direction, params)

    monkeypatch.setattr(backend, "can_run", refuses_small)
    cs.clear_plan_cache()
    rng = np.random.default_rng(42)
    x, w = rng.standard_normal(1001).astype(np.float32), rng.standard_normal(31).astype(np.float32)
    with dask.config.set(scheduler="synchronous"):
        got = cs.conv1d(da.from_array(x, chunks=100), w, padding="same", backend="cython", algorithm="direct")
        got = got.compute()
    cs.clear_plan_cache()
    np.testing.assert_array_equal(got, cs.conv1d(x, w, padding="same", backend="cython", algorithm="direct"))
    assert in_place_blocks["tried"] > 0 and in_place_blocks["taken"] == 0


def test_in_place_parts_of_equal_chunks_are_planned_once(monkeypatch, in_place_blocks):
    """Equal chunks have equal parts: through the plan cache each part shape is built once, not per block."""
    from convsuite import _planner

    built = []
    original = _planner.build

    def counting(ndim, direction, a, *args, **kwargs):
        padding = args[3]  # after w, bias and stride
        built.append((a.shape, padding, tuple(sorted((kwargs.get("params") or {}).items()))))
        return original(ndim, direction, a, *args, **kwargs)

    monkeypatch.setattr(_planner, "build", counting)
    rng = np.random.default_rng(43)
    x, w = rng.standard_normal(20_000).astype(np.float32), rng.standard_normal(31).astype(np.float32)
    cs.clear_plan_cache()
    with dask.config.set(scheduler="synchronous"):
        got = cs.conv1d(da.from_array(x, chunks=1000), w, padding="same", backend="cython").compute()
    cs.clear_plan_cache()
    np.testing.assert_array_equal(got, cs.conv1d(x, w, padding="same", backend="cython", algorithm=_slab_algorithm()))
    assert in_place_blocks["taken"] == 20
    assert len(built) == len(set(built)), built  # no part or slab (shape and padding) built twice
    assert len(built) <= 8, built  # the first, middle and last blocks' slabs and parts, not 20 blocks' worth


def _slab_algorithm():
    """The algorithm auto picks on the cython backend for a middle block's slab (1,000 samples + 2 x 15 halo)."""
    return cs.explain(np.zeros(1030, np.float32), np.zeros(31, np.float32), backend="cython").algorithm
