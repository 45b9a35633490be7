"""Plans: cached per problem, invalidated by settings, correct on every path."""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest

import convsuite as cs
from convsuite import _plan_cache
from convsuite._plan_cache import PlanCache
from convsuite.backends.base import Backend
from convsuite.testing import reference_forward

RNG = np.random.default_rng(7)
X = RNG.standard_normal((2, 4, 9, 9)).astype(np.float32)
W = RNG.standard_normal((6, 4, 3, 3)).astype(np.float32)
B = RNG.standard_normal(6).astype(np.float32)


def _info():
    return _plan_cache.plan_cache_info()


def test_second_call_is_a_hit_and_agrees():
    cs.clear_plan_cache()
    first = cs.conv2d(X, W, B, padding=1, backend="numpy")
    before = _info()
    second = cs.conv2d(X, W, B, padding=1, backend="numpy")
    after = _info()
    assert after["hits"] == before["hits"] + 1 and after["misses"] == before["misses"]
    np.testing.assert_array_equal(first, second)
    spec = cs.explain(X, W, B, padding=1).spec
    np.testing.assert_allclose(second, reference_forward(spec, X, W, B), rtol=1e-4, atol=1e-4)


def test_each_distinguishing_argument_misses():
    cs.clear_plan_cache()
    cs.conv2d(X, W, padding=1, backend="numpy")
    variants = [
        dict(padding=0),
        dict(padding=(1, 1)),
        dict(padding=1, stride=2),
        dict(padding=1, dilation=2),
        dict(padding=1, backend="cython"),
        dict(padding=1, backend="python"),
    ]
    for kw in variants:
        misses = _info()["misses"]
        cs.conv2d(X, W, **{"backend": "numpy", **kw})
        assert _info()["misses"] == misses + 1, kw
    misses = _info()["misses"]
    cs.conv2d(X.astype(np.float64), W, padding=1, backend="numpy")
    cs.conv2d(X[:1], W, padding=1, backend="numpy")
    cs.conv2d(X, W, B, padding=1, backend="numpy")
    assert _info()["misses"] == misses + 3


@pytest.mark.parametrize("bad", [dict(stride=True), dict(stride=1.0), dict(padding=1.0), dict(groups=True)])
def test_invalid_keywords_never_hit_a_valid_plan(bad):
    cs.conv2d(X, W, stride=1, padding=1, groups=1, backend="numpy")  # a valid plan with equal-comparing values
    kw = {"stride": 1, "padding": 1, "groups": 1, **bad}
    with pytest.raises(TypeError):
        cs.conv2d(X, W, backend="numpy", **kw)


def test_lists_and_non_contiguous_inputs_run_through_plans():
    y = cs.conv2d(X, W, padding=1, backend="numpy")
    np.testing.assert_allclose(cs.conv2d(X.tolist(), W.tolist(), padding=1, backend="numpy"), y, rtol=1e-4, atol=1e-4)
    wide = np.zeros((2, 4, 9, 18), np.float32)
    wide[..., ::2] = X
    np.testing.assert_array_equal(cs.conv2d(wide[..., ::2], W, padding=1, backend="numpy"), y)


@pytest.mark.parametrize("change", ["set_backend", "register", "set_autotune", "clear_tuning_cache"])
def test_settings_changes_invalidate(change, tmp_path, monkeypatch):
    monkeypatch.setenv("CONVSUITE_CACHE_DIR", str(tmp_path))
    cs.conv2d(X, W, padding=1)
    size_before = _info()["size"]
    assert size_before >= 1
    generation = _plan_cache.generation()
    if change == "set_backend":
        cs.set_backend("numpy")
        cs.set_backend(None)
    elif change == "register":
        cs.register_backend("convsuite.backends.numpy_backend:NumpyBackend", name="numpy_again")
        cs.unregister_backend("numpy_again")
    elif change == "set_autotune":
        cs.set_autotune(False)
        cs.set_autotune(None)
    else:
        cs.clear_tuning_cache()
    assert _plan_cache.generation() > generation
    assert _info()["size"] == 0


