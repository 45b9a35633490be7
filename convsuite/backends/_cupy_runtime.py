"""CUDA plumbing of the cupy backend: modules, kernel handles, packed launches, device facts, timing.

Everything here is per device and cached: NVRTC compiles each kernel (an
kernel template of a ``cupy._sources.CudaSource``: one template argument list,
both dtypes, and both index types where it has them) once per device and per
configuration (the source's ``-D`` constants, some replaced by a tunable
parameter's value), a kernel handle is looked up once,
the multiprocessor count is queried once. cupy is imported on first use only.
A module per kernel rather than per file, because a first call compiles only
what it runs: the tf32x3 forward kernel alone compiles in ~4 s, its file's
ten float32 kernels (forward and weight gradient, every tile and epilogue)
in ~65 s (nvcc -cubin sm_90 on the 2-core VM, 2026-11-26).

Across processes: CuPy writes every NVRTC result to its disk cache
(``CUPY_CACHE_DIR``, default ``~/.cupy/kernel_cache``) and, from CuPy 14.2 on,
reads modules built with ``name_expressions`` back from it too, with the
mangled names NVRTC produced (``cupy/cuda/compiler.py``,
``_compile_with_cache_cuda``). Each configuration is its own entry, since the
key holds the ``-D`` options; the source handed to NVRTC ends with the hash of
the headers it includes (:func:`.cupy._sources.compile_source`), since the key
does not read them. So a configuration compiled by one process (a sweep, a
tuner) is loaded, not compiled, by the next; :func:`disk_cache` says where,
and whether this CuPy reads it back. Within a process each configuration is
built once per device. :func:`compile_seconds` keeps what each build took (a
compile, or a load from the disk cache), so a sweep reports it apart from
run time.

A cache that cannot be read (a cubin whose hash matches but that the driver
refuses, a file that cannot be opened) must not break the backend: a module
whose build fails is built once more with CuPy's disk cache bypassed
(``CUPY_CACHE_IN_MEMORY``), with one warning naming the cache; an error that
the bypass repeats is the module's own, and is raised (:func:`_build`).

Fork. CUDA cannot be used in a child forked after the parent initialised it
(the driver's state is not copied; calls fail or hang). The backend then says
it is unavailable, and why (:func:`fork_refusal`), so ``"auto"`` carries on
with the CPU backends; every cached handle and lock is reset in the child.

Per call: a plan's kernels run through :class:`PackedLaunch` (:func:`bind`),
whose argument block is written once; a call fills in the arrays' pointers
and calls the driver, instead of CuPy converting every argument again.
"""

from __future__ import annotations

import ctypes
import math
import os
import re
import struct
import threading
import time
import warnings
import weakref
from contextlib import contextmanager

import numpy as np

from .. import _forksafe
from .cupy._sources import (
    SHARED_DEFINES,
    arch_options,
    compile_options,
    compile_source,
    include_dirs,
    name_expression,
    name_expressions,
    normalize_overrides,
)

__all__ = [
    "ARG",
    "THREADS",
    "EventTimer",
    "PackedLaunch",
    "PerStream",
    "bind",
    "compile_seconds",
    "compute_capability",
    "cupy",
    "disk_cache",
    "device_id",
    "grid_stride_blocks",
    "i32",
    "kernel",
    "module",
    "module_seconds",
    "resident_blocks",
    "shared_memory_optin",
    "sm_count",
    "zeros",
]

THREADS = SHARED_DEFINES["CS_THREADS"]

