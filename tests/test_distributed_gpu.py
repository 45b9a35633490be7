"""A batch split across GPUs, and Dask arrays of CuPy chunks: run with `pytest -m gpu`.

With one visible GPU every code path still runs (one shard, or several
shards pinned to the same device); with two or more the shards really run on
different devices and cross them on the way back.
"""

from __future__ import annotations

import numpy as np
import pytest

import convsuite as cs
from convsuite.testing import (
    assert_within,
    backward_tolerances,
    forward_tolerance,
    reference_backward,
    reference_forward,
)

INFO = {b.name: b for b in cs.list_backends()}["cupy"]
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not INFO.available, reason=f"cupy backend unavailable: {INFO.reason}"),
]


def _arrays(seed=0, batch=7):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, 3, 20, 17)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    return x, w, b


def _devices_to_try():
    from convsuite.distributed.multigpu import visible_gpus

    gpus = visible_gpus()
    # Every GPU; and with one GPU, the same device twice (two shards, two threads).
    return [gpus, gpus * 2] if len(gpus) == 1 else [gpus, gpus[:1]]


def test_forward_split_across_gpus_matches_reference_and_stays_where_the_caller_is():
    import cupy

    from convsuite.distributed import multigpu

    x, w, b = _arrays()
    keywords = dict(stride=2, padding="same")
    spec = cs.explain(x, w, b, **keywords).spec
    expected, tol = reference_forward(spec, x, w, b), forward_tolerance(spec, x, w, b)
    for devices in _devices_to_try():
        y = multigpu.conv2d(x, w, b, devices=devices, **keywords)
        assert isinstance(y, np.ndarray)
        assert_within(y, expected, tol, f"multigpu forward on {devices}")
        y_dev = multigpu.conv2d(cupy.asarray(x), cupy.asarray(w), cupy.asarray(b), devices=devices, **keywords)
        assert isinstance(y_dev, cupy.ndarray) and y_dev.device.id == cupy.cuda.Device().id
        assert_within(y_dev.get(), expected, tol, f"multigpu forward (CuPy in) on {devices}")


def test_backward_split_across_gpus_sums_weight_gradients():
    from convsuite.distributed import multigpu

    x, w, _ = _arrays(1)
    keywords = dict(padding=1, dilation=2)
    spec = cs.explain(x, w, **keywords).spec
    grad_y = np.random.default_rng(2).standard_normal(spec.y_shape).astype(np.float32)
    expected = reference_backward(spec, grad_y, x, w)
    tolerances = backward_tolerances(spec, grad_y, x, w)
    for devices in _devices_to_try():
        grads = multigpu.conv2d_backward(grad_y, x, w, devices=devices, **keywords)
        for name, got, want, tol in zip(("grad_x", "grad_w", "grad_b"), grads, expected, tolerances):
            assert isinstance(got, np.ndarray)
            assert_within(np.reshape(got, np.shape(want)), want, tol, f"multigpu {name} on {devices}")


def test_scatter_places_shards_and_gather_collects_them():
    from convsuite.distributed import multigpu

    x, _, _ = _arrays(batch=5)
    gpus = multigpu.visible_gpus()
    shards = multigpu.scatter(x, gpus)
    assert [s.array.device.id for s in shards] == gpus[: len(shards)]
    np.testing.assert_array_equal(multigpu.gather(shards), x)
    np.testing.assert_array_equal(multigpu.gather(shards, gpus[0]).get(), x)
    with pytest.raises(ValueError, match="devices"):
        multigpu.scatter(x, [len(gpus) + 3])


def test_dask_array_of_cupy_chunks_runs_on_the_gpu_and_stays_there():
    da = pytest.importorskip("dask.array")
    dask = pytest.importorskip("dask")
    import cupy

    x, w, b = _arrays(3)
    xd = da.from_array(cupy.asarray(x), chunks=(2, 3, 7, 6), asarray=False)
    keywords = dict(stride=(2, 1), padding="full")
    with dask.config.set(scheduler="synchronous"):
        y = cs.conv2d(xd, cupy.asarray(w), cupy.asarray(b), **keywords)
        assert isinstance(y._meta, cupy.ndarray)
        got = y.compute()
    assert isinstance(got, cupy.ndarray)
    spec = cs.explain(x, w, b, **keywords).spec
    assert_within(got.get(), reference_forward(spec, x, w, b), forward_tolerance(spec, x, w, b), "dask+cupy")