def test_thread_count_is_part_of_the_key():
    cs.set_num_threads(1)
    try:
        cs.conv2d(X, W, padding=1, backend="numba")
        misses = _info()["misses"]
        cs.set_num_threads(None)
        cs.conv2d(X, W, padding=1, backend="numba")
        assert _info()["misses"] == misses + 1
    finally:
        cs.set_num_threads(None)


def test_a_tasks_own_thread_count_is_part_of_the_key():
    """A Dask task's thread count (thread-local) keys its own plan: numba sizes its chunks by it."""
    from convsuite import _threads

    cs.conv2d(X, W, padding=1, backend="numba")
    misses = _info()["misses"]
    with _threads.task_threads(1):
        cs.conv2d(X, W, padding=1, backend="numba")
    assert _info()["misses"] == misses + 1
    cs.conv2d(X, W, padding=1, backend="numba")  # outside again: the first plan
    assert _info()["misses"] == misses + 1


def test_set_backend_takes_effect_on_a_cached_problem():
    class Marker(Backend):
        name = "marker_backend"
        algorithms = ("only",)

        def forward(self, spec, x, w, bias, out, algorithm):
            out[...] = 7.0

        def backward(self, spec, grad_y, x, w, grad_x, grad_w, grad_b, algorithm):
            grad_x[...] = grad_w[...] = grad_b[...] = 7.0

    cs.conv2d(X, W, padding=1)
    cs.register_backend(Marker())
    try:
        cs.set_backend("marker_backend")
        assert float(cs.conv2d(X, W, padding=1)[0, 0, 0, 0]) == 7.0
        cs.set_backend(None)
        assert float(cs.conv2d(X, W, padding=1)[0, 0, 0, 0]) != 7.0
    finally:
        cs.set_backend(None)
        cs.unregister_backend("marker_backend")


def test_lru_bound_and_order():
    cache = PlanCache(maxsize=2)
    a, b, c = object(), object(), object()
    cache.put("a", a)
    cache.put("b", b)
    assert cache.get("a") is a  # a is now the most recently used
    cache.put("c", c)
    assert cache.get("b") is None and cache.get("a") is a and cache.get("c") is c
    assert len(cache) == 2


def test_concurrent_calls_from_threads_agree():
    shapes = [(1, 4, 8 + i, 8 + i) for i in range(6)]
    inputs = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    expected = [cs.conv2d(x, W, padding=1, backend="numpy") for x in inputs]
    cs.clear_plan_cache()
    errors = []

    def work(offset):
        try:
            for i in range(30):
                k = (i + offset) % len(inputs)
                np.testing.assert_array_equal(cs.conv2d(inputs[k], W, padding=1, backend="numpy"), expected[k])
        except Exception as exc:  # reported below, with the thread's failure
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_public_plan_from_arrays_and_from_shapes():
    p = cs.plan(X, W, B, padding=1, backend="numpy")
    assert isinstance(p, cs.Plan) and p.backend.name == "numpy" and p.spec.y_shape == (2, 6, 9, 9)
    np.testing.assert_array_equal(p(X, W, B), cs.conv2d(X, W, B, padding=1, backend="numpy"))
    q = cs.plan((2, 4, 9, 9), (6, 4, 3, 3), padding=1, backend="numpy")
    np.testing.assert_array_equal(q(X, W), cs.conv2d(X, W, padding=1, backend="numpy"))
    with pytest.raises(ValueError, match=r"`x` must have shape \(2, 4, 9, 9\)"):
        q(X[:1], W)
    with pytest.raises(TypeError, match="dtype float32"):
        q(X.astype(np.float64), W)
    with pytest.raises(ValueError, match="without a bias"):
        q(X, W, B)
    with pytest.raises(ValueError, match="`direction`"):
        cs.plan(X, W, direction="sideways")


