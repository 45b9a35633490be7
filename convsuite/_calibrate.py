"""Calibration: this machine's own rule table, measured within a time budget and used from then on.

The shipped tables are an estimate (FFTW's ``ESTIMATE``): measured on a few
machines, applied to the nearest. :func:`calibrate` is the measured plan
(FFTW's wisdom): it times every backend and algorithm on part of the
crossover grid (:mod:`convsuite._grid`) on this machine, at the thread count
convsuite uses (or the counts asked for), with the measuring core
(:mod:`convsuite._timing`, through the tuner's candidate timing), fits the
rule on what it measured, and writes the table atomically beside the tuning
cache (``CONVSUITE_CACHE_DIR`` or the user cache folder), filed under this
machine's key (:meth:`convsuite._machine.Machine.key`). From then on the
rule (:mod:`convsuite._rule`) uses it first, and ``explain()`` says so.

Which problems first: those the current rule is least sure about. For each
grid problem the rule in force ranks the candidates; a problem scores high
when its nearest measured problem is far (the table's machine ran other
thread counts, or nothing like it was measured) and when the two best
candidates were predicted close; each problem measured lowers the score of
problems near it, so a short budget spreads over the grid instead of
measuring one corner twice. A second calibration adds to the first (new
problems first; a problem measured again replaces its old times), unless
``fresh=True``.
"""

from __future__ import annotations

import math
import numbers
import os
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from . import _machine, _plan_cache, _registry, _rule, _tuning
from ._grid import Problem, fit_grid, spec_of
from ._threads import get_num_threads, max_threads, task_threads
from ._validation import positive_int

__all__ = ["Calibration", "calibrate", "measure_problem"]

#: Devices a problem can be measured on.
DEVICES = ("cpu", "gpu")
#: Measurement settings: ``full`` is the crossover map's (quiet machine, no budget: steady medians);
#: ``quick`` fits many problems into a budget (calibration, a budgeted crossover run).
SETTINGS: dict[str, dict[str, Any]] = {
    "full": dict(repeat=10, rounds=5, min_block_s=0.03, settle_s=0.1),
    "quick": dict(repeat=5, rounds=3, min_block_s=0.01, settle_s=0.02),
}
#: A predicted lead of the best candidate over the next of this ratio or more counts as a sure choice.
SURE_RATIO = 2.0
#: Reach beyond this many doublings counts as "nothing like it measured"; it no longer grows the score.
_REACH_CAP = 4.0


def measure_problem(
    problem: Problem, device: str, skip: Sequence[str] = (), *, settings: str = "full"
) -> dict[str, float]:
    """Median seconds of every candidate (``"backend/algorithm"``) on the problem, on ``device``.

    In the order measured selection ranks them: the first is what autotune
    would pick (the fastest, or a single-core candidate within 5% of it). The
    rule uses the times, so its winner is the fastest. Runs at the calling
    thread's thread count (:func:`convsuite._threads.task_threads`).
    """
    if device not in DEVICES:  # another device has no backends: every problem would measure as {}
        raise ValueError(f"`device` must be 'cpu' or 'gpu'; got {device!r}")
    spec = spec_of(problem)
    pairs, _ = _registry.candidates(spec, "auto", problem.direction, device)
    pairs = [(b, a) for b, a in _tuning.contenders(pairs) if b.name not in skip]
    rows = _tuning.measure_candidates(spec, problem.direction, pairs, **SETTINGS[settings])
    return {f"{b}/{a}": median for b, a, median, _, status in rows if median is not None}


def case_row(problem: Problem, threads: int, times: dict[str, float]) -> dict:
    """One row of a rule table: the problem, the thread count, its features and the measured times."""
    spec = spec_of(problem)
    row = {
        "name": problem.name,
        "direction": problem.direction,
        "threads": threads,
        "features": list(_rule.features(spec, threads)),
        "macs": spec.macs,
        "reduction": spec.reduction_length,
        "times": times,
    }
    if "family" in problem.extra:
        row["family"] = problem.extra["family"]
    return row


