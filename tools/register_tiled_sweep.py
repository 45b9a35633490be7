"""register_tiled's parameters on the layers where it is the chosen kernel, against cuDNN.

Two problems: the input gradient of ECE408 fa21 conv2 at batch 1,000 as the
backward pass runs it (a forward convolution of grad_y with the flipped,
transposed filters, 16 -> 4 channels, 7x7, padding 6) and ECE408 fa19 conv2
at batch 10,000 (12 -> 24, 5x5). Every admitted configuration of
register_tiled (``mt`` x ``block_w`` x ``px``) is timed through a held plan
(CUDA events, medians of interleaved rounds: ``convsuite._timing.measure_side_by_side``)
next to the hand rule's choice
and cuDNN through torch (TF32 off). Run on the GPU machine:
``python3 tools/register_tiled_sweep.py``.
"""

import itertools
import sys

import cupy as cp
import numpy as np
import torch

import convsuite as cs
from convsuite._timing import Contender, measure_side_by_side
from convsuite.backends import _cupy_runtime as rt
from convsuite.backends._cupy_algorithms import RECORDS

torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
PROBLEMS = [  # name, x shape, w shape, padding
    ("fa21 conv2 dX B1000", (1000, 16, 34, 34), (4, 16, 7, 7), 6),
    ("fa19 conv2 B10000", (10000, 12, 22, 22), (24, 12, 5, 5), 0),
]
OTHERS = ("tiled_shared", "igemm_big", "tf32x3")


def contenders(rng, xs, ws, pad) -> dict:
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

    calls = {f"default {record.defaults(spec, 'forward')}": planned("register_tiled")}
    grid = {t.name: t.values for t in record.tunables}
    for values in itertools.product(*grid.values()):
        params = dict(zip(grid, values))
        if record.can_run(spec, "forward", params) is True:
            calls[str(params)] = planned("register_tiled", params)
    for alg in OTHERS:
        try:
            calls[alg] = planned(alg)
        except Exception as exc:  # declined: say why
            print(f"  {alg}: {str(exc)[:90]}")
    xt, wt = torch.as_tensor(x, device="cuda"), torch.as_tensor(w, device="cuda")
    calls["cudnn"] = lambda: torch.nn.functional.conv2d(xt, wt, padding=pad)
    return calls


def main() -> int:
    rng = np.random.default_rng(0)
    for name, xs, ws, pad in PROBLEMS:
        calls = contenders(rng, xs, ws, pad)
        timings = measure_side_by_side(
            {label: Contender(call, rt.EventTimer) for label, call in calls.items()}, repeat=7, rounds=7
        )
        med = {k: t.median * 1e3 for k, t in timings.items()}
        print(f"== {name}: cuDNN {med['cudnn']:.3f} ms")
        shown = sorted(med, key=med.get)[:12] + [k for k in calls if k.startswith("default") or k in OTHERS]
        for k in shown:
            spread = timings[k].high / timings[k].low
            print(f"  {med[k]:8.3f} ms  {med['cudnn'] / med[k]:5.2f}x cuDNN  spread {spread:4.2f}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
