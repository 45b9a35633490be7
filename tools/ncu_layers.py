"""One warm forward call per (layer, algorithm) on the GPU, for Nsight Compute to profile.

    ncu --kernel-name regex:"tf32x3|igemm" --launch-skip 0 ... python3 tools/ncu_layers.py

Layers: ECE408 fa19 conv2 at batch 2,000 (tf32x3_image, register_tiled), 3x3 C=M=64 56x56
pad 1 at batch 64 (tf32x3, igemm_big) and issue 11's depthwise 3x3 stride 2 C=144 56x56 at batch 64
(depthwise). Each call runs twice: the first compiles and plans.
"""

import cupy as cp

import convsuite as cs

CASES = [
    ((2000, 12, 22, 22), (24, 12, 5, 5), {}, ("tf32x3_image", "register_tiled")),
    ((64, 64, 56, 56), (64, 64, 3, 3), dict(padding=1), ("tf32x3", "igemm_big")),
    ((64, 144, 56, 56), (144, 1, 3, 3), dict(stride=2, padding=1, groups=144), ("depthwise",)),
]
rs = cp.random.RandomState(0)
for x_shape, w_shape, kw, algorithms in CASES:
    x, w = rs.standard_normal(x_shape, dtype=cp.float32), rs.standard_normal(w_shape, dtype=cp.float32)
    for algorithm in algorithms:
        for _ in range(2):
            cs.conv2d(x, w, backend="cupy", algorithm=algorithm, **kw)
cp.cuda.Device().synchronize()