_lock = _forksafe.lock()
_modules: dict[tuple[int, str, tuple, str | None], object] = {}
_compile_seconds: dict[tuple[str, tuple], float] = {}
_module_seconds: dict[tuple[str, tuple, str], float] = {}
_building: dict[tuple, threading.Lock] = {}  # one lock per module key while it is compiled
_functions: dict[tuple, object] = {}
_sm_counts: dict[int, int] = {}
_capabilities: dict[int, int] = {}
_smem_optin: dict[int, int] = {}
_raised_ceilings: dict[int, int] = {}  # CUfunction -> the dynamic shared memory ceiling set on it
_zero_cache: dict[tuple, object] = {}
#: Whether this process initialised CUDA (:func:`note_cuda_initialised`), and whether it is a child
#: forked after its parent (or an earlier ancestor) did.
_cuda_initialised = False
_forked_after_cuda = False
#: Cache folders already warned about (one warning per folder and process).
_warned_caches: set[str] = set()
#: Builds in flight with CuPy's disk cache bypassed, and CUPY_CACHE_IN_MEMORY as it was before the first.
_bypassing = 0
_saved_in_memory: str | None = None


def cupy():
    """The cupy module (imported here so that importing convsuite never needs it)."""
    import cupy as cp

    return cp


def device_id() -> int:
    """The current CUDA device's ordinal."""
    return cupy().cuda.Device().id


def module(filename: str, overrides=(), *, kernel: str):
    """The compiled module of ``kernel`` of ``filename`` on the current device, built once per configuration.

    ``kernel`` is a kernel template of the source ``filename`` declares (such as
    ``"conv2d_register_tiled@8"`` or ``"conv2d_direct|I"``): the module
    holds its instantiations only, and its own copy of every ``__constant__``
    symbol of the source (a kernel reads the copy of its module).
    ``overrides`` replaces some ``-D`` constants (see
    ``CudaSource.overridable``): a mapping or ``(name, value)`` pairs;
    values equal to the defaults are dropped, so the default configuration
    of a kernel is one module whatever the spelling.

    Raises
    ------
    KeyError
        ``kernel`` is not a kernel of ``filename``, or no imported module declares ``filename``.
    """
    overrides = normalize_overrides(filename, overrides)
    cp = cupy()
    key = (cp.cuda.Device().id, filename, overrides, kernel)
    compiled = _modules.get(key)
    if compiled is not None:
        return compiled
    # One lock per module: a first call compiling one kernel (tens of seconds for the
    # big ones) must not hold up other threads' kernels or device queries.
    with _lock:
        building = _building.setdefault(key, threading.Lock())
    with building:
        compiled = _modules.get(key)
        if compiled is None:
            expressions = name_expressions(filename, kernel)  # KeyError on a kernel the file lacks
            t0 = time.perf_counter()
            # An architecture-specific target (sm_90a for wgmma) goes before CuPy's own -arch, which
            # CuPy appends after the options: so given, NVRTC built wgmma kernels on an H100
            # (tools/wgmma_probe.py at tag notebook-2026-11-28, 2026-11-27), which it refuses for plain sm_90.
            target = arch_options(filename)
            includes = tuple(f"-I{folder}" for folder in include_dirs())
            options = (*target, "-std=c++17", *includes, *compile_options(filename, overrides))
            compiled = _build(cp, compile_source(filename), options, expressions, f"{filename} ({kernel})")
            seconds = time.perf_counter() - t0
            with _lock:
                _compile_seconds[(filename, overrides)] = _compile_seconds.get((filename, overrides), 0.0) + seconds
                _module_seconds[(filename, overrides, kernel)] = seconds
                _modules[key] = compiled
        return compiled


def _build(cp, code: str, options: tuple, expressions, what: str):
    """A compiled ``RawModule``; where the build fails, built once more without CuPy's disk cache.

    A cache entry the driver refuses (``CUDA_ERROR_INVALID_IMAGE`` from a cubin
    whose stored hash still matches) or a file that cannot be opened fails the
    first build; the second, with the disk cache bypassed, compiles anew. If
    that one succeeds, the cache was at fault: one warning per cache folder
    names it. If it fails too, its error is the module's own and is raised.
    NVRTC's own errors (``CompileException``: the source does not compile) are
    raised at once.
    """
    try:
        return _compiled(cp, code, options, expressions)
    except Exception as exc:
        if type(exc).__name__ == "CompileException":
            raise
        first = exc
    with _disk_cache_bypassed():
        compiled = _compiled(cp, code, options, expressions)
    _warn_cache(first, what)
    return compiled


