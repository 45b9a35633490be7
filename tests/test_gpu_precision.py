"""The cupy backend's algorithms against the precision class each record declares (run on a GPU machine).

As ``tests/test_precision_classes.py`` does for the CPU backends: the relative L2 error against
float64 on random normal operands, bounded by :func:`convsuite.testing.precision_bound` for the
class the algorithm claims ('highest': IEEE float32; 'high': error-compensated TF32).
"""

from __future__ import annotations

import numpy as np
import pytest

import convsuite as cs
from convsuite.testing import assert_precision_class, reference_backward, reference_forward

INFO = {b.name: b for b in cs.list_backends()}["cupy"]
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not INFO.available, reason=f"cupy backend unavailable: {INFO.reason}"),
]

#: Long reductions of real networks' layers (2304-4608 products), and shorter ones.
LAYERS = [
    ("3x3 C256 14x14 B4", (4, 256, 14, 14), (256, 256, 3, 3), dict(padding=1)),
    ("3x3 C512 7x7 B8", (8, 512, 7, 7), (512, 512, 3, 3), dict(padding=1)),
    ("1x1 C2048->512 7x7 B8", (8, 2048, 7, 7), (512, 2048, 1, 1), {}),
    ("3x3 C256 dil2 16x16 B2", (2, 256, 16, 16), (128, 256, 3, 3), dict(padding=2, dilation=2)),
    ("3x3 s2 C64->128 28x28 B8", (8, 64, 28, 28), (128, 64, 3, 3), dict(stride=2, padding=1)),
    ("5x5 C12->24 22x22 B64", (64, 12, 22, 22), (24, 12, 5, 5), {}),
    ("1-D K33 C256 B4", (4, 256, 200), (256, 256, 33), dict(padding=16)),
]


def _cases():
    """Every (algorithm, layer) pair the algorithm runs in some direction (the rule reads shapes only)."""
    backend = cs.get_backend("cupy")
    for algorithm, record in backend.algorithm_table().items():
        for label, x_shape, w_shape, kw in LAYERS:
            spec = cs.explain(np.empty(x_shape, np.float32), np.empty(w_shape, np.float32), backend="numpy", **kw).spec
            if any(backend.can_run(spec, algorithm, d) is True for d in ("forward", "backward")):
                yield pytest.param(algorithm, record.precision, x_shape, w_shape, kw, id=f"{algorithm} {label}")


@pytest.mark.parametrize("algorithm, precision, x_shape, w_shape, kw", list(_cases()))
def test_gpu_algorithms_stay_within_their_class(algorithm, precision, x_shape, w_shape, kw):
    import cupy as cp

    rng = np.random.default_rng(0)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    spec = cs.explain(x, w, **kw).spec
    backend = cs.get_backend("cupy")
    conv = cs.conv2d if spec.ndim == 2 else cs.conv1d
    conv_backward = cs.conv2d_backward if spec.ndim == 2 else cs.conv1d_backward
    if backend.can_run(spec, algorithm, "forward") is True:
        y = conv(cp.asarray(x), cp.asarray(w), backend="cupy", algorithm=algorithm, **kw).get()
        want = reference_forward(spec, x.astype(np.float64), w.astype(np.float64))
        assert_precision_class(y, want, spec.reduction_length, precision, f"{algorithm} forward")
    if backend.can_run(spec, algorithm, "backward") is True:
        gy = rng.standard_normal(spec.y_shape).astype(np.float32)
        got = conv_backward(cp.asarray(gy), cp.asarray(x), cp.asarray(w), backend="cupy", algorithm=algorithm, **kw)
        want = reference_backward(spec, gy.astype(np.float64), x.astype(np.float64), w.astype(np.float64))
        lengths = (
            spec.out_channels_per_group * int(np.prod(spec.kernel_size)),
            spec.batch * int(np.prod(spec.out_size)),
            spec.batch * int(np.prod(spec.out_size)),
        )
        for name, g, r, n in zip(("grad_x", "grad_w", "grad_b"), got, want, lengths):
            assert_precision_class(g.get(), r, n, precision, f"{algorithm} {name}")