def check_threads(threads: object, name: str = "threads") -> list[int]:
    """``threads`` (an int or a sequence of ints) as a list of distinct counts this process can run.

    Raises
    ------
    TypeError, ValueError
        Not counts, or a count above what this process may use (named, with the limit).
    """
    if threads is None:
        return [get_num_threads()]
    values = [threads] if not isinstance(threads, (list, tuple)) else list(threads)
    if not values:
        raise ValueError(f"`{name}` must name at least one thread count; got {threads!r}")
    counts = []
    for value in values:
        n = positive_int(value, name)
        if n > max_threads():
            raise ValueError(
                f"`{name}` must be at most {max_threads()} (the CPUs this process may use, or NUMBA_NUM_THREADS); "
                f"got {n}"
            )
        if n not in counts:
            counts.append(n)
    return counts


def measure_grid(
    problems: Sequence[Problem],
    device: str,
    threads: Sequence[int],
    *,
    skip: Sequence[str] = (),
    budget_s: float | None = None,
    settings: str = "full",
    progress: Callable[[str], None] | None = None,
) -> tuple[list[dict], float, int]:
    """Measure each problem at each thread count, in order, until the budget is spent.

    A problem is measured at all its thread counts or not at all. Before each
    problem after the first, the time it will take is estimated from the
    problems measured so far (their median per thread count); a problem that
    would end past ``budget_s`` stops the run, so the run overshoots by at
    most one estimate's error.

    Returns
    -------
    rows, seconds, left
        The table rows (problems no candidate could run are left out), the
        seconds spent, and how many problems the budget left unmeasured.
    """
    rows: list[dict] = []
    durations: list[float] = []
    start = time.perf_counter()
    problems = list(problems)
    for i, problem in enumerate(problems):
        elapsed = time.perf_counter() - start
        if budget_s is not None and durations and elapsed + statistics.median(durations) > budget_s:
            return rows, elapsed, len(problems) - i
        began = time.perf_counter()
        for n in threads:
            with task_threads(n):
                times = measure_problem(problem, device, skip, settings=settings)
            if times:
                rows.append(case_row(problem, n, times))
            if progress is not None and times:
                winner = min(times, key=times.__getitem__)
                progress(f"[{i + 1}/{len(problems)}] {problem.name} {problem.direction} threads {n}: {winner}")
        durations.append(time.perf_counter() - began)
    return rows, time.perf_counter() - start, 0


# --- which problems first ---------------------------------------------------------


def _labels(problem: Problem, device: str) -> list[str]:
    """The candidates auto would choose among for the problem."""
    pairs, _ = _registry.candidates(spec_of(problem), "auto", problem.direction, device)
    return [f"{b.name}/{a}" for b, a in _tuning.contenders(pairs)]


def uncertainty(
    point: Sequence[float], direction: str, labels: Sequence[str], table: _rule.RuleTable | None
) -> tuple[float, float]:
    """How unsure the rule of ``table`` is at ``point``: (reach, closeness).

    ``reach`` is the distance to the nearest measured problem of the
    direction (infinite without one); ``closeness`` is 1 when the two best
    candidates are predicted equal, falling to 0 at a predicted lead of
    :data:`SURE_RATIO` (and 1 when fewer than two candidates were measured there).
    """
    if table is None:
        return math.inf, 1.0
    rows, points = table.rows(direction)
    if not rows or points.shape[1] != len(point):
        return math.inf, 1.0
    weights = _rule._weights(points.shape[1], table.thread_weight)
    reach = float(np.sqrt((((points - np.asarray(point, float)) * weights) ** 2).sum(axis=1)).min())
    ranking = _rule._rank_rows(point, rows, labels, table.neighbours, table.thread_weight, points)
    scored = [s for _, s in ranking if s is not None]
    if len(scored) < 2:
        return reach, 1.0
    lead = math.log(scored[1] / scored[0]) / math.log(SURE_RATIO)
    return reach, max(0.0, 1.0 - lead)


