"""Forward + bias + ReLU through the public API, fused vs the unfused pair, on the cnn-train-3x3 layers.

    python3 tools/fused_relu_api.py [--repeat 21]

What a user calls: ``cs.conv2d(x, w, b, padding=1, activation="relu")`` (one kernel where the
chosen algorithm fuses it) against ``cs.conv2d(x, w, b, padding=1)`` followed by
``cupy.maximum(y, 0, out=y)``; both with ``algorithm="auto"`` and, per algorithm that fuses,
pinned. CUDA events around each call (host time included, as the user pays it), interleaved
rounds after a warm-up, medians and (min-max) spread. Issue 17's goal: fused >= 1.2x the pair.
"""

from __future__ import annotations

import argparse

import cupy as cp

import convsuite as cs
from convsuite.backends._cupy_algorithms import FUSED_ACTIVATION
from convsuite.bench.backward_ladder import _interleaved
from convsuite.bench.workloads import layer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    args = parser.parse_args()
    rs = cp.random.RandomState(7)
    print("| layer | algorithm | fused ms (spread) | unfused ms (spread) | fused vs unfused | max rel diff |")
    print("|---|---|---|---|---|---|")
    for name in ("c1", "c2"):
        e = layer("cnn-train-3x3", name)
        B = e["batch"]
        x = rs.standard_normal((B, e["C"], e["H"], e["W"]), dtype=cp.float32)
        w = rs.standard_normal((e["M"], e["C"], e["K"], e["K"]), dtype=cp.float32)
        b = rs.standard_normal(e["M"], dtype=cp.float32)
        kw = dict(padding=e["padding"], backend="cupy")
        chosen = cs.explain(x, w, b, **kw)
        auto, spec = chosen.algorithm, chosen.spec
        backend = cs.get_backend("cupy")
        pinned = [a for a in FUSED_ACTIVATION if backend.can_run(spec, a, "forward") is True]
        for algorithm in ["auto", *pinned]:

            def fused(algorithm=algorithm, x=x, w=w, b=b, kw=kw):
                return cs.conv2d(x, w, b, activation="relu", algorithm=algorithm, **kw)

            def unfused(algorithm=algorithm, x=x, w=w, b=b, kw=kw):
                y = cs.conv2d(x, w, b, algorithm=algorithm, **kw)
                return cp.maximum(y, 0, out=y)

            t = _interleaved({"fused": fused, "unfused": unfused}, args.repeat)
            diff = float(cp.abs(fused() - unfused()).max() / (cp.abs(unfused()).max() + 1e-30))
            (fm, flo, fhi), (um, ulo, uhi) = t["fused"], t["unfused"]
            label = f"auto ({auto})" if algorithm == "auto" else algorithm
            print(
                f"| {name} B={B} C={e['C']} M={e['M']} {e['H']}x{e['W']} | {label} | {fm * 1e3:.3f} "
                f"({flo * 1e3:.3f}-{fhi * 1e3:.3f}) | {um * 1e3:.3f} ({ulo * 1e3:.3f}-{uhi * 1e3:.3f}) | "
                f"{um / fm:.2f}x | {diff:.1e} |",
                flush=True,
            )
        x = w = b = None
        cp.get_default_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()
