"""The default rule of ``backend="auto"``: nearest measured neighbours.

The rule has no hand-set thresholds. ``python -m convsuite.bench.crossover``
times every backend and algorithm over a grid of problems (batch, channels,
size, kernel, stride, groups; forward and backward) and writes the times to
``convsuite/data/rule-<device>.json``. For a new problem the rule takes the
:data:`NEIGHBOURS` measured problems of the same direction nearest to it in
log-feature space (features: :func:`features`; the table records which, and a
table fitted on other features is not used), scores each candidate by the
distance-weighted geometric mean of its time over the best time of each
neighbour, and ranks candidates by that score. Re-running the command after a
new algorithm lands refits the rule; nothing here names a backend.

A candidate the table has no times for (a backend registered later, an
algorithm added since the fit) is ranked after every measured one; a device
without a table falls back to backend priority.
"""

from __future__ import annotations

import json
import math
import threading
import warnings
from importlib import resources
from typing import Any, Sequence

from . import _plan_cache
from ._spec import ConvSpec

__all__ = ["NEIGHBOURS", "Ranking", "features", "load_table", "rank", "table_path"]

#: Measured problems that vote for a new one.
NEIGHBOURS = 3

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
)

_tables: dict[str, dict | None] = {}
_lock = threading.Lock()


def features(spec: ConvSpec) -> tuple[float, ...]:
    """The problem as a point: log2 of each size that moves the crossover, and of its work.

    The work (multiply-adds) is a sum of the other log-features, so adding it
    weights the distance along the direction that decides whether a call is
    dominated by fixed overhead or by arithmetic: two problems of equal shape
    class but 100x different work are far apart. On the 137 problems of the
    2026-11-22 CPU fit it cut the leave-one-out regrets over 1.5x from 16-19
    to 10-15 for every neighbour count from 2 to 7 (docs/measurements/crossover-cpu.md).
    """
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
    )
    return tuple(math.log2(v) for v in values)


def table_path(device: str):
    """Where the fitted table of ``device`` ships inside the package."""
    return resources.files("convsuite") / "data" / f"rule-{device}.json"


def load_table(device: str) -> dict | None:
    """The fitted table of ``device``, or None when none was fitted (loaded once)."""
    with _lock:
        if device not in _tables:
            path = table_path(device)
            try:
                _tables[device] = _checked(device, json.loads(path.read_text()))
            except (FileNotFoundError, OSError, ValueError):
                _tables[device] = None
        return _tables[device]


def _checked(device: str, table: dict) -> dict | None:
    """``table``, or None (with a warning) when it was fitted on other features than :data:`FEATURE_NAMES`."""
    fitted = table.get("features")
    if fitted is not None and list(fitted) != list(FEATURE_NAMES):
        warnings.warn(
            f"the rule table of {device!r} was fitted on features {list(fitted)}, this version uses "
            f"{list(FEATURE_NAMES)}: auto falls back to backend priority; refit it with "
            f"`python -m convsuite.bench.crossover --device {device}` (add --refit when its grid is unchanged)",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return table


def set_table(device: str, table: dict | None) -> None:
    """Replace the table of ``device`` in this process (tests; a freshly fitted map)."""
    with _lock:
        _tables[device] = table
    _plan_cache.invalidate()


class Ranking(tuple):
    """Candidates ``(label, score)`` best first; ``score`` is None for unmeasured ones."""

    neighbours: tuple[str, ...] = ()


def _distance(a: Sequence[float], b: Sequence[float]) -> float:
    """Euclidean distance between two feature points."""
    return math.sqrt(sum((p - q) ** 2 for p, q in zip(a, b)))


def _rank_rows(point: Sequence[float], rows: Sequence[dict], labels: Sequence[str], neighbours: int) -> Ranking:
    """Rank ``labels`` at ``point`` from measured ``rows`` (one direction)."""
    nearest = sorted(rows, key=lambda row: _distance(point, row["features"]))[:neighbours]
    scores: dict[str, float] = {}
    for label in labels:
        log_sum, weight_sum = 0.0, 0.0
        for row in nearest:
            times = row["times"]
            t = times.get(label)
            if t is None:
                continue
            best = min(times.values())
            weight = 1.0 / (1e-3 + _distance(point, row["features"]))
            log_sum += weight * math.log(t / best)
            weight_sum += weight
        if weight_sum:
            scores[label] = math.exp(log_sum / weight_sum)
    measured = sorted(scores.items(), key=lambda item: item[1])
    unmeasured = [(label, None) for label in labels if label not in scores]
    ranking = Ranking(measured + unmeasured)
    ranking.neighbours = tuple(row.get("name", "?") for row in nearest)
    return ranking


def rank(spec: ConvSpec, direction: str, labels: Sequence[str], device: str) -> Ranking | None:
    """Rank candidate labels (``"backend/algorithm"``) for ``spec``; None without a table.

    Returns
    -------
    Ranking or None
        ``(label, score)`` pairs, lowest predicted relative time first; its
        ``neighbours`` attribute names the measured problems that voted.
    """
    table = load_table(device)
    if not table:
        return None
    rows = [row for row in table.get("cases", ()) if row.get("direction") == direction]
    if not rows:
        return None
    return _rank_rows(features(spec), rows, labels, int(table.get("neighbours", NEIGHBOURS)))


def leave_one_out(cases: Sequence[dict], neighbours: int) -> list[float]:
    """Regret of the rule on each measured problem when fitted on all the others.

    Regret is the measured time of the rule's pick over the fastest measured
    time of that problem; the crossover command uses it to choose
    ``neighbours`` and prints it with the map.
    """
    regrets = []
    for i, case in enumerate(cases):
        rows = [c for j, c in enumerate(cases) if j != i and c["direction"] == case["direction"]]
        if not rows:
            continue
        ranking = _rank_rows(case["features"], rows, list(case["times"]), neighbours)
        pick = ranking[0][0]
        regrets.append(case["times"][pick] / min(case["times"].values()))
    return regrets


def describe(device: str) -> dict[str, Any] | None:
    """Where the table of ``device`` came from (machine, date, cases), or None."""
    table = load_table(device)
    if not table:
        return None
    return {k: table.get(k) for k in ("machine", "date", "command")} | {"cases": len(table.get("cases", ()))}
