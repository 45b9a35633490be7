"""Tuned parameters against the hand-chosen defaults on layers the tuner has not seen.

``python -m convsuite.bench.tuned_vs_default --device cpu|gpu [--budget-s S] [--out FILE]``

For every held-out layer below and every algorithm of the device's backends
that declares tunable parameters and can run it, the tuner's parameter
search (:func:`convsuite._param_search.search_parameters`, the code
``cs.tune`` runs) picks parameters within ``--budget-s`` seconds; then the
defaults and the tuned parameters are timed again, side by side, in a fresh
measurement (warm-up, interleaved rounds, medians, spread), so the ratio is
not the search's own figure. Ratio = default time / tuned time: above 1 the
tuned parameters are faster. The summary counts the layers where tuning gained
10% or more and those where it lost more than the noise: the ratio below
``1 - max(3%, the larger of the two interquartile spreads)``.

The layers are none of the seed workloads' (ECE408, MobileNetV2's, the
cnn-train 3x3 layers): other channel counts, sizes, strides and groups.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from datetime import datetime, timezone
from pathlib import Path

from .crossover import Problem, spec_of

__all__ = ["HELD_OUT", "main", "run"]

#: Held-out layers (batch scaled up on the GPU, see ``run``).
HELD_OUT = (
    Problem("rgb 3->16 3x3 64x64", (4, 3, 64, 64), (16, 3, 3, 3), padding=1),
    Problem("16->8 5x5 40x40", (4, 16, 40, 40), (8, 16, 5, 5), padding=2),
    Problem("1->6 7x7 60x60", (8, 1, 60, 60), (6, 1, 7, 7)),
    Problem("8->12 3x3 45x45 s2", (4, 8, 45, 45), (12, 8, 3, 3), stride=2, padding=1),
    Problem("dw 32 3x3 s2 28x28", (4, 32, 28, 28), (32, 1, 3, 3), stride=2, padding=1, groups=32),
    Problem("pw 64->24 1x1 28x28", (4, 64, 28, 28), (24, 64, 1, 1)),
    Problem("1-D 1->1 K=15 N=2e5", (2, 1, 200_000), (1, 1, 15), padding=7),
)

GAIN = 1.10  # "at least 10% faster"
NOISE = 0.03  # the smallest margin of noise: side-by-side medians of equal code differ by this much


def _lost(row: dict) -> bool:
    """Whether the tuned parameters were slower than the defaults beyond the measured noise."""
    spread = max(row.get("spread", (0.0, 0.0)))
    return row["ratio"] < 1.0 - max(NOISE, spread)


def run(device: str = "cpu", budget_s: float = 3.0, repeat: int = 12, backends=None, problems=HELD_OUT) -> dict:
    """Search, re-time default vs tuned, return the rows and the summary."""
    from .. import list_backends
    from .._param_search import frozen_params, search_parameters
    from .._registry import get_backend
    from .._timing import Contender, measure_side_by_side
    from .._tuning import _operands
    from .machine import cpu_description, gpu_description

    batch_scale = 16 if device == "gpu" else 1
    names = [b.name for b in list_backends() if b.available and b.device == device]
    if backends:
        names = [n for n in names if n in backends]
    rows = []
    for problem in problems:
        x_shape = (problem.x_shape[0] * batch_scale, *problem.x_shape[1:])
        spec = spec_of(dataclasses.replace(problem, x_shape=x_shape))
        for name in names:
            backend = get_backend(name)
            table = backend.algorithm_table() or {}
            for algorithm, record in table.items():
                if not record.tunables or backend.can_run(spec, algorithm, "forward") is not True:
                    continue
                operands = _operands(spec, "forward", backend)
                found = search_parameters(spec, "forward", backend, algorithm, operands, budget_s=budget_s)
                default, tuned = found.default, found.params
                row = dict(
                    case=problem.name,
                    backend=name,
                    algorithm=algorithm,
                    default=default,
                    tuned=tuned,
                    strategy=found.strategy,
                    search_s=found.elapsed_s,
                    valid=found.valid,
                )
                if frozen_params(default) == frozen_params(tuned):
                    row.update(ratio=1.0, note="the search kept the defaults")
                    rows.append(row)
                    print(f"{problem.name:28s} {name}/{algorithm}: defaults kept ({found.strategy})", flush=True)
                    continue
                launches = {
                    "default": backend.plan(spec, algorithm, "forward", default),
                    "tuned": backend.plan(spec, algorithm, "forward", tuned),
                }

                def contender(launch, backend=backend, operands=operands):
                    def call():
                        launch(*operands)
                        backend.synchronize()

                    return Contender(call, backend.timer)

                t = measure_side_by_side(
                    {k: contender(v) for k, v in launches.items()}, repeat=repeat, rounds=4, warmup=1, settle_s=0.02
                )
                ratio = t["default"].median / t["tuned"].median
                row.update(
                    ratio=ratio,
                    default_s=t["default"].median,
                    tuned_s=t["tuned"].median,
                    spread=(t["default"].iqr_rel, t["tuned"].iqr_rel),
                    note="",
                )
                rows.append(row)
                print(
                    f"{problem.name:28s} {name}/{algorithm}: default {t['default'].median * 1e3:.3f} ms, tuned "
                    f"{t['tuned'].median * 1e3:.3f} ms {tuned} -> x{ratio:.2f} ({found.strategy})",
                    flush=True,
                )
    gained = sum(r["ratio"] >= GAIN for r in rows)
    lost = sum(_lost(r) for r in rows)
    return dict(
        device=gpu_description() if device == "gpu" else cpu_description(),
        date=datetime.now(timezone.utc).isoformat(timespec="minutes"),
        budget_s=budget_s,
        rows=rows,
        summary=dict(pairs=len(rows), gained_10pct=gained, lost_beyond_noise=lost),
    )


def _markdown(result: dict) -> str:
    """The report as a markdown table."""
    lines = [
        f"# Tuned vs default parameters on held-out layers ({result['date']})",
        "",
        f"Device: {result['device']}. Search budget {result['budget_s']} s per (layer, algorithm). "
        "Ratio = default / tuned time, both re-timed side by side after the search (medians of interleaved "
        "rounds; spread = interquartile range / median).",
        "",
        "| layer | backend/algorithm | default | tuned | default ms | tuned ms | ratio | spread (def, tuned) "
        "| search |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        d = ", ".join(f"{k}={v}" for k, v in r["default"].items())
        t = ", ".join(f"{k}={v}" for k, v in r["tuned"].items())
        if "default_s" in r:
            times = f"{r['default_s'] * 1e3:.3f} | {r['tuned_s'] * 1e3:.3f} | x{r['ratio']:.2f}"
            spread = f"{r['spread'][0]:.0%}, {r['spread'][1]:.0%}"
        else:
            times, spread = "- | - | x1.00", r["note"]
        lines.append(
            f"| {r['case']} | {r['backend']}/{r['algorithm']} | {d} | {t} | {times} | {spread} | {r['strategy']} |"
        )
    s = result["summary"]
    lines += [
        "",
        f"Of {s['pairs']} (layer, algorithm) pairs: tuned >= 1.10x the defaults on {s['gained_10pct']}, "
        f"slower than the defaults beyond noise (ratio < 1 - max(3%, spread)) on {s['lost_beyond_noise']}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    """Command line: run, print the summary, write JSON and markdown with ``--out``."""
    parser = argparse.ArgumentParser(
        prog="python -m convsuite.bench.tuned_vs_default", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--budget-s", type=float, default=3.0)
    parser.add_argument("--repeat", type=int, default=12)
    parser.add_argument("--backends", default=None, help="comma-separated backend names (default: all on the device)")
    parser.add_argument("--out", default=None, help="write FILE.json and FILE.md")
    args = parser.parse_args(argv)
    if not args.budget_s >= 0 or args.repeat < 1:
        parser.error(f"--budget-s must be >= 0 seconds and --repeat >= 1; got {args.budget_s}, {args.repeat}")
    if not 0 < args.budget_s < float("inf"):
        parser.error(f"--budget-s must be > 0 seconds (a finite tuning budget); got {args.budget_s}")
    backends = args.backends.split(",") if args.backends else None
    if backends:
        from .. import list_backends

        known = {b.name for b in list_backends()}
        unknown = [b for b in backends if b not in known]
        if unknown:
            parser.error(f"--backends: unknown {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    result = run(args.device, args.budget_s, args.repeat, backends)
    text = _markdown(result)
    print(text.splitlines()[-1])
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str))
        out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
