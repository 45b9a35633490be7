"""What machine a measurement ran on: CPU, BLAS, GPU, driver, library versions.

Every results file carries :func:`machine_metadata`, so a figure can always
be traced to the hardware and software that produced it. Nothing here
prints; the CLI and the reports decide how to show it.
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

__all__ = [
    "LIBRARIES",
    "blas_description",
    "cpu_description",
    "cpu_flags",
    "gpu_description",
    "library_versions",
    "machine_metadata",
]

#: Distributions whose versions a results file records.
LIBRARIES = (
    "convsuite",
    "numpy",
    "scipy",
    "numba",
    "llvmlite",
    "cupy-cuda13x",
    "torch",
    "joblib",
    "dask",
    "threadpoolctl",
    "matplotlib",
    "rich",
    "asv",
)

#: The instruction-set extensions that decide which kernels a compiler may
#: emit (what a ``-march=native`` build depends on).
_INTERESTING_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "neon",
    "asimd",
    "sve",
)


def _cpuinfo() -> dict[str, str]:
    """The first processor's entries of /proc/cpuinfo (empty elsewhere)."""
    entries: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    if entries:
                        break
                    continue
                key, _, value = line.partition(":")
                entries.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return entries


def cpu_description() -> str:
    """CPU model name and logical core count, as far as the OS tells, and how many of them this
    process may run on where that is fewer (``taskset``, a container's CPU set).
    """
    info = _cpuinfo()
    model = info.get("model name") or platform.processor() or platform.machine()
    from .._threads import usable_cpus

    total = os.cpu_count()
    usable = usable_cpus()
    limited = f" ({usable} usable by this process)" if total and usable < total else ""
    return f"{model}, {total} logical cores{limited}"


def cpu_flags() -> list[str]:
    """The vector instruction-set extensions this CPU reports (sorted)."""
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    return sorted(f for f in _INTERESTING_FLAGS if f in flags)


def blas_description() -> list[dict]:
    """Every BLAS/OpenMP library loaded in this process, through threadpoolctl.

    Each entry has the library's role (``user_api``), vendor
    (``internal_api``: openblas, mkl, blis...), version, thread count and,
    for OpenBLAS, the kernel architecture it chose. Empty if threadpoolctl is
    not installed.
    """
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    import numpy  # noqa: F401  (loads NumPy's BLAS, so it is listed)

    keys = ("user_api", "internal_api", "version", "num_threads", "architecture", "threading_layer")
    return [{k: pool[k] for k in keys if k in pool} for pool in threadpool_info()]


def gpu_description() -> str:
    """The first CUDA device through CuPy, or why none was found."""
    try:
        import cupy
    except Exception as exc:  # not installed, or a broken CUDA install
        return f"none found (cupy not importable: {type(exc).__name__})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
        if count == 0:
            return "none found (no CUDA device)"
        props = cupy.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        return f"{name} ({count} device{'s' if count > 1 else ''}), {props['totalGlobalMem'] / 2**30:.0f} GiB"
    except Exception as exc:
        return f"none found ({type(exc).__name__}: {exc})"


def _cuda_versions() -> dict[str, str]:
    """CUDA driver and runtime versions through CuPy, when a GPU is usable."""
    try:
        import cupy

        driver = cupy.cuda.runtime.driverGetVersion()
        runtime = cupy.cuda.runtime.runtimeGetVersion()
    except Exception:  # no cupy, no driver, no device: nothing to report
        return {}

    def dotted(v: int) -> str:
        return f"{v // 1000}.{(v % 1000) // 10}"

    return {"cuda_driver": dotted(driver), "cuda_runtime": dotted(runtime)}


def library_versions() -> dict[str, str]:
    """Installed version of every distribution in :data:`LIBRARIES`."""
    versions = {}
    for dist in LIBRARIES:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def _threads() -> dict[str, int | None]:
    """Thread counts that decide CPU timings."""
    from .._threads import get_num_threads, usable_cpus

    threads: dict[str, int | None] = {
        "numba backend": get_num_threads(),
        "os.cpu_count": os.cpu_count(),
        "usable CPUs": usable_cpus(),
    }
    if "torch" in sys.modules or _importable("torch"):
        try:
            import torch

            threads["torch"] = torch.get_num_threads()
        except Exception:  # a broken torch install must not stop a measurement
            pass
    return threads


def _importable(name: str) -> bool:
    """Whether a module can be found without importing it."""
    from importlib.util import find_spec

    return find_spec(name) is not None


def machine_metadata() -> dict:
    """Machine, libraries and thread counts, for every results file.

    Returns
    -------
    dict
        ``cpu`` (model and cores), ``cpu_flags``, ``blas`` (threadpoolctl's
        view: vendor, version, threads), ``gpu``, CUDA ``driver`` versions when
        there is a GPU, ``platform``, ``python``, ``versions`` of the libraries
        and ``threads``.
    """
    return dict(
        cpu=cpu_description(),
        cpu_flags=cpu_flags(),
        blas=blas_description(),
        gpu=gpu_description(),
        driver=_cuda_versions(),
        platform=platform.platform(),
        python=platform.python_version(),
        versions=library_versions(),
        threads=_threads(),
    )
