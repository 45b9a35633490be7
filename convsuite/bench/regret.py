"""Regret of ``backend="auto"`` on problems the rule was not fitted on.

``python -m convsuite.bench.regret --device cpu`` takes a held-out set
(ECE408 layers, MobileNetV2-1.0 layers, strided, depthwise, pointwise, 1-D
and backward problems, none of them in the crossover grid), and for each
problem:

1. asks the default rule which backend/algorithm it would use (no measuring);
2. tunes it (times every candidate: what autotune would pick);
3. times every candidate again, side by side, as the evaluation.

Regret is the evaluation time of a pick over the fastest candidate's time in
that same evaluation run (1.00 = the pick was the fastest). The old default
(highest priority first) is shown for comparison. Targets: rule <= 1.5x,
autotune <= 1.15x, worst case.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

from .. import _registry, _select, _tuning
from .crossover import DEFAULT_SKIP, Problem, _load, _machine, measure_problem, spec_of

__all__ = ["RULE_TARGET", "TUNED_TARGET", "held_out", "main", "regrets"]

#: Worst-case regret targets of the default rule and of autotune (issue 10).
RULE_TARGET = 1.5
TUNED_TARGET = 1.15


def held_out(batch: int = 8) -> list[Problem]:
    """The held-out problems (float32); ``batch`` sizes the ECE408 and backward ones."""
    b = batch
    p = [
        Problem("ece408-fa19 conv1", (b, 1, 48, 48), (12, 1, 5, 5)),
        Problem("ece408-fa19 conv2", (b, 12, 22, 22), (24, 12, 5, 5)),
        Problem("ece408-fa21 conv1", (b, 1, 86, 86), (4, 1, 7, 7)),
        Problem("ece408-fa21 conv2", (b, 4, 40, 40), (16, 4, 7, 7)),
        Problem("mnv2 stem 3x3 s2 C3->32 224", (1, 3, 224, 224), (32, 3, 3, 3), stride=2, padding=1),
        Problem("mnv2 1x1 C96->24 56", (1, 96, 56, 56), (24, 96, 1, 1)),
        Problem("mnv2 1x1 C24->144 56", (1, 24, 56, 56), (144, 24, 1, 1)),
        Problem("mnv2 dw 3x3 s2 C144 56", (1, 144, 56, 56), (144, 1, 3, 3), stride=2, padding=1, groups=144),
        Problem("mnv2 1x1 C32->192 28", (1, 32, 28, 28), (192, 32, 1, 1)),
        Problem("mnv2 dw 3x3 C384 14", (1, 384, 14, 14), (384, 1, 3, 3), padding=1, groups=384),
        Problem("mnv2 1x1 C384->96 14", (1, 384, 14, 14), (96, 384, 1, 1)),
        Problem("mnv2 1x1 C576->160 7", (1, 576, 7, 7), (160, 576, 1, 1)),
        Problem("mnv2 dw 3x3 C960 7", (1, 960, 7, 7), (960, 1, 3, 3), padding=1, groups=960),
        Problem("mnv2 classifier 1x1 C1280->1000 1", (1, 1280, 1, 1), (1000, 1280, 1, 1)),
        Problem("strided 5x5 s2 C32->64 33", (4, 32, 33, 33), (64, 32, 5, 5), stride=2, padding=2),
        Problem("strided 3x3 s3 C16->16 40", (2, 16, 40, 40), (16, 16, 3, 3), stride=3),
        Problem("1-D C1 N2e5 k5 same", (200_000,), (5,), padding="same"),
        Problem("1-D C4->4 N2e4 k9", (1, 4, 20_000), (4, 4, 9), padding=4),
        Problem("bwd 3x3 C32->32 28", (4, 32, 28, 28), (32, 32, 3, 3), padding=1, direction="backward"),
        Problem(
            "bwd dw 3x3 s2 C64 28",
            (4, 64, 28, 28),
            (64, 1, 3, 3),
            stride=2,
            padding=1,
            groups=64,
            direction="backward",
        ),
        Problem("bwd 1x1 C64->128 14", (4, 64, 14, 14), (128, 64, 1, 1), direction="backward"),
        Problem("bwd ece408-fa19 conv2", (4, 12, 22, 22), (24, 12, 5, 5), direction="backward"),
    ]
    return p


def _rule_pick(problem: Problem, device: str) -> tuple[str, str, str]:
    """What auto picks by the rule, without measuring: the label, how it decided, and why."""
    spec = spec_of(problem)
    # The data's home decides the device auto chooses on: None (NumPy) is the CPU; on the GPU, the
    # device backend that would own the user's arrays (as cs.conv2d on CuPy arrays).
    home = None if device == "cpu" else _device_backend(device)
    with _tuning.use_autotune(False):
        backend, algorithm, decision = _select.choose(spec, problem.direction, "auto", "regret", "auto", home)
    return f"{backend.name}/{algorithm}", decision.decided_by, decision.reason


def _device_backend(device: str):
    """The highest-priority available backend of ``device`` (the owner of arrays there)."""
    for info in _registry.list_backends():
        if info.device == device and info.available:
            return _registry.get_backend(info.name)
    raise ValueError(f"no available backend on device {device!r}")


def _priority_pick(problem: Problem, device: str) -> str:
    """What the highest-priority backend that can run it would use (the pre-rule default)."""
    spec = spec_of(problem)
    pairs, _ = _registry.candidates(spec, "auto", problem.direction, device)
    first = pairs[0][0]
    return f"{first.name}/{first.choose_algorithm(spec, problem.direction)[0]}"


def regrets(problems: Sequence[Problem], device: str, skip: Sequence[str], progress: bool = True) -> list[dict]:
    """Rule, autotune and priority regret of each problem, from two side-by-side measurements."""
    rows = []
    for i, problem in enumerate(problems, 1):
        rule, decided_by, reason = _rule_pick(problem, device)
        priority = _priority_pick(problem, device)
        tuned_times = measure_problem(problem, device, skip)
        tuned = next(iter(tuned_times))  # the tuner's own pick (its ranking, ties included), not just the min
        times = measure_problem(problem, device, skip)
        best = min(times.values())
        row = {
            "name": problem.name,
            "direction": problem.direction,
            "best": min(times, key=times.get),
            "best_s": best,
            "rule": rule,
            "rule_regret": times.get(rule, float("nan")) / best,
            "decided_by": decided_by,
            "rule_reason": reason,
            "tuned": tuned,
            "tuned_regret": times[tuned] / best,
            "priority": priority,
            "priority_regret": times.get(priority, float("nan")) / best,
        }
        rows.append(row)
        if progress:
            print(
                f"[{i}/{len(problems)}] {problem.name}: rule {rule} x{row['rule_regret']:.2f}, "
                f"tuned x{row['tuned_regret']:.2f}, priority x{row['priority_regret']:.2f}",
                file=sys.stderr,
            )
    return rows


def _markdown(device: str, rows: list[dict], machine: str, date: str) -> str:
    lines = [
        f"# Regret of auto on held-out problems ({device})",
        "",
        f"Measured {date} on {machine}, float32, by `python -m convsuite.bench.regret --device {device}`. "
        "Regret = time of the pick / time of the fastest candidate, both from the same side-by-side "
        "evaluation run (the tuned pick comes from a separate, earlier measurement). The machine is shared "
        "and noisy; re-run at a quiet moment for final figures.",
        "",
        "| problem | dir | fastest (us) | rule pick | rule | autotune pick | autotune | old priority pick | priority |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['direction'][:3]} | {r['best']} ({r['best_s'] * 1e6:.0f}) | {r['rule']} | "
            f"{r['rule_regret']:.2f} | {r['tuned']} | {r['tuned_regret']:.2f} | {r['priority']} | "
            f"{r['priority_regret']:.2f} |"
        )
    for key, label in (("rule_regret", "rule"), ("tuned_regret", "autotune"), ("priority_regret", "old priority")):
        values = [r[key] for r in rows]
        lines.append("")
        lines.append(
            f"- {label}: worst x{max(values):.2f}, median x{statistics.median(values):.2f}, "
            f"mean x{statistics.fmean(values):.2f}"
        )
    misses = [r for r in rows if r["rule_regret"] > RULE_TARGET or r["tuned_regret"] > TUNED_TARGET]
    if misses:
        lines += [
            "",
            f"Over target (rule > {RULE_TARGET}x or autotune > {TUNED_TARGET}x), with the rule's reason "
            "(the measured problems that voted):",
            "",
        ]
        lines += [
            f"- {r['name']} ({r['direction']}): rule x{r['rule_regret']:.2f}, autotune x{r['tuned_regret']:.2f}; "
            f"{r.get('rule_reason', '')}"
            for r in misses
        ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Print (and write to docs/measurements/) the regret table of one device."""
    from ._arguments import backend_names, folder_or_nowhere, positive

    parser = argparse.ArgumentParser(
        prog="python -m convsuite.bench.regret", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument(
        "--skip",
        type=backend_names(allow_empty=True),
        default=list(DEFAULT_SKIP),
        help="backends to leave out (comma-separated)",
    )
    parser.add_argument("--batch", type=positive, default=8, help="batch of the ECE408 problems")
    parser.add_argument(
        "--docs", type=folder_or_nowhere, default="docs/measurements", help="where the table goes ('' for nowhere)"
    )
    args = parser.parse_args(argv)
    skip = tuple(args.skip)
    load_before = _load()
    rows = regrets(held_out(args.batch), args.device, skip)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = _markdown(args.device, rows, _machine(args.device, load_before), date)
    print(text)
    if args.docs:
        Path(args.docs).mkdir(parents=True, exist_ok=True)
        (Path(args.docs) / f"regret-{args.device}.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
