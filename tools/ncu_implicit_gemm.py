"""One forward launch each of tf32x3 and igemm_big on the cnn-train-3x3 c1 layer, for Nsight Compute.

Run on the GPU machine through ``bash tools/device_run.sh tc``.
"""

import cupy as cp
import numpy as np

import convsuite as cs

rng = np.random.default_rng(0)
x = cp.asarray(rng.standard_normal((64, 32, 64, 64), dtype=np.float32))
w = cp.asarray(rng.standard_normal((64, 32, 3, 3), dtype=np.float32))
for alg in ("tf32x3", "igemm_big"):
    cs.conv2d(x, w, padding=1, backend="cupy", algorithm=alg)
cp.cuda.Device().synchronize()
