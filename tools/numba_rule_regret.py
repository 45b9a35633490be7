"""Regret of the numba backend's forward algorithm rule on random cases, before and after its refit.

``python tools/numba_rule_regret.py SEED N``: N random conv problems (1-D and
2-D, batch 1-64, 1-32 channels, kernels 1-7, stride 1-2, padding 0 or half);
every numba algorithm that can run a case is timed side by side (9 calls in 3
interleaved rounds, medians), and the time of the rule's choice is divided by
the fastest: the rule of 2026-11-24 (``choose_algorithm``) and the one before
it (re-stated here as ``old_rule``). Prints one row per case, then the
geometric mean, 90th percentile and maximum regret of each.
"""

import sys

import numpy as np

import convsuite as cs
from convsuite._timing import measure_side_by_side
from convsuite.backends._depthwise_bands import prefer as prefer_dw
from convsuite.backends._tiles import gemm_check, prefer_gemm
from convsuite.backends.numba_backend import _line_check

rng = np.random.default_rng(int(sys.argv[1]))


def old_rule(s, ndim):
    """The rule before 2026-11-24: line1d, depthwise, gemm past prefer_gemm's bounds, else direct."""
    if ndim == 1 and _line_check(s, "forward") is True:
        return "line1d"
    if prefer_dw(s):
        return "depthwise"
    g, _ = prefer_gemm(s, "forward")
    return "gemm" if g and gemm_check(s, "forward") is True else "direct"


def case():
    nd = 2 if rng.random() < 0.8 else 1
    B = int(rng.choice([1, 2, 8, 32, 64]))
    C = int(rng.choice([1, 1, 2, 3, 4, 6, 8, 16, 32]))
    M = int(rng.choice([1, 2, 4, 6, 8, 16, 32]))
    k = int(rng.choice([1, 3, 5, 7]))
    s = int(rng.choice([1, 1, 2]))
    H = int(rng.choice([8, 14, 28, 32, 56, 86]))
    if nd == 1:
        H = int(rng.choice([64, 256, 1024]))
    p = k // 2 if rng.random() < 0.5 else 0
    return (B, C) + (H,) * nd, (M, C) + (k,) * nd, dict(stride=s, padding=p)


def _timed_algorithms(f, x, w, kw) -> dict:
    """Median seconds of every numba algorithm that runs this case, side by side."""
    contenders = {}
    for name in ("gemm", "direct", "depthwise", "blocked", "line1d"):
        try:
            f(x, w, backend="numba", algorithm=name, **kw)
        except (cs.UnsupportedCaseError, ValueError):
            continue
        contenders[name] = lambda name=name: f(x, w, backend="numba", algorithm=name, **kw)
    timings = measure_side_by_side(contenders, repeat=9, warmup=1, rounds=3)
    return {name: t.median for name, t in timings.items()}


def _summary(regrets: list[float]) -> str:
    geomean = float(np.exp(np.mean(np.log(regrets))))
    return f"geomean {geomean:.3f} p90 {np.percentile(regrets, 90):.2f} max {max(regrets):.2f}"


def main() -> None:
    old_regret, new_regret = [], []
    for _ in range(int(sys.argv[2])):
        xs, ws, kw = case()
        x = rng.random(xs, dtype=np.float32)
        w = rng.random(ws, dtype=np.float32)
        f = cs.conv1d if len(xs) == 3 else cs.conv2d
        try:
            explained = cs.explain(x, w, backend="numba", **kw)
        except (cs.UnsupportedCaseError, ValueError):
            continue  # e.g. a kernel larger than the padded input
        new = explained.algorithm
        old = old_rule(explained.spec.as_2d(), len(xs) - 2)
        medians = _timed_algorithms(f, x, w, kw)
        best = min(medians.values())
        old_regret.append(medians[old] / best)
        new_regret.append(medians[new] / best)
        print(xs, ws, kw, f"old {old} {old_regret[-1]:.2f} new {new} {new_regret[-1]:.2f}", flush=True)
    print(f"n {len(old_regret)}  old: {_summary(old_regret)} | new: {_summary(new_regret)}")


if __name__ == "__main__":
    main()
