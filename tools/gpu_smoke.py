"""Run every cupy algorithm once on small inputs (for compute-sanitizer memcheck).

    compute-sanitizer --tool memcheck python3 tools/gpu_smoke.py
"""

import numpy as np

import convsuite as cs
from convsuite.backends.cupy_backend import ALGORITHMS

rng = np.random.default_rng(0)
backend = cs._registry.get_backend("cupy")
ran = []
for dtype in (np.float32, np.float64):
    cases = [
        ((2, 3, 37), (4, 3, 5), dict(padding="same")),
        ((2, 4, 29), (6, 2, 3), dict(stride=2, dilation=2, padding=(1,), groups=2)),
        ((2, 3, 13, 11), (4, 3, 3, 3), dict(padding=1)),
        ((2, 4, 12, 9), (8, 1, 3, 2), dict(stride=2, padding="same", groups=4)),
        ((1, 1, 20, 20), (5, 1, 5, 5), {}),
    ]
    for x_shape, w_shape, kw in cases:
        x = rng.standard_normal(x_shape).astype(dtype)
        w = rng.standard_normal(w_shape).astype(dtype)
        fn = cs.conv1d if x.ndim == 3 else cs.conv2d
        ref = fn(x, w, backend="numpy", **kw)
        spec = cs.explain(x, w, **kw).spec
        for algorithm in ALGORITHMS:
            if backend.can_run(spec, algorithm, "forward") is not True:
                continue
            y = fn(x, w, backend="cupy", algorithm=algorithm, **kw)
            assert np.allclose(y, ref, rtol=1e-4, atol=1e-4), (algorithm, x_shape)
            ran.append((algorithm, np.dtype(dtype).name))
        gy = rng.standard_normal(ref.shape).astype(dtype)
        backward = cs.conv1d_backward if x.ndim == 3 else cs.conv2d_backward
        backward(gy, x, w, backend="cupy", **kw)
        ran.append(("backward", np.dtype(dtype).name))
print("ran:", sorted(set(ran)))
missing = set(ALGORITHMS) - {a for a, _ in ran}
print("every algorithm ran" if not missing else f"NOT RUN: {missing}")
