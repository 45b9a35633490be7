"""numba ``gemm``: wide against compact im2col tiles, forward and backward, through held plans.

Usage: ``.venv/bin/python tools/numba_gemm_tiles_ab.py``. For every case two
plans per direction are built, one with wide tiles forced on wherever the
kernels can take them (stride 1, several output rows) and one with compact
tiles, then timed interleaved (30 calls in 5 rounds, medians; the min-max of
the wide plan). The rows feed ``WIDE_MAX_OUT_WIDTH`` in ``numba_backend``.
"""

from __future__ import annotations

import numpy as np

import convsuite as cs
from convsuite._timing import measure_side_by_side
from convsuite.backends import numba_backend

CASES = [
    ("LeNet conv1 1->6 5x5 32x32 B64", (64, 1, 32, 32), (6, 1, 5, 5), 0),
    ("LeNet conv2 6->16 5x5 14x14 B64", (64, 6, 14, 14), (16, 6, 5, 5), 0),
    ("3x3 C64 56x56 pad1 B8", (8, 64, 56, 56), (64, 64, 3, 3), 1),
    ("3x3 C32 28x28 pad1 B4", (4, 32, 28, 28), (32, 32, 3, 3), 1),
    ("ECE408 fa21 conv2 4->16 7x7 40x40 B100", (100, 4, 40, 40), (16, 4, 7, 7), 0),
    ("5x5 C16->32 64x64 pad2 B8", (8, 16, 64, 64), (32, 16, 5, 5), 2),
    ("1-D C8->16 K9 N4096 B16 pad4", (16, 8, 1, 4096), (16, 8, 1, 9), ((0, 0), (4, 4))),
    ("3x3 C64 56x56 pad1 B1", (1, 64, 56, 56), (64, 64, 3, 3), 1),
    ("3x3 C32 112x112 pad1 B2", (2, 32, 112, 112), (32, 32, 3, 3), 1),
    ("3x3 C16->32 224x224 pad1 B1", (1, 16, 224, 224), (32, 16, 3, 3), 1),
    ("5x5 C32 64x64 pad2 B4", (4, 32, 64, 64), (32, 32, 5, 5), 2),
    ("3x3 C128 28x28 pad1 B8", (8, 128, 28, 28), (128, 128, 3, 3), 1),
]


def _can_be_wide(s) -> bool:
    """Where the kernels can take wide tiles, whatever the rule's width limit."""
    return s.stride == (1, 1) and not numba_backend._is_pointwise(s) and s.out_size[0] > 1


def main() -> None:
    rule = numba_backend._wide_tiles
    rng = np.random.default_rng(0)
    print(
        "| case | fwd compact us | fwd wide us (min-max) | fwd gain "
        "| bwd compact us | bwd wide us (min-max) | bwd gain |"
    )
    print("|---|---|---|---|---|---|---|")
    try:
        for name, x_shape, w_shape, pad in CASES:
            x = rng.standard_normal(x_shape).astype(np.float32)
            w = rng.standard_normal(w_shape).astype(np.float32)
            y = cs.conv2d(x, w, padding=pad, backend="numba", algorithm="gemm")
            gy = rng.standard_normal(y.shape).astype(np.float32)
            contenders = {}
            for tag, choice in (("wide", _can_be_wide), ("compact", lambda s: False)):
                numba_backend._wide_tiles = choice
                cs.clear_plan_cache()
                fwd = cs.plan(x, w, padding=pad, backend="numba", algorithm="gemm")
                bwd = cs.plan(x, w, padding=pad, backend="numba", algorithm="gemm", direction="backward")
                contenders[f"fwd {tag}"] = lambda fwd=fwd, x=x, w=w: fwd(x, w)
                contenders[f"bwd {tag}"] = lambda bwd=bwd, gy=gy, x=x, w=w: bwd(gy, x, w)
            numba_backend._wide_tiles = rule
            t = measure_side_by_side(contenders, repeat=30, warmup=2, rounds=5, settle_s=0.1)
            us = {k: (v.median * 1e6, v.low * 1e6, v.high * 1e6) for k, v in t.items()}
            cells = []
            for d in ("fwd", "bwd"):
                (c, _, _), (m, lo, hi) = us[f"{d} compact"], us[f"{d} wide"]
                cells += [f"{c:.0f}", f"{m:.0f} ({lo:.0f}-{hi:.0f})", f"{c / m:.2f}x"]
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
    finally:
        numba_backend._wide_tiles = rule
        cs.clear_plan_cache()


if __name__ == "__main__":
    main()
