"""The compiled rungs' ``gemm`` before and after: SciPy's BLAS with 256 KiB tiles against
scipy-openblas32 with the grown default tiles, through the public API.

Usage: ``.venv/bin/python tools/kernel_blas_ab.py [--rounds 3] [--out FILE.md]``.

The BLAS is chosen once per process (``CONVSUITE_BLAS``), so the parent runs
child processes that alternate between the two builds (A B A B ...). Each
child times, side by side and interleaved (``measure_side_by_side``: warm-up,
rounds, medians), for every case: ``cs.conv2d``/``cs.conv2d_backward`` with
the backend's own choice (what users call) and a held ``gemm`` plan pinned to
the old 256 KiB tile budget. numba runs on every core, Cython on one (its
BLAS at one thread either way). The table gives, per case, the median of the
children's medians, and the min-max of those medians as the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

CASES = [
    # name, x shape, w shape, conv kwargs, direction
    ("3x3 C=M=64 56x56 pad1 B=8", (8, 64, 56, 56), (64, 64, 3, 3), dict(padding=1), "forward"),
    ("3x3 C=M=128 28x28 pad1 B=8", (8, 128, 28, 28), (128, 128, 3, 3), dict(padding=1), "forward"),
    ("3x3 C=M=256 14x14 pad1 B=8", (8, 256, 14, 14), (256, 256, 3, 3), dict(padding=1), "forward"),
    ("1x1 C96->24 56x56 B=4", (4, 96, 56, 56), (24, 96, 1, 1), {}, "forward"),
    ("5x5 s2 C16->32 64x64 B=8", (8, 16, 64, 64), (32, 16, 5, 5), dict(stride=2, padding=2), "forward"),
    ("ECE408 fa19 conv1 B=200", (200, 1, 48, 48), (12, 1, 5, 5), {}, "forward"),
    ("ECE408 fa19 conv2 B=200", (200, 12, 22, 22), (24, 12, 5, 5), {}, "forward"),
    ("backward 3x3 C=32 M=64 64x64 B=4", (4, 32, 64, 64), (64, 32, 3, 3), dict(padding=1), "backward"),
    ("backward 3x3 C=M=256 14x14 B=8", (8, 256, 14, 14), (256, 256, 3, 3), dict(padding=1), "backward"),
]

_CHILD = r"""
import json, sys
import convsuite as cs
import numpy as np
from convsuite._timing import measure_side_by_side
from convsuite.backends._blas_routines import gemm_routines
sys.path.insert(0, sys.argv[1])
from kernel_blas_ab import CASES

rng = np.random.default_rng(0)
out = {"source": gemm_routines().source, "times": {}}
for backend in ("numba", "cython"):
    cs.set_num_threads(None if backend == "numba" else 1)
    for name, xs, ws, kw, direction in CASES:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        old = cs.plan(x, w, backend=backend, algorithm="gemm", params={"tile_kib": 256}, direction=direction, **kw)
        if direction == "forward":
            contenders = {"api": lambda: cs.conv2d(x, w, backend=backend, **kw), "gemm 256": lambda: old(x, w)}
        else:
            gy = rng.standard_normal(cs.explain(x, w, **kw).spec.y_shape).astype(np.float32)
            contenders = {
                "api": lambda: cs.conv2d_backward(gy, x, w, backend=backend, **kw),
                "gemm 256": lambda: old(gy, x, w),
            }
        t = measure_side_by_side(contenders, repeat=9, warmup=1, rounds=3, settle_s=0.05)
        algo = cs.explain(x, w, backend=backend, direction=direction, **kw).algorithm
        for k, v in t.items():
            out["times"][f"{backend}|{name}|{k}"] = [v.median, algo]
print(json.dumps(out))
"""


def _child(blas: str) -> dict:
    env = {**os.environ, "CONVSUITE_BLAS": blas}
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", _CHILD, here], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    runs = {"scipy": [], "scipy-openblas32": []}
    sources = {}
    for _ in range(args.rounds):
        for blas in runs:
            result = _child(blas)
            sources[blas] = result["source"]
            runs[blas].append(result["times"])
    lines = [
        f"BLAS A: {sources['scipy']}; BLAS B: {sources['scipy-openblas32']}. float32; ms = median of "
        f"{args.rounds} alternating child processes' medians (min-max of those); numba on "
        f"{os.cpu_count()} threads, Cython on 1.",
        "",
        "| backend | case | algorithm (after) | before: A, tile 256 KiB | A, default | B, tile 256 KiB "
        "| after: B, default | after / before |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def cell(blas, key):
        ms = [run[key][0] * 1e3 for run in runs[blas]]
        return float(np.median(ms)), min(ms), max(ms)

    for backend in ("numba", "cython"):
        for name, *_ in CASES:
            key = f"{backend}|{name}|"
            algo = runs["scipy-openblas32"][0][key + "api"][1]
            before = cell("scipy", key + "gemm 256")
            a_default = cell("scipy", key + "api")
            b_old = cell("scipy-openblas32", key + "gemm 256")
            after = cell("scipy-openblas32", key + "api")
            fmt = "{:.2f} ({:.2f}-{:.2f})".format
            lines.append(
                f"| {backend} | {name} | {algo} | {fmt(*before)} | {fmt(*a_default)} | {fmt(*b_old)} "
                f"| {fmt(*after)} | {before[0] / after[0]:.2f}x |"
            )
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
