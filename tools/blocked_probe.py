"""The cupy backend's blocked algorithm on long signals and multi-channel 1-D layers: one tile per
block against the persistent, pipelined grid (its `persistent` tunable), and the public call.

    python3 tools/blocked_probe.py [--rounds N] [--label NAME]
    python3 tools/blocked_probe.py --summarise LOG...   (several runs: medians, persistent 0 over 1)

Per case, held plans of both grids and `cs.conv1d` (auto: the rule's pick), with a device copy
of the N=1e8 signal (the bandwidth ceiling of the issue-11 1-D targets), are timed in one
process, interleaved round by round (gpu_targets' loop: CUDA events around each call from an
idle GPU, so the call's host time counts), after a correctness check of each against the
float64 reference on a prefix. Prints one JSON line per contender: median ms, min-max, the
compulsory bytes over the median as GB/s and as a fraction of the copy (tools/device_run.sh oned).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics

import numpy as np

import convsuite as cs
from convsuite.testing import forward_tolerance, reference_forward

CASES = [  # name, x shape, w shape, keywords, dtype
    ("N=1e8 K=3", (10**8,), (3,), dict(padding="same"), np.float32),
    ("N=1e8 K=5", (10**8,), (5,), dict(padding="same"), np.float32),
    ("N=1e8 K=7", (10**8,), (7,), dict(padding="same"), np.float32),
    ("N=1e8 K=31", (10**8,), (31,), dict(padding="same"), np.float32),
    ("N=1e8 K=8 (run-time width)", (10**8,), (8,), dict(padding="same"), np.float32),
    ("N=1e8 K=5 dilation 3", (10**8,), (5,), dict(padding="same", dilation=3), np.float32),
    ("B=64 C=1->16 W=65536 K=31", (64, 1, 65536), (16, 1, 31), dict(padding="same"), np.float32),
    ("B=8 C=64->64 W=16384 K=9", (8, 64, 16384), (64, 64, 9), dict(padding="same"), np.float32),
    ("B=8 C=64 g=8 W=16384 K=9", (8, 64, 16384), (64, 8, 9), dict(padding="same", groups=8), np.float32),
    ("B=8 C=64 dw W=65536 K=9", (8, 64, 65536), (64, 1, 9), dict(padding="same", groups=64), np.float32),
    ("float64 N=5e7 K=3", (5 * 10**7,), (3,), dict(padding="same"), np.float64),
    ("float64 N=5e7 K=31", (5 * 10**7,), (31,), dict(padding="same"), np.float64),
]


#: The cases and outputs per thread of --sweep-v.
SWEEP = ("N=1e8 K=3", "N=1e8 K=31", "B=64 C=1->16 W=65536 K=31", "float64 N=5e7 K=31")
SWEEP_V = (5, 7, 9, 11, 13, 15)


def _check(x, w, kw, y) -> bool:
    """A prefix of the signal (or of the first image's rows, every channel) against the float64 reference."""
    import cupy as cp

    n = 1 << 16 if x.ndim == 1 else 1 << 12
    xs = cp.asnumpy(x[:1, :, :n] if x.ndim > 1 else x[:n])
    ws = cp.asnumpy(w)
    sub = cs.explain(xs, ws, **kw).spec
    ref = reference_forward(sub, xs, ws).reshape(-1, sub.out_size[0])
    tol = forward_tolerance(sub, xs, ws).reshape(ref.shape)
    got = cp.asnumpy(y[:1] if y.ndim > 1 else y).reshape(ref.shape[0], -1)[:, : ref.shape[1]]
    keep = ref.shape[1] - 2 * w.shape[-1] * kw.get("dilation", 1)  # the prefix's right edge differs
    return bool(np.all(np.abs(got[:, :keep] - ref[:, :keep]) <= tol[:, :keep]))


def summarise(paths: list[str]) -> None:
    """One line per case: each contender's median over runs (runs' medians), persistent 0 over 1."""
    rows = [json.loads(line) for p in paths for line in open(p) if line.startswith("{")]
    by = collections.defaultdict(list)
    for r in rows:
        by[(r["case"], r["contender"])].append(r)
    swept = [r for r in rows if r["contender"].startswith("v=")]
    if swept:
        print("v x persistent: medians over runs, ms (the rule's v is 9)")
        for case in dict.fromkeys(r["case"] for r in swept):
            cells = {}
            for r in swept:
                if r["case"] == case:
                    cells.setdefault(r["contender"], []).append(r["ms"])
            best = min(statistics.median(v) for v in cells.values())
            line = "  ".join(f"{c}: {statistics.median(v):.3f}" for c, v in cells.items())
            print(f"{case}: best {best:.3f} | {line}")
    names = ("persistent 0", "persistent 1", "auto")
    print(f"{'case':28} " + " ".join(f"{n + ' ms':>20}" for n in names) + f" {'0 / 1':>6} {'auto of copy':>12}")
    for case in dict.fromkeys(r["case"] for r in rows if r["contender"] in names):
        med = {n: statistics.median(r["ms"] for r in by[(case, n)]) if by[(case, n)] else float("nan") for n in names}
        runs = {n: "/".join(f"{r['ms']:.3f}" for r in by[(case, n)]) for n in names}
        auto = by[(case, "auto")]
        frac = statistics.median(r["of_copy"] for r in auto) if auto else float("nan")
        ratio = med["persistent 0"] / med["persistent 1"]
        print(f"{case:28} " + " ".join(f"{runs[n]:>20}" for n in names) + f" {ratio:6.3f} {frac:12.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--label", default="")
    ap.add_argument("--summarise", nargs="+", metavar="LOG")
    ap.add_argument("--sweep-v", action="store_true", help=f"v x persistent held plans on {', '.join(SWEEP)}")
    args = ap.parse_args()
    if args.summarise:  # no GPU needed
        return summarise(args.summarise)
    import cupy as cp

    from convsuite.bench.gpu_targets import _interleaved

    rs = cp.random.RandomState(0)
    contenders, nbytes, picks = {}, {}, {}
    for name, xs, wsh, kw, dt in CASES:
        x, w = rs.standard_normal(xs, dtype=dt), rs.standard_normal(wsh, dtype=dt)
        picks[name] = cs.plan(x, w, backend="cupy", **kw)
        if args.sweep_v:
            if name not in SWEEP:
                continue
            grid = [{"v": v, "persistent": p} for v in SWEEP_V for p in (0, 1)]
            record = cs.get_backend("cupy").algorithm_table()["blocked"]
            grid = [g for g in grid if record.can_run(picks[name].spec, "forward", g) is True]
            calls = {
                f"v={g['v']} persistent {g['persistent']}": cs.plan(
                    x, w, backend="cupy", algorithm="blocked", params=g, **kw
                )
                for g in grid
            }
        else:
            calls = {
                f"persistent {p}": cs.plan(x, w, backend="cupy", algorithm="blocked", params={"persistent": p}, **kw)
                for p in (0, 1)
            }
            calls["auto"] = lambda x=x, w=w, kw=kw: cs.conv1d(x, w, backend="cupy", **kw)
        for contender, call in calls.items():
            y = call(x, w) if contender != "auto" else call()
            if not _check(x, w, kw, y):
                raise SystemExit(f"{name} {contender}: wrong result")
            fn = call if contender == "auto" else (lambda call=call, x=x, w=w: call(x, w))
            contenders[(name, contender)] = fn
            nbytes[(name, contender)] = (x.size + y.size) * x.itemsize
    src = rs.standard_normal(10**8, dtype=cp.float32)
    dst = cp.empty_like(src)
    copy = ("copy N=1e8", "copy")
    contenders[copy] = lambda: cp.copyto(dst, src)
    nbytes[copy] = 2 * src.nbytes
    samples = _interleaved(contenders, args.rounds, warmup=2)
    copy_gbs = nbytes[copy] / statistics.median(samples[copy]) / 1e9
    for name, plan in picks.items():
        if not args.sweep_v or name in SWEEP:
            print(f"auto's plan, {name}: {plan!r}")
    for (name, contender), s in samples.items():
        med = statistics.median(s)
        gbs = nbytes[(name, contender)] / med / 1e9
        row = dict(label=args.label, case=name, contender=contender, ms=med * 1e3, lo=min(s) * 1e3, hi=max(s) * 1e3)
        row.update(gbs=gbs, of_copy=gbs / copy_gbs)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
