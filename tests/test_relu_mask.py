"""The ReLU mask inside the backward kernels (``relu_output=``), without a GPU.

The plumbing with a fake backend that fuses the mask (and one that does
not), the operand a fused launch receives, the non-finite fix-up under the
mask, and the cupy backend's masked launches run against a recording stand-in
for its CUDA runtime: every kernel they launch is a ``_masked`` instantiation
of the kernel table, given grad_y and the ReLU output as its first two
operands, and db is the masked reduction. The kernels themselves run in
tests/test_relu_mask_gpu.py on a GPU.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import convsuite as cs
from convsuite import _epilogue, _nonfinite
from convsuite.backends import _cupy_runtime as rt
from convsuite.backends.base import Backend
from convsuite.backends.cupy import _catalog as algs
from convsuite.backends.cupy._catalog import KERNELS
from convsuite.backends.cupy._sources import normalize_overrides
from convsuite.backends.cupy_backend import CupyBackend
from convsuite.backends.numpy_backend import NumpyBackend
from convsuite.testing import assert_within, backward_tolerances, reference_backward


def _threshold_backward(grad_y, relu_output):
    """torch.threshold_backward: grad_y where relu_output is not <= 0 (NaN passes), else 0."""
    return np.where(relu_output <= 0, 0, grad_y).astype(grad_y.dtype)


class MaskingBackend(Backend):
    """Fuses the ReLU mask for its algorithm "fused" (and not "plain"); records what its launches receive."""

    name = "relu_mask_fake"
    algorithms = ("fused", "plain")
    description = "numpy im2col, with a fake fused ReLU mask"

    def __init__(self):
        self.planned = []
        self.received = []

    def fuses_relu_mask(self, spec, algorithm):
        return algorithm == "fused"

    def plan(self, spec, algorithm, direction, params=None):
        self.planned.append((algorithm, direction))
        numpy = NumpyBackend()
        if direction == "forward":
            return lambda x, w, bias, out: numpy.forward(spec, x, w, bias, out, "im2col")
        if direction == "backward+relu":
            assert algorithm == "fused", "only a fusing algorithm is planned with the mask"

            def fused(grad_y, x, w, grad_x, grad_w, grad_b, relu_output):
                self.received.append(("fused", grad_y, relu_output))
                masked = _threshold_backward(grad_y, relu_output)
                numpy.backward(spec, masked, x, w, grad_x, grad_w, grad_b, "im2col")

            return fused

        def plain(grad_y, x, w, grad_x, grad_w, grad_b):
            self.received.append(("plain", grad_y, None))
            numpy.backward(spec, grad_y, x, w, grad_x, grad_w, grad_b, "im2col")

        return plain


@pytest.fixture
def fake():
    backend = MaskingBackend()
    cs.register_backend(backend)
    try:
        yield backend
    finally:
        cs.unregister_backend(backend.name)


def _case(rng, x_shape, w_shape, kw, dtype=np.float32):
    """Operands, a ReLU output with zeros, negatives and NaN, and grad_y."""
    x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
    fwd = cs.conv1d if len(w_shape) == 3 else cs.conv2d
    y = np.asarray(fwd(x, w, backend="numpy", activation="relu", **kw)).copy()
    flat = y.reshape(-1)
    flat[::7] = -2.0
    flat[3::11] = np.nan
    gy = rng.standard_normal(y.shape).astype(dtype)
    return x, w, y, gy


def _no_masked_copy(*args, **kwargs):
    raise AssertionError("a masked copy of grad_y was made although the backend fuses the mask")


def _assert_gradients(got, spec, masked, x, w, what):
    masked = masked.reshape(spec.y_shape)
    for name, g, ref, tol in zip(
        "xwb", got, reference_backward(spec, masked, x, w), backward_tolerances(spec, masked, x, w)
    ):
        assert_within(np.reshape(g, ref.shape), ref, tol, f"{what} grad_{name}")


CASES = [
    ((2, 3, 9, 8), (4, 3, 3, 3), dict(padding=1)),
    ((3, 9, 8), (4, 3, 3, 3), dict(padding=1)),  # unbatched: the launch sees (1, M, Ho, Wo)
    ((2, 4, 11, 10), (6, 2, 3, 2), dict(stride=2, padding="same", groups=2, dilation=(1, 2))),
    ((2, 3, 17), (5, 3, 4), dict(padding="full")),
]


@pytest.mark.parametrize("x_shape, w_shape, kw", CASES)
def test_a_fusing_backend_gets_relu_output_and_no_masked_copy(fake, x_shape, w_shape, kw, monkeypatch):
    x, w, y, gy = _case(np.random.default_rng(1), x_shape, w_shape, kw)
    bwd = cs.conv1d_backward if len(w_shape) == 3 else cs.conv2d_backward
    spec = cs.explain(x, w, **kw).spec
    monkeypatch.setattr(_epilogue, "mask_relu_gradient", _no_masked_copy)
    got = bwd(gy, x, w, backend=fake.name, algorithm="fused", relu_output=y, **kw)
    assert fake.planned == [("fused", "backward+relu")]
    (kind, grad_y, relu_output), *_ = fake.received
    assert kind == "fused"
    assert relu_output.dtype == np.float32 and relu_output.shape == spec.y_shape
    assert relu_output.flags.c_contiguous
    np.testing.assert_array_equal(grad_y.reshape(-1), gy.reshape(-1))  # grad_y itself, unmasked
    _assert_gradients(got, spec, _threshold_backward(gy, y), x, w, "fused")


@pytest.mark.parametrize("x_shape, w_shape, kw", CASES)
def test_a_non_fusing_algorithm_gets_the_masked_copy_as_before(fake, x_shape, w_shape, kw):
    x, w, y, gy = _case(np.random.default_rng(2), x_shape, w_shape, kw)
    bwd = cs.conv1d_backward if len(w_shape) == 3 else cs.conv2d_backward
    spec = cs.explain(x, w, **kw).spec
    got = bwd(gy, x, w, backend=fake.name, algorithm="plain", relu_output=y, **kw)
    assert fake.planned == [("plain", "backward")]
    (kind, grad_y, relu_output), *_ = fake.received
    assert kind == "plain" and relu_output is None
    np.testing.assert_array_equal(grad_y.reshape(-1), _threshold_backward(gy, y).reshape(-1))
    _assert_gradients(got, spec, _threshold_backward(gy, y), x, w, "plain")


def test_relu_and_plain_backward_are_separate_plans(fake):
    x, w, y, gy = _case(np.random.default_rng(3), *CASES[0])
    with_relu = cs.conv2d_backward(gy, x, w, padding=1, backend=fake.name, algorithm="fused", relu_output=y)
    without = cs.conv2d_backward(gy, x, w, padding=1, backend=fake.name, algorithm="fused")
    again = cs.conv2d_backward(gy, x, w, padding=1, backend=fake.name, algorithm="fused", relu_output=y)
    assert fake.planned == [("fused", "backward+relu"), ("fused", "backward")]  # the third call hit the cache
    assert [kind for kind, _, _ in fake.received] == ["fused", "plain", "fused"]
    spec = cs.explain(x, w, padding=1).spec
    _assert_gradients(without, spec, gy, x, w, "no relu_output")
    for a, b in zip(with_relu, again):
        np.testing.assert_array_equal(a, b)


def test_relu_output_of_another_dtype_reaches_the_kernel_with_its_sign_test(fake):
    """float64 1e-50 is > 0 (passes); cast to float32 it would be 0 (masked): the operand is 1/0, not a cast."""
    rng = np.random.default_rng(4)
    x, w, y, gy = _case(rng, *CASES[0])
    y = y.astype(np.float64)
    y.reshape(-1)[1::5] = 1e-50
    assert np.float32(1e-50) == 0
    spec = cs.explain(x, w, padding=1).spec
    got = cs.conv2d_backward(gy, x, w, padding=1, backend=fake.name, algorithm="fused", relu_output=y)
    (_, _, relu_output), *_ = fake.received
    assert relu_output.dtype == np.float32
    np.testing.assert_array_equal(relu_output <= 0, y <= 0)
    _assert_gradients(got, spec, _threshold_backward(gy, y), x, w, "float64 relu_output")
    ints = np.where(np.isnan(y), 5, np.sign(y) * 5).astype(np.int16)
    got = cs.conv2d_backward(gy, x, w, padding=1, backend=fake.name, algorithm="fused", relu_output=ints)
    _assert_gradients(got, spec, _threshold_backward(gy, y), x, w, "integer relu_output")


def test_relu_mask_operand():
    y32 = np.array([1.0, -1.0, 0.0, np.nan], dtype=np.float32)
    assert _epilogue.relu_mask_operand(y32, np.dtype(np.float32), np) is y32  # the same dtype: no copy
    y64 = np.array([1e-50, -1e-50, 0.0, -0.0, np.nan, 3.0, -np.inf])
    got = _epilogue.relu_mask_operand(y64, np.dtype(np.float32), np)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, [1, 0, 0, 0, 1, 1, 0])
    np.testing.assert_array_equal(
        _epilogue.relu_mask_operand(np.array([-3, 0, 2], dtype=np.int8), np.dtype(np.float64), np), [0, 0, 1]
    )


def test_backend_fuses_relu_mask_asks_the_backend():
    spec = cs.explain(np.ones((1, 1, 4, 4)), np.ones((1, 1, 3, 3))).spec
    for name in ("python", "numpy"):  # no capability: the plan masks grad_y
        assert _epilogue.backend_fuses_relu_mask(cs._registry.get_backend(name), spec, "auto") is False
    backend = MaskingBackend()
    assert _epilogue.backend_fuses_relu_mask(backend, spec, "fused") is True
    assert _epilogue.backend_fuses_relu_mask(backend, spec, "plain") is False


def test_nonfinite_fix_up_ignores_grad_y_under_the_mask():
    """A non-finite grad_y at a border output counts only where the ReLU passes it."""
    x, w = np.ones((1, 1, 5, 5), np.float32), np.ones((2, 1, 3, 3), np.float32)
    spec = cs.explain(x, w, padding=1).spec
    gy = np.ones(spec.y_shape, np.float32)
    relu = np.ones(spec.y_shape, np.float32)
    gy[0, 0, 0, 0], relu[0, 0, 0, 0] = np.inf, 0.0  # channel 0: a border inf under the mask
    gy[0, 0, 2, 2] = np.inf  # and an interior one that passes: grad_b[0] is inf
    grad_b = _threshold_backward(gy, relu).sum(axis=(0, 2, 3))
    assert np.isinf(grad_b[0]) and np.isfinite(grad_b[1])

    grad_w = np.zeros(spec.w_shape, np.float32)
    _nonfinite.fix_backward(spec, gy, grad_w, grad_b, np, relu)
    assert not np.isnan(grad_w).any()  # the interior inf meets no padding; the border one is masked

    grad_w = np.zeros(spec.w_shape, np.float32)
    _nonfinite.fix_backward(spec, gy, grad_w, grad_b, np)  # without the mask the border inf counts
    assert np.isnan(grad_w[0, 0, 0]).all() and not np.isnan(grad_w[1]).any()


# --- the cupy backend, without a GPU --------------------------------------------------


def test_cupy_capability_lists_the_masked_algorithms():
    backend = CupyBackend()
    spec = cs.explain(np.ones((2, 8, 9, 9), np.float32), np.ones((12, 8, 3, 3), np.float32), padding=1).spec
    backward = [name for name, record in algs.RECORDS.items() if "backward" in record.directions]
    # By default every algorithm takes the masked copy (measured faster than the masked kernels).
    assert not any(backend.fuses_relu_mask(spec, name) for name in backward)
    backend.relu_mask_in_kernels = True
    for name in backward:
        # cuBLAS multiplies inside a library call; tf32x3 has no masked kernels (yet)
        assert backend.fuses_relu_mask(spec, name) == (name not in ("pointwise_gemm", "im2col_gemm", "tf32x3")), name
    assert set(algs.FUSED_RELU_MASK) <= set(backward)


def test_cupy_refuses_relu_output_for_an_algorithm_that_cannot_mask():
    spec = cs.explain(np.ones((2, 8, 9, 9), np.float32), np.ones((12, 8, 1, 1), np.float32)).spec
    outs = (np.empty(spec.x_shape), np.empty(spec.w_shape), np.empty(12))
    with pytest.raises(ValueError, match=r"`relu_output`: 'pointwise_gemm'.*fused_gemm.*mask grad_y before"):
        CupyBackend().backward(spec, None, None, None, *outs, "pointwise_gemm", relu_output=np.ones(spec.y_shape))
    with pytest.raises(ValueError, match=r"'im2col_gemm' does not read grad_y through a ReLU mask.*depthwise"):
        algs.plan_backward_relu(spec, "im2col_gemm")


class _Recorder:
    """Stands in for the CUDA runtime: records every kernel handle asked for and every launch."""

    def __init__(self):
        self.handles = []
        self.launches = []
        self.geometry = []

    def clear(self):
        for log in (self.handles, self.launches, self.geometry):
            log.clear()

    def kernel(self, filename, name, dtype, total=None, overrides=()):
        self.handles.append((filename, name))

        def launch(grid, block, args, shared_mem=0):
            self.launches.append((filename, name, args))
            self.geometry.append((dtype, total, normalize_overrides(filename, overrides), grid, block, shared_mem))

        return launch

    def cupy(self):
        return types.SimpleNamespace(
            empty=lambda shape, dtype: np.zeros(shape, dtype),  # zeros: the fake kernels write nothing
            ascontiguousarray=np.ascontiguousarray,
            asarray=np.asarray,
            pad=np.pad,
        )


#: Kernels of a masked backward that read no grad_y (partial sums, the flipped filters), so they need no mask.
READS_NO_GRAD_Y = {"depthwise_grad_finish", "chunk_sums", "flip_weights"}

ROUTES = [
    ((2, 8, 15, 17), (12, 8, 3, 3), dict(padding=1)),  # stride-1 dX as register_tiled
    ((2, 40, 11, 13), (72, 40, 3, 3), dict(padding=1)),  # stride-1 dX as the implicit GEMM
    ((2, 6, 15, 16), (10, 6, 3, 3), dict(stride=2, padding=1)),  # the gather dX
    ((2, 6, 15, 13), (12, 1, 3, 3), dict(groups=6, padding=1)),  # depthwise, compiled K and S
    ((1, 3, 11, 12), (3, 1, 3, 2), dict(groups=3, dilation=2, padding=1)),  # depthwise, general
    ((2, 3, 40), (5, 3, 4), dict(padding="full")),  # 1-D
]


def _bind_as_call(function, grid, block, args, shared_mem=0):
    """``rt.bind`` as a plain call of the (recorded) kernel: PackedLaunch's CuPy path, with no driver."""

    def launch(*arrays):
        given = iter(arrays)
        function(grid, block, tuple(next(given) if a is rt.ARG else a for a in args), shared_mem=shared_mem)

    return launch


