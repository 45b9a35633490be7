"""The crossover map: which backend and algorithm wins where, and the rule fitted from it.

``python -m convsuite.bench.crossover --device cpu`` (or ``gpu`` on a
machine with one) times every backend and algorithm that can run each
problem of a grid (batch, channels, size, kernel, stride, groups; 2-D and
1-D; forward and backward) side by side with the measuring core, then writes

- ``convsuite/data/rule-<device>.json``: the times, which *are* the default
  rule (:mod:`convsuite._rule` ranks candidates by their relative time on the
  nearest measured problems);
- ``docs/measurements/crossover-<device>.md``: the table, with machine and date;
- ``docs/measurements/crossover-<device>.png``: the map (winner per problem,
  by work and reduction length), when matplotlib is installed.

Re-run it whenever a backend gains an algorithm: the rule follows the data.
``--refit`` measures nothing: it recomputes the features of the stored cases
(after a change of :func:`convsuite._rule.features`) and refits the number of
voting neighbours, keeping the times; it needs the grid the table was measured on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .. import _registry, _rule, _tuning
from .._spec import ConvSpec
from .._timing import _is_number
from .._validation import int_at_least, prepare_forward

__all__ = ["Problem", "fit_grid", "measure_problem", "main", "spec_of"]

#: Backends left out of the map besides those that declare ``contender = False``.
DEFAULT_SKIP: tuple[str, ...] = ()
#: Largest forward work (multiply-adds) of a grid problem: keeps one sweep to minutes on 2 cores.
MAX_MACS = 150_000_000

_DIRECTIONS = ("forward", "backward")
_DEVICES = ("cpu", "gpu")
#: The :func:`fit_grid` parameters of each family's forward and backward quota (for error messages).
_NAMES = {
    "dense": {"forward": "forward", "backward": "backward"},
    "depthwise": {"forward": "depthwise_forward", "backward": "depthwise_backward"},
    "first": {"forward": "first_forward", "backward": "first_backward"},
}


@dataclass(frozen=True)
class Problem:
    """One convolution problem of a grid or a held-out set."""

    name: str
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    stride: int = 1
    padding: object = 0
    groups: int = 1
    direction: str = "forward"
    dtype: str = "float32"
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        # Checked here: an unknown direction has no candidates, so measuring it returned {} without a word.
        if self.direction not in _DIRECTIONS:
            raise ValueError(f"`direction` must be 'forward' or 'backward'; got {self.direction!r}")

    @property
    def ndim(self) -> int:
        """Spatial dimensions (1 or 2); a plain kernel ``(K,)``/``(KH, KW)`` has no channel axes."""
        rank = len(self.w_shape)
        return rank - 2 if rank > 2 else rank


def spec_of(problem: Problem) -> ConvSpec:
    """The validated spec of a problem, without allocating its operands.

    Raises
    ------
    ValueError
        A weight shape of another rank than 1 to 4, or a geometry the
        convolution refuses.
    """
    if len(problem.w_shape) not in (1, 2, 3, 4):
        raise ValueError(
            "`w_shape` must be (K,), (KH, KW), (M, C/groups, K) or (M, C/groups, KH, KW); "
            f"got {tuple(problem.w_shape)!r} in problem {problem.name!r}"
        )
    dtype = np.dtype(problem.dtype)

    def stand_in(shape):
        return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, (0,) * len(shape))

    op = f"conv{problem.ndim}d"
    return prepare_forward(
        op,
        problem.ndim,
        stand_in(problem.x_shape),
        stand_in(problem.w_shape),
        None,
        problem.stride,
        problem.padding,
        1,
        problem.groups,
        convert=False,
    ).spec


def _problem_2d(
    batch: int, channels: int, out_channels: int, size: int, kernel: int, stride: int, depthwise: bool, direction: str
) -> Problem | None:
    """One 2-D grid problem (padding ``kernel // 2``), or None where it is invalid or over :data:`MAX_MACS`."""
    if depthwise:
        if channels == 1:
            return None
        out_channels, groups = channels, channels
    else:
        groups = 1
    if kernel > size:
        return None
    problem = Problem(
        name=f"B{batch} C{channels} M{out_channels} {size}x{size} k{kernel} s{stride}" + (" dw" if depthwise else ""),
        x_shape=(batch, channels, size, size),
        w_shape=(out_channels, channels // groups, kernel, kernel),
        stride=stride,
        padding=kernel // 2,
        groups=groups,
        direction=direction,
    )
    return problem if spec_of(problem).macs <= MAX_MACS else None


def _sample(
    rng: random.Random, axes: list[tuple], quota: dict[str, int], depthwise: bool, seen: set, names: dict[str, str]
) -> list[Problem]:
    """Draw problems from the shuffled ``axes`` until each direction's quota is filled.

    ``names`` gives each direction's parameter of :func:`fit_grid`: a quota
    the axes cannot fill is a ValueError naming it (a grid silently smaller
    than asked for would be fitted as if it were whole).
    """
    asked = dict(quota)
    rng.shuffle(axes)
    problems = []
    for batch, channels, out_channels, size, kernel, stride in axes:
        direction = "forward" if quota["forward"] else "backward"
        if not quota[direction]:
            break
        problem = _problem_2d(batch, channels, out_channels, size, kernel, stride, depthwise, direction)
        if problem is None or (key := (problem.x_shape, problem.w_shape, stride, direction)) in seen:
            continue
        seen.add(key)
        quota[direction] -= 1
        problems.append(problem)
    short = [direction for direction in quota if quota[direction]]
    if short:
        wanted = " + ".join(f"{names[d]}={asked[d]}" for d in asked)
        raise ValueError(
            f"`{names[short[0]]}` asks for more problems than its axes hold: {wanted} asked, "
            f"{len(problems)} distinct valid problems found; ask for fewer"
        )
    return problems


def fit_grid(
    seed: int = 0,
    forward: int = 52,
    backward: int = 36,
    depthwise_forward: int = 22,
    depthwise_backward: int = 6,
    first_forward: int = 12,
    first_backward: int = 4,
) -> list[Problem]:
    """The fitting grid: fixed random samples of the axes below, a deep-end block, and 1-D problems.

    How it covers the class the rule is judged on (the held-out set of
    :mod:`convsuite.bench.regret`: ECE408, MobileNetV2, strided, depthwise,
    pointwise and backward layers), without containing any of its problems:

    - dense problems (``forward`` + ``backward``) sample batch 1/4/16,
      channels 1..1024, output channels 8..1024, sizes 1..56 (1 and 7 are the
      pixel counts at the end of a classification network), kernels 1/3/5 and
      strides 1/2;
    - depthwise problems are sampled on their own (``depthwise_forward`` +
      ``depthwise_backward``), so they are not a thin share of the dense
      product: channels 8..1024, sizes 4..112, kernels 3/5, strides 1/2;
    - first layers are sampled on their own too (``first_forward`` +
      ``first_backward``): 1..16 input channels, 4..32 output channels, 32..96
      pixels a side, kernels 3/5/7 (ECE408's layers and a network's stem);
    - a fixed block of 1x1 problems at batch 1 with 256..1024 channels on 1x1
      and 7x7 pixels (a classifier and the last stages), where BLAS call
      overhead, not arithmetic, decides the winner;
    - 1-D problems of 1 and 8 channels, 10^3 and 10^5 samples.

    The channel counts of the grid (powers of two and 96) differ from the
    held-out ones (12, 24, 144, 160, 192, 384, 576, 960, 1280, ...), and
    ``tests/test_selection_tools.py`` checks that no grid problem equals a
    held-out one.

    Raises
    ------
    TypeError, ValueError
        A count that is not an int >= 0, or more problems than a family's
        axes hold (its forward and backward problems are distinct).
    """
    counts = dict(
        forward=forward,
        backward=backward,
        depthwise_forward=depthwise_forward,
        depthwise_backward=depthwise_backward,
        first_forward=first_forward,
        first_backward=first_backward,
    )
    for name, value in counts.items():  # a negative quota is never used up: the sampler took every problem
        int_at_least(value, name, 0)
    rng = random.Random(seed)
    seen: set = set()
    dense = [
        (batch, channels, out_channels, size, kernel, stride)
        for batch in (1, 4, 16)
        for channels in (1, 8, 32, 96, 256, 1024)
        for out_channels in (8, 32, 96, 256, 1024)
        for size in (1, 4, 7, 12, 28, 56)
        for kernel in (1, 3, 5)
        for stride in (1, 2)
    ]
    problems = _sample(rng, dense, {"forward": forward, "backward": backward}, False, seen, _NAMES["dense"])
    depthwise = [
        (batch, channels, channels, size, kernel, stride)
        for batch in (1, 4, 16)
        for channels in (8, 32, 96, 256, 512, 1024)
        for size in (4, 7, 14, 28, 56, 112)
        for kernel in (3, 5)
        for stride in (1, 2)
    ]
    quota = {"forward": depthwise_forward, "backward": depthwise_backward}
    problems += _sample(rng, depthwise, quota, True, seen, _NAMES["depthwise"])
    first = [
        (batch, channels, out_channels, size, kernel, stride)
        for batch in (1, 4, 16)
        for channels in (1, 4, 16)
        for out_channels in (4, 8, 32)
        for size in (32, 64, 96)
        for kernel in (3, 5, 7)
        for stride in (1, 2)
    ]
    quota = {"forward": first_forward, "backward": first_backward}
    problems += _sample(rng, first, quota, False, seen, _NAMES["first"])
    for size in (1, 7):
        for channels in (256, 512, 1024):
            for out_channels in (256, 512, 1024):
                problem = _problem_2d(1, channels, out_channels, size, 1, 1, False, "forward")
                key = (problem.x_shape, problem.w_shape, 1, "forward")
                if key not in seen:
                    seen.add(key)
                    problems.append(problem)
    for length in (1_000, 100_000):
        for kernel in (3, 7, 31):
            for channels in (1, 8):
                problem = Problem(
                    name=f"1-D B1 C{channels} M{channels} N{length} k{kernel}",
                    x_shape=(1, channels, length),
                    w_shape=(channels, channels, kernel),
                    padding="same",
                )
                if spec_of(problem).macs <= MAX_MACS:
                    problems.append(problem)
    return problems


def measure_problem(problem: Problem, device: str, skip: Sequence[str] = DEFAULT_SKIP) -> dict[str, float]:
    """Median seconds of every candidate (``"backend/algorithm"``) on the problem, on ``device``.

    In the order measured selection ranks them: the first is what autotune
    would pick (the fastest, or a single-core candidate within 5% of it). The
    crossover map and the fitted rule use the times, so their winner is the
    fastest.
    """
    if device not in _DEVICES:  # another device has no backends: every problem would measure as {}
        raise ValueError(f"`device` must be 'cpu' or 'gpu'; got {device!r}")
    spec = spec_of(problem)
    pairs, _ = _registry.candidates(spec, "auto", problem.direction, device)
    pairs = [(b, a) for b, a in _tuning.contenders(pairs) if b.name not in skip]
    rows = _tuning.measure_candidates(
        spec, problem.direction, pairs, repeat=10, rounds=5, min_block_s=0.03, settle_s=0.1
    )
    return {f"{b}/{a}": median for b, a, median, _, status in rows if median is not None}


def _machine(device: str, load_before: str = "") -> str:
    """The machine, threads, and the 1/5/15-minute load average before and after a run."""
    load = f"; load average {load_before} before, {_load()} after" if load_before else ""
    return f"{_tuning.device_name(device)}; {platform.platform()}; threads {_tuning.get_num_threads()}{load}"


def _load() -> str:
    """The load average as ``"1m/5m/15m"`` ("?" where the system has none)."""
    try:
        return "/".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"


def _markdown(device: str, rows: list[dict], machine: str, date: str, seconds: float | None) -> str:
    labels = sorted({label for row in rows for label in row["times"]})
    head = "| problem | direction | " + " | ".join(labels) + " | winner |"
    lines = [
        f"# Crossover map ({device})",
        "",
        f"Measured {date} on {machine}, float32, " + (f"in {seconds:.0f} s " if seconds else "") + "by "
        f"`python -m convsuite.bench.crossover --device {device}`. Each cell is the candidate's median time "
        "over the fastest one's on that problem (1.00 = the winner), all candidates of a problem timed side "
        "by side (warm-up, interleaved blocks, medians; far slower ones abandoned after two rounds). "
        "The same times are the default rule's data (`convsuite/data/rule-"
        f"{device}.json`). The machine is shared, so single figures are noisy; ratios are what to read.",
        "",
        head,
        "|" + "---|" * (len(labels) + 3),
    ]
    for row in rows:
        times = row["times"]
        best = min(times.values())
        winner = min(times, key=times.get)
        cells = [f"{times[label] / best:.2f}" if label in times else "-" for label in labels]
        lines.append(
            f"| {row['name']} | {row['direction']} | " + " | ".join(cells) + f" | {winner} ({best * 1e6:.0f} us) |"
        )
    wins: dict[str, int] = {}
    for row in rows:
        winner = min(row["times"], key=row["times"].get)
        wins[winner] = wins.get(winner, 0) + 1
    lines += ["", "Wins: " + ", ".join(f"{label} {n}" for label, n in sorted(wins.items(), key=lambda kv: -kv[1]))]
    return "\n".join(lines) + "\n"


def _loo_text(table: dict) -> str:
    """The rule's leave-one-out regret on the fitting data, as a paragraph."""
    if not table["leave_one_out"]:
        return ""
    parts = [
        f"{k} neighbour{'s' if k != '1' else ''}: mean x{v['mean']:.2f}, geometric mean x{v.get('geomean', 0):.2f}, "
        f"worst x{v['worst']:.2f}, "
        f"{v['over_1.5']} over 1.5x"
        for k, v in table["leave_one_out"].items()
    ]
    return (
        "\nLeave-one-out regret of the rule on these problems (each predicted from all the others): "
        + "; ".join(parts)
        + f". The rule uses {table['neighbours']} (fewest over 1.5x, then lowest geometric mean).\n"
    )


def _plot(device: str, rows: list[dict], path: Path) -> bool:
    """Winner per problem over (log work, log reduction length); False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    labels = sorted({min(r["times"], key=r["times"].get) for r in rows})
    colours = {label: plt.cm.tab10(i % 10) for i, label in enumerate(labels)}
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for row in rows:
        winner = min(row["times"], key=row["times"].get)
        marker = "o" if row["direction"] == "forward" else "^"
        ax.scatter(math.log10(row["macs"]), math.log10(row["reduction"]), color=colours[winner], marker=marker, s=40)
    for label in labels:
        ax.scatter([], [], color=colours[label], label=label)
    ax.scatter([], [], color="grey", marker="o", label="forward")
    ax.scatter([], [], color="grey", marker="^", label="backward")
    ax.set_xlabel("log10 multiply-adds per call")
    ax.set_ylabel("log10 reduction length (C/groups x kernel taps)")
    ax.set_title(f"Fastest backend/algorithm per problem ({device})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def run(
    device: str, problems: Iterable[Problem], skip: Sequence[str], progress: bool = True
) -> tuple[list[dict], float]:
    """Measure every problem; rows of the table (name, direction, features, times)."""
    rows, start = [], time.perf_counter()
    problems = list(problems)
    for i, problem in enumerate(problems, 1):
        spec = spec_of(problem)
        times = measure_problem(problem, device, skip)
        if not times:
            continue
        rows.append(
            {
                "name": problem.name,
                "direction": problem.direction,
                "features": list(_rule.features(spec)),
                "macs": spec.macs,
                "reduction": spec.reduction_length,
                "times": times,
            }
        )
        if progress:
            winner = min(times, key=times.get)
            print(f"[{i}/{len(problems)}] {problem.name} {problem.direction}: {winner}", file=sys.stderr)
    return rows, time.perf_counter() - start


#: Neighbour counts the fit chooses from.
NEIGHBOUR_CHOICES = (1, 2, 3, 5, 7)


def _geomean(values: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _check_rows(rows: Sequence[dict]) -> None:
    """Every row's times: a non-empty mapping of labels to finite numbers of seconds > 0."""
    for row in rows:
        times = row.get("times") if isinstance(row, dict) else None
        where = f"row {row.get('name', '?')!r}" if isinstance(row, dict) else f"row {row!r}"
        if not isinstance(times, dict) or not times:
            raise ValueError(f"`rows`: {where} must have `times`, a non-empty dict of label -> seconds; got {times!r}")
        for label, seconds in times.items():
            if not (_is_number(seconds) and math.isfinite(seconds) and seconds > 0):
                raise ValueError(
                    f"`rows`: {where} has time {seconds!r} for {label!r}; times must be finite numbers of seconds > 0"
                )


def fit_table(device: str, rows: list[dict], machine: str, date: str, seconds: float | None) -> dict:
    """The rule's table from measured rows: the times, and the neighbour count fitted on them.

    The number of voting neighbours is the one with the fewest leave-one-out
    regrets over 1.5x, then the lowest geometric mean: an arithmetic mean or
    a worst case is decided by a single noisy cell (one timing spike of a
    loser makes a x40 "regret").

    Raises
    ------
    ValueError
        A row without times, or a time that is not a finite number > 0: the
        rule divides by the fastest time, and a NaN would spread to every
        statistic.
    """
    _check_rows(rows)
    loo = {k: regrets for k in NEIGHBOUR_CHOICES if (regrets := _rule.leave_one_out(rows, k))}
    neighbours = min(loo, key=lambda k: (sum(r > 1.5 for r in loo[k]), _geomean(loo[k]))) if loo else _rule.NEIGHBOURS
    return {
        "device": device,
        "neighbours": neighbours,
        "leave_one_out": {
            str(k): {
                "mean": statistics.fmean(v),
                "geomean": _geomean(v),
                "worst": max(v),
                "over_1.5": sum(r > 1.5 for r in v),
            }
            for k, v in loo.items()
        },
        "machine": machine,
        "date": date,
        "seconds": seconds,
        "command": f"python -m convsuite.bench.crossover --device {device}",
        "features": list(_rule.FEATURE_NAMES),
        "cases": rows,
    }


def refit(table: dict, grid: Sequence[Problem]) -> dict:
    """``table`` with every case's features recomputed from its grid problem and the neighbours refitted.

    For a change of :func:`convsuite._rule.features` that needs no new
    measurement; a case whose problem is no longer in ``grid`` is an error.
    """
    problems = {(p.name, p.direction): p for p in grid}
    rows = []
    for case in table["cases"]:
        problem = problems.get((case["name"], case["direction"]))
        if problem is None:
            raise ValueError(f"case {case['name']!r} ({case['direction']}) is not in the fitting grid; re-measure")
        rows.append(dict(case, features=list(_rule.features(spec_of(problem)))))
    refitted = fit_table(table["device"], rows, table["machine"], table["date"], table.get("seconds"))
    refitted["refitted"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return refitted


def _write(table: dict, data_path: Path, docs: Path) -> bool:
    """Write the table, the markdown map and the plot; whether the plot was drawn."""
    data_path.parent.mkdir(parents=True, exist_ok=True)
    data_path.write_text(json.dumps(table, indent=1) + "\n")
    docs.mkdir(parents=True, exist_ok=True)
    device, rows = table["device"], table["cases"]
    text = _markdown(device, rows, table["machine"], table["date"], table.get("seconds")) + _loo_text(table)
    (docs / f"crossover-{device}.md").write_text(text)
    print(text)
    return _plot(device, rows, docs / f"crossover-{device}.png")


def main(argv: Sequence[str] | None = None) -> int:
    """Regenerate the crossover map and the rule's data for one device."""
    from ._arguments import backend_names, folder, out_file

    parser = argparse.ArgumentParser(
        prog="python -m convsuite.bench.crossover", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument(
        "--skip",
        type=backend_names(allow_empty=True),
        default=list(DEFAULT_SKIP),
        help="backends to leave out (comma-separated)",
    )
    parser.add_argument("--forward", type=int, default=52, help="dense forward 2-D problems in the grid")
    parser.add_argument("--backward", type=int, default=36, help="dense backward 2-D problems in the grid")
    parser.add_argument("--depthwise-forward", type=int, default=22, help="depthwise forward problems in the grid")
    parser.add_argument("--depthwise-backward", type=int, default=6, help="depthwise backward problems in the grid")
    parser.add_argument("--first-forward", type=int, default=12, help="first-layer forward problems in the grid")
    parser.add_argument("--first-backward", type=int, default=4, help="first-layer backward problems in the grid")
    parser.add_argument("--docs", type=folder, default="docs/measurements", help="where the table and the plot go")
    parser.add_argument(
        "--data", type=out_file, default=None, help="where the rule's JSON goes (default: inside the package)"
    )
    parser.add_argument(
        "--refit",
        action="store_true",
        help="measure nothing: recompute the features and the neighbour count from the times already in the table",
    )
    args = parser.parse_args(argv)
    counts = ("forward", "backward", "depthwise_forward", "depthwise_backward", "first_forward", "first_backward")
    for name in counts:
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be a count >= 0; got {getattr(args, name)}")
    if not any(getattr(args, name) for name in counts):
        options = ", ".join(f"--{name.replace('_', '-')}" for name in counts)
        parser.error(f"at least one of {options} must be > 0; got all 0 (an empty grid)")
    skip = tuple(args.skip)
    data_path = Path(args.data) if args.data else Path(str(_rule.table_path(args.device)))
    try:
        grid = fit_grid(
            forward=args.forward,
            backward=args.backward,
            depthwise_forward=args.depthwise_forward,
            depthwise_backward=args.depthwise_backward,
            first_forward=args.first_forward,
            first_backward=args.first_backward,
        )
    except ValueError as exc:  # more problems than a family's axes hold: name the option
        parser.error(re.sub(r"`(\w+)`", lambda m: "--" + m.group(1).replace("_", "-"), str(exc)))
    if args.refit:
        try:
            stored = json.loads(data_path.read_text())
        except (OSError, ValueError) as exc:
            parser.error(f"--refit needs a measured table at {data_path} (--data); it could not be read: {exc}")
        table = refit(stored, grid)
        plotted = _write(table, data_path, Path(args.docs))
        print(f"refitted {data_path} from its stored times" + (" and redrew the plot" if plotted else ""))
        return 0
    load_before = _load()
    rows, seconds = run(args.device, grid, skip)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    table = fit_table(args.device, rows, _machine(args.device, load_before), date, seconds)
    plotted = _write(table, data_path, Path(args.docs))
    print(
        f"wrote {data_path}, {Path(args.docs) / f'crossover-{args.device}.md'}" + (" and the plot" if plotted else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
