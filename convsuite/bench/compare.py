"""``convsuite compare``: every backend and anchor on a workload, side by side."""

from __future__ import annotations

import datetime as dt
import os
import platform
from importlib import metadata
from pathlib import Path

from .._registry import list_backends
from .._threads import get_num_threads
from .anchors import ANCHORS, GPU_ANCHORS
from .ceilings import Ceilings, measure_cpu_ceilings, measure_gpu_ceilings
from .measure import Result, measure
from .report import print_table, write_reports
from .workloads import get_workload

__all__ = ["run_comparison", "machine_metadata"]

_VERSIONS = ("numpy", "scipy", "numba", "torch", "cupy-cuda13x", "matplotlib", "rich")


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_metadata() -> dict:
    """Machine, library versions and thread counts, for the JSON report."""
    from ..cli import cpu_description, gpu_description

    threads = {"numba backend": get_num_threads(), "os.cpu_count": os.cpu_count()}
    try:
        import torch

        threads["torch"] = torch.get_num_threads()
    except ImportError:
        pass
    return dict(
        cpu=cpu_description(),
        gpu=gpu_description(),
        platform=platform.platform(),
        python=platform.python_version(),
        versions={d: _version(d) for d in _VERSIONS},
        threads=threads,
    )


def run_comparison(
    workload: str = "default",
    backends: list[str] | None = None,
    anchors: bool = True,
    dtype: str = "float32",
    repeat: int = 5,
    baseline: str | None = None,
    out: str | Path | None = "compare-out",
    progress: bool = True,
    device: str = "cpu",
    ceilings: Ceilings | None = None,
) -> tuple[list[Result], dict]:
    """Measure every chosen backend (and installed anchor) on every case of a workload.

    Returns the results and the metadata; writes reports to ``out`` unless it is
    None. ``ceilings`` are measured on the spot unless given.
    """
    if device not in ("cpu", "gpu"):
        raise ValueError(f"`device` must be 'cpu' or 'gpu'; got {device!r}")
    rows = list_backends()
    if backends is None:
        # On a GPU the workloads are sized for it: the CPU backends would take minutes.
        backends = [b.name for b in rows if device == "cpu" or b.device == "gpu"]
    if device == "gpu" and not any(b.available for b in rows if b.device == "gpu" and b.name in backends):
        reasons = "; ".join(f"{b.name}: {b.reason}" for b in rows if b.device == "gpu")
        raise ValueError(f"--device gpu needs an available GPU backend ({reasons or 'none registered'})")
    if baseline is None:
        baseline = "numpy" if device == "cpu" else "cuDNN (torch, TF32 off)"
    contenders = [(name, "backend") for name in backends]
    if anchors:
        contenders += [(name, "anchor") for name in (ANCHORS if device == "cpu" else GPU_ANCHORS)]
    cases = get_workload(workload, device)
    try:
        import torch

        torch.set_num_threads(get_num_threads())  # same thread budget as the numba backend
    except ImportError:
        pass
    if ceilings is None:
        ceilings = measure_cpu_ceilings() if device == "cpu" else measure_gpu_ceilings()
    results: list[Result] = []
    total = len(cases) * len(contenders)
    if progress:
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            task = bar.add_task(f"{workload}", total=total)
            for case in cases:
                for name, kind in contenders:
                    bar.update(task, description=f"{case.label} / {name}")
                    results.append(measure(case, name, kind, dtype, repeat, ceilings))
                    bar.advance(task)
    else:
        results = [measure(c, n, k, dtype, repeat, ceilings) for c in cases for n, k in contenders]
    # Anchors that apply to none of the cases only add noise to the table.
    used = {r.contender for r in results if r.status != "skipped" or r.kind == "backend"}
    results = [r for r in results if r.contender in used]
    meta = dict(
        date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        workload=workload,
        device=device,
        dtype=dtype,
        repeat=repeat,
        baseline=baseline,
        machine=machine_metadata(),
        ceilings=ceilings.as_dict(),
    )
    where = meta["machine"]["cpu"] if device == "cpu" else meta["machine"]["gpu"]
    title = (
        f"{workload}, {dtype}, on {where} (copy {ceilings.copy_gbs:.1f} GB/s, "
        f"GEMM {ceilings.gemm_gflops:.0f} GFLOP/s)"
    )
    print_table(results, baseline, title)
    if out is not None:
        paths = write_reports(results, meta, baseline, Path(out))
        print("written: " + ", ".join(str(p) for p in paths.values()))
    return results, meta