def test_public_backward_plan_matches_the_function():
    gy = RNG.standard_normal((2, 6, 9, 9)).astype(np.float32)
    p = cs.plan(X.shape, W.shape, padding=1, backend="numpy", direction="backward")
    got = p(gy, X, W)
    want = cs.conv2d_backward(gy, X, W, padding=1, backend="numpy")
    for g, h in zip(got, want):
        np.testing.assert_array_equal(g, h)


def test_plain_signal_layout_through_a_plan():
    x = RNG.standard_normal(50).astype(np.float32)
    w = RNG.standard_normal(5).astype(np.float32)
    y = cs.conv1d(x, w, padding="same", backend="numpy")
    assert y.shape == (50,)
    gx, gw, gb = cs.conv1d_backward(np.ones_like(y), x, w, padding="same", backend="numpy")
    assert gx.shape == (50,) and gw.shape == (5,) and gb.shape == (1,)
    np.testing.assert_array_equal(cs.conv1d(x, w, padding="same", backend="numpy"), y)


def test_layers_reuse_their_plans_and_follow_settings():
    layer = cs.Conv2D(4, 6, 3, padding=1, seed=0)
    y = layer(X)
    np.testing.assert_allclose(y, cs.conv2d(X, layer.weight, layer.bias, padding=1), rtol=1e-5, atol=1e-6)
    built = _info()["misses"]
    layer(X)
    assert _info()["misses"] == built  # the second call found the first call's plan
    backend = cs.get_backend("python")
    calls = []
    with cs.use_backend("python"):
        original = backend.plan
        backend.plan = lambda *args, **kwargs: calls.append(args) or original(*args, **kwargs)
        try:
            np.testing.assert_allclose(layer(X), y, rtol=1e-5, atol=1e-6)
        finally:
            del backend.plan
    assert calls, "use_backend('python') did not reach the layer's call"
    grads = layer.backward(np.ones_like(y), X)
    assert grads[0].shape == X.shape and grads[1].shape == layer.weight.shape


class _Box:
    """A stand-in for a device array: the front end must move data through the backend, never touch it."""

    def __init__(self, array):
        self.a = array
        self.shape, self.dtype = array.shape, array.dtype

    def reshape(self, *shape):
        return _Box(self.a.reshape(*shape))

    def fill(self, value):
        self.a.fill(value)


class _BoxModule:
    @staticmethod
    def empty(shape, dtype):
        return _Box(np.empty(shape, dtype))


class _FakeDevice(Backend):
    """A 'device' backend whose arrays are _Box objects; computes with the numpy backend's launch."""

    name = "fake_device"
    device = "fakegpu"
    algorithms = ("boxed",)

    def __init__(self):
        self.moves = {"to_device": 0, "to_host": 0}

    def array_module(self):
        return _BoxModule

    def owns(self, array):
        return isinstance(array, _Box)

    def to_device(self, array):
        self.moves["to_device"] += 1
        return _Box(np.array(array))

    def to_host(self, array):
        self.moves["to_host"] += 1
        return array.a.copy()

    def memory_limit(self):
        return 2**40

    def ieee_padding(self, spec, algorithm, direction):
        return True  # the numpy im2col launch multiplies padding zeros: no fix-up touches the boxes

    def plan(self, spec, algorithm, direction):
        inner = cs.get_backend("numpy").plan(spec, "im2col", direction)

        def launch(*operands):
            assert all(o is None or isinstance(o, _Box) for o in operands)
            inner(*(None if o is None else o.a for o in operands))

        return launch


