"""tf32x3's accumulation, measured: error against float64 and time, beside cuDNN-FP32's, on the zoo's
long-reduction layers (docs/measurements/precision-*.md).

``--promote 1`` (the default build) sums each k-step's three MMAs in a zeroed tile that the float32
accumulator takes with rounded adds; ``--promote 0`` builds the kernels that accumulate in the MMAs
themselves. The build constant is chosen before any kernel compiles, so each value needs a process
of its own: ``tools/device.sh promote`` runs both.
"""

from __future__ import annotations

import argparse
import math
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--promote", type=int, choices=(0, 1), required=True)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--layers", type=int, default=14, help="the N zoo layers with the longest reductions")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    from convsuite.backends.cupy import _sources

    _sources.SHARED_DEFINES["CS_TX_PROMOTE"] = args.promote  # before any module is compiled
    import cupy as cp
    import numpy as np
    import torch

    import convsuite as cs
    from convsuite._files import atomic_write_json
    from convsuite._timing import Contender, measure_side_by_side
    from convsuite.bench.versus import _operands, _reference, _relative_error, _torch_call, _TorchEvents
    from convsuite.bench.workloads import zoo_cases

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    backend = cs.get_backend("cupy")
    dense = [
        c
        for c in zoo_cases(args.batch, device="gpu")
        if c.layer_class in ("dense", "pointwise", "1d", "1d-dilated", "grouped") and c.op == "conv2d"
    ]

    def reduction(case):
        return cs.explain(np.empty(case.x_shape, np.float32), np.empty(case.w_shape, np.float32), **case.keywords).spec

    picked = sorted(dense, key=lambda c: -reduction(c).reduction_length)
    seen, layers = set(), []
    for case in picked:  # distinct reduction lengths, longest first
        n = reduction(case).reduction_length
        if n not in seen and backend.can_run(reduction(case), "tf32x3", "forward") is True:
            seen.add(n)
            layers.append(case)
        if len(layers) == args.layers:
            break
    rows = []
    for case in layers:
        x, w, bias, _ = _operands(case, "gpu")
        spec = reduction(case)
        xd, wd = cp.asarray(x), cp.asarray(w)
        want = _reference(case, spec, x, w, None, None, "gpu")
        contenders, errors = {}, {}
        for mma in ("sync", "wgmma"):
            params = {"mma": mma}
            if backend.can_run(spec, "tf32x3", "forward", params) is not True:
                continue
            plan = cs.plan(xd, wd, backend="cupy", algorithm="tf32x3", params=params, **case.keywords)
            contenders[f"tf32x3/{mma}"] = Contender(lambda plan=plan, xd=xd, wd=wd: plan(xd, wd), backend.timer)
            errors[f"tf32x3/{mma}"] = _relative_error(plan(xd, wd), want)
        torch_run = _torch_call(case, spec, x, w, None, None, "gpu")
        contenders["cuDNN-FP32"] = Contender(torch_run, _TorchEvents)
        errors["cuDNN-FP32"] = _relative_error(torch_run(), want)
        for simt in ("igemm_big", "fused_gemm"):
            if backend.can_run(spec, simt, "forward") is True:
                plan = cs.plan(xd, wd, backend="cupy", algorithm=simt, **case.keywords)
                contenders[simt] = Contender(lambda plan=plan, xd=xd, wd=wd: plan(xd, wd), backend.timer)
                errors[simt] = _relative_error(contenders[simt].run(), want)
        for contender in contenders.values():
            contender.run()
        times = {k: t.median for k, t in measure_side_by_side(contenders, repeat=20, rounds=4, warmup=2).items()}
        row = dict(name=case.name, reduction=spec.reduction_length, times=times, errors=errors, promote=args.promote)
        rows.append(row)
        cudnn = errors["cuDNN-FP32"]
        cells = [f"{k} {v:.2e} (x{v / cudnn:.1f}, {times.get(k, math.nan) * 1e3:.3f} ms)" for k, v in errors.items()]
        print(f"{case.name:<58} n={spec.reduction_length:5d} " + " ".join(cells), flush=True)
    atomic_write_json(args.out, {"promote": args.promote, "device": torch.cuda.get_device_name(), "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
