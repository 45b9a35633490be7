"""The seed report: how much the swept best beats the hand-chosen default, per backend.

For every available backend on a device and every algorithm that declares
tunable parameters, :func:`build_report` sweeps the seed workloads it can run
(``ece408-fa19``, ``ece408-fa21``, ``cnn-train-3x3`` backward where the
algorithm implements backward, ``conv1d-signal`` for 1-D algorithms) and
writes a markdown report (per backend, algorithm and layer: default time,
best time, best parameters, best/default speedup; and the totals) next to
each sweep's own files.

A time budget (``--budget-s``) is shared equally by the sweeps. Each
sweep's cost per configuration is estimated from one call of the default
configuration on every layer (timed, compile included); when the whole grid
would not fit, a deterministic sample of it is measured (same seed, same
subset), and the report says how many of how many.

Run it as ``python -m convsuite.bench.sweep_report --device cpu --out
docs/measurements/sweep-cpu-<date>/``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from .._files import atomic_write_text, check_writable_file, read_json
from .._registry import get_backend, list_backends
from ..backends.base import Algorithm, Backend
from ._arguments import check_output_dir
from .machine import cpu_description, gpu_description
from .sweep import SweepResult, _first_call, _operands, run_sweep
from .sweep_output import check_sweep_files, summary_lines, write_sweep
from .timing import SETTLE_S
from .workloads import Case, get_workload

__all__ = [
    "build_report",
    "check_algorithms",
    "configurations_for_budget",
    "main",
    "read_sweep_file",
    "seed_cases",
    "summarise_folder",
]


def seed_cases(device: str, record: Algorithm, backend: Backend) -> list[tuple[str, str, list[Case]]]:
    """``(workload, direction, cases)`` of the seed workloads ``record`` can run on ``device``."""
    plans = []
    if 2 in record.ndims and "forward" in record.directions:
        plans += [("ece408-fa19", "forward"), ("ece408-fa21", "forward")]
    if 2 in record.ndims and "backward" in record.directions:
        plans.append(("cnn-train-3x3", "backward"))
    if 1 in record.ndims and "forward" in record.directions:
        plans.append(("conv1d-signal", "forward"))
    out = []
    for workload, direction in plans:
        cases = [c for c in get_workload(workload, device) if c.direction == direction]
        if workload == "conv1d-signal":
            # One length per mask width: the longest the device's workload has (the seed's headline rows).
            longest = max(c.x_shape[0] for c in cases)
            cases = [c for c in cases if c.x_shape[0] == longest]
        runnable = [c for c in cases if record.can_run(c.spec(_DTYPE), direction) is True]
        if runnable:
            out.append((workload, direction, runnable))
    return out


_DTYPE = "float32"


#: Configurations every sweep measures whatever the budget (the default is
#: measured besides): fewer cannot answer "does another value beat the default?".
MIN_CONFIGS = 4


def configurations_for_budget(total: int, share_s: float, per_config_s: float) -> int | None:
    """How many of ``total`` configurations fit in ``share_s`` (None: all of them; at least :data:`MIN_CONFIGS`).

    The minimum can take a sweep past its share of the budget; the report
    states the time it took.
    """
    fits = int(share_s // per_config_s) if per_config_s > 0 else total
    fits = max(fits, MIN_CONFIGS)
    return None if fits >= total else fits


def _per_config_s(backend: Backend, record: Algorithm, cases: list[Case], repeat: int) -> float:
    """Seconds one configuration costs on all the layers, from each layer's default.

    A new configuration costs its first call (compilation included) and the
    check once, then the measuring core's first call, a warm-up call per
    round and the timed repeats at the steady-state time, plus the settle
    pause before each round on the CPU.
    """
    rounds = min(3, repeat)
    seconds = 0.0
    for case in cases:
        ops = _operands(case, backend, _DTYPE)
        params = record.defaults(ops.spec, case.direction)
        t0 = time.perf_counter()
        _, launch = _first_call(ops, backend, record.name, params)
        first_and_check = time.perf_counter() - t0
        steady = first_and_check
        if launch is not None:
            t0 = time.perf_counter()
            launch(*ops.device, *ops.outputs)
            backend.synchronize()
            steady = time.perf_counter() - t0
        seconds += first_and_check + (1 + rounds + repeat) * steady
        if backend.device == "cpu":
            seconds += rounds * SETTLE_S  # the pause before each interleaved block
    return seconds


def _fmt_ms(seconds: float | None) -> str:
    """Milliseconds, three significant digits, or a dash."""
    return "-" if seconds is None else f"{seconds * 1e3:.3g}"


def _params(params: dict | None) -> str:
    """``a=1 b=2`` in backticks."""
    return "-" if params is None else "`" + " ".join(f"{k}={v}" for k, v in params.items()) + "`"


def _summary(sweeps: list[dict]) -> list[str]:
    """The overview table, one line per sweep, and the closing count of layers tuning speeds up by 10% or more."""
    lines = [
        "## Summary",
        "",
        "| backend / algorithm | workload | layers | default total ms | best total ms | best/default | "
        "layers >= 10% faster |",
        "|---|---|---|---|---|---|---|",
    ]
    faster = measured = 0
    for entry in sweeps:
        result: SweepResult = entry["result"]
        speedups = [layer.speedup for layer in result.layers if layer.speedup is not None]
        gains = sum(s >= 1.1 for s in speedups)
        faster, measured = faster + gains, measured + len(speedups)
        total = "-"
        if result.best_total_s is not None and result.default_total_s is not None:
            total = f"x{result.default_total_s / result.best_total_s:.2f}"
        lines.append(
            f"| {result.backend} / {result.algorithm} | {result.workload} {result.direction} | {len(result.layers)} "
            f"| {_fmt_ms(result.default_total_s)} | {_fmt_ms(result.best_total_s)} | {total} "
            f"| {gains} of {len(speedups)} |"
        )
    lines += [
        "",
        f"On {faster} of {measured} layers the swept best is at least 10% faster than the hand-chosen default "
        "(the best is chosen among measured configurations that include the default, so best/default >= 1 "
        "up to noise; compare the spread in each sweep's sweep.csv before reading a small gain as real).",
        "",
    ]
    return lines


def _markdown(device: str, sweeps: list[dict], skipped: list[str], budget_s: float, seconds: float) -> str:
    """The report."""
    where = cpu_description() if device == "cpu" else gpu_description()
    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"# Tunable parameters: swept best vs hand-chosen default ({device})",
        "",
        f"Machine: {where}. Date: {date}. dtype float32. Budget {budget_s:g} s (took {seconds:.0f} s).",
        "",
        "Generated by `python -m convsuite.bench.sweep_report`. Every configuration was checked against the "
        "float64 reference; times are medians of interleaved repeats (the measuring core), side by side per "
        "layer. Speedup = default time / best time on that layer; `x1.00` means the default is the best.",
        "",
    ]
    if not sweeps:
        lines += ["No available backend on this device has an algorithm with tunable parameters.", ""]
    else:
        lines += _summary(sweeps)
    for entry in sweeps:
        result: SweepResult = entry["result"]
        meta = result.meta
        sample = ""
        if meta["configurations"] < meta["configurations_in_grid"]:
            sample = (
                f" (budget: a deterministic sample of {meta['configurations']} of {meta['configurations_in_grid']})"
            )
        else:
            sample = f" (all {meta['configurations']})"
        lines += [
            f"## {result.backend} / {result.algorithm}: {result.workload} {result.direction}",
            "",
            f"Configurations{sample}; files: [`{entry['folder']}/`]({entry['folder']}/sweep.csv).",
            "",
            "| layer | default | default ms | best | best ms | best/default |",
            "|---|---|---|---|---|---|",
        ]
        for layer in result.layers:
            speed = "-" if layer.speedup is None else f"x{layer.speedup:.2f}"
            lines.append(
                f"| {layer.label} | {_params(layer.default)} | {_fmt_ms(layer.default_s)} | {_params(layer.best)} "
                f"| {_fmt_ms(layer.best_s)} | {speed} |"
            )
        total = "-"
        if result.best_total_s is not None and result.default_total_s is not None:
            total = f"x{result.default_total_s / result.best_total_s:.2f}"
        lines += [
            f"| **total** | | {_fmt_ms(result.default_total_s)} | {_params(result.best)} "
            f"| {_fmt_ms(result.best_total_s)} | {total} |",
            "",
        ]
        failed = [line for line in summary_lines(result) if line.startswith("FAILED")]
        lines += [f"- {line}" for line in failed] + ([""] if failed else [])
    if skipped:
        lines += ["## Not swept", ""] + [f"- {s}" for s in skipped] + [""]
    return "\n".join(lines)


def build_report(
    device: str,
    out: str | Path,
    *,
    budget_s: float = 120.0,
    backends: list[str] | None = None,
    algorithms: list[str] | None = None,
    repeat: int = 3,
    progress=None,
) -> dict:
    """Sweep every tunable algorithm of every available backend on ``device``; write the report.

    Parameters
    ----------
    device : {"cpu", "gpu"}
    out : path
        Folder for ``README.md`` and one sub-folder of sweep files per sweep.
    budget_s : float
        Seconds shared equally by the sweeps; a sweep whose grid would not
        fit measures a deterministic sample of it.
    backends : list of str, optional
        Restrict to these backends (default: every available one on ``device``).
    algorithms : list of str, optional
        Restrict to these algorithm names (default: every tunable one); a
        report split over several runs is joined by :func:`summarise_folder`.
    repeat : int
        Timed calls per configuration.
    progress : callable, optional
        ``progress(message)``.

    Returns
    -------
    dict
        ``sweeps`` (each with its result and folder), ``skipped``, ``report``
        (the path) and ``not_saved``: one line per file that could not be
        written where asked, saying where it went instead.

    Raises
    ------
    ValueError
        A bad device or algorithm name, or a file of the report that cannot
        be written (checked before the first sweep).
    """
    if device not in ("cpu", "gpu"):
        raise ValueError(f"--device must be 'cpu' or 'gpu'; got {device!r}")
    started = time.perf_counter()
    out = check_output_dir(out, "--out")
    infos = [b for b in list_backends() if b.device == device and (backends is None or b.name in backends)]
    skipped, todo = [], []
    for info in infos:
        if not info.available:
            skipped.append(f"{info.name}: unavailable ({info.reason})")
            continue
        backend = get_backend(info.name)
        for name, record in (backend.algorithm_table() or {}).items():
            if not record.tunables or (algorithms is not None and name not in algorithms):
                continue
            plans = seed_cases(device, record, backend)
            if not plans:
                skipped.append(f"{info.name}/{name}: runs none of the seed workloads")
            todo += [(backend, record, workload, direction, cases) for workload, direction, cases in plans]
    if algorithms is not None:
        check_algorithms(device, backends, algorithms)
    # Every file the report will write is checked before the first sweep, not after the last.
    report = check_writable_file(out / "README.md", "--out")
    for backend, record, workload, direction, _ in todo:
        check_sweep_files(
            out / f"{backend.name}-{record.name}-{workload}-{direction}", [t.name for t in record.tunables]
        )
    sweeps, not_saved = [], []
    for i, (backend, record, workload, direction, cases) in enumerate(todo):
        share = max(budget_s - (time.perf_counter() - started), 0.0) / (len(todo) - i)
        per_config = _per_config_s(backend, record, cases, repeat)
        limit = configurations_for_budget(len(record.configurations()), share, per_config)
        if progress:
            progress(f"{backend.name}/{record.name} on {workload} {direction}: {limit or 'all'} configurations")
        result = run_sweep(
            backend, record.name, cases, direction=direction, repeat=repeat, rounds=min(3, repeat), max_configs=limit
        )
        result.workload = workload
        folder = f"{backend.name}-{record.name}-{workload}-{direction}"
        write_sweep(result, out / folder)
        not_saved += result.meta.get("not_saved", [])
        sweeps.append(dict(result=result, folder=folder))
    text = _markdown(device, sweeps, skipped, budget_s, time.perf_counter() - started)
    saved = atomic_write_text(report, text, fallback=True)
    not_saved += [saved.warning] if saved.warning else []
    return dict(sweeps=sweeps, skipped=skipped, report=saved.path, not_saved=not_saved)


def check_algorithms(device: str, backends: list[str] | None, algorithms: list[str]) -> None:
    """Raise ValueError naming any of ``algorithms`` that no available backend swept on ``device`` has as a
    tunable algorithm (a report restricted to a misspelt name would sweep nothing, silently).
    """
    tunable = set()
    for info in list_backends():
        if info.device == device and info.available and (backends is None or info.name in backends):
            tunable |= {n for n, r in (get_backend(info.name).algorithm_table() or {}).items() if r.tunables}
    unknown = sorted(set(algorithms) - tunable)
    if unknown:
        raise ValueError(
            f"--algorithms: {', '.join(map(repr, unknown))} is not a tunable algorithm of the backends swept "
            f"on the {device} (those that are: {', '.join(sorted(tunable)) or 'none'})"
        )


#: What a sweep.json must hold for the summary: top-level text fields, and per layer.
_SWEEP_TEXT = ("backend", "algorithm", "workload", "direction", "device")


def _seconds_or_none(value) -> bool:
    """A finite number >= 0, or None."""
    if value is None:
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _layer_problem(layer) -> str | None:
    """What makes one ``layers`` entry of a sweep.json unreadable for the summary, or None."""
    if not isinstance(layer, dict) or not isinstance(layer.get("label"), str):
        return "a layer without a 'label'"
    for key in ("default", "best"):
        if layer.get(key) is not None and not isinstance(layer[key], dict):
            return f"layer {layer['label']!r}: {key!r} is not an object of parameters"
    for key in ("default_s", "best_s", "speedup"):
        if not _seconds_or_none(layer.get(key)):
            return f"layer {layer['label']!r}: {key!r} is not a number"
    return None


def read_sweep_file(path: str | Path) -> dict:
    """The data of one ``sweep.json``; ValueError naming the file if it is cut short, foreign or of another shape."""
    label = f"{path}"
    data = read_json(path, label)
    if not isinstance(data, dict):
        raise ValueError(f"{label}: not a sweep.json (not a JSON object)")
    missing = [k for k in _SWEEP_TEXT if not isinstance(data.get(k), str)]
    if missing:
        raise ValueError(f"{label}: not a sweep.json of this version (no text {', '.join(map(repr, missing))})")
    meta = data.get("meta")
    if not isinstance(meta, dict) or not all(isinstance(meta.get(k), str) for k in ("device_description", "date")):
        raise ValueError(f"{label}: not a sweep.json of this version ('meta' lacks the machine or the date)")
    if not isinstance(data.get("layers"), list):
        raise ValueError(f"{label}: not a sweep.json of this version (no 'layers' list)")
    for layer in data["layers"]:
        problem = _layer_problem(layer)
        if problem is not None:
            raise ValueError(f"{label}: not a sweep.json of this version ({problem})")
    return data


def summarise_folder(out: str | Path, note: str = "", *, warn: Callable[[str], None] | None = None) -> Path:
    """Write ``README.md`` of a report folder from the ``sweep.json`` files in its sub-folders.

    For a report whose run was cut short (a time limit on a lent machine):
    every sweep that finished wrote its files, and the summary is rebuilt
    from them. ``note`` is printed under the title (say what is missing).
    A ``sweep.json`` that cannot be read (cut short, foreign, of another
    shape) is skipped, and ``warn`` (default: :func:`warnings.warn`) gets one
    line naming it and why.

    Returns
    -------
    Path
        The README written (elsewhere, with a warning, if it could not be written in ``out``).

    Raises
    ------
    FileNotFoundError
        No ``*/sweep.json`` under ``out``.
    ValueError
        None of them could be read, or ``README.md`` cannot be written there
        (checked before reading).
    """
    warn = warn or (lambda line: warnings.warn(line, stacklevel=3))
    out = Path(out)
    target = check_writable_file(out / "README.md", "--summarise")
    paths = sorted(out.glob("*/sweep.json"))
    if not paths:
        raise FileNotFoundError(f"no */sweep.json under {out}")
    sweeps, data, skipped = [], [], []
    for path in paths:
        try:
            data.append(read_sweep_file(path))
        except ValueError as exc:
            skipped.append(str(exc))
            warn(f"skipped {exc}")
        else:
            sweeps.append(path)
    if not data:
        raise ValueError(f"no readable */sweep.json under {out}: {'; '.join(skipped)}")
    first = data[0]["meta"]
    lines = [
        f"# Tunable parameters: swept best vs hand-chosen default ({data[0]['device']})",
        "",
        f"Machine: {first['device_description']}. Date: {first['date']}. dtype float32.",
        "",
    ]
    if note:
        lines += [note, ""]
    if skipped:
        lines += [f"Skipped {len(skipped)} sweep file(s) that could not be read:", ""]
        lines += [f"- {line}" for line in skipped] + [""]
    lines += [
        "Rebuilt with `python -m convsuite.bench.sweep_report --summarise DIR` from the sweeps' own files. Every "
        "configuration was checked against the float64 reference; times are medians of interleaved repeats. "
        "Speedup = default time / best time on that layer.",
        "",
        "| backend / algorithm | workload | layer | default | default ms | best | best ms | best/default |",
        "|---|---|---|---|---|---|---|---|",
    ]
    faster = measured = 0
    for path, d in zip(sweeps, data):
        for layer in d["layers"]:
            speed = layer.get("speedup")
            if speed is not None:
                measured += 1
                faster += speed >= 1.1
            lines.append(
                f"| [{d['backend']} / {d['algorithm']}]({path.parent.name}/sweep.csv) | {d['workload']} "
                f"{d['direction']} | {layer['label']} | {_params(layer['default'])} | {_fmt_ms(layer['default_s'])} "
                f"| {_params(layer['best'])} | {_fmt_ms(layer['best_s'])} | "
                f"{'-' if speed is None else f'x{speed:.2f}'} |"
            )
    lines += [
        "",
        f"On {faster} of {measured} layers the swept best is at least 10% faster than the hand-chosen default "
        "(best/default >= 1 up to noise: the default is among the configurations measured).",
        "",
    ]
    saved = atomic_write_text(target, "\n".join(lines), fallback=True)
    if saved.warning:
        warn(saved.warning)
    return saved.path


def main(argv: list[str] | None = None) -> int:
    """``python -m convsuite.bench.sweep_report``: build the report, print where it is."""
    from ._arguments import backend_names, existing_folder, folder, positive, positive_float

    parser = argparse.ArgumentParser(
        prog="python -m convsuite.bench.sweep_report", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument("--device", choices=["cpu", "gpu"])
    parser.add_argument("--out", type=folder, help="folder, e.g. docs/measurements/sweep-cpu-<date>/")
    parser.add_argument(
        "--summarise", type=existing_folder, metavar="DIR", help="only rebuild DIR/README.md from DIR/*/sweep.json"
    )
    parser.add_argument("--note", default="", help="with --summarise: a line under the title")
    parser.add_argument(
        "--budget-s", type=positive_float, default=120.0, help="seconds shared by all sweeps (default 120)"
    )
    parser.add_argument(
        "--backends", type=backend_names(), default=None, help="comma-separated (default: every available one)"
    )
    parser.add_argument("--algorithms", default=None, help="comma-separated (default: every tunable one)")
    parser.add_argument("--repeat", type=positive, default=3, help="timed calls per configuration (default 3)")
    args = parser.parse_args(argv)

    def warn(line: str) -> None:
        print(f"warning: {line}", file=sys.stderr)

    if args.summarise:
        try:
            written = summarise_folder(args.summarise, args.note, warn=warn)
        except (FileNotFoundError, ValueError) as exc:
            parser.error(f"--summarise: {exc}")
        print(f"written: {written}")
        return 0
    missing = [f"--{name}" for name in ("device", "out") if getattr(args, name) is None]
    if missing:
        parser.error(f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} required (or --summarise DIR)")
    if args.budget_s <= 0 or args.repeat < 1:
        parser.error(f"--budget-s must be > 0 and --repeat >= 1; got {args.budget_s}, {args.repeat}")
    names = args.backends
    if names is not None:
        on_device = {b.name for b in list_backends() if b.device == args.device}
        elsewhere = [n for n in names if n not in on_device]
        if elsewhere:
            parser.error(
                f"--backends: {', '.join(map(repr, elsewhere))} is not a {args.device} backend "
                f"(those that are: {', '.join(sorted(on_device)) or 'none'})"
            )
    wanted = None if args.algorithms is None else [n.strip() for n in args.algorithms.split(",") if n.strip()]
    if wanted is not None:
        try:
            check_algorithms(args.device, names, wanted)
        except ValueError as exc:
            parser.error(str(exc))
    try:
        done = build_report(
            args.device,
            args.out,
            budget_s=args.budget_s,
            backends=names,
            algorithms=wanted,
            repeat=args.repeat,
            progress=lambda message: print(message, file=sys.stderr),
        )
    except ValueError as exc:  # raised before the first sweep: a file of the report that cannot be written
        parser.error(str(exc))
    print(f"written: {done['report']} ({len(done['sweeps'])} sweeps)")
    for line in done["not_saved"]:
        warn(line)
    return 2 if done["not_saved"] else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
