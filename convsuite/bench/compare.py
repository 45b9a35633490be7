"""``convsuite compare``: every backend and anchor on a workload, side by side.

:func:`check_request` validates a whole request (cases, contenders,
baseline, output folder, saved run) and raises ``ValueError`` with one line
before anything is measured; :func:`run_comparison` then measures and
returns the results and their metadata (and writes the reports if asked).
Nothing here prints: the command line decides what to show.

Every contender is measured as it runs alone. torch and numba each drive an
OpenMP runtime, whose idle threads spin by default and take cores from the
next contender's call; so the comparison makes their waits passive
(:func:`convsuite.bench.timing.passive_openmp`) before either starts. Where
that is too late (torch was imported before, with spinning waits; or the
environment asks for another policy), the cases are measured in a worker
process started with passive waits instead. ``meta["isolation"]`` says which.
"""

from __future__ import annotations

import datetime as dt
import math
import multiprocessing
import os
import pickle
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from .._files import read_json
from .._precision import get_precision, set_precision
from .._registry import get_backend, list_backends, register_backend
from .._threads import get_num_threads, set_num_threads
from .._timing import check_settings
from ._arguments import check_output_dir
from .anchors import ANCHORS, GPU_ANCHORS
from .ceilings import Ceilings, measure_cpu_ceilings, measure_gpu_ceilings
from .machine import machine_metadata
from .measure import ROUNDS, Result, measure_case
from .report import check_report_files, ratios_to_saved, unavailable_contenders, write_reports
from .timing import WAIT_POLICY, openmp_waits, passive_openmp
from .workloads import Case, get_workload

__all__ = [
    "Request",
    "check_output_dir",
    "check_request",
    "load_saved_run",
    "machine_metadata",
    "measuring_process",
    "run_comparison",
]

#: ``progress(done, total, description)``, called before and after each measurement.
Progress = Callable[[int, int, str], None]


@dataclass
class Request:
    """A validated comparison: what to measure and against what."""

    cases: list[Case]
    contenders: list[tuple[str, str]]  # (name, "backend" | "anchor")
    baseline: str
    out: Path | None
    saved: dict | None
    saved_path: str | None


def _default_baseline(backends: list[str], anchors: bool, device: str) -> str:
    """Numpy on the CPU and cuDNN on a GPU, if they take part; else the first backend."""
    preferred = "numpy" if device == "cpu" else "cuDNN (TF32 off)"
    if preferred in backends or (anchors and preferred in GPU_ANCHORS):
        return preferred
    return backends[0]


#: The fields of a results.json row that ``--compare-to`` reads, each a string.
_SAVED_KEYS = ("case", "contender", "direction", "dtype", "status")


def _positive_or_none(value) -> bool:
    """A finite number > 0, or None (a figure that was not measured, or not finite when written)."""
    if value is None:
        return True
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _row_problem(row) -> str | None:
    """What makes ``row`` not a row of a results.json that ``--compare-to`` can read, or None."""
    if not isinstance(row, dict):
        return f"is a {type(row).__name__}, not an object"
    missing = [k for k in _SAVED_KEYS if not isinstance(row.get(k), str)]
    if missing:
        return f"has no text {', '.join(map(repr, missing))} field"
    if row["status"] == "ok":
        bad = [k for k in ("gflops", "end_to_end_s") if not _positive_or_none(row.get(k))]
        if bad:
            return f"has a {' and '.join(map(repr, bad))} that is not a positive number"
        shape = row.get("x_shape", [])
        if not isinstance(shape, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in shape):
            return "has an 'x_shape' that is not a list of integers"
    return None