def test_device_backend_gets_operands_through_its_protocol():
    fake = _FakeDevice()
    cs.register_backend(fake)
    try:
        y = cs.conv2d(X, W, B, padding=1, backend="fake_device")
        assert isinstance(y, np.ndarray)  # NumPy in, NumPy out
        np.testing.assert_allclose(y, cs.conv2d(X, W, B, padding=1, backend="numpy"), rtol=1e-6)
        assert fake.moves == {"to_device": 3, "to_host": 1}
        grads = cs.conv2d_backward(np.ones_like(y), X, W, padding=1, backend="fake_device")
        want = cs.conv2d_backward(np.ones_like(y), X, W, padding=1, backend="numpy")
        for got, expected in zip(grads, want):
            assert isinstance(got, np.ndarray)
            np.testing.assert_allclose(got, expected, rtol=1e-6)
        from convsuite._instrument import record_kernel_times

        with record_kernel_times() as times:
            cs.conv2d(X, W, padding=1, backend="fake_device")
        assert len(times) == 1 and times[0] > 0
        explanation = cs.explain(X, W, padding=1)
        assert ("fake_device", "computes on the fakegpu, the data is on the cpu") in explanation.considered
    finally:
        cs.unregister_backend("fake_device")


# --- plan(..., out=): a caller's buffer (the Dask blocks write their parts into one output) ---


def test_forward_plan_writes_into_a_given_out():
    p = cs.plan(X, W, B, padding=1, backend="numpy")
    out = np.full(p.user_y_shape, np.nan, dtype=np.float32)
    assert p.accepts_out and p(X, W, B, out=out) is out
    np.testing.assert_array_equal(out, p(X, W, bias=B))
    # A plain signal's plan takes its own layout or the canonical (1, 1, n_out).
    x, w = RNG.standard_normal(40).astype(np.float32), RNG.standard_normal(5).astype(np.float32)
    q = cs.plan(x, w, padding="same", backend="numpy")
    for shape in ((40,), (1, 1, 40)):
        buffer = np.full(shape, np.nan, dtype=np.float32)
        assert q(x, w, out=buffer) is buffer
        np.testing.assert_array_equal(buffer.reshape(40), q(x, w))
    # A contiguous view of a larger buffer is written in place, nothing around it.
    whole = np.zeros(100, dtype=np.float32)
    q(x, w, out=whole[30:70])
    np.testing.assert_array_equal(whole[30:70], q(x, w))
    assert not whole[:30].any() and not whole[70:].any()


def _read_only_out():
    out = np.empty((2, 6, 9, 9), np.float32)
    out.setflags(write=False)
    return out


@pytest.mark.parametrize(
    "make, error, fragment",
    [
        (lambda: np.empty((2, 6, 9, 8), np.float32), ValueError, "`out` must have shape (2, 6, 9, 9)"),
        (
            lambda: np.empty((2, 6, 9, 9), np.float64),
            TypeError,
            "`out` must have dtype float32 for this plan; got float64",
        ),
        (lambda: np.empty((2, 6, 9, 9), np.float32).tolist(), TypeError, "`out` must be a numpy.ndarray; got list"),
        (lambda: np.empty((2, 6, 9, 18), np.float32)[..., ::2], ValueError, "`out` must be C-contiguous"),
        (_read_only_out, ValueError, "`out` must be writeable; got a read-only array"),
        (lambda: np.ma.zeros((2, 6, 9, 9), np.float32), TypeError, "`out` must be a numpy.ndarray; got MaskedArray"),
    ],
)
@pytest.mark.parametrize("backend", ["numpy", "cython", "numba"])
def test_forward_plan_refuses_a_bad_out(make, error, fragment, backend):
    p = cs.plan(X, W, B, padding=1, backend=backend)
    with pytest.raises(error, match=re.escape(fragment)):
        p(X, W, B, out=make())


@pytest.mark.parametrize("backend", ["numpy", "cython", "numba"])
def test_plans_read_byte_order_as_conv2d_does_and_write_into_a_memmap(backend, tmp_path):
    """'>f4' is float32 (conv2d took it, a plan refused it), and an np.memmap is a buffer like any array."""
    p = cs.plan(X, W, B, padding=1, backend=backend)
    expected = p(X, W, B)
    swapped = [a.astype(a.dtype.newbyteorder(">")) for a in (X, W, B)]
    np.testing.assert_array_equal(p(*swapped), expected)
    np.testing.assert_array_equal(cs.conv2d(*swapped[:2], swapped[2], padding=1, backend=backend), expected)
    mapped = np.memmap(tmp_path / "y.f32", dtype=np.float32, mode="w+", shape=p.user_y_shape)
    assert p(X, W, B, out=mapped) is mapped
    np.testing.assert_array_equal(np.asarray(mapped), expected)
    backward = cs.plan(X, W, padding=1, backend=backend, direction="backward")
    grads = backward(expected, X, W)
    for got, want in zip(backward(*(a.astype(a.dtype.newbyteorder(">")) for a in (expected, X, W))), grads):
        np.testing.assert_array_equal(got, want)