def _compiled(cp, code: str, options: tuple, expressions):
    """``cupy.RawModule`` of ``code``, compiled now (NVRTC, or CuPy's disk cache)."""
    compiled = cp.RawModule(code=code, options=options, name_expressions=expressions)
    compiled.compile()
    return compiled


@contextmanager
def _disk_cache_bypassed():
    """Inside: CuPy compiles in memory (``CUPY_CACHE_IN_MEMORY=1``, which CuPy reads at every build).

    The variable is process-wide: builds of other threads in the meantime skip
    the disk too (they compile instead of loading: slower, never wrong). The
    first of overlapping uses saves its value and the last one restores it.
    """
    global _bypassing, _saved_in_memory
    with _lock:
        if _bypassing == 0:
            _saved_in_memory = os.environ.get("CUPY_CACHE_IN_MEMORY")
            os.environ["CUPY_CACHE_IN_MEMORY"] = "1"
        _bypassing += 1
    try:
        yield
    finally:
        with _lock:
            _bypassing -= 1
            if _bypassing == 0:
                if _saved_in_memory is None:
                    os.environ.pop("CUPY_CACHE_IN_MEMORY", None)
                else:
                    os.environ["CUPY_CACHE_IN_MEMORY"] = _saved_in_memory


def _cache_folder() -> str:
    """CuPy's kernel cache folder (``CUPY_CACHE_DIR``, default ``~/.cupy/kernel_cache``)."""
    return os.environ.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")


def _warn_cache(exc: Exception, what: str) -> None:
    """One warning per cache folder: a build failed reading it and succeeded without it."""
    folder = _cache_folder()
    with _lock:
        if folder in _warned_caches:
            return
        _warned_caches.add(folder)
    where = getattr(exc, "filename", None) or folder
    warnings.warn(
        f"CuPy's kernel cache could not be used for {what}: {where} ({type(exc).__name__}: {exc}); "
        f"compiled it without the cache. Delete {folder} (or the broken file in it) to rebuild the cache.",
        RuntimeWarning,
        stacklevel=4,
    )


def note_cuda_initialised() -> None:
    """Record that this process initialised CUDA: a child forked from now on cannot use it."""
    global _cuda_initialised
    _cuda_initialised = True


def fork_refusal() -> str | None:
    """Why CUDA cannot be used in this process (a child forked after CUDA was initialised), else None."""
    if not _forked_after_cuda:
        return None
    return (
        "this process was forked from one that had initialised CUDA, and CUDA cannot be used in such a "
        "child; start worker processes with the 'spawn' or 'forkserver' method "
        "(multiprocessing.get_context('spawn')) to use the GPU in them"
    )


@_forksafe.at_fork_in_child
def _after_fork_in_child() -> None:
    """In a forked child: no inherited handle is valid, and CUDA is unusable if the parent initialised it."""
    global _forked_after_cuda, _bypassing, _saved_in_memory
    _forked_after_cuda = _forked_after_cuda or _cuda_initialised
    for cache in (_modules, _functions, _building, _raised_ceilings, _zero_cache):
        cache.clear()
    if _bypassing:  # a parent thread was building without the disk cache: restore the setting it changed
        if _saved_in_memory is None:
            os.environ.pop("CUPY_CACHE_IN_MEMORY", None)
        else:
            os.environ["CUPY_CACHE_IN_MEMORY"] = _saved_in_memory
        _bypassing, _saved_in_memory = 0, None


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
    cp = cupy()
    release = tuple(int(part) for part in re.findall(r"\d+", cp.__version__)[:2])
    in_memory = os.environ.get("CUPY_CACHE_IN_MEMORY", "0") not in ("", "0")
    return {
        "directory": _cache_folder(),
        "reads_templates": release >= DISK_CACHE_CUPY and not in_memory,
        "cupy": cp.__version__,
        "in_memory": in_memory,
    }


