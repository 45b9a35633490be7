"""The default rule of ``backend="auto"``: nearest measured neighbours, on the nearest machine's table.

The rule has no hand-set thresholds. A table holds the measured times of
every backend and algorithm on a grid of problems, each measured at some
thread count: ``python -m convsuite.bench.crossover`` writes the tables that
ship in ``convsuite/data/rule-<device>*.json`` (one per measured machine),
:func:`convsuite.calibrate` writes this machine's own into the cache folder.
For a new problem the rule takes the :data:`NEIGHBOURS` (or the table's
fitted count) measured problems of the same direction nearest to it in
log-feature space (:func:`features`: the problem's sizes, its work, and the
thread count in use), scores each candidate by the distance-weighted
geometric mean of its time over the best time of each neighbour, and ranks
candidates by that score.

Which table, like FFTW's wisdom: this machine's calibrated table when there
is one (measured here, so it wins); otherwise the shipped table of the
machine nearest to this one (:func:`convsuite._machine.distance`: cores,
vector width, caches, BLAS). A table that cannot be used (unreadable, of a
newer format, fitted on other features, measured on another machine while
filed under this one) is skipped with one warning naming its file, never an
error: ``auto`` must keep working. Tables of the first format (no thread
count, no machine) are read as measured at the thread count their machine
line records.

A candidate the table has no times for (a backend registered later, an
algorithm added since the fit) is ranked after every measured one; a device
without a table falls back to backend priority.
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from . import _forksafe, _machine, _plan_cache
from ._files import atomic_write_text, read_json
from ._machine import Machine
from ._spec import ConvSpec
from ._threads import get_num_threads

if TYPE_CHECKING:  # importlib.resources.abc from Python 3.11 on; this name is the one 3.10 has
    from importlib.abc import Traversable

__all__ = [
    "FEATURE_NAMES",
    "FORMAT",
    "NEIGHBOURS",
    "Ranking",
    "RuleTable",
    "calibrated_path",
    "features",
    "fit",
    "leave_one_out",
    "load_table",
    "make_table",
    "rank",
    "table_path",
    "write_table",
]

#: Version of the table format. 1: times and 9 problem features, the machine as one line of text.
#: 2: a tenth feature, log2 of the thread count each case was measured at; the machine's features
#: (:class:`convsuite._machine.Machine`); the fitted weight of the thread feature.
FORMAT = 2

#: Measured problems that vote for a new one, where a table does not say.
NEIGHBOURS = 3
#: Neighbour counts the fit chooses from.
NEIGHBOUR_CHOICES = (1, 2, 3, 5, 7)
#: Weights of the thread feature the fit chooses from, where a table holds several thread counts: 1 treats a
#: doubling of threads like a doubling of any size; larger keeps neighbours at the same thread count.
THREAD_WEIGHTS = (1.0, 2.0, 4.0)
#: A leave-one-out regret above this counts as a miss when the fit compares settings.
MISS = 1.5

FEATURE_NAMES = (
    "batch",
    "in_per_group",
    "out_per_group",
    "groups",
    "out_pixels",
    "kernel_taps",
    "stride",
    "ndim",
    "macs",
    "threads",
)
_THREAD_FEATURE = FEATURE_NAMES.index("threads")
#: The features of format-1 tables: the same, without the thread count.
_V1_FEATURES = FEATURE_NAMES[:_THREAD_FEATURE]

#: Tables set in this process (:func:`set_table`; tests): device -> table, or None for "no rule".
_tables: dict[str, dict | None] = {}
_lock = _forksafe.lock()
_shipped: dict[str, list[RuleTable]] = {}
#: Calibrated files read so far: path -> ((mtime_ns, size), table or None). A file is read again when it
#: changes, and a bad one warns once per version of it.
_calibrated: dict[str, tuple[tuple[int, int], RuleTable | None]] = {}
_wrapped: dict[str, RuleTable] = {}


def features(spec: ConvSpec, threads: int | None = None) -> tuple[float, ...]:
    """The problem as a point: log2 of each size that moves the crossover, of its work, and of the threads.

    The work (multiply-adds) is a sum of the other log-features, so adding it
    weights the distance along the direction that decides whether a call is
    dominated by fixed overhead or by arithmetic: two problems of equal shape
    class but 100x different work are far apart. On the 137 problems of the
    2026-11-22 CPU fit it cut the leave-one-out regrets over 1.5x from 16-19
    to 10-15 for every neighbour count from 2 to 7 (docs/measurements/crossover-cpu.md).
    ``threads`` (default: the count convsuite uses now) moves the crossover
    between the parallel rungs and the single-core ones.
    """
    if threads is None:
        threads = get_num_threads()
    values = (
        spec.batch,
        spec.channels_per_group,
        spec.out_channels_per_group,
        spec.groups,
        math.prod(spec.out_size),
        math.prod(spec.kernel_size),
        math.prod(spec.stride),
        spec.ndim,
        spec.macs,
        threads,
    )
    return tuple(math.log2(v) for v in values)


# --- where tables live ---------------------------------------------------------


def table_path(device: str) -> Traversable:
    """Where the first shipped table of ``device`` lives inside the package (``rule-<device>.json``)."""
    return resources.files("convsuite") / "data" / f"rule-{device}.json"


def shipped_paths(device: str) -> list[Traversable]:
    """Every shipped table of ``device``: ``rule-<device>.json`` and ``rule-<device>-<machine>.json``."""
    folder = resources.files("convsuite") / "data"
    first = table_path(device)
    others = sorted(
        (p for p in folder.iterdir() if re.fullmatch(rf"rule-{re.escape(device)}-[\w.-]+\.json", p.name)),
        key=lambda p: p.name,
    )
    return ([first] if first.is_file() else []) + others


def calibrated_path(directory: Path | str, device: str, key: str) -> Path:
    """The calibrated table of machine ``key`` in ``directory`` (the tuning cache's folder)."""
    return Path(directory) / f"calibrated-rule-{device}-{key}.json"


# --- reading and checking tables -----------------------------------------------


def _is_seconds(value: Any) -> bool:
    """A finite number of seconds > 0 (the rule divides by the fastest)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def check_cases(cases: Any, width: int | None = None, where: str = "`rows`") -> None:
    """Every case: a direction, ``width`` finite features (when given) and non-empty positive times.

    Raises
    ------
    ValueError
        The first case that is not so, named, with what is wrong.
    """
    if not isinstance(cases, list):
        raise ValueError(f"{where} must be a list of cases; got {type(cases).__name__}")
    for case in cases:
        name = f"row {case.get('name', '?')!r}" if isinstance(case, dict) else f"row {case!r}"
        times = case.get("times") if isinstance(case, dict) else None
        if not isinstance(times, dict) or not times:
            raise ValueError(f"{where}: {name} must have `times`, a non-empty dict of label -> seconds; got {times!r}")
        for label, seconds in times.items():
            if not _is_seconds(seconds):
                raise ValueError(
                    f"{where}: {name} has time {seconds!r} for {label!r}; times must be finite numbers of seconds > 0"
                )
        if width is None:
            continue
        if case.get("direction") not in ("forward", "backward"):
            raise ValueError(f"{where}: {name} has direction {case.get('direction')!r}, not 'forward' or 'backward'")
        point = case.get("features")
        if (
            not isinstance(point, list)
            or len(point) != width
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in point)
        ):
            raise ValueError(f"{where}: {name} must have `features`, {width} finite numbers; got {point!r}")


def _recorded_threads(host: Any) -> int | None:
    """The thread count a format-1 table's machine line records ("...; threads 2; ...")."""
    match = re.search(r"\bthreads (\d+)\b", host) if isinstance(host, str) else None
    return int(match.group(1)) if match and int(match.group(1)) > 0 else None


def _upgraded(data: dict) -> dict:
    """A format-1 table as format 2: each case measured at the thread count its machine line records.

    Raises
    ------
    ValueError
        Fitted on other features, or no thread count recorded.
    """
    fitted = data.get("features")
    if fitted is not None and list(fitted) != list(_V1_FEATURES):
        raise ValueError(
            f"it was fitted on features {list(fitted)}, this version uses {list(FEATURE_NAMES)}; refit it with "
            "`python -m convsuite.bench.crossover --refit` (the grid it was measured on is unchanged) or measure again"
        )
    threads = _recorded_threads(data.get("machine"))
    if threads is None:
        raise ValueError("it is of format 1 and records no thread count (`threads N` in its machine line)")
    check_cases(data.get("cases"), len(_V1_FEATURES), "its cases")
    cases = [dict(case, threads=threads, features=[*case["features"], math.log2(threads)]) for case in data["cases"]]
    return dict(
        data,
        format=FORMAT,
        kind="shipped",
        machine=None,
        host=data.get("machine"),
        features=list(FEATURE_NAMES),
        threads=[threads],
        thread_weight=1.0,
        cases=cases,
    )


def checked_table(data: Any, device: str | None = None) -> dict:
    """``data`` as a usable format-2 table (a format-1 table upgraded).

    Raises
    ------
    ValueError
        Why it cannot be used, as a clause ("it was written by a newer convsuite (format 3)").
    """
    if not isinstance(data, dict):
        raise ValueError(f"it holds {type(data).__name__}, not a table")
    version = data.get("format", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError(f"its format is {version!r}, not a version number")
    if version > FORMAT:
        raise ValueError(f"it was written by a newer convsuite (format {version}; this one reads up to {FORMAT})")
    if device is not None and data.get("device", device) != device:
        raise ValueError(f"it is a table of device {data.get('device')!r}, not {device!r}")
    if version == 1:
        return _upgraded(data)
    if list(data.get("features") or ()) != list(FEATURE_NAMES):
        raise ValueError(
            f"it was fitted on features {data.get('features')}, this version uses {list(FEATURE_NAMES)}; "
            "measure it again"
        )
    check_cases(data.get("cases"), len(FEATURE_NAMES), "its cases")
    for case in data["cases"]:
        threads = case.get("threads")
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
            raise ValueError(f"its case {case.get('name', '?')!r} has `threads` {threads!r}, not a count >= 1")
    if data.get("machine") is not None:
        Machine.from_dict(data["machine"])  # raises with the feature that is wrong
    return data


@dataclass
class RuleTable:
    """One table the rule may use: its data, where it came from, and its cases by direction.

    ``origin`` is ``"calibrated"`` (this machine's, by :func:`convsuite.calibrate`),
    ``"shipped"`` (in the package) or ``"set"`` (:func:`set_table`, in this process).
    """

    data: dict
    origin: str
    path: str | None = None
    _by_direction: dict = field(default_factory=dict, repr=False)

    @functools.cached_property
    def machine(self) -> Machine | None:
        """The machine the table was measured on, where it records one."""
        recorded = self.data.get("machine")
        return Machine.from_dict(recorded) if isinstance(recorded, dict) else None

    @property
    def neighbours(self) -> int:
        """Voting neighbours: the table's fitted count, else :data:`NEIGHBOURS`."""
        return int(self.data.get("neighbours", NEIGHBOURS))

    @property
    def thread_weight(self) -> float:
        """Weight of the thread feature in the distance (fitted; 1 where the table does not say)."""
        return float(self.data.get("thread_weight", 1.0))

    def rows(self, direction: str) -> tuple[list[dict], np.ndarray]:
        """The cases of one direction and their features as an array (computed once)."""
        found = self._by_direction.get(direction)
        if found is None:
            rows = [row for row in self.data.get("cases", ()) if row.get("direction") == direction]
            points = np.array([row["features"] for row in rows], dtype=float) if rows else np.zeros((0, 0))
            found = self._by_direction[direction] = (rows, points)
        return found

    def thread_counts(self) -> list[int]:
        """The thread counts the table's cases were measured at (empty where it does not record them)."""
        return sorted({row["threads"] for row in self.data.get("cases", ()) if isinstance(row.get("threads"), int)})

    def describe(self, here: Machine | None = None) -> str:
        """Which table this is, in a user's words (for ``explain()``)."""
        date = str(self.data.get("date") or "an unrecorded date").split(" ")[0]
        machine = self.machine
        if self.origin == "set":
            return "the rule table set in this process"
        if self.origin == "calibrated":
            return f"measured on this machine by `convsuite calibrate` on {date}"
        if machine is None:
            host = str(self.data.get("host") or self.data.get("machine") or "an unrecorded machine").split(";")[0]
            return f"the shipped table measured on {host} on {date}"
        if here is not None and machine.key() == here.key():
            return f"the shipped table of a {machine.describe()}, measured on {date}: the same kind as this one"
        if here is None:
            return f"the shipped table of a {machine.describe()}, measured on {date}"
        differences = here.differences(machine)
        if machine.describe() == here.describe() and differences:
            this = f" (it had {'; '.join(differences)})"
        else:
            this = f" ({here.describe()})"
        return f"the shipped table of a {machine.describe()}, nearest to this one{this}, measured on {date}"


def _warn_unusable(path: Any, problem: str, what: str) -> None:
    """One warning that names the file, says why it is not used and what ``auto`` does instead."""
    warnings.warn(f"convsuite: the {what} {path} is not used: {problem}", RuntimeWarning, stacklevel=4)


def _load_shipped(device: str) -> list[RuleTable]:
    """The usable shipped tables of ``device`` (read once; each unusable one warned about once)."""
    with _lock:
        if device not in _shipped:
            tables = []
            for path in shipped_paths(device):
                try:
                    # A file of the installed package; as_file gives it a real path where the package is not
                    # on the file system (a zip), as read_json's checks (regular file, size) need one.
                    with resources.as_file(path) as real:
                        data = checked_table(read_json(real, str(path)), device)
                except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
                    _warn_unusable(path, str(exc), "shipped rule table")
                    continue
                tables.append(RuleTable(data, "shipped", str(path)))
            _shipped[device] = tables
        return _shipped[device]


def _load_calibrated(path: Path, key: str) -> RuleTable | None:
    """The calibrated table at ``path`` if it is this machine's, else None (absent; unusable: warned once)."""
    try:
        status = path.stat()
    except OSError:  # absent (the usual case), or a folder we may not look into
        return None
    signature = (status.st_mtime_ns, status.st_size)
    name = str(path)
    with _lock:
        known = _calibrated.get(name)
        if known is not None and known[0] == signature:
            return known[1]
    table: RuleTable | None = None
    try:
        data = checked_table(read_json(path, name), None)
        recorded = (data.get("machine") or {}).get("key")
        if data.get("kind") != "calibrated":
            raise ValueError(f"it is not a calibrated table (its kind is {data.get('kind')!r})")
        if recorded != key:
            raise ValueError(
                f"it was measured on another machine (key {recorded!r}, this one is {key!r}); "
                "run `convsuite calibrate` to measure this one"
            )
        table = RuleTable(data, "calibrated", name)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        _warn_unusable(path, f"{exc}; auto uses the shipped tables instead", "calibrated rule table")
    with _lock:
        _calibrated[name] = (signature, table)
    return table


def _set_table(device: str, data: dict) -> RuleTable:
    """A table set in this process, wrapped once per object."""
    wrapped = _wrapped.get(device)
    if wrapped is None or wrapped.data is not data:
        wrapped = _wrapped[device] = RuleTable(data, "set")
    return wrapped


def tables(device: str, calibrated_dir: Path | str | None = None) -> list[RuleTable]:
    """The tables that may decide for ``device``, in the order the rule tries them.

    A table set in this process alone (:func:`set_table`; None: no rule);
    otherwise this machine's calibrated table in ``calibrated_dir`` (CPU
    only) when there is a usable one, then the shipped table of the machine
    nearest to this one.
    """
    if device in _tables:
        data = _tables[device]
        return [] if data is None else [_set_table(device, data)]
    found = []
    here = _machine.current() if device == "cpu" else None
    if here is not None and calibrated_dir is not None:
        own = _load_calibrated(calibrated_path(calibrated_dir, device, here.key()), here.key())
        if own is not None:
            found.append(own)
    shipped = _load_shipped(device)
    if shipped:
        found.append(min(shipped, key=lambda t: _machine_distance(t, here)))
    return found


def _machine_distance(table: RuleTable, here: Machine | None) -> float:
    """How far the table's machine is from this one (a table without a machine: farther than any known)."""
    machine = table.machine
    if here is None:
        return 0.0
    return _machine.distance(machine, here) if machine is not None else math.inf


def load_table(device: str, calibrated_dir: Path | str | None = None) -> dict | None:
    """The table the rule tries first for ``device``, or None when there is none."""
    found = tables(device, calibrated_dir)
    return found[0].data if found else None


def set_table(device: str, table: dict | None) -> None:
    """Use ``table`` for ``device`` in this process (None: no rule), whatever is calibrated or shipped."""
    with _lock:
        _tables[device] = table
    _plan_cache.invalidate()


def forget_tables() -> None:
    """Drop tables set in this process and everything read from disk: the next choice reads them again."""
    with _lock:
        _tables.clear()
        _shipped.clear()
        _calibrated.clear()
        _wrapped.clear()
    _plan_cache.invalidate()


# --- ranking ---------------------------------------------------------------------


class Ranking(tuple):
    """Candidates ``(label, score)`` best first; ``score`` is None for unmeasured ones.

    ``neighbours`` names the measured problems that voted, ``table`` is the
    :class:`RuleTable` they come from and ``threads`` the thread count ranked for.
    """

    neighbours: tuple[str, ...] = ()
    table: RuleTable | None = None
    threads: int | None = None

    def reason(self) -> str:
        """Why the first candidate, in a user's words: what it did on the problems most like this one, the
        candidates close behind it, then which table's measurements those were.

        Clauses are joined by ``"; "`` in that order (``explain()`` prints the ``close:`` one on a line of its own).
        """
        if not self or self[0][1] is None:
            return "no measured candidate"
        label, score = self[0]
        table = self.table
        here = _machine.current() if table is not None and table.origin != "set" else None
        where = table.describe(here) if table is not None else "the rule table"
        counts = table.thread_counts() if table is not None else []
        if counts and self.threads is not None and self.threads not in counts:
            shown = "/".join(str(n) for n in counts)
            where += f", at {shown} thread{'s' if counts != [1] else ''} (this call uses {self.threads})"
        names = list(self.neighbours)
        problems = f"the {len(names)} measured problem{'s' if len(names) != 1 else ''} most like this one"
        # A score is a geometric mean, over those problems, of each candidate's time over the fastest one's.
        how = "was the fastest" if score <= 1.05 else f"came closest to the fastest (x{score:.2f} its time)"
        clauses = [f"{label} {how} on {problems}"]
        behind = [(lbl, s) for lbl, s in self[1:4] if s is not None]
        if behind:
            first, rest = behind[0], behind[1:]
            clauses.append(
                f"close: {first[0]} (x{first[1]:.2f} the fastest's time)"
                + "".join(f", {lbl} (x{s:.2f})" for lbl, s in rest)
            )
        clauses.append(f"data: {where}")
        if names:
            clauses.append(
                "those problems: " + ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            )
        return "; ".join(clauses)


def _weights(width: int, thread_weight: float) -> np.ndarray:
    """Per-feature weights of the distance: 1, and ``thread_weight`` on the thread feature."""
    weights = np.ones(width)
    if width == len(FEATURE_NAMES):
        weights[_THREAD_FEATURE] = thread_weight
    return weights


def _distance(a: Sequence[float], b: Sequence[float], thread_weight: float = 1.0) -> float:
    """Weighted Euclidean distance between two feature points."""
    weights = _weights(len(a), thread_weight)
    return float(np.sqrt(np.sum((weights * (np.asarray(a, float) - np.asarray(b, float))) ** 2)))


def _scores(
    point_distances: Sequence[float], nearest: Sequence[dict], labels: Iterable[str]
) -> tuple[dict[str, float], list]:
    """Distance-weighted geometric mean of each label's time over each neighbour's best."""
    scores: dict[str, float] = {}
    for label in labels:
        log_sum, weight_sum = 0.0, 0.0
        for distance, row in zip(point_distances, nearest):
            times = row["times"]
            t = times.get(label)
            if t is None:
                continue
            weight = 1.0 / (1e-3 + distance)
            log_sum += weight * math.log(t / min(times.values()))
            weight_sum += weight
        if weight_sum:
            scores[label] = math.exp(log_sum / weight_sum)
    return scores, list(nearest)


def _ranked(scores: dict[str, float], labels: Sequence[str]) -> Ranking:
    measured = sorted(scores.items(), key=lambda item: item[1])
    return Ranking(measured + [(label, None) for label in labels if label not in scores])


def _rank_rows(
    point: Sequence[float],
    rows: Sequence[dict],
    labels: Sequence[str],
    neighbours: int,
    thread_weight: float = 1.0,
    points: np.ndarray | None = None,
) -> Ranking:
    """Rank ``labels`` at ``point`` from measured ``rows`` (one direction); ``points``: their features, stacked."""
    if points is None:
        points = np.array([row["features"] for row in rows], dtype=float)
    weights = _weights(points.shape[1], thread_weight)
    distances = np.sqrt((((points - np.asarray(point, float)) * weights) ** 2).sum(axis=1))
    order = np.argsort(distances, kind="stable")[:neighbours]
    scores, nearest = _scores(distances[order], [rows[i] for i in order], labels)
    ranking = _ranked(scores, labels)
    ranking.neighbours = tuple(row.get("name", "?") for row in nearest)
    return ranking


def rank(
    spec: ConvSpec,
    direction: str,
    labels: Sequence[str],
    device: str,
    *,
    threads: int | None = None,
    calibrated_dir: Path | str | None = None,
) -> Ranking | None:
    """Rank candidate labels (``"backend/algorithm"``) for ``spec``; None without a table.

    Of the tables of :func:`tables` with cases of ``direction``, the one
    whose nearest measured problem is nearest decides; on a tie, the first
    (this machine's calibrated table before the shipped one). A calibration
    measures a small grid in its budget: on a problem far from all of it,
    a shipped table with nearer problems knows more.

    Returns
    -------
    Ranking or None
        ``(label, score)`` pairs, lowest predicted relative time first; its
        ``neighbours`` attribute names the measured problems that voted, its
        ``table`` the table they come from, and :meth:`Ranking.reason` says why.
    """
    if threads is None:
        threads = get_num_threads()
    point = features(spec, threads)
    here = np.asarray(point, dtype=float)
    best = None
    for table in tables(device, calibrated_dir):
        rows, points = table.rows(direction)
        if not rows or points.shape[1] != len(point):
            continue
        nearest = float(np.sqrt((((points - here) * _weights(len(point), table.thread_weight)) ** 2).sum(axis=1)).min())
        if best is None or nearest < best[0]:
            best = (nearest, table, rows, points)
    if best is None:
        return None
    _, table, rows, points = best
    ranking = _rank_rows(point, rows, labels, table.neighbours, table.thread_weight, points)
    ranking.table, ranking.threads = table, threads
    return ranking


# --- fitting ------------------------------------------------------------------------


def _problem_of(case: dict, index: int) -> tuple:
    """What identifies a problem across thread counts (held out together by :func:`leave_one_out`); a case
    without a name is a problem of its own.
    """
    if case.get("name") is None:
        return ("#", index)
    return (case["name"], case["direction"], case.get("network"))


def leave_one_out(cases: Sequence[dict], neighbours: int, thread_weight: float = 1.0) -> list[float]:
    """Regret of the rule on each measured case when fitted on all the other problems.

    Regret is the measured time of the rule's pick over the fastest measured
    time of that case. A problem measured at several thread counts is held
    out at all of them (its own time at another count would be a neighbour
    no new problem has). The fit uses it to choose the neighbour count and
    the thread weight, and the crossover command prints it with the map.
    """
    by_direction: dict[str, list[int]] = {}
    for i, case in enumerate(cases):
        by_direction.setdefault(case["direction"], []).append(i)
    result: dict[int, float] = {}
    for indices in by_direction.values():
        rows = [cases[i] for i in indices]
        points = np.array([row["features"] for row in rows], dtype=float)
        weights = _weights(points.shape[1], thread_weight)
        diff = (points[:, None, :] - points[None, :, :]) * weights
        distances = np.sqrt((diff**2).sum(axis=2))
        groups = [_problem_of(row, i) for row, i in zip(rows, indices)]
        for a, case in enumerate(rows):
            others = [b for b in range(len(rows)) if groups[b] != groups[a]]
            if not others:
                continue
            others.sort(key=lambda b: distances[a, b])  # stable: ties keep the table's order
            nearest = others[:neighbours]
            scores, _ = _scores(distances[a, nearest], [rows[b] for b in nearest], list(case["times"]))
            pick = _ranked(scores, list(case["times"]))[0][0]
            result[indices[a]] = case["times"][pick] / min(case["times"].values())
    return [result[i] for i in sorted(result)]


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive numbers."""
    return math.exp(statistics.fmean(math.log(v) for v in values))


def _stats(regrets: Sequence[float]) -> dict[str, float | int]:
    return {
        "mean": statistics.fmean(regrets),
        "geomean": geomean(regrets),
        "worst": max(regrets),
        "over_1.5": sum(r > MISS for r in regrets),
    }


def fit(rows: Sequence[dict]) -> dict[str, Any]:
    """The rule's settings fitted on measured rows: neighbour count, thread weight, and their regrets.

    Each setting's leave-one-out regrets are computed; the chosen one has
    the fewest over :data:`MISS`, then the lowest geometric mean: an
    arithmetic mean or a worst case is decided by a single noisy cell (one
    timing spike of a loser makes a x40 "regret"). The thread weight is
    fitted only where the rows hold several thread counts.

    Returns
    -------
    dict
        ``neighbours``, ``thread_weight`` and ``leave_one_out`` (per
        neighbour count, at the chosen weight: mean, geomean, worst, over_1.5).
    """
    check_cases(list(rows))
    counts = {row.get("threads") for row in rows}
    weights = THREAD_WEIGHTS if len(counts) > 1 else (1.0,)
    loo = {(k, w): r for w in weights for k in NEIGHBOUR_CHOICES if (r := leave_one_out(rows, k, w))}
    if not loo:
        return {"neighbours": NEIGHBOURS, "thread_weight": 1.0, "leave_one_out": {}}
    k, w = min(loo, key=lambda kw: (sum(r > MISS for r in loo[kw]), geomean(loo[kw]), kw[1]))
    return {
        "neighbours": k,
        "thread_weight": w,
        "leave_one_out": {str(n): _stats(r) for (n, weight), r in loo.items() if weight == w},
    }


def make_table(
    device: str,
    rows: list[dict],
    *,
    machine: Machine | None,
    host: str,
    date: str,
    seconds: float | None,
    command: str,
    kind: str,
) -> dict:
    """A format-2 table from measured rows (each with ``threads``), with the rule's settings fitted on them.

    Raises
    ------
    ValueError
        A row without times, or a time that is not a finite number > 0: the
        rule divides by the fastest time, and a NaN would spread to every
        statistic.
    """
    settings = fit(rows)
    return {
        "format": FORMAT,
        "device": device,
        "kind": kind,
        "machine": machine.to_dict() if machine is not None else None,
        "host": host,
        "date": date,
        "seconds": seconds,
        "command": command,
        "features": list(FEATURE_NAMES),
        "threads": sorted({row["threads"] for row in rows if isinstance(row.get("threads"), int)}),
        **settings,
        "cases": list(rows),
    }


def write_table(path: Path | str, table: dict) -> Path:
    """Write ``table`` to ``path`` whole or not at all (:func:`convsuite._files.atomic_write_bytes`).

    Strict JSON: a NaN in a table is a bug, raised here as a ValueError before anything is written.
    """
    text = json.dumps(table, indent=1, allow_nan=False) + "\n"
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return Path(path)


def describe(device: str, calibrated_dir: Path | str | None = None) -> dict[str, Any] | None:
    """Which table the rule tries first for ``device`` (in words), its date, thread counts and cases; or None."""
    found = tables(device, calibrated_dir)
    if not found:
        return None
    table = found[0]
    here = _machine.current() if device == "cpu" and table.origin != "set" else None
    return {
        "table": table.describe(here),
        "origin": table.origin,
        "path": table.path,
        "date": table.data.get("date"),
        "threads": table.thread_counts(),
        "cases": len(table.data.get("cases", ())),
    }