def test_forward_plan_refuses_an_out_that_is_an_operand_or_needs_a_transfer():
    square = RNG.standard_normal((4, 4, 3, 3)).astype(np.float32)  # output shaped like the input
    x = X.copy()
    p = cs.plan(x, square, padding=1, backend="numpy")
    with pytest.raises(ValueError, match="must not share memory with x"):
        p(x, square, out=x)
    fake = _FakeDevice()
    cs.register_backend(fake)
    try:
        q = cs.plan(X, W, B, padding=1, backend="fake_device")
        assert not q.accepts_out
        with pytest.raises(ValueError, match="`out` needs the operands on the fake_device backend's device"):
            q(X, W, B, out=np.empty((2, 6, 9, 9), np.float32))
    finally:
        cs.unregister_backend("fake_device")
    assert not cs.plan(X.shape, W.shape, padding=1, backend="numpy", direction="backward").accepts_out


@pytest.mark.parametrize("backend", ["numpy", "cython", "numba"])
def test_forward_plan_checks_operands_before_writing_out(backend):
    """The kernels index operands by the plan's shapes: a smaller x (or the wrong number of channels)
    must be refused before anything runs, `out=` or not, and `out` left as it was."""
    p = cs.plan(X, W, B, padding=1, backend=backend)
    out = np.full(p.user_y_shape, 7.0, np.float32)
    for x in (X[:, :2], X[:1], X[..., :3, :3]):
        with pytest.raises(ValueError, match=r"`x` must have shape \(2, 4, 9, 9\) for this plan"):
            p(x, W, B, out=out)
    assert (out == 7.0).all()


def test_backward_plan_refuses_out():
    p = cs.plan(X, W, padding=1, backend="numpy", direction="backward")
    gy = np.ones(p.spec.y_shape, np.float32)
    with pytest.raises(TypeError, match="`out` is for forward plans"):
        p(gy, X, W, out=np.empty_like(X))


def test_plans_have_no_public_unchecked_run():
    """The unchecked runs are private: a user's call goes through the checks of ``plan(...)``."""
    p = cs.plan(X, W, B, padding=1, backend="numpy")
    public = [name for name in dir(p) if not name.startswith("_")]
    assert not [name for name in public if name.startswith("run")], public


@pytest.mark.parametrize(
    "x, dtype, error, fragment",
    [
        ((1, 2, 5, 5), "bogus", TypeError, "`dtype` must be 'float32' or 'float64'; got 'bogus'"),
        ((1, 2, 5, 5), None, TypeError, "`dtype` must be 'float32' or 'float64'; got None"),
        ((1, 2, -5, 5), "float32", ValueError, "`x`'s shape must have entries >= 0; got (1, 2, -5, 5)"),
        ((1, 2, 2**40, 2**40), "float32", ValueError, "`x`'s shape (1, 2, 1099511627776, 1099511627776) holds more"),
        ((2**62, 2, 5, 5), "float64", ValueError, "`x`'s shape (4611686018427387904, 2, 5, 5) holds more"),
        ((0, 2**70, 5, 5), "float32", ValueError, "`x`'s shape (0, 1180591620717411303424, 5, 5) holds more"),
    ],
)
def test_plans_from_shapes_refuse_bad_shapes_and_dtypes(x, dtype, error, fragment):
    with pytest.raises(error, match=re.escape(fragment)):
        cs.plan(x, (3, 2, 3, 3), dtype=dtype)
