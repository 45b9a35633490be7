"""CUDA plumbing of the cupy backend: modules, kernel handles, device facts, timing.

Everything here is per device and cached: NVRTC compiles each source once
per device and per configuration (the shared ``-D`` constants of
``_cuda_sources``, some replaced by a tunable parameter's value), a kernel
handle is looked up once, the multiprocessor count is queried once. cupy is
imported on first use only.

Across processes: CuPy writes every NVRTC result to its disk cache
(``CUPY_CACHE_DIR``, default ``~/.cupy/kernel_cache``) and, from CuPy 14.2 on,
reads modules built with ``name_expressions`` back from it too, with the
mangled names NVRTC produced (``cupy/cuda/compiler.py``,
``_compile_with_cache_cuda``). Each configuration is its own entry, since the
key holds the ``-D`` options; the source handed to NVRTC ends with the hash of
the headers it includes (:func:`_cuda_sources.compile_source`), since the key
does not read them. So a configuration compiled by one process (a sweep, a
tuner) is loaded, not compiled, by the next; :func:`disk_cache` says where,
and whether this CuPy reads it back. Within a process each configuration is
built once per device. :func:`compile_seconds` keeps what each build took (a
compile, or a load from the disk cache), so a sweep reports it apart from
run time.
"""

from __future__ import annotations

import math
import re
import threading
import time

import numpy as np

from ._cuda_sources import (
    DEFINES,
    KERNELS,
    compile_options,
    compile_source,
    name_expression,
    name_expressions,
    normalize_overrides,
    source_dir,
)

__all__ = [
    "THREADS",
    "EventTimer",
    "compile_seconds",
    "cupy",
    "disk_cache",
    "device_id",
    "grid_stride_blocks",
    "i32",
    "kernel",
    "module",
    "sm_count",
    "zeros",
]

THREADS = DEFINES["CS_THREADS"]

_lock = threading.Lock()
_modules: dict[tuple[int, str, tuple], object] = {}
_compile_seconds: dict[tuple[str, tuple], float] = {}
_functions: dict[tuple, object] = {}
_sm_counts: dict[int, int] = {}
_zero_cache: dict[tuple, object] = {}


def cupy():
    """The cupy module (imported here so that importing convsuite never needs it)."""
    import cupy as cp

    return cp


def device_id() -> int:
    """The current CUDA device's ordinal."""
    return cupy().cuda.Device().id


def module(filename: str, overrides=()):
    """The compiled module of ``filename`` on the current device, built once per configuration.

    ``overrides`` replaces some ``-D`` constants (see
    ``_cuda_sources.OVERRIDABLE``): a mapping or ``(name, value)`` pairs;
    values equal to the defaults are dropped, so the default configuration
    is one module whatever the spelling.
    """
    overrides = normalize_overrides(filename, overrides)
    cp = cupy()
    key = (cp.cuda.Device().id, filename, overrides)
    with _lock:
        compiled = _modules.get(key)
        if compiled is None:
            t0 = time.perf_counter()
            compiled = cp.RawModule(
                code=compile_source(filename),
                options=("-std=c++17", f"-I{source_dir()}", *compile_options(overrides)),
                name_expressions=name_expressions(filename),
            )
            compiled.compile()
            _compile_seconds[(filename, overrides)] = time.perf_counter() - t0
            _modules[key] = compiled
        return compiled


#: The first CuPy release whose disk cache reads back modules built with name_expressions.
DISK_CACHE_CUPY = (14, 2)


def disk_cache() -> dict:
    """Where compiled configurations persist across processes, and whether they are read back.

    Returns
    -------
    dict
        ``directory``: CuPy's kernel cache (``CUPY_CACHE_DIR`` or
        ``~/.cupy/kernel_cache``); ``reads_templates``: whether the installed
        CuPy (>= 14.2) loads our template modules from it instead of
        compiling them again; ``cupy``: its version; ``in_memory``: whether
        ``CUPY_CACHE_IN_MEMORY`` keeps the cache off the disk.
    """
    import os

    cp = cupy()
    release = tuple(int(part) for part in re.findall(r"\d+", cp.__version__)[:2])
    in_memory = os.environ.get("CUPY_CACHE_IN_MEMORY", "0") not in ("", "0")
    directory = os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")
    return {
        "directory": directory,
        "reads_templates": release >= DISK_CACHE_CUPY and not in_memory,
        "cupy": cp.__version__,
        "in_memory": in_memory,
    }


def compile_seconds() -> dict[tuple[str, tuple], float]:
    """Seconds each configuration's compile took in this process: ``{(file, overrides): seconds}``.

    ``overrides`` is the normalised tuple of ``(name, value)`` pairs (empty
    for the default configuration); a module compiled on several devices
    keeps its last time.
    """
    with _lock:
        return dict(_compile_seconds)


def compile_all() -> None:
    """Build every module on the current device (what a first call would do)."""
    for filename in KERNELS:
        module(filename)


def kernel(filename: str, name: str, dtype: str, total: int | None = None, overrides=()):
    """A kernel handle; ``total`` picks the 64-bit-index instantiation of a ``|I`` kernel when needed.

    ``overrides`` selects the configuration's module (see :func:`module`).
    Handles are cached: a module lookup costs a driver call, which at a few
    microseconds matters for small layers.
    """
    overrides = normalize_overrides(filename, overrides)
    if total is not None:
        name += "|I"
    wide = total is not None and total >= 2**31 - 1
    key = (device_id(), filename, name, dtype, wide, overrides)
    function = _functions.get(key)
    if function is None:
        function = _functions[key] = module(filename, overrides).get_function(name_expression(name, dtype, wide))
    return function


def sm_count() -> int:
    """Multiprocessors of the current device (queried once per device: the query is slow)."""
    device = device_id()
    count = _sm_counts.get(device)
    if count is None:
        count = _sm_counts[device] = cupy().cuda.runtime.getDeviceProperties(device)["multiProcessorCount"]
    return count


def grid_stride_blocks(total: int) -> int:
    """Enough blocks to fill the device (32 per SM); grid-stride kernels loop over the rest."""
    return max(1, min(math.ceil(total / THREADS), sm_count() * 32))


def zeros(n: int, dtype):
    """A cached zero vector (a missing bias): allocating one per call would add a launch."""
    cp = cupy()
    key = (cp.cuda.Device().id, n, str(dtype))
    array = _zero_cache.get(key)
    if array is None:
        array = _zero_cache[key] = cp.zeros(n, dtype=dtype)
    return array


def i32(*values) -> tuple:
    """Kernel arguments as 32-bit ints."""
    return tuple(np.int32(v) for v in values)


class EventTimer:
    """CUDA events on the current stream; ``stop()`` synchronises and returns seconds."""

    __slots__ = ("_start", "_end")

    def start(self) -> None:
        cp = cupy()
        self._start, self._end = cp.cuda.Event(), cp.cuda.Event()
        self._start.record()

    def stop(self) -> float:
        self._end.record()
        self._end.synchronize()
        return cupy().cuda.get_elapsed_time(self._start, self._end) / 1e3