def compile_seconds() -> dict[tuple[str, tuple], float]:
    """Seconds each configuration's compiles took in this process: ``{(file, overrides): seconds}``.

    ``overrides`` is the normalised tuple of ``(name, value)`` pairs (empty
    for the default configuration); the time is the sum over the modules of
    the file's kernels built so far (on every device).
    """
    with _lock:
        return dict(_compile_seconds)


def module_seconds() -> dict[tuple[str, tuple, str], float]:
    """Seconds each kernel's module took to build in this process: ``{(file, overrides, kernel): seconds}``."""
    with _lock:
        return dict(_module_seconds)


def compile_all(sources) -> None:
    """Build the module of every kernel of ``sources`` (``CudaSource`` records) on the current device
    (what first calls of every algorithm would do).
    """
    for source in sources:
        for entry in source.kernels:
            module(source.filename, kernel=entry)


def kernel(filename: str, name: str, dtype: str, total: int | None = None, overrides=()):
    """A kernel handle; ``total`` picks the 64-bit-index instantiation of a ``|I`` kernel when needed.

    ``total`` is the count the kernel's grid-stride loop runs over (outputs, im2col
    columns, depthwise tiles), launched with :func:`grid_stride_blocks` blocks of
    THREADS: the int instantiation is taken while that loop's last index fits
    (:func:`needs_wide_index` with :func:`max_grid_stride`).
    ``overrides`` selects the configuration's module (see :func:`module`).
    Handles are cached: a module lookup costs a driver call, which at a few
    microseconds matters for small layers.
    """
    overrides = normalize_overrides(filename, overrides)
    if total is not None:
        name += "|I"
    wide = total is not None and needs_wide_index(total, max_grid_stride())
    key = (device_id(), filename, name, dtype, wide, overrides)
    function = _functions.get(key)
    if function is None:
        compiled = module(filename, overrides, kernel=name)
        function = _functions[key] = compiled.get_function(name_expression(name, dtype, wide))
    return function


def _queried_once(cache: dict, device: int, read):
    """``read(device)``, kept in ``cache`` per device: device queries are slow (a driver call each)."""
    value = cache.get(device)
    if value is None:
        value = cache[device] = read(device)
    return value


def _current_device_or_none() -> int | None:
    """The current device's ordinal, or None when CuPy, the driver or a device is missing."""
    try:
        return device_id()
    except Exception:  # no cupy, no driver, no device
        return None


def sm_count() -> int:
    """Multiprocessors of the current device (queried once per device: the query is slow)."""
    return _queried_once(
        _sm_counts, device_id(), lambda d: cupy().cuda.runtime.getDeviceProperties(d)["multiProcessorCount"]
    )


def sm_count_or_none() -> int | None:
    """:func:`sm_count`, or None without a usable GPU (for hand rules that also run on a CPU-only machine)."""
    if _current_device_or_none() is None:
        return None
    return sm_count()


def compute_capability() -> int | None:
    """The current device's compute capability as an int (90 for sm_90), or None without a usable GPU.

    None when CuPy is missing or no device answers, so the planning checks that ask
    (tf32x3's) still run, and decline nothing, on a machine without a GPU.
    """
    device = _current_device_or_none()
    if device is None:
        return None
    return _queried_once(_capabilities, device, lambda d: int(cupy().cuda.Device(d).compute_capability))


def shared_memory_optin() -> int | None:
    """Dynamic shared memory one block may opt in to on the current device, in bytes; None without a GPU.

    227 KiB on sm_90, 163 KiB on sm_80, 99 KiB on sm_86/89 (queried once per device).
    """
    device = _current_device_or_none()
    if device is None:
        return None
    return _queried_once(
        _smem_optin, device, lambda d: int(cupy().cuda.runtime.getDeviceProperties(d)["sharedMemPerBlockOptin"])
    )