def _recording_runtime(monkeypatch) -> _Recorder:
    """Replace the CUDA runtime the cupy records use by a recorder (numpy for cupy's array calls)."""
    recorder = _Recorder()
    monkeypatch.setattr(rt, "kernel", recorder.kernel)
    monkeypatch.setattr(rt, "bind", _bind_as_call)
    monkeypatch.setattr(rt, "cupy", recorder.cupy)
    monkeypatch.setattr(rt, "sm_count", lambda: 132)
    monkeypatch.setattr(rt, "zeros", lambda n, dtype: np.zeros(n, dtype))
    return recorder


@pytest.mark.parametrize("algorithm", algs.FUSED_RELU_MASK)
def test_cupy_masked_launches_pass_the_relu_output_to_every_kernel(algorithm, monkeypatch):
    recorder = _recording_runtime(monkeypatch)
    backend = CupyBackend()
    ran = 0
    for x_shape, w_shape, kw in ROUTES:
        x, w, y, gy = _case(np.random.default_rng(5), x_shape, w_shape, kw)
        spec = cs.explain(x, w, **kw).spec
        if backend.can_run(spec, algorithm, "backward") is not True:
            continue
        recorder.clear()
        launch = algs.plan_backward_relu(spec, algorithm)
        gy, y = gy.reshape(spec.y_shape), y.reshape(spec.y_shape)
        grad_x, grad_w = np.zeros(spec.x_shape, x.dtype), np.zeros(spec.w_shape, x.dtype)
        grad_b = np.full(spec.out_channels, np.nan, x.dtype)
        launch(gy, x.reshape(spec.x_shape), w.reshape(spec.w_shape), grad_x, grad_w, grad_b, y)
        for filename, name in recorder.handles:  # the masked modules only: the plain ones compile as before
            assert filename.endswith("_masked.cu") and name in KERNELS[filename], (filename, name)
            assert name.partition("@")[0].endswith("_masked") or name in READS_NO_GRAD_Y, name
        # Every kernel that reads grad_y reads it through the mask: dX, dW and db (depthwise sums db in its dW kernel).
        reading = [(name, args) for _filename, name, args in recorder.launches if any(a is gy for a in args)]
        assert len(reading) == (2 if algorithm == "depthwise" else 3), recorder.launches
        for name, args in reading:
            assert args[0] is gy and args[1] is y, f"{name}: grad_y, then the ReLU output"
        others = [args for _filename, name, args in recorder.launches if name in READS_NO_GRAD_Y]
        assert len(reading) + len(others) == len(recorder.launches), recorder.launches
        # db is the last sum of partial sums, never grad_y read unmasked (the conformance tests check its value).
        assert any(a is grad_b for args in others for a in args), recorder.launches
        ran += 1
    assert ran, f"no route ran {algorithm!r}"