def priority_order(
    problems: Sequence[Problem], device: str, threads: Sequence[int], table: _rule.RuleTable | None
) -> list[Problem]:
    """``problems`` most uncertain first, each pick lowering the priority of the problems near it.

    Score = closeness + reach (capped at :data:`_REACH_CAP`, in units of a
    doubling of one feature), times the distance to the nearest problem
    already picked (capped at 1 doubling): the first pick is the most
    uncertain problem, later ones spread out.
    """
    points, base = [], []
    for problem in problems:
        labels = _labels(problem, device)
        scores = []
        spec = spec_of(problem)
        for n in threads:
            point = _rule.features(spec, n)
            reach, closeness = uncertainty(point, problem.direction, labels, table)
            scores.append(closeness + min(reach, _REACH_CAP))
        points.append(np.array(_rule.features(spec, threads[0])))
        base.append(max(scores))
    order: list[int] = []
    spread = np.ones(len(problems))
    left = set(range(len(problems)))
    while left:
        best = max(left, key=lambda i: (base[i] * spread[i], -i))
        order.append(best)
        left.discard(best)
        for i in left:
            if problems[i].direction == problems[best].direction:
                near = float(np.sqrt(((points[i] - points[best]) ** 2).sum()))
                spread[i] = min(spread[i], near, 1.0)
    return [problems[i] for i in order]