def resident_blocks(function, threads: int, shared_mem: int) -> int:
    """Blocks of ``function`` one multiprocessor holds at once (the driver's occupancy calculator).

    Where ``shared_mem`` exceeds the 48 KiB every kernel gets without asking,
    first raises the function's dynamic shared memory ceiling to it (a launch
    above the ceiling fails, and the calculator counts against it) -- only
    ever up: the ceiling belongs to the kernel, which plans of other layers
    share and launch with their own sizes -- and asks for the largest
    shared-memory carveout: left to the driver, an sm_90 multiprocessor held
    one block of 104 KiB where two fit (Nsight Compute, tf32x3_image on
    ECE408 fa19 conv2).
    """
    driver = cupy().cuda.driver
    ptr = function.kernel.ptr
    if shared_mem > 48 * 1024:
        with _lock:
            if _raised_ceilings.get(ptr, 0) < shared_mem:
                driver.funcSetAttribute(ptr, _MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_mem)
                driver.funcSetAttribute(ptr, _PREFERRED_SHARED_MEMORY_CARVEOUT, 100)
                _raised_ceilings[ptr] = shared_mem
    return int(driver.occupancyMaxActiveBlocksPerMultiprocessor(ptr, threads, shared_mem))


#: CUfunction_attribute values (cuda.h): the dynamic shared memory ceiling, the carveout in percent.
_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_PREFERRED_SHARED_MEMORY_CARVEOUT = 9


def needs_wide_index(total: int, stride: int) -> bool:
    """Whether a grid-stride loop over ``total`` items, ``stride`` apart, needs 64-bit indices.

    Its last index is the first one at or past ``total`` (up to ``total + stride - 1``):
    an int index overflows there before the loop test sees it, so ``total`` just
    under 2^31 is not enough; ``stride`` is the largest the grid can have
    (:func:`grid_stride_blocks`' cap times the block size).
    """
    return total + stride > 2**31 - 1


def grid_stride_blocks(total: int) -> int:
    """Enough blocks to fill the device (32 per SM); grid-stride kernels loop over the rest."""
    return max(1, min(math.ceil(total / THREADS), sm_count() * 32))


def max_grid_stride() -> int:
    """The largest stride of a grid-stride loop launched with :func:`grid_stride_blocks` blocks of THREADS."""
    return sm_count() * 32 * THREADS


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


#: In :func:`bind`'s argument list, a place filled by the next array of each call.
ARG = None