def _masked_name(name: str) -> str:
    """The ``_masked`` twin of a plain kernel: the forward kernels run as dX lose their ACT argument (0;
    fused_gemm's last, igemm_big's second, before its gather)."""
    base, _, extra = name.partition("@")
    if base == "conv2d_implicit_gemm":
        extra = ",".join(extra.split(",")[:-1])
    if base == "conv2d_igemm_fwd":
        bm, act, gather = extra.split(",")
        assert act == "0", name
        extra = f"{bm},{gather}"
    return f"{base}_masked" + (f"@{extra}" if extra else "")


def _same_operand(a, b) -> bool:
    """Equal launch arguments: arrays of one shape, dtype and value (NaN equal); scalars equal."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and np.array_equal(a, b, equal_nan=True)
        )
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("algorithm", algs.FUSED_RELU_MASK)
def test_cupy_masked_launch_is_the_plain_launch_plus_the_mask(algorithm, monkeypatch):
    """Kernel for kernel: the twin of each plain kernel, the same grid, block, shared memory, module and
    operands, with the ReLU output inserted after grad_y."""
    recorder = _recording_runtime(monkeypatch)
    backend = CupyBackend()
    ran = 0
    for x_shape, w_shape, kw in ROUTES:
        x, w, y, gy = _case(np.random.default_rng(6), x_shape, w_shape, kw)
        spec = cs.explain(x, w, **kw).spec
        if backend.can_run(spec, algorithm, "backward") is not True:
            continue
        gy, y = gy.reshape(spec.y_shape), y.reshape(spec.y_shape)
        x, w = x.reshape(spec.x_shape), w.reshape(spec.w_shape)
        logs = {}
        for kind in ("plain", "masked"):
            recorder.clear()
            outs = (np.zeros(spec.x_shape, x.dtype), np.zeros(spec.w_shape, x.dtype), np.zeros(spec.out_channels))
            if kind == "plain":
                algs.RECORDS[algorithm].build(spec, "backward")(gy, x, w, *outs)
            else:
                algs.plan_backward_relu(spec, algorithm)(gy, x, w, *outs, y)
            logs[kind] = (list(recorder.launches), list(recorder.geometry))
        (plain, plain_geo), (masked, masked_geo) = logs["plain"], logs["masked"]
        assert len(plain) == len(masked) >= 2
        assert plain_geo == masked_geo  # dtype, module (-D overrides), grid, block, shared memory
        for (file_p, name_p, args_p), (file_m, name_m, args_m) in zip(plain, masked):
            if name_p in READS_NO_GRAD_Y:  # the same kernel from the masked module, the same operands
                assert (file_m, name_m) == (file_p.replace(".cu", "_masked.cu"), name_p)
                assert len(args_m) == len(args_p) and all(_same_operand(a, b) for a, b in zip(args_p, args_m))
                continue
            assert (file_m, name_m) == (file_p.replace(".cu", "_masked.cu"), _masked_name(name_p))
            assert args_p[0] is gy and args_m[0] is gy and args_m[1] is y
            assert len(args_m) == len(args_p) + 1
            for position, (a, b) in enumerate(zip(args_p[1:], args_m[2:]), start=1):
                assert _same_operand(a, b), f"{name_m}: operand {position} differs from {name_p}'s"
        ran += 1
    assert ran, f"no route ran {algorithm!r}"