def test_each_gpu_gets_its_own_plan():
    """Plans hold device-bound kernel handles: the same call on another GPU must build its own."""
    import cupy

    from convsuite.distributed.multigpu import visible_gpus

    gpus = visible_gpus()
    if len(gpus) < 2:
        pytest.skip("needs two GPUs (the device machine's nvidia-h200-x2)")
    x, w, b = _arrays()
    spec = cs.explain(x, w, b, padding=1).spec
    expected, tol = reference_forward(spec, x, w, b), forward_tolerance(spec, x, w, b)
    cs.clear_plan_cache()
    for device in gpus[:2]:
        with cupy.cuda.Device(device):
            y = cs.conv2d(cupy.asarray(x), cupy.asarray(w), cupy.asarray(b), padding=1, backend="cupy")
            assert y.device.id == device
            assert_within(y.get(), expected, tol, f"cs.conv2d on GPU {device}")
    from convsuite._plan_cache import plan_cache_info

    assert plan_cache_info()["size"] == 2


def test_replicated_weights_give_the_same_result():
    """Weights placed once on every GPU (replicate) in place of a host array: same result, nothing moved per call."""
    from convsuite.distributed import multigpu

    x, w, b = _arrays()
    spec = cs.explain(x, w, b, padding=1).spec
    expected, tol = reference_forward(spec, x, w, b), forward_tolerance(spec, x, w, b)
    for devices in _devices_to_try():
        unique = list(dict.fromkeys(devices))
        shards = multigpu.scatter(x, devices)
        w_on, b_on = multigpu.replicate(w, unique), multigpu.replicate(b, unique)
        assert sorted(w_on) == sorted(unique) and all(a.device.id == d for d, a in w_on.items())
        y = multigpu.gather(multigpu.conv_shards(shards, w_on, b_on, padding=1))
        assert_within(y, expected, tol, f"replicated weights on {devices}")


def test_captured_shards_replay_the_conv_and_see_new_data_written_in_place():
    """One CUDA graph per shard: the reference result, fixed outputs, new inputs seen on the next call."""
    import cupy

    from convsuite.distributed import multigpu

    x, w, b = _arrays(seed=3, batch=9)
    x2 = np.random.default_rng(4).standard_normal(x.shape).astype(np.float32)
    keywords = dict(stride=(1, 2))  # no padding: every algorithm the rule picks here captures
    spec = cs.explain(x, w, b, **keywords).spec
    for devices in _devices_to_try():
        unique = list(dict.fromkeys(devices))
        shards = multigpu.scatter(x, devices)
        run = multigpu.CapturedShards(shards, multigpu.replicate(w, unique), b, **keywords)
        assert run.captured == len(shards) and run.fallback_reason is None, run.fallback_reason
        outputs = run()
        assert [o.device for o in outputs] == [s.device for s in shards]
        assert all(o.array.device.id == o.device for o in outputs)
        want = reference_forward(spec, x, w, b)
        assert_within(multigpu.gather(outputs), want, forward_tolerance(spec, x, w, b), f"captured on {devices}")
        for s in shards:  # new data into the same device arrays
            with cupy.cuda.Device(s.device):
                s.array[...] = cupy.asarray(x2[s.start : s.stop])
        again = run()
        assert all(a.array is o.array for a, o in zip(again, outputs)), "the outputs are the fixed arrays"
        want2 = reference_forward(spec, x2, w, b)
        assert_within(multigpu.gather(again), want2, forward_tolerance(spec, x2, w, b), f"replay on {devices}")
        assert run.replays == 2


def test_captured_shards_run_eagerly_where_capture_is_refused_and_say_why():
    """A plan that reads a flag back to the host each call (the non-finite fix-up after a kernel
    that skips halo taps) cannot be captured: each shard runs eagerly into its fixed output,
    with the IEEE result, and the reason is kept."""
    from convsuite.distributed import multigpu

    x, w, b = _arrays(seed=5, batch=4)
    w[0, 0, 0, 0] = np.inf  # a corner tap: it meets the padding at the border (inf * 0 = NaN there)
    keywords = dict(padding=1, backend="cupy", algorithm="direct")
    spec = cs.explain(x, w, b, **keywords).spec
    shards = multigpu.scatter(x)
    run = multigpu.CapturedShards(shards, w, b, **keywords)
    assert run.captured == 0 and "device" in run.fallback_reason, run.fallback_reason
    for _ in range(2):
        got = multigpu.gather(run())
        want = reference_forward(spec, x, w, b)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        infinite = np.isinf(want)
        np.testing.assert_array_equal(got[infinite], want[infinite])
        finite = np.isfinite(want)
        tol = np.where(finite, forward_tolerance(spec, x, w, b), 1.0)
        assert_within(np.where(finite, got, 0), np.where(finite, want, 0), tol, "eager shards")
    assert run.replays == 2
