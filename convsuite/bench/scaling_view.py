"""``convsuite compare --scaling``: the scaling rows with workers on one axis.

:func:`convsuite.bench.scaling.scaling_rows` measures comparisons (ours
against a baseline, side by side). This module turns them into points, one
per case and contender, ordered by the workers, threads or GPUs it ran on,
each with its speed-up over the case's one-worker contender, and writes them
as compare writes its reports.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import os
import tempfile
from pathlib import Path

from .machine import machine_metadata
from .scaling import ms, scaling_rows

__all__ = ["COLUMNS", "run_scaling", "scaling_points", "table_cells", "write_scaling"]

#: The columns of the table, the CSV and the Markdown report, in order.
COLUMNS = ("section", "case", "contender", "workers", "ms", "spread (ms)", "speed-up vs 1", "against")


def scaling_points(rows: list[dict]) -> list[dict]:
    """One point per (section, case, contender) of ``rows``, fewest workers first.

    A point's ``speedup`` is the median of the case's one-worker contender
    (the baseline that ran on 1 worker, thread or GPU) over its own median;
    None when the case has no such contender. ``against`` lists the other
    comparisons the contender took part in (e.g. against an in-memory call).
    """
    points: dict[tuple, dict] = {}
    references: dict[tuple, str] = {}
    for r in rows:
        case = (r["section"], r["case"])
        for side in ("ours", "baseline"):
            key = (*case, r[side])
            if key not in points:
                points[key] = dict(
                    section=r["section"],
                    case=r["case"],
                    contender=r[side],
                    workers=r[f"{side}_workers"],
                    ms=r[f"{side}_ms"],
                    spread_ms=list(r[f"{side}_spread_ms"]),
                    speedup=None,
                    against=[],
                )
        if r["baseline_workers"] == 1:
            references.setdefault(case, r["baseline"])
    for r in rows:
        case = (r["section"], r["case"])
        if references.get(case) != r["baseline"]:
            points[(*case, r["ours"])]["against"].append(f"{r['ratio']:.2f}x vs {r['baseline']}")
    for (section, case, _), point in points.items():
        reference = references.get((section, case))
        if reference is not None:
            point["speedup"] = points[(section, case, reference)]["ms"] / point["ms"]
    order = {key: i for i, key in enumerate(dict.fromkeys((p["section"], p["case"]) for p in points.values()))}
    return sorted(points.values(), key=lambda p: (order[(p["section"], p["case"])], p["workers"]))


def table_cells(point: dict) -> list[str]:
    """The text cells of one point, in :data:`COLUMNS` order."""
    low, high = point["spread_ms"]
    return [
        point["section"],
        point["case"],
        point["contender"],
        str(point["workers"]),
        ms(point["ms"] / 1e3),
        f"{ms(low / 1e3)}-{ms(high / 1e3)}",
        "" if point["speedup"] is None else f"{point['speedup']:.2f}x",
        "; ".join(point["against"]),
    ]


def _markdown(points: list[dict], meta: dict) -> str:
    """The report: machine and load, then the table."""
    lines = [
        f"# Scaling, {meta['date']}",
        "",
        f"Machine: {meta['machine']['cpu']}; load average {meta['load_average_before']:.1f} before, "
        f"{meta['load_average_after']:.1f} after; sections {', '.join(meta['sections'])}"
        f"{' (quick sizes: a smoke run, not figures to report)' if meta['quick'] else ''}; "
        f"{meta['repeat']} timed calls per contender.",
        "",
        "Medians of interleaved repeats in one run, (min-max) spread; speed-up = the case's "
        "one-worker median / this median.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(table_cells(p)) + " |" for p in points]
    return "\n".join(lines) + "\n"


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a temporary file in the same folder, fsync, replace."""
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_scaling(rows: list[dict], points: list[dict], meta: dict, out: Path) -> dict[str, Path]:
    """Write scaling.json (meta, rows, points), scaling.csv (points) and scaling.md to ``out``, each atomically."""
    out = Path(out)
    paths = {"json": out / "scaling.json", "csv": out / "scaling.csv", "markdown": out / "scaling.md"}
    _write_atomic(paths["json"], json.dumps(dict(meta=meta, rows=rows, points=points), indent=2, allow_nan=False))
    table = io.StringIO()
    writer = csv.writer(table)
    writer.writerow(COLUMNS)
    writer.writerows(table_cells(p) for p in points)
    _write_atomic(paths["csv"], table.getvalue())
    _write_atomic(paths["markdown"], _markdown(points, meta))
    return paths


def run_scaling(
    sections, quick: bool, repeat: int, out: Path | None, backend: str | None = None
) -> tuple[list[dict], dict]:
    """Measure the sections, return their points and metadata (with ``files`` if ``out`` is given).

    The load average before and after goes into the metadata: on a shared
    host, a ratio of workers cannot exceed the idle cores.
    """
    meta = dict(
        date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        sections=list(sections),
        quick=quick,
        repeat=repeat,
        machine=machine_metadata(),
        load_average_before=os.getloadavg()[0],
    )
    rows = scaling_rows(tuple(sections), quick=quick, repeat=repeat, backend=backend)
    meta["load_average_after"] = os.getloadavg()[0]
    points = scaling_points(rows)
    if out is not None:
        meta["files"] = {k: str(p) for k, p in write_scaling(rows, points, meta, out).items()}
    return points, meta
