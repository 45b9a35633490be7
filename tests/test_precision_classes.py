"""Each algorithm's accuracy against the precision class its record declares, on every backend here.

The class bounds of :func:`convsuite.testing.precision_bound` are statistical (relative L2 error
on random normal operands, growing with the square root of the reduction length), unlike the
worst-case per-element tolerance of the conformance suite, which a truncating TF32 reduction
still meets. A stand-in algorithm that computes its products in TF32 shows that the check fails
an algorithm that claims a class it does not reach. The GPU's algorithms are checked the same way
by ``tests/test_gpu_precision.py`` on the device machine.
"""

from __future__ import annotations

import numpy as np
import pytest

import convsuite as cs
from convsuite.backends.base import Algorithm, Backend
from convsuite.testing import (
    assert_precision_class,
    precision_bound,
    reference_backward,
    reference_forward,
    relative_l2_error,
)

#: Layers whose reductions run from 27 to 2304 products forward (and their gradients' lengths).
LAYERS = [
    ("3x3 C3->8 16x16 B2", (2, 3, 16, 16), (8, 3, 3, 3), dict(padding=1)),
    ("3x3 C64->32 8x8 B2", (2, 64, 8, 8), (32, 64, 3, 3), dict(padding=1)),
    ("3x3 C256->16 6x6 B1", (1, 256, 6, 6), (16, 256, 3, 3), dict(padding=1)),
    ("1x1 C1024->32 4x4 B2", (2, 1024, 4, 4), (32, 1024, 1, 1), {}),
    ("1-D K33 C128->64 B2", (2, 128, 60), (64, 128, 33), dict(padding=16)),
    ("3x3 s2 C32->32 dw 12x12 B2", (2, 32, 12, 12), (32, 1, 3, 3), dict(stride=2, padding=1, groups=32)),
]

CPU = [info.name for info in cs.list_backends() if info.device == "cpu" and info.available]


def _operands(x_shape, w_shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(x_shape).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)


def _cases():
    for backend in CPU:
        table = cs.get_backend(backend).algorithm_table() or {}
        for algorithm, record in table.items():
            for label, x_shape, w_shape, kw in LAYERS:
                yield pytest.param(
                    backend, algorithm, record.precision, x_shape, w_shape, kw, id=f"{backend}/{algorithm} {label}"
                )


@pytest.mark.parametrize("backend, algorithm, precision, x_shape, w_shape, kw", list(_cases()))
def test_cpu_algorithms_stay_within_their_class(backend, algorithm, precision, x_shape, w_shape, kw):
    x, w = _operands(x_shape, w_shape)
    spec = cs.explain(x, w, **kw).spec
    verdict = cs.get_backend(backend).can_run(spec, algorithm, "forward")
    if verdict is True:
        y = (
            cs.conv2d(x, w, backend=backend, algorithm=algorithm, **kw)
            if spec.ndim == 2
            else cs.conv1d(x, w, backend=backend, algorithm=algorithm, **kw)
        )
        want = reference_forward(spec, x.astype(np.float64), w.astype(np.float64))
        assert_precision_class(y, want, spec.reduction_length, precision, f"{backend}/{algorithm} forward")
    if cs.get_backend(backend).can_run(spec, algorithm, "backward") is not True:
        return
    gy = np.random.default_rng(1).standard_normal(spec.y_shape).astype(np.float32)
    backward = cs.conv2d_backward if spec.ndim == 2 else cs.conv1d_backward
    got = backward(gy, x, w, backend=backend, algorithm=algorithm, **kw)
    want = reference_backward(spec, gy.astype(np.float64), x.astype(np.float64), w.astype(np.float64))
    lengths = (
        spec.out_channels_per_group * int(np.prod(spec.kernel_size)),
        spec.batch * int(np.prod(spec.out_size)),
        spec.batch * int(np.prod(spec.out_size)),
    )
    for name, g, r, n in zip(("grad_x", "grad_w", "grad_b"), got, want, lengths):
        assert_precision_class(g, r, n, precision, f"{backend}/{algorithm} {name}")


def _tf32(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32 (10 explicit mantissa bits), as one TF32 product reads them."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


class _OneTF32(Backend):
    """A backend whose one algorithm computes with TF32 operands, claiming the class it is given."""

    name = "one_tf32"
    device = "cpu"
    priority = -100
    description = "test stand-in: products of TF32-rounded operands"

    def __init__(self, precision: str):
        numpy = cs.get_backend("numpy")

        def plan(spec, direction):
            inner = numpy.plan(spec, "im2col", direction)

            def launch(x, w, bias, out):
                inner(_tf32(x), _tf32(w), bias, out)

            return launch

        self._records = {"tf32": Algorithm("tf32", "TF32 operands", plan, precision=precision)}
        self.algorithms = ("tf32",)

    def available(self):
        return True

    def algorithm_table(self):
        return self._records


@pytest.mark.parametrize("claimed, passes", [("highest", False), ("high", False), ("medium", True)])
def test_the_check_fails_an_algorithm_outside_the_class_it_claims(claimed, passes):
    x, w = _operands((2, 256, 6, 6), (16, 256, 3, 3))
    cs.register_backend(_OneTF32(claimed))
    try:
        y = cs.conv2d(x, w, padding=1, backend="one_tf32")
    finally:
        cs.unregister_backend("one_tf32")
    spec = cs.explain(x, w, padding=1).spec
    want = reference_forward(spec, x.astype(np.float64), w.astype(np.float64))
    error = relative_l2_error(y, want)
    assert error > 20 * precision_bound(spec.reduction_length, "highest")  # TF32's 2^-11, not float32's
    if passes:
        assert_precision_class(y, want, spec.reduction_length, claimed, "one_tf32")
    else:
        with pytest.raises(AssertionError, match=rf"exceeds the '{claimed}' class"):
            assert_precision_class(y, want, spec.reduction_length, claimed, "one_tf32")


def test_bounds_grow_with_the_reduction_and_the_class():
    assert precision_bound(100, "highest") < precision_bound(10_000, "highest")
    assert precision_bound(2304, "highest") < precision_bound(2304, "high") < precision_bound(2304, "medium")
    for bad in (0, -3, 2.5, True, "9"):
        with pytest.raises(ValueError, match="`reduction_length`"):
            precision_bound(bad, "high")
    with pytest.raises(ValueError, match="`precision`"):
        precision_bound(10, "low")
    with pytest.raises(ValueError, match="finite"):
        relative_l2_error([np.nan], [1.0])
    assert relative_l2_error([1.0, 2.0], [1.0, 2.0]) == 0.0
