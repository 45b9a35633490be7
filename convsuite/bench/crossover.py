"""The crossover map: which backend and algorithm wins where, and the rule table fitted from it.

``python -m convsuite.bench.crossover --device cpu`` (or ``gpu`` on a
machine with one) times every backend and algorithm that can run each
problem of a grid (:func:`convsuite._grid.fit_grid`: batch, channels, size,
kernel, stride, groups; 2-D and 1-D; forward and backward) side by side
with the measuring core, at each thread count of ``--threads`` (default:
the count convsuite uses), then writes

- the rule table (``--out``; by default ``convsuite/data/rule-<device>.json``
  when this is the machine that table was measured on, else
  ``rule-<device>-<machine key>.json`` beside it): the times, which *are*
  the default rule (:mod:`convsuite._rule` ranks candidates by their
  relative time on the nearest measured problems of the nearest machine's
  table), with this machine's features;
- ``docs/measurements/crossover-<table>.md``: the table, with machine and date;
- ``docs/measurements/crossover-<table>.png``: the map (winner per problem,
  by work and reduction length), when matplotlib is installed.

``--budget-s S`` bounds the measuring time (lighter measurement settings,
families of problems taken in turn so a cut run still covers each; a
problem is measured at all thread counts or not at all): the shipped table
of a machine one has for a few minutes, e.g.
``python -m convsuite.bench.crossover --device cpu --threads 1,4,16 --budget-s 420 --out FILE``;
the same command with ``--resume`` in a later slot adds the problems the budget left.

Re-run it whenever a backend gains an algorithm: the rule follows the data.
``--refit`` measures nothing: it recomputes the features of the stored cases
(after a change of :func:`convsuite._rule.features`) and refits the rule's
settings, keeping the times; it needs the grid the table was measured on.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Sequence

from .. import _machine as machines
from .. import _rule, _tuning
from .._calibrate import check_threads, load_average, measure_grid, measure_problem
from .._grid import MAX_MACS, Problem, fit_grid, round_robin, spec_of

__all__ = ["MAX_MACS", "Problem", "fit_grid", "fit_table", "measure_problem", "main", "run", "spec_of"]

#: Backends left out of the map besides those that declare ``contender = False``.
DEFAULT_SKIP: tuple[str, ...] = ()
#: Neighbour counts the fit chooses from.
NEIGHBOUR_CHOICES = _rule.NEIGHBOUR_CHOICES


def _machine(device: str, load_before: str = "", threads: Sequence[int] | None = None) -> str:
    """The machine, threads, and the 1/5/15-minute load average before and after a run."""
    load = f"; load average {load_before} before, {_load()} after" if load_before else ""
    counts = "/".join(str(n) for n in threads) if threads else str(_tuning.get_num_threads())
    return f"{_tuning.device_name(device)}; {platform.platform()}; threads {counts}{load}"


def _load() -> str:
    """The load average as ``"1m/5m/15m"`` ("?" where the system has none)."""
    return load_average()


def _markdown(
    device: str, rows: list[dict], machine: str, date: str, seconds: float | None, data_name: str | None = None
) -> str:
    labels = sorted({label for row in rows for label in row["times"]})
    several = len({row.get("threads") for row in rows}) > 1
    head = "| problem | direction | " + ("threads | " if several else "") + " | ".join(labels) + " | winner |"
    data_name = data_name or f"rule-{device}.json"
    lines = [
        f"# Crossover map ({device})",
        "",
        f"Measured {date} on {machine}, float32, " + (f"in {seconds:.0f} s " if seconds else "") + "by "
        f"`python -m convsuite.bench.crossover --device {device}`. Each cell is the candidate's median time "
        "over the fastest one's on that problem (1.00 = the winner), all candidates of a problem timed side "
        "by side (warm-up, interleaved blocks, medians; far slower ones abandoned after two rounds). "
        f"The same times are the default rule's data (`{data_name}`). "
        "Single figures are noisy on a shared machine; ratios are what to read.",
        "",
        head,
        "|" + "---|" * (len(labels) + 3 + several),
    ]
    for row in rows:
        times = row["times"]
        best = min(times.values())
        winner = min(times, key=times.get)
        cells = [f"{times[label] / best:.2f}" if label in times else "-" for label in labels]
        threads = f"{row.get('threads', '?')} | " if several else ""
        lines.append(
            f"| {row['name']} | {row['direction']} | {threads}"
            + " | ".join(cells)
            + f" | {winner} ({best * 1e6:.0f} us) |"
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
        + f". The rule uses {table['neighbours']} (fewest over 1.5x, then lowest geometric mean)"
        + (f", thread feature weight {table['thread_weight']:g}" if len(table.get("threads", ())) > 1 else "")
        + ".\n"
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
    device: str,
    problems: Iterable[Problem],
    skip: Sequence[str],
    progress: bool = True,
    *,
    threads: Sequence[int] | None = None,
    budget_s: float | None = None,
) -> tuple[list[dict], float]:
    """Measure every problem at each thread count; rows of the table (name, direction, threads, features, times).

    With ``budget_s``, the families of the grid are taken in turn and the run
    stops when the next problem would end past the budget (quick measurement
    settings); without, every problem is measured with the full settings.
    """
    counts = list(threads) if threads else [_tuning.get_num_threads()]
    problems = round_robin(list(problems)) if budget_s is not None else list(problems)
    report = (lambda line: print(line, file=sys.stderr)) if progress else None
    rows, seconds, left = measure_grid(
        problems,
        device,
        counts,
        skip=skip,
        budget_s=budget_s,
        settings="full" if budget_s is None else "quick",
        progress=report,
    )
    if left and progress:
        print(f"the budget of {budget_s:g} s left {left} of {len(problems)} problems unmeasured", file=sys.stderr)
    return rows, seconds


def fit_table(
    device: str,
    rows: list[dict],
    machine: str,
    date: str,
    seconds: float | None,
    *,
    features: machines.Machine | None = None,
    command: str | None = None,
) -> dict:
    """The rule's table from measured rows: the times, the machine, and the rule's settings fitted on them.

    ``machine`` is the line of text that states the host and its load;
    ``features`` the machine's features (:class:`convsuite._machine.Machine`),
    by which the rule finds the table nearest to the machine it runs on.

    Raises
    ------
    ValueError
        A row without times, or a time that is not a finite number > 0: the
        rule divides by the fastest time, and a NaN would spread to every
        statistic.
    """
    return _rule.make_table(
        device,
        rows,
        machine=features,
        host=machine,
        date=date,
        seconds=seconds,
        command=command or f"python -m convsuite.bench.crossover --device {device}",
        kind="shipped",
    )


def refit(table: dict, grid: Sequence[Problem]) -> dict:
    """``table`` with every case's features recomputed from its grid problem and the rule's settings refitted.

    For a change of :func:`convsuite._rule.features` that needs no new
    measurement; a case whose problem is no longer in ``grid`` is an error. A
    table of the first format gets the thread count its machine line records.
    """
    problems = {(p.name, p.direction): p for p in grid}
    recorded = _rule._recorded_threads(table.get("host") or table.get("machine"))
    rows = []
    for case in table["cases"]:
        problem = problems.get((case["name"], case["direction"]))
        if problem is None:
            raise ValueError(f"case {case['name']!r} ({case['direction']}) is not in the fitting grid; re-measure")
        threads = case.get("threads") or recorded
        if threads is None:
            raise ValueError(f"case {case['name']!r} records no thread count, nor does the table's machine line")
        rows.append(dict(case, threads=threads, features=list(_rule.features(spec_of(problem), threads))))
    recorded_machine = table.get("machine")
    features = machines.Machine.from_dict(recorded_machine) if isinstance(recorded_machine, dict) else None
    host = table.get("host") if isinstance(recorded_machine, dict) or recorded_machine is None else recorded_machine
    refitted = fit_table(
        table["device"],
        rows,
        str(host),
        table["date"],
        table.get("seconds"),
        features=features,
        command=table.get("command"),
    )
    refitted["refitted"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return refitted


def docs_name(data_path: Path, device: str) -> str:
    """The stem of the markdown map and plot of a table: ``crossover-cpu`` for ``rule-cpu.json``."""
    stem = data_path.stem
    return "crossover-" + (stem.removeprefix("rule-") if stem.startswith("rule-") else f"{device}-{stem}")


def _resumable(path: Path, device: str) -> tuple[list[dict], float]:
    """The cases and seconds of a table measured on this machine, to add to; ValueError saying why not."""
    try:
        table = _rule.checked_table(json.loads(path.read_text()), device)
    except (OSError, ValueError) as exc:
        raise ValueError(str(exc)) from None
    recorded = (table.get("machine") or {}).get("key")
    if device == "cpu" and recorded != machines.current().key():
        raise ValueError(
            f"it was measured on another machine (key {recorded!r}, this one is {machines.current().key()!r})"
        )
    return list(table["cases"]), float(table.get("seconds") or 0.0)


def _write(table: dict, data_path: Path, docs: Path) -> bool:
    """Write the table, the markdown map and the plot; whether the plot was drawn."""
    _rule.write_table(data_path, table)
    docs.mkdir(parents=True, exist_ok=True)
    device, rows = table["device"], table["cases"]
    name = docs_name(data_path, device)
    text = _markdown(device, rows, table.get("host", ""), table["date"], table.get("seconds"), data_path.name)
    (docs / f"{name}.md").write_text(text + _loo_text(table))
    print(text + _loo_text(table))
    return _plot(device, rows, docs / f"{name}.png")


def default_out(device: str) -> Path:
    """Where a table measured here goes by default: ``rule-<device>.json`` if it was measured on this machine
    (or there is none), else ``rule-<device>-<machine key>.json`` beside it, so another machine's run adds a
    table instead of replacing one.
    """
    first = Path(str(_rule.table_path(device)))
    if device != "cpu":
        return first
    key = machines.current().key()
    try:
        recorded = (json.loads(first.read_text()).get("machine") or {}).get("key")
    except (OSError, ValueError, AttributeError):
        return first
    return first if recorded == key else first.with_name(f"rule-{device}-{key}.json")


def thread_list(text: str) -> list[int]:
    """``--threads``: comma-separated thread counts this process can run (an argparse ``type=``)."""
    try:
        return check_threads([int(part) for part in text.split(",") if part.strip()])
    except ValueError as exc:
        message = str(exc)
        if "at most" not in message:
            message = f"must be comma-separated thread counts >= 1, e.g. 1,4,16; got {text!r}"
        raise argparse.ArgumentTypeError(message.replace("`threads` must", "each count must")) from None


def main(argv: Sequence[str] | None = None) -> int:
    """Regenerate the crossover map and the rule's table for one device."""
    from ._arguments import backend_names, folder, out_file, positive_float

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
    parser.add_argument(
        "--threads",
        type=thread_list,
        default=None,
        help="thread counts to measure each problem at, comma-separated (default: the count convsuite uses)",
    )
    parser.add_argument(
        "--budget-s",
        type=positive_float,
        default=None,
        help="stop measuring after about this many seconds (quick settings; grid families taken in turn)",
    )
    parser.add_argument("--docs", type=folder, default="docs/measurements", help="where the table and the plot go")
    parser.add_argument(
        "--out",
        "--data",
        dest="data",
        metavar="FILE",
        type=out_file,
        default=None,
        help="where the rule's JSON goes (default: rule-<device>.json in the package when measured on its machine, "
        "else rule-<device>-<machine key>.json beside it)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="add to the table at --out (measured on this machine): measure only the problems it lacks",
    )
    parser.add_argument(
        "--refit",
        action="store_true",
        help="measure nothing: recompute the features and the rule's settings from the times already in the table",
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
        data_path = Path(args.data) if args.data else Path(str(_rule.table_path(args.device)))
        try:
            stored = json.loads(data_path.read_text())
        except (OSError, ValueError) as exc:
            parser.error(f"--refit needs a measured table at {data_path} (--out); it could not be read: {exc}")
        table = refit(stored, grid)
        plotted = _write(table, data_path, Path(args.docs))
        print(f"refitted {data_path} from its stored times" + (" and redrew the plot" if plotted else ""))
        return 0
    data_path = Path(args.data) if args.data else default_out(args.device)
    threads = args.threads or [_tuning.get_num_threads()]
    kept, spent = [], 0.0
    if args.resume and data_path.exists():
        try:
            kept, spent = _resumable(data_path, args.device)
        except ValueError as exc:
            parser.error(f"--resume cannot add to {data_path}: {exc}")
        measured = {(row["name"], row["direction"], row["threads"]) for row in kept}
        grid = [p for p in grid if any((p.name, p.direction, n) not in measured for n in threads)]
        print(f"resuming {data_path}: {len(kept)} cases kept, {len(grid)} problems left", file=sys.stderr)
    load_before = _load()
    rows, seconds = run(args.device, grid, skip, threads=threads, budget_s=args.budget_s)
    replaced = {(row["name"], row["direction"], row["threads"]) for row in rows}
    rows = [row for row in kept if (row["name"], row["direction"], row["threads"]) not in replaced] + rows
    seconds += spent
    if not rows:
        print("no problem of the grid could be measured: nothing written", file=sys.stderr)
        return 1
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = " ".join(["python -m convsuite.bench.crossover", *(argv if argv is not None else sys.argv[1:])])
    table = fit_table(
        args.device,
        rows,
        _machine(args.device, load_before, threads),
        date,
        seconds,
        features=machines.current() if args.device == "cpu" else None,
        command=command,
    )
    plotted = _write(table, data_path, Path(args.docs))
    print(
        f"wrote {data_path}, {Path(args.docs) / (docs_name(data_path, args.device) + '.md')}"
        + (" and the plot" if plotted else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
