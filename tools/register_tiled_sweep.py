"""register_tiled's parameters on the problems where it is the chosen kernel, against cuDNN.

The backward pass of a stride-1 layer with at most 24 input channels per
group runs its input gradient through register_tiled, as a forward
convolution of grad_y with the flipped, transposed filters (M -> C channels,
padding ``d*(K-1) - p``): that class is swept here on several layers (the
ECE408 and LeNet-5 second convolutions at batch 1,000, small-channel 3x3 and
5x5 layers), with ECE408 fa19 conv2's own forward at batch 10,000. For each,
every admitted ``block_w`` x ``px`` of register_tiled with the hand rule's
``mt`` (``--all-mt``: every ``mt`` too) is timed through a held plan (CUDA
events, medians of interleaved rounds: ``convsuite._timing.measure_side_by_side``)
next to the hand rule's choice, the other candidates and cuDNN through torch
(TF32 off); each line shows the block shape and the blocks of the launch.
Run on the GPU machine: ``python3 tools/register_tiled_sweep.py [--only NAME,...] [--all-mt]``.
"""

import argparse
import itertools
import sys

import cupy as cp
import numpy as np
import torch

import convsuite as cs
from convsuite._timing import Contender, measure_side_by_side
from convsuite.backends import _cupy_runtime as rt
from convsuite.backends._cupy_algorithms import RECORDS, _tile_geometry

torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
PROBLEMS = [  # name, x shape, w shape, padding (dX: x is grad_y, w the transposed filters)
    ("fa21 conv2 dX B1000", (1000, 16, 34, 34), (4, 16, 7, 7), 6),
    ("fa19 conv2 dX B1000", (1000, 24, 18, 18), (12, 24, 5, 5), 4),
    ("lenet conv2 dX B1000", (1000, 16, 10, 10), (6, 16, 5, 5), 4),
    ("3x3 C16->32 32x32 dX B64", (64, 32, 32, 32), (16, 32, 3, 3), 1),
    ("3x3 C8->16 64x64 dX B32", (32, 16, 64, 64), (8, 16, 3, 3), 1),
    ("5x5 C3->32 32x32 p2 dX B64", (64, 32, 32, 32), (3, 32, 5, 5), 2),
    ("fa19 conv2 B10000", (10000, 12, 22, 22), (24, 12, 5, 5), 0),
]
OTHERS = ("tiled_shared", "igemm_big", "tf32x3")


def contenders(rng, xs, ws, pad, all_mt=False) -> dict:
    """label -> zero-argument call: register_tiled's hand-rule plan and every admitted configuration,
    the other candidates that take the problem, and cuDNN (through torch) last.
    """
    record = RECORDS["register_tiled"]
    x = cp.asarray(rng.standard_normal(xs, dtype=np.float32))
    w = cp.asarray(rng.standard_normal(ws, dtype=np.float32))
    spec = cs.explain(x, w, padding=pad, backend="cupy", algorithm="register_tiled").spec

    def planned(algorithm, params=None):
        plan = cs.plan(x, w, padding=pad, backend="cupy", algorithm=algorithm, params=params)
        return lambda: plan(x, w)

    default = record.defaults(spec, "forward")
    calls = {f"default {default} {_geometry(spec, default)}": planned("register_tiled")}
    grid = {t.name: t.values for t in record.tunables}
    if not all_mt:
        grid["mt"] = (default["mt"],)
    for values in itertools.product(*grid.values()):
        params = dict(zip(grid, values))
        if record.can_run(spec, "forward", params) is True:
            calls[f"{params} {_geometry(spec, params)}"] = planned("register_tiled", params)
    for alg in OTHERS:
        try:
            calls[alg] = planned(alg)
        except Exception as exc:  # declined: say why
            print(f"  {alg}: {str(exc)[:90]}")
    xt, wt = torch.as_tensor(x, device="cuda"), torch.as_tensor(w, device="cuda")
    calls["cudnn"] = lambda: torch.nn.functional.conv2d(xt, wt, padding=pad)
    return calls


def _geometry(spec, params) -> str:
    """Block shape and block count of register_tiled with ``params`` on ``spec``."""
    s = spec.as_2d()
    geo = _tile_geometry(s, "register_tiled", params)
    blocks = s.batch * s.groups * geo["tiles"] * -(-s.out_channels_per_group // params["mt"])
    return f"block {geo['block'][0]}x{geo['block'][1]}, {blocks} blocks"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated name prefixes of the problems")
    parser.add_argument("--all-mt", action="store_true", help="sweep mt too (default: the hand rule's)")
    args = parser.parse_args()
    wanted = [p.strip() for p in args.only.split(",") if p.strip()]
    problems = [p for p in PROBLEMS if not wanted or any(p[0].startswith(w) for w in wanted)]
    if not problems:
        parser.error(f"--only {args.only!r} matches none of: {', '.join(p[0] for p in PROBLEMS)}")
    rng = np.random.default_rng(0)
    for name, xs, ws, pad in problems:
        calls = contenders(rng, xs, ws, pad, args.all_mt)
        timings = measure_side_by_side(
            {label: Contender(call, rt.EventTimer) for label, call in calls.items()}, repeat=7, rounds=7
        )
        med = {k: t.median * 1e3 for k, t in timings.items()}
        print(f"== {name}: cuDNN {med['cudnn']:.3f} ms")
        shown = sorted(med, key=med.get)[:16] + [k for k in calls if k.startswith("default") or k in OTHERS]
        for k in shown:
            spread = timings[k].high / timings[k].low
            print(f"  {med[k]:8.3f} ms  {med['cudnn'] / med[k]:5.2f}x cuDNN  spread {spread:4.2f}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