def load_saved_run(path: str | Path) -> dict:
    """A ``results.json`` written by an earlier comparison; ValueError naming the file if it is not one.

    Checked whole, before anything is measured: the file is read (capped
    size, UTF-8, JSON), its ``meta`` must be an object and ``results`` a
    non-empty list of rows each with the fields the comparison reads
    (``case``, ``contender``, ``direction``, ``dtype``, ``status``; for ``ok``
    rows ``gflops`` and ``end_to_end_s`` numbers > 0 or null). An older
    file, written before rows had a ``direction``, is refused by name.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "results.json"
    label = f"--compare-to {str(path)!r}"
    data = read_json(path, label)
    if not isinstance(data, dict) or not isinstance(data.get("results"), list) or "meta" not in data:
        raise ValueError(f"{label}: not a results.json of convsuite compare (no 'meta' and 'results' list)")
    meta = data["meta"]
    if not isinstance(meta, dict) or not isinstance(meta.get("machine", {}) or {}, dict):
        raise ValueError(f"{label}: not a results.json of convsuite compare ('meta' is not an object with a 'machine')")
    if not data["results"]:
        raise ValueError(f"{label}: has no results to compare with (its 'results' list is empty)")
    for i, row in enumerate(data["results"]):
        problem = _row_problem(row)
        if problem is not None:
            old = (
                " (written by an older convsuite? compare against a run of this version)"
                if (isinstance(row, dict) and "direction" not in row)
                else ""
            )
            raise ValueError(f"{label}: not a results.json this version can read: result {i + 1} {problem}{old}")
    data["path"] = str(path)
    return data


def check_request(
    workload: str = "default",
    backends: list[str] | None = None,
    anchors: bool = True,
    baseline: str | None = None,
    out: str | Path | None = "compare-out",
    device: str = "cpu",
    cases: list[Case] | None = None,
    compare_to: str | Path | None = None,
) -> Request:
    """Validate every part of a comparison before anything is measured.

    Raises
    ------
    ValueError
        With one line naming the argument at fault: an unknown or
        unavailable backend asked for by name, a baseline that takes no
        part, a folder that cannot be written, a saved run that cannot be
        read, a device without a backend.
    """
    if device not in ("cpu", "gpu"):
        raise ValueError(f"`device` must be 'cpu' or 'gpu'; got {device!r}")
    rows = {b.name: b for b in list_backends()}
    if backends is None:
        # On a GPU the workloads are sized for it: the CPU backends would take minutes.
        backends = [name for name, b in rows.items() if device == "cpu" or b.device == "gpu"]
    else:
        if isinstance(backends, str) or not backends:
            raise ValueError(f"--backends must be a list naming at least one of {', '.join(rows)}; got {backends!r}")
        # Not a string: a list inside the list is unhashable, so it cannot even be looked up.
        unknown = [n for n in backends if not isinstance(n, str) or n not in rows]
        if unknown:
            got = ", ".join(n if isinstance(n, str) else repr(n) for n in unknown)
            raise ValueError(f"--backends must be names from {', '.join(rows)}; got unknown {got}")
        unavailable = [f"{n} ({rows[n].reason})" for n in backends if not rows[n].available]
        if unavailable:
            raise ValueError(f"--backends names an unavailable backend: {'; '.join(unavailable)}")
    if device == "gpu" and not any(rows[n].available for n in backends if rows[n].device == "gpu"):
        reasons = "; ".join(f"{b.name}: {b.reason}" for b in rows.values() if b.device == "gpu")
        raise ValueError(f"--device gpu needs an available GPU backend ({reasons or 'none registered'})")
    anchor_names = list(ANCHORS if device == "cpu" else GPU_ANCHORS) if anchors else []
    contenders = [(name, "backend") for name in backends] + [(name, "anchor") for name in anchor_names]
    if baseline is None:
        baseline = _default_baseline(backends, anchors, device)
    elif not isinstance(baseline, str) or baseline not in dict(contenders):  # a list is unhashable: no lookup
        raise ValueError(f"--baseline must be one of the contenders ({', '.join(dict(contenders))}); got {baseline!r}")
    if cases is None:
        cases = get_workload(workload, device)
    if not cases:
        raise ValueError("nothing to compare: no cases")
    strays = [c for c in cases if not isinstance(c, Case)]
    if strays:
        raise ValueError(f"`cases` must be Case objects (convsuite.bench.workloads.Case); got {strays[0]!r}")
    labels = [c.label for c in cases]
    if len(set(labels)) != len(labels):
        raise ValueError(f"case names must be unique; got {labels}")
    saved = None if compare_to is None else load_saved_run(compare_to)
    return Request(
        cases=cases,
        contenders=contenders,
        baseline=baseline,
        out=None if out is None else check_report_files(out),
        saved=saved,
        saved_path=None if saved is None else saved["path"],
    )


def _start_worker(threads: int, precision: str) -> None:
    """In the worker process: the parent's thread budget and precision policy (its waits are passive)."""
    passive_openmp()
    set_num_threads(threads)
    set_precision(precision)
    _torch_threads()