# --- calibrate -------------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    """What :func:`calibrate` measured and where it wrote the table.

    Attributes
    ----------
    path : Path
        The calibrated table (used by ``auto`` from now on).
    machine : str
        This machine, in words.
    threads : tuple of int
        The thread counts measured.
    measured : int
        Problems measured by this calibration.
    cases : int
        Cases in the table (with those of an earlier calibration kept).
    left : int
        Grid problems the budget left unmeasured (a later calibration measures them first).
    seconds : float
        Time spent measuring.
    regret : dict
        The fitted rule's leave-one-out regret on the table (``geomean``,
        ``worst``), empty with fewer than two problems of a direction.
    """

    path: Path
    machine: str
    threads: tuple[int, ...]
    measured: int
    cases: int
    left: int
    seconds: float
    regret: dict

    def __str__(self) -> str:
        counts = "/".join(str(n) for n in self.threads)
        lines = [
            f"calibrated the rule of `auto` for this {self.machine} at {counts} thread"
            f"{'s' if self.threads != (1,) else ''}: {self.measured} problems measured in {self.seconds:.0f} s "
            f"({self.cases} cases in the table, {self.left} grid problems left for a longer budget)",
            f"wrote {self.path}; auto uses it from now on (explain() says so)",
        ]
        if self.regret:
            lines.append(
                f"leave-one-out regret of the fitted rule on these problems: geometric mean "
                f"x{self.regret['geomean']:.2f}, worst x{self.regret['worst']:.2f}"
            )
        return "\n".join(lines)


def check_budget(budget_s: object) -> float:
    """``budget_s`` as a positive finite float, or a TypeError/ValueError naming it."""
    if isinstance(budget_s, bool) or not isinstance(budget_s, numbers.Real):
        raise TypeError(f"`budget_s` must be a number of seconds > 0; got {budget_s!r}")
    try:
        value = float(budget_s)
    except OverflowError:  # an int beyond float's range
        value = math.inf
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"`budget_s` must be a finite number of seconds > 0; got {budget_s!r}")
    return value


def check_device(device: object) -> str:
    """``device`` when calibration can run there: 'cpu' (a ValueError naming it otherwise)."""
    if device == "cpu":
        return "cpu"
    if device == "gpu":
        raise ValueError(
            "`device` must be 'cpu': on a GPU, auto follows the cupy backend's hand rule, which has no table "
            "to calibrate (use cs.tune or autotune to measure); got 'gpu'"
        )
    raise ValueError(f"`device` must be 'cpu'; got {device!r}")


def calibrate(
    budget_s: float = 60.0,
    device: str = "cpu",
    *,
    threads: int | Sequence[int] | None = None,
    fresh: bool = False,
    progress: bool = False,
) -> Calibration:
    """Measure the rule of ``auto`` on this machine within ``budget_s`` seconds, and use it from now on.

    Times every backend and algorithm on the part of the crossover grid the
    current rule is least sure about, fits the rule on the times and writes
    this machine's table atomically beside the tuning cache
    (``CONVSUITE_CACHE_DIR``). Later choices of ``auto`` on this machine, in
    this process and in new ones, consult it beside the shipped tables: the
    table with the problem nearest the call's decides (ties: this one), and
    ``explain()`` reports "measured on this machine by `convsuite calibrate`".
    A later calibration adds to the table.

    The grid's problems are small, so a short calibration knows little of
    large layers: on a 16-core host, a 200-second table picked worse than the
    shipped one on real networks' layers (0.84x torch against 1.08x,
    docs/measurements/zoo-cpu-2026-11-28-xeon16.md). Check a calibration with
    ``convsuite compare --workload zoo`` before relying on it; delete the file
    it names to go back.

    Parameters
    ----------
    budget_s : float, default 60
        Seconds of measurement (> 0). Checked before each problem: the run
        may end up to one problem's measurement past it, and always measures at
        least one problem.
    device : {'cpu'}
        The device whose rule to calibrate.
    threads : int or sequence of int, optional
        Thread counts to measure at (default: the count convsuite uses now,
        :func:`convsuite.get_num_threads`). Each problem is measured at each.
    fresh : bool, default False
        Start a new table instead of adding to this machine's earlier one.
    progress : bool, default False
        Print a line per problem measured to stderr.

    Returns
    -------
    Calibration
        Where the table went, what was measured and the fitted rule's regret; printable.

    Raises
    ------
    TypeError, ValueError
        A bad ``budget_s``, ``device``, ``threads`` or ``fresh`` (the message names it).
    OSError
        The cache folder cannot be written (nothing is measured first).
    """
    budget = check_budget(budget_s)
    check_device(device)
    counts = check_threads(threads)
    if not isinstance(fresh, bool):
        raise TypeError(f"`fresh` must be True or False; got {fresh!r}")
    if not isinstance(progress, bool):
        raise TypeError(f"`progress` must be True or False; got {progress!r}")
    report = (lambda line: print(line, file=sys.stderr)) if progress else None
    return run_calibration(fit_grid(), budget, device, counts, fresh=fresh, progress=report)


def _writable(directory: Path) -> None:
    """Raise OSError (naming the folder) unless a file can be created in ``directory``: checked before measuring."""
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / f".calibrate-probe-{id(directory)}"
    try:
        probe.write_bytes(b"")
    finally:
        probe.unlink(missing_ok=True)


def run_calibration(
    problems: Sequence[Problem],
    budget_s: float,
    device: str,
    threads: Sequence[int],
    *,
    fresh: bool = False,
    skip: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
) -> Calibration:
    """:func:`calibrate` on ``problems`` (arguments already checked); ``skip`` leaves backends out."""
    machine = _machine.current()
    directory = _tuning.cache_dir()
    path = _rule.calibrated_path(directory, device, machine.key())
    _writable(directory)
    earlier: list[dict] = []
    if not fresh:
        found = _rule.tables(device, directory)
        if found and found[0].origin == "calibrated":
            earlier = list(found[0].data["cases"])
    reference = next(iter(_rule.tables(device, None if fresh else directory)), None)
    done = {(row["name"], row["direction"], row["threads"]) for row in earlier}
    new = [p for p in problems if any((p.name, p.direction, n) not in done for n in threads)]
    ordered = priority_order(new or list(problems), device, threads, reference)
    rows, seconds, left = measure_grid(
        ordered, device, threads, skip=skip, budget_s=budget_s, settings="quick", progress=progress
    )
    replaced = {(row["name"], row["direction"], row["threads"]) for row in rows}
    kept = [row for row in earlier if (row["name"], row["direction"], row["threads"]) not in replaced]
    measured = len({(row["name"], row["direction"]) for row in rows})
    all_rows = kept + rows
    if not all_rows:
        raise RuntimeError("calibration measured nothing: no candidate could run any problem of the grid")
    table = _rule.make_table(
        device,
        all_rows,
        machine=machine,
        host=f"{machine.describe()}; load average {load_average()}",
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        seconds=seconds,
        command="convsuite calibrate",
        kind="calibrated",
    )
    _rule.write_table(path, table)
    _plan_cache.invalidate()  # plans chosen by the previous table are chosen again
    chosen = table["leave_one_out"].get(str(table["neighbours"]), {})
    return Calibration(
        path=path,
        machine=machine.describe(),
        threads=tuple(threads),
        measured=measured,
        cases=len(all_rows),
        left=left,
        seconds=seconds,
        regret={k: chosen[k] for k in ("geomean", "worst")} if chosen else {},
    )


def load_average() -> str:
    """The 1/5/15-minute load average as ``"1m/5m/15m"`` ("?" where the system has none)."""
    try:
        return "/".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"