class PackedLaunch:
    """One kernel launch whose argument block is packed once; a call writes only the arrays' addresses.

    CuPy's ``RawKernel.__call__`` looks up the device's function and
    inspects and converts every argument on every call, about 0.3 us each;
    a convolution kernel takes 16 to 21 arguments, most of them integers
    fixed by the plan. Here the fixed arguments are written once into a
    host buffer, ``void *params[]`` points into it, and a call packs the
    per-call device pointers into their slots (one ``struct.pack_into``)
    and hands the block to ``cuLaunchKernel`` (``cupy.cuda.driver.
    launchKernel``, which copies the arguments before it returns) on the
    current stream. A lock keeps two threads from packing one block at
    once: the driver call releases the GIL.

    The launch runs on the device whose function it holds; on another
    current device, or where the driver refuses the launch (no context
    current on this thread yet), the call goes through CuPy's own path,
    which sets up what is missing or raises CuPy's error.

    Parameters
    ----------
    function : cupy.RawKernel
        The kernel, from :func:`kernel`.
    grid, block : tuple of int
        Launch geometry (1 to 3 extents each).
    args : sequence
        The kernel's arguments in order: :data:`ARG` where each call passes
        an array, else a fixed NumPy scalar or CuPy array (kept alive here).
    shared_mem : int
        Dynamic shared memory in bytes.
    """

    __slots__ = (
        "_kernel",
        "_grid",
        "_block",
        "_args",
        "_shared_mem",
        "_device",
        "_fptr",
        "_dims",
        "_buffer",
        "_pin",
        "_params",
        "_params_ptr",
        "_runs",
        "_lock",
        "_slots",
        "_driver_launch",
        "_driver_error",
        "_get_device",
        "_current_stream",
    )

    def __init__(self, function, grid, block, args, shared_mem: int = 0) -> None:
        grid, block = tuple(grid), tuple(block)
        self._kernel, self._grid, self._block = function, grid, block
        self._args, self._shared_mem = tuple(args), int(shared_mem)
        self._device = device_id()
        self._fptr = function.kernel.ptr  # the CUfunction of the current device
        self._dims = (*grid, *(1,) * (3 - len(grid)), *block, *(1,) * (3 - len(block)))
        cp = cupy()
        offsets, fixed, end = [], [], 0
        for arg in self._args:
            if arg is ARG or isinstance(arg, cp.ndarray):
                size, raw = 8, None if arg is ARG else struct.pack("=Q", arg.data.ptr)
            elif isinstance(arg, np.generic) and arg.dtype.kind in "iuf":
                size, raw = arg.dtype.itemsize, arg.tobytes()
            else:
                raise TypeError(f"a packed kernel argument must be ARG, a NumPy scalar or a CuPy array; got {arg!r}")
            end = -(-end // size) * size  # aligned slots (the driver copies each from its own pointer)
            offsets.append(end)
            fixed.append(raw)
            end += size
        self._buffer = bytearray(max(8, end))
        for offset, raw in zip(offsets, fixed):
            if raw is not None:
                self._buffer[offset : offset + len(raw)] = raw
        self._pin = (ctypes.c_char * len(self._buffer)).from_buffer(self._buffer)  # fixes the buffer's address
        base = ctypes.addressof(self._pin)
        self._params = (ctypes.c_void_p * max(1, len(offsets)))(*(base + o for o in offsets))
        self._params_ptr = ctypes.addressof(self._params)
        # Runs of consecutive per-call pointers: one struct.pack_into each (usually one run).
        self._runs, slots = [], [i for i, arg in enumerate(self._args) if arg is ARG]
        start = 0
        for j in range(1, len(slots) + 1):
            if j == len(slots) or slots[j] != slots[j - 1] + 1:
                first = slots[start]
                self._runs.append((struct.Struct(f"={j - start}Q"), offsets[first], start, j))
                start = j
        self._lock = _forksafe.lock()
        self._slots = len(slots)  # arrays per call (fixed CuPy arrays stay referenced by _args)
        # CuPy's entry points, looked up once (an attribute chain per call costs more than the launch's packing).
        self._driver_launch, self._driver_error = cp.cuda.driver.launchKernel, cp.cuda.driver.CUDADriverError
        self._get_device = cp.cuda.runtime.getDevice
        self._current_stream = cp.cuda.get_current_stream

    def __call__(self, *arrays, stream=None) -> None:
        """Launch with ``arrays`` in the :data:`ARG` places, in order, on the current stream
        (``stream``: the handle of the current stream, where the caller has just read it).
        """
        if len(arrays) != self._slots:
            raise TypeError(f"this launch takes {self._slots} arrays; got {len(arrays)}")
        if self._get_device() != self._device:
            return self._cupy_call(arrays)
        pointers = [a.data.ptr for a in arrays]
        gx, gy, gz, bx, by, bz = self._dims
        if stream is None:
            stream = self._current_stream().ptr
        with self._lock:
            for packer, offset, first, last in self._runs:
                packer.pack_into(self._buffer, offset, *pointers[first:last])
            try:
                self._driver_launch(self._fptr, gx, gy, gz, bx, by, bz, self._shared_mem, stream, self._params_ptr, 0)
                return None
            except self._driver_error as exc:
                if getattr(exc, "status", None) not in _RETRY_THROUGH_CUPY:
                    raise
        # No context current on this thread yet: CuPy's path sets one up (the launch did not happen).
        return self._cupy_call(arrays)

    def _cupy_call(self, arrays) -> None:
        """The same launch through ``RawKernel.__call__``."""
        it = iter(arrays)
        args = tuple(next(it) if arg is ARG else arg for arg in self._args)
        self._kernel(self._grid, self._block, args, shared_mem=self._shared_mem)


def bind(function, grid, block, args, shared_mem: int = 0) -> PackedLaunch:
    """A :class:`PackedLaunch` of ``function``: ``bind(fn, grid, block, (ARG, ARG, n, m))(x, y)``."""
    return PackedLaunch(function, grid, block, args, shared_mem)


#: cudaStreamPerThread: the handle of every thread's own default stream.
PER_THREAD_STREAM = 2

#: Driver errors after which a packed launch goes through CuPy's path instead: no context current
#: on this thread yet (CUDA_ERROR_NOT_INITIALIZED, CUDA_ERROR_INVALID_CONTEXT). Any other is raised.
_RETRY_THROUGH_CUPY = frozenset({3, 201})


def _dead_reference():
    """Stands in for a weak reference whose object is gone (PerStream's empty last entry)."""
    return None


class PerStream:
    """Device buffers a plan keeps for each CUDA stream it runs on, made on first use there.

    Work on one stream runs in order, so buffers that one launch writes and
    reads (split-K partial sums, tile counters) can serve the next launch on
    that stream without a fresh allocation; launches on two streams may
    overlap, so each stream gets its own. Streams are keyed as CuPy compares
    them (by handle) and held weakly, so the buffers of a stream object that
    is collected go with it (the last-served entry too: its weak reference's
    callback drops it). The per-thread default stream is one handle but
    a different stream in every thread: its buffers are kept per thread.
    While the current stream is capturing a CUDA graph, :meth:`get` returns
    None: a graph may be replayed on any stream, concurrently with calls on
    this one, so captured work must not share these buffers.

    Parameters
    ----------
    make : callable
        Returns the buffers for a new stream (on the current device).
    """

    __slots__ = ("_make", "_by_stream", "_per_thread", "_lock", "_current", "_last")

    def __init__(self, make) -> None:
        self._make = make
        self._by_stream = weakref.WeakKeyDictionary()
        self._per_thread = threading.local()
        self._lock = _forksafe.lock()
        self._current = cupy().cuda.get_current_stream
        # The stream object last served (weakly) and its buffers: a call on the same stream object
        # as the one before skips the weak dictionary (a Python-level get that hashes the stream).
        self._last = (_dead_reference, None)

    def get(self, stream=None):
        """The buffers of ``stream`` (the current stream, where the caller has just read it; read here
        if None), or None while it captures a graph.
        """
        if stream is None:
            stream = self._current()
        try:
            if stream.is_capturing():
                return None
        except Exception:  # e.g. the legacy stream queried while another stream captures: take the safe path
            return None
        if stream.ptr == PER_THREAD_STREAM:
            found = getattr(self._per_thread, "buffers", None)
            if found is None:
                found = self._per_thread.buffers = self._make()
            return found
        last_stream, found = self._last  # one tuple, replaced whole: a consistent pair in any thread
        if last_stream() is stream:
            return found
        found = self._by_stream.get(stream)
        if found is None:
            with self._lock:
                found = self._by_stream.get(stream)
                if found is None:
                    found = self._by_stream[stream] = self._make()
        self._last = (weakref.ref(stream, self._forget_last), found)
        return found

    def _forget_last(self, reference) -> None:
        """The last-served stream was collected: drop the entry, so its buffers go with it."""
        if self._last[0] is reference:
            self._last = (_dead_reference, None)