def _torch_threads() -> None:
    """Give torch the numba backend's thread budget, if torch is installed (imported after passive_openmp)."""
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(get_num_threads())  # same thread budget as the numba backend


@contextmanager
def _environment(name: str, value: str) -> Iterator[None]:
    """``os.environ[name] = value`` inside the block (a process started there inherits it), then as before."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _registered() -> list[str]:
    """The backend names registered in this process (asked of the worker)."""
    return [b.name for b in list_backends()]


def _register(blob: bytes) -> None:
    """In the worker: register a backend the parent registered (pickled there)."""
    register_backend(pickle.loads(blob), replace=True)


def _carry_backends(executor: ProcessPoolExecutor, names: list[str]) -> str | None:
    """Register in the worker the backends of ``names`` that only this process has; why not, if one cannot be."""
    known = set(executor.submit(_registered).result())
    for name in names:
        if name in known:
            continue
        try:
            blob = pickle.dumps(get_backend(name))
        except Exception as exc:  # a backend defined in __main__ or a notebook, a lock inside: not portable
            return f"backend {name!r} cannot be sent to a worker process ({type(exc).__name__}: {exc})"
        executor.submit(_register, blob).result()
    return None


@contextmanager
def measuring_process(backends: list[str] = ()) -> Iterator[tuple[Callable, str]]:
    """``(measure_case, how)``: where the cases are measured, and a line saying so.

    In this process when its OpenMP waits are passive (set before torch and
    numba started); else in one worker process, started (``spawn``) with
    ``OMP_WAIT_POLICY=PASSIVE``, this process's thread budget and precision
    policy, which measures every case in turn (its JIT and disk caches stay
    warm from case to case). Backends registered only here are sent to it;
    one that cannot be sent keeps the measurement here, and the line says
    that contenders may then slow each other down.
    """
    passive_openmp()
    waits = openmp_waits()
    if waits.passive:
        _torch_threads()
        yield measure_case, f"{waits.description}; contenders timed interleaved in this process"
        return
    context = multiprocessing.get_context("spawn")
    with _environment(WAIT_POLICY, "PASSIVE"):
        executor = ProcessPoolExecutor(
            1, context, initializer=_start_worker, initargs=(get_num_threads(), get_precision())
        )
        executor.submit(os.getpid).result()  # started now, while the environment says PASSIVE
    try:
        stuck = _carry_backends(executor, list(backends))
        if stuck is not None:
            executor.shutdown()
            _torch_threads()
            yield (
                measure_case,
                f"contenders timed interleaved in this process, where {waits.description}, so they may slow each "
                f"other down: a worker process with passive waits was not possible ({stuck}); set "
                f"{WAIT_POLICY}=PASSIVE before importing torch, or run `convsuite compare`",
            )
            return
        how = (
            f"measured in a worker process with {WAIT_POLICY}=PASSIVE, contenders timed interleaved there "
            f"(here: {waits.description})"
        )
        yield (lambda *args, **kwargs: executor.submit(measure_case, *args, **kwargs).result()), how
    finally:
        executor.shutdown(cancel_futures=True)


def run_comparison(
    workload: str = "default",
    backends: list[str] | None = None,
    anchors: bool = True,
    dtype: str = "float32",
    repeat: int = 5,
    baseline: str | None = None,
    out: str | Path | None = "compare-out",
    progress: Progress | bool | None = None,
    device: str = "cpu",
    ceilings: Ceilings | None = None,
    cases: list[Case] | None = None,
    compare_to: str | Path | None = None,
    request: Request | None = None,
) -> tuple[list[Result], dict]:
    """Measure every chosen backend (and anchor) on every case; return results and metadata.

    Parameters
    ----------
    workload : str
        A preset of :mod:`convsuite.bench.workloads`, used unless ``cases`` is given.
    backends : list of str, optional
        Backends by name (each must be available); all registered ones by default.
    anchors : bool
        Include torch / NumPy / SciPy (cuDNN / cupyx on a GPU) where installed.
    dtype, repeat, device :
        As ``convsuite compare`` takes them.
    baseline : str, optional
        The contender speedups are relative to.
    out : path, optional
        Folder for results.json, results.csv, report.md and plots; None writes nothing.
    progress : callable or bool, optional
        ``progress(done, total, description)``; falsy for none.
    ceilings : Ceilings, optional
        Measured on the spot unless given.
    cases : list of Case, optional
        The user's own cases (:mod:`convsuite.bench.user_cases`).
    compare_to : path, optional
        An earlier results.json; the metadata then has ``compare_to`` with
        the speed ratio of every result found in both.
    request : Request, optional
        An already validated request (from :func:`check_request`).

    Returns
    -------
    results : list of Result
    meta : dict
        Date, cases, machine, ceilings, ``isolation`` (how contenders were
        kept from starving each other), ``method``, ``unavailable`` (each
        contender that could take part in no case, and why: listed once),
        notes (plots skipped), ``files`` written and, with ``compare_to``,
        the ratios.
    """
    passive_openmp()  # before anything here loads numba's or torch's OpenMP runtime
    check_settings(repeat=repeat)  # before the ceilings are measured, not after
    if request is None:
        request = check_request(workload, backends, anchors, baseline, out, device, cases, compare_to)
    if cases is not None:
        workload = "custom" if all(c.workload == "custom" for c in cases) else workload
    if ceilings is None:
        ceilings = measure_cpu_ceilings() if device == "cpu" else measure_gpu_ceilings()
    results: list[Result] = []
    total = len(request.cases) * len(request.contenders)
    rounds = min(ROUNDS, repeat)
    backend_names = [name for name, kind in request.contenders if kind == "backend"]
    with measuring_process(backend_names) as (measure_one, isolation):
        for case in request.cases:
            if callable(progress):
                progress(len(results), total, case.label)
            results += measure_one(case, request.contenders, dtype, repeat, ceilings, rounds=rounds)
    if callable(progress):
        progress(total, total, "done")
    unavailable = unavailable_contenders(results)  # listed once, under the table
    # Anchors that apply to none of the cases only add noise to the table.
    used = {r.contender for r in results if r.status != "skipped" or r.kind == "backend"}
    results = [r for r in results if r.contender in used]
    meta = dict(
        date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        workload=workload,
        device=device,
        dtype=dtype,
        repeat=repeat,
        baseline=request.baseline,
        cases=[c.as_dict() for c in request.cases],
        machine=machine_metadata(),
        ceilings=ceilings.as_dict(),
        rounds=rounds,
        isolation=isolation,
        method=(
            f"each contender called until its time per call was stable (first call and warm-up reported apart), "
            f"then the contenders of a case timed interleaved: {repeat} calls each in {rounds} rounds, medians"
        ),
        unavailable=unavailable,
        notes=[],
    )
    if request.saved is not None:
        saved_meta = request.saved.get("meta", {})
        meta["compare_to"] = dict(
            path=request.saved_path,
            date=saved_meta.get("date"),
            machine=(saved_meta.get("machine") or {}).get("cpu"),
            ratios=ratios_to_saved(results, request.saved["results"]),
        )
    if request.out is not None:
        meta["files"] = {k: str(p) for k, p in write_reports(results, meta, request.baseline, request.out).items()}
    return results, meta
