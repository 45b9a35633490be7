"""Measured choice: autotune, :func:`tune` and the persistent tuning cache.

With autotune on (:func:`set_autotune`, :func:`use_autotune`,
``CONVSUITE_AUTOTUNE=1``) the first call of a new problem times every backend
and algorithm that can run it on the data's device, with the measuring core
(:mod:`convsuite._timing`: warm-up, interleaved repeats, early abandon of
far slower candidates, a close call between the two fastest re-timed),
keeps the fastest and remembers it in a persistent cache. :func:`tune` does the same explicitly and returns the table.

The cache is one JSON file in the user cache directory (``platformdirs``;
``CONVSUITE_CACHE_DIR`` overrides). Each entry's key carries the device name,
the library versions, convsuite's version and the thread count, so an entry
measured elsewhere or with other software is never used. Writers take an
exclusive ``flock`` on a lock file, merge with what is on disk and replace the
file atomically (temporary file + ``os.replace``), so two processes tuning at
once lose nothing and a reader never sees half a file. A file that cannot be
read is ignored with a warning (and rewritten on the next store), and so is
an entry not of the shape convsuite writes (checked once, on reading: it is
measured again and overwritten).

Tunable parameters: after the algorithms are timed, the fastest few that
declare tunables (:class:`~convsuite.backends.base.Tunable`) have their
parameters searched (:mod:`._param_search`: exhaustive when it fits the
budget, else random sampling plus local search), the finalists are timed
once more side by side with their best parameters, and the winner's
parameters are stored with it. The budget is ``budget_s`` of :func:`tune`,
or ``CONVSUITE_TUNE_BUDGET`` seconds per problem under autotune (default
:data:`AUTOTUNE_BUDGET_S`; 0 searches no parameters).

The policy that decides when to measure, and what to do without a
measurement, is :mod:`._select`.
"""

from __future__ import annotations

import json
import math
import os
import platform
import warnings
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from . import _forksafe, _plan_cache, _registry
from ._errors import UnsupportedCaseError
from ._files import atomic_write_json, open_regular, read_text
from ._param_search import search_parameters
from ._plans import Decision
from ._precision import get_precision
from ._spec import ConvSpec
from ._threads import get_num_threads
from ._timing import NOISE_FLOOR, Contender, confirm_close_call, measure_side_by_side
from .backends.base import Backend

__all__ = [
    "AUTOTUNE_ENV",
    "BUDGET_ENV",
    "CACHE_DIR_ENV",
    "TuneResult",
    "autotune_budget",
    "autotune_enabled",
    "cache_file",
    "clear_tuning_cache",
    "set_autotune",
    "use_autotune",
]

AUTOTUNE_ENV = "CONVSUITE_AUTOTUNE"
CACHE_DIR_ENV = "CONVSUITE_CACHE_DIR"
BUDGET_ENV = "CONVSUITE_TUNE_BUDGET"
#: Seconds of parameter search per problem under autotune (the first call pays it).
AUTOTUNE_BUDGET_S = 2.0
#: Seconds of parameter search of an explicit :func:`tune` by default.
TUNE_BUDGET_S = 10.0
#: Algorithms within this multiple of the fastest (at their defaults) have their parameters searched.
FINALIST_RATIO = 1.3
#: At most this many algorithms have their parameters searched.
MAX_FINALISTS = 3
CACHE_FORMAT = 2  # 2: entries carry the winner's tunable parameters
_FILE_NAME = "tuning.json"
#: The largest tuning cache read (a few hundred bytes an entry): a bigger file is not convsuite's.
CACHE_MAX_BYTES = 64 * 2**20

#: Measurement settings of a tuning run: enough repeats for a stable median
#: of small calls, few enough that the first call of a big layer stays short.
REPEAT = 10
ROUNDS = 5
#: A candidate whose fastest call is slower than this multiple of the fastest, in the first round and
#: again in the second, is dropped.
ABANDON_RATIO = 3.0
#: Each block runs at least this long: short calls get many samples, so one
#: preemption on a shared machine cannot move the median.
MIN_BLOCK_S = 0.01
#: Pause between candidates' blocks: OpenMP (numba) and OpenBLAS worker
#: threads spin for a while after a call and would slow the next candidate.
SETTLE_S = 0.02
#: How close to the fastest (relative) a single-core candidate must be to be preferred (single_core_on_a_tie).
SINGLE_CORE_TIE = NOISE_FLOOR

_scoped: ContextVar[bool | None] = ContextVar("convsuite_autotune_scope", default=None)
_global: bool | None = None
#: CONVSUITE_AUTOTUNE as read (None: not read yet). Read once, not per call:
#: an ``os.environ`` lookup costs about 2 us, on the path of every call.
_from_env: bool | None = None
_memory: dict[str, dict] = {}
_memory_lock = _forksafe.lock()
_fingerprints: dict[str, str] = {}


# --- the switch -----------------------------------------------------------


def set_autotune(enabled: bool | None) -> None:
    """Turn measured selection on or off process-wide (``None``: follow ``CONVSUITE_AUTOTUNE``).

    ``use_autotune`` blocks take precedence. The environment variable is read
    on the first call that needs it and again by ``set_autotune(None)``, not
    on every call (a lookup in ``os.environ`` would cost each call ~2 us).
    """
    global _global, _from_env
    if enabled is not None and not isinstance(enabled, (bool, np.bool_)):
        raise TypeError(f"`enabled` must be True, False or None; got {enabled!r}")
    _global = None if enabled is None else bool(enabled)
    if enabled is None:
        _from_env = None  # read the environment again
    _plan_cache.invalidate()


@contextmanager
def use_autotune(enabled: bool = True) -> Iterator[None]:
    """Turn measured selection on (or off) inside the ``with`` block.

    Blocks nest (the innermost wins) and are private to the thread or asyncio
    task that entered them, like ``use_backend``.
    """
    if not isinstance(enabled, (bool, np.bool_)):
        raise TypeError(f"`enabled` must be True or False; got {enabled!r}")
    token = _scoped.set(bool(enabled))
    try:
        yield
    finally:
        _scoped.reset(token)


def autotune_enabled() -> bool:
    """Whether calls made here measure: the innermost block, then ``set_autotune``, then the environment."""
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    if _global is not None:
        return _global
    global _from_env
    if _from_env is None:
        _from_env = _autotune_from_environment()
    return _from_env


_ON, _OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def _autotune_from_environment() -> bool:
    """``CONVSUITE_AUTOTUNE`` as a switch; any other value is off, with a warning (as a bad
    ``CONVSUITE_TUNE_BUDGET`` is ignored with one), read once.
    """
    raw = os.environ.get(AUTOTUNE_ENV, "").strip().lower()
    if raw not in _ON and raw not in _OFF:
        warnings.warn(
            f"{AUTOTUNE_ENV} must be one of {', '.join(_ON)} (on) or {', '.join(v for v in _OFF if v)} or empty "
            f"(off); got {os.environ.get(AUTOTUNE_ENV)!r}; autotune stays off",
            stacklevel=3,
        )
    return raw in _ON


def autotune_budget() -> float:
    """Seconds of parameter search per problem under autotune: ``CONVSUITE_TUNE_BUDGET`` or the default.

    A value that is not a finite number >= 0 is ignored with a warning.
    """
    raw = os.environ.get(BUDGET_ENV, "").strip()
    if not raw:
        return AUTOTUNE_BUDGET_S
    try:
        return check_budget(float(raw))
    except ValueError:
        warnings.warn(
            f"{BUDGET_ENV} must be a number of seconds >= 0; got {raw!r}; using {AUTOTUNE_BUDGET_S}", stacklevel=2
        )
        return AUTOTUNE_BUDGET_S


def check_budget(budget_s: object) -> float:
    """``budget_s`` as a float, or a TypeError/ValueError naming it."""
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float, np.integer, np.floating)):
        raise TypeError(f"`budget_s` must be a number of seconds; got {budget_s!r}")
    try:
        value = float(budget_s)
    except OverflowError:  # an int beyond float's range
        value = float("inf")
    if not (value >= 0 and value != float("inf")):
        raise ValueError(f"`budget_s` must be a finite number of seconds >= 0; got {budget_s!r}")
    return value


# --- the persistent cache ---------------------------------------------------


def cache_dir() -> Path:
    """The directory of the tuning cache: ``$CONVSUITE_CACHE_DIR`` or the user cache dir."""
    override = os.environ.get(CACHE_DIR_ENV, "").strip()
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("convsuite"))


def cache_file() -> Path:
    """The tuning cache file."""
    return cache_dir() / _FILE_NAME


def _versions() -> str:
    """Versions of the libraries whose code is timed, as one string."""
    from importlib import metadata

    from ._version import __version__

    parts = [f"convsuite={__version__}", f"python={platform.python_version()}", f"numpy={np.__version__}"]
    for dist in ("numba", "Cython", "cupy-cuda13x", "cupy-cuda12x"):
        try:
            parts.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            continue
    return ",".join(parts)


def _cpu_name() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: str, backend: Backend | None = None) -> str:
    """A name that tells this device from another: CPU model, or what a device backend reports.

    Without ``backend``, the highest-priority available backend of ``device`` is asked.
    """
    if device == "cpu":
        return f"{_cpu_name()} x{os.cpu_count()}"
    if backend is None:
        backend = next((b for b in _registry._by_priority() if b.device == device and b.available() is True), None)
    describe = getattr(backend, "device_name", None)
    if callable(describe):
        return describe()
    # No name from the backend: its memory size at least tells an H100 from an H200.
    memory = backend.memory_limit() if backend is not None else None
    return f"{device}:{getattr(backend, 'name', '?')}:{memory or 0}B"


def fingerprint(device: str, backend: Backend | None = None) -> str:
    """Device name, library versions and thread count: an entry made under others is never used."""
    base = _fingerprints.get(device)
    if base is None:
        base = f"{device_name(device, backend)}|{_versions()}"
        _fingerprints[device] = base
    return f"{base}|threads={get_num_threads()}"


def problem_key(spec: ConvSpec, direction: str, request: str) -> str:
    """The problem and what was asked for, as a string (float32: with the precision policy, which bounds the
    candidates).
    """
    policy = f"|precision={get_precision()}" if spec.dtype == "float32" else ""
    return (
        f"{direction}|x{spec.x_shape}|w{spec.w_shape}|bias={spec.has_bias}|{spec.dtype}|s{spec.stride}"
        f"|p{spec.padding}|d{spec.dilation}|g{spec.groups}|{request}{policy}"
    )


def _read(path: Path) -> dict[str, dict]:
    """The entries on disk; an unreadable file (a FIFO or a folder in its place too), and each malformed
    entry, is ignored with a warning.
    """
    if not os.path.lexists(path):
        return {}
    try:
        text = read_text(path, f"convsuite tuning cache {path}", max_bytes=CACHE_MAX_BYTES)
    except ValueError as exc:  # a folder, a FIFO, unreadable, too large, not text: the message names the file
        warnings.warn(f"{exc}; ignoring it", stacklevel=3)
        return {}
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT or not isinstance(data["entries"], dict):
            raise ValueError("not a convsuite tuning cache of this format")
        entries = data["entries"]
    except (ValueError, KeyError, TypeError) as exc:
        warnings.warn(
            f"convsuite tuning cache {path} is corrupt or of another format ({exc}); ignoring it "
            "(it is rewritten on the next tuning)",
            stacklevel=3,
        )
        return {}
    problems = {key: why for key, entry in entries.items() if (why := _entry_problem(entry)) is not None}
    if problems:  # one warning for the file, as for a corrupt one
        one = len(problems) == 1
        warnings.warn(
            f"convsuite tuning cache {path} has {len(problems)} malformed entr{'y' if one else 'ies'} "
            f"({next(iter(problems.values()))}); ignoring {'it' if one else 'them'} "
            "(measured again, and overwritten on the next tuning)",
            stacklevel=3,
        )
    return {key: entry for key, entry in entries.items() if key not in problems}


def _entry_problem(entry: object) -> str | None:
    """Why a cache entry is not of the shape :func:`_tune_entry` writes (None: it is).

    Checked once, when the file is read, so every later use (``_usable``,
    ``_decision_of``, ``explain``'s tables) may rely on the shape.
    """
    if not isinstance(entry, dict):
        return f"a {type(entry).__name__}, not an object"
    for key in ("backend", "algorithm"):
        if not isinstance(entry.get(key), str):
            return f"{key!r} must be a string; got {_brief(entry.get(key))}"
    for key, kind in (("params", dict), ("search", str), ("measured_at", str)):
        if key in entry and not isinstance(entry[key], kind):  # absent in entries of older versions
            return f"{key!r} must be a{'n object' if kind is dict else ' string'}; got {_brief(entry[key])}"
    table = entry.get("table")
    if not isinstance(table, list) or not all(_is_row(row, str) for row in table):
        rows = "[backend, algorithm, median, spread, status] rows"
        return f"'table' must be a list of {rows}; got {_brief(table)}"
    param_table = entry.get("param_table", [])
    if not isinstance(param_table, list) or not all(_is_row(row, dict) for row in param_table):
        rows = "[label, params, median, spread, status] rows"
        return f"'param_table' must be a list of {rows}; got {_brief(param_table)}"
    return None


def _brief(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters (a table can hold hundreds of rows)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_row(row: object, second: type) -> bool:
    """Whether ``row`` is ``[str, second, median, spread, str]`` with a timing as :func:`_is_timing` reads it."""
    return (
        isinstance(row, list)
        and len(row) == 5
        and isinstance(row[0], str)
        and isinstance(row[1], second)
        and isinstance(row[4], str)
        and _is_timing(row[2], row[3])
    )


def _is_timing(median: object, spread: object) -> bool:
    """A measured median with its spread, or no median (a candidate that failed or was rejected)."""
    if median is None:
        return spread is None or _is_measure(spread)
    return _is_measure(median) and _is_measure(spread)


def _is_measure(value: object) -> bool:
    """A finite real number >= 0 (JSON also spells NaN and Infinity, and ``true`` is no number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


@contextmanager
def _file_lock(directory: Path) -> Iterator[None]:
    """An exclusive lock between processes (``flock``; a no-op where there is none)."""
    try:
        import fcntl
    except ImportError:  # Windows: os.replace keeps files whole; merges may race
        yield
        return
    # Opened without blocking: a FIFO in the lock file's place is refused (OSError), never waited on.
    with os.fdopen(open_regular(directory / ".tuning.lock", os.O_RDWR | os.O_CREAT, 0o644), "r+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _store(key: str, entry: dict) -> None:
    """Merge one entry into the file under the lock and replace it atomically."""
    with _memory_lock:
        _memory[key] = entry
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with _file_lock(directory):
            entries = _read(directory / _FILE_NAME)
            entries[key] = entry
            target = directory / _FILE_NAME
            if os.path.lexists(target) and not target.is_file():  # a FIFO or a folder: moved aside, not replaced
                raise OSError(f"{target} is not a regular file")
            atomic_write_json(target, {"format": CACHE_FORMAT, "entries": entries}, indent=1, sort_keys=True)
    except OSError as exc:  # a read-only home must not break a convolution
        warnings.warn(f"convsuite could not write its tuning cache in {directory} ({exc})", stacklevel=3)


def _lookup(key: str) -> dict | None:
    """An entry from memory, else from the file (another process may have tuned it)."""
    entry = _memory.get(key)
    if entry is not None:
        return entry
    entries = _read(cache_file())
    with _memory_lock:
        _memory.update(entries)
    return entries.get(key)


def clear_tuning_cache() -> None:
    """Forget every measured choice, in this process and on disk."""
    with _memory_lock:
        _memory.clear()
    _plan_cache.invalidate()
    directory = cache_dir()
    if not directory.is_dir():  # nothing was ever written there (or CONVSUITE_CACHE_DIR names a file)
        return
    try:
        with _file_lock(directory):
            try:
                os.unlink(directory / _FILE_NAME)
            except FileNotFoundError:
                pass
    except OSError as exc:  # a read-only cache folder: the choices on disk stay, and the caller must know
        raise OSError(exc.errno, f"convsuite could not clear its tuning cache in {directory}: {exc}") from exc


# --- measuring -------------------------------------------------------------


@dataclass(frozen=True)
class TuneResult:
    """What :func:`convsuite.tune` measured.

    Attributes
    ----------
    backend, algorithm : str
        The chosen candidate (the fastest, or a single-core one within 5% of a
        multicore fastest), which later calls of this problem use under autotune.
    table : tuple of (str, str, float or None, float or None, str)
        ``(backend, algorithm, median seconds, relative spread, status)``,
        the chosen first, then fastest first; status is ``"ok"``, ``"abandoned"`` (dropped early,
        far slower) or why the candidate failed.
    device : str
        The device measured, with its name.
    key : str
        The cache key of the problem.
    params : dict
        The winner's tunable parameters (empty when it has none).
    param_table : tuple of (str, dict, float or None, float or None, str)
        ``("backend/algorithm", params, median seconds, relative spread, status)`` of
        every configuration the parameter search timed, fastest first per algorithm.
    search : str
        How parameters were searched (strategy and counts), or why not.
    """

    backend: str
    algorithm: str
    table: tuple[tuple[str, str, float | None, float | None, str], ...]
    device: str
    key: str
    params: dict = field(default_factory=dict)
    param_table: tuple = ()
    search: str = ""

    def __str__(self) -> str:
        chosen = "".join(f"[{k}={v}]" for k, v in self.params.items())
        lines = [f"measured on {self.device}; chosen: {self.backend}/{self.algorithm}{chosen}"]
        best = min((row[2] for row in self.table if row[2] is not None), default=None)  # ratios to the fastest
        for backend, algorithm, median, spread, status in self.table:
            if median is None:
                lines.append(f"  {backend}/{algorithm}: {status}")
                continue
            ratio = median / best if best else float("nan")
            lines.append(
                f"  {backend}/{algorithm}: {median * 1e6:10.1f} us  (x{ratio:.2f}, spread {spread:.0%}) {status}"
            )
        if self.search:
            lines.append(f"parameters: {self.search}")
        lines += format_param_table(self.param_table)
        return "\n".join(lines)


def format_param_table(param_table: Sequence[Sequence[Any]]) -> list[str]:
    """Lines of a parameter-search table (what ``tune`` and ``explain`` print)."""
    lines = []
    best: dict[str, float] = {}
    for label, params, median, spread, status in param_table:
        values = ", ".join(f"{k}={v}" for k, v in params.items())
        if median is None:
            lines.append(f"  {label}[{values}]: {status}")
            continue
        best.setdefault(label, median)
        lines.append(
            f"  {label}[{values}]: {median * 1e6:10.1f} us  (x{median / best[label]:.2f}, spread {spread:.0%}) {status}"
        )
    return lines


def _operands(spec: ConvSpec, direction: str, backend: Backend) -> tuple:
    """Random operands of the spec's shapes on the backend's device, and fresh outputs."""
    rng = np.random.default_rng(0)
    dtype = spec.dtype

    def make(shape: tuple[int, ...]) -> Any:
        return backend.to_device(rng.standard_normal(shape).astype(dtype))

    xp = backend.array_module()
    x, w = make(spec.x_shape), make(spec.w_shape)
    if direction == "forward":
        bias = make((spec.out_channels,)) if spec.has_bias else None
        return (x, w, bias, xp.empty(spec.y_shape, dtype=dtype))
    shapes = (spec.x_shape, spec.w_shape, (spec.out_channels,))
    return (make(spec.y_shape), x, w, *(xp.empty(s, dtype=dtype) for s in shapes))


def measure_candidates(
    spec: ConvSpec,
    direction: str,
    pairs: Sequence[tuple[Backend, str]],
    *,
    repeat: int = REPEAT,
    rounds: int = ROUNDS,
    min_block_s: float = MIN_BLOCK_S,
    settle_s: float = SETTLE_S,
    params: dict[tuple[str, str], dict] | None = None,
    confirm: bool = True,
) -> list[tuple[str, str, float | None, float | None, str]]:
    """Time each (backend, algorithm) on the spec; the table, the chosen first, then fastest first.

    Operands are random, of the spec's shapes, on each backend's device; each
    call is bracketed by the backend's timer and followed by its sync.
    ``params`` gives some candidates tunable parameters (by (backend name,
    algorithm)); the others run with their defaults. With ``confirm``, the
    two fastest are timed once more when they are within the measurement's
    noise of each other, and ranked on both measurements
    (:func:`convsuite._timing.confirm_close_call`). The first row is the
    choice: the fastest, or a single-core candidate within
    :data:`SINGLE_CORE_TIE` of a multicore fastest (:func:`single_core_on_a_tie`).
    """
    contenders: dict[str, Contender] = {}
    failed: list[tuple[str, str, float | None, float | None, str]] = []
    labels: dict[str, tuple[str, str]] = {}
    for backend, algorithm in pairs:
        label = f"{backend.name}/{algorithm}"
        try:
            given = (params or {}).get((backend.name, algorithm))
            # Parameters only when there are some: a backend of the older contract takes three arguments.
            launch = (
                backend.plan(spec, algorithm, direction, given) if given else backend.plan(spec, algorithm, direction)
            )
            operands = _operands(spec, direction, backend)
        except Exception as exc:  # a candidate that cannot even start is reported, not fatal
            failed.append((backend.name, algorithm, None, None, f"failed to start: {exc!r}"))
            continue
        try:
            # One call before any timing: a candidate that raises on this case (a limit its can_run
            # missed) is reported in the table, and the others are still measured and chosen from.
            launch(*operands)
            backend.synchronize()
        except Exception as exc:
            failed.append((backend.name, algorithm, None, None, f"failed to run: {exc!r}"))
            continue

        def run(launch: Callable[..., None] = launch, operands: tuple = operands, backend: Backend = backend) -> None:
            launch(*operands)
            backend.synchronize()

        contenders[label] = Contender(run, backend.timer)
        labels[label] = (backend.name, algorithm)
    timings = {}
    if contenders:
        settings: dict[str, Any] = dict(
            repeat=repeat, warmup=1, rounds=rounds, min_block_s=min_block_s, settle_s=settle_s
        )
        timings = measure_side_by_side(contenders, abandon_ratio=ABANDON_RATIO, **settings)
        if confirm:
            timings = confirm_close_call(
                timings, lambda names: measure_side_by_side({n: contenders[n] for n in names}, **settings)
            )
    single_core = {f"{b.name}/{a}": bool(getattr(b, "single_core", False)) for b, a in pairs}
    ranked = single_core_on_a_tie(sorted(timings, key=lambda label: timings[label].median), timings, single_core)
    rows: list[tuple[str, str, float | None, float | None, str]] = [
        (
            *labels[label],
            timings[label].median,
            timings[label].iqr_rel,
            "abandoned" if timings[label].abandoned else "ok",
        )
        for label in ranked
    ]
    return rows + failed


def single_core_on_a_tie(ranked: list[str], timings: dict, single_core: dict[str, bool]) -> list[str]:
    """``ranked`` (fastest first) with a single-core contender first where it ties with a multicore fastest.

    At equal speed the single-core kernel leaves the other cores free and
    has no thread team to wake: on the 2-core VM ``numba/depthwise`` on MobileNetV2's dw 3x3 C=960
    7x7 ran at 127-129 us with its OpenMP team awake and 200-216 us when a
    worker woke late, against 128-134 us for ``cython/depthwise``; the two
    swapped order from one window to the next, and a tuner that kept numba
    was 1.3-1.6x off in the next window (cpu-autotune-dw960-2026-11-26.md).

    A tie is a median within :data:`SINGLE_CORE_TIE` (5%) of the fastest's:
    a fixed margin, not the measurement's spread, because a multicore kernel
    whose calls are bimodal has a wide spread while being truly faster (on
    the VM, ``numba/gemm`` backward of a 1x1 C 64 -> 128 14x14 layer was
    counted a tie by its spread and was 1.28x faster than ``cython/gemm`` in
    the next window). Abandoned contenders never move.
    """
    live = [label for label in ranked if not timings[label].abandoned]
    if len(live) < 2 or single_core.get(live[0], False):
        return ranked
    limit = timings[live[0]].median * (1.0 + SINGLE_CORE_TIE)
    for label in live[1:]:
        if timings[label].median > limit:
            break
        if single_core.get(label, False):
            return [label] + [other for other in ranked if other != label]
    return ranked


# --- choosing -----------------------------------------------------------------


def request_label(name: str, algorithm: str) -> str:
    return f"{name}/{algorithm}"


def data_device(home: Backend | None) -> str:
    return "cpu" if home is None else home.device


def _search_finalists(
    spec: ConvSpec, direction: str, pairs: Sequence[tuple[Backend, str]], rows: list, budget_s: float
) -> tuple[tuple[str, str], dict, list, str]:
    """Search the tunables of the fastest algorithms; the winner, its params, the configurations table, how.

    The finalists (within :data:`FINALIST_RATIO` of the fastest, at most
    :data:`MAX_FINALISTS`) that declare tunables are searched with an equal
    share of the budget; when more than one finalist remains, they are timed
    once more side by side, each with its best parameters, and the fastest wins.
    """
    ok = [row for row in rows if row[2] is not None and row[4] == "ok"]
    winner = (ok[0][0], ok[0][1])
    backend_of = {b.name: b for b, _ in pairs}
    finalists = [row for row in ok if row[2] <= FINALIST_RATIO * ok[0][2]][:MAX_FINALISTS]
    tunable = [row for row in finalists if backend_of[row[0]].tunables(row[1])]
    if budget_s <= 0 or not tunable:
        why = "no parameter search (budget 0)" if budget_s <= 0 else "no finalist declares tunable parameters"
        return winner, {}, [], why
    share = budget_s / len(tunable)
    best_params: dict[tuple[str, str], dict] = {}
    param_table: list = []
    notes = []
    for name, algorithm, median, _spread, _status in tunable:
        backend = backend_of[name]
        found = search_parameters(
            spec, direction, backend, algorithm, _operands(spec, direction, backend), budget_s=share, call_s=median
        )
        best_params[(name, algorithm)] = found.params
        param_table += [[f"{name}/{algorithm}", params, m, s, st] for params, m, s, st in found.table]
        notes.append(f"{name}/{algorithm}: {found.strategy} in {found.elapsed_s:.1f} s")
    if len(finalists) > 1:
        final = measure_candidates(spec, direction, [(backend_of[r[0]], r[1]) for r in finalists], params=best_params)
        final_ok = [row for row in final if row[2] is not None]
        if final_ok:
            winner = (final_ok[0][0], final_ok[0][1])
            order = ", ".join(f"{r[0]}/{r[1]}" for r in final_ok)
            notes.append(f"finalists re-timed with their best parameters: {order}")
    return winner, best_params.get(winner, {}), param_table, "; ".join(notes)


def _tune_entry(spec: ConvSpec, direction: str, pairs: Sequence[tuple[Backend, str]], budget_s: float) -> dict | None:
    """Time the candidates, search the finalists' parameters; the cache entry, or None if nothing ran."""
    rows = measure_candidates(spec, direction, contenders(pairs))
    ok = [row for row in rows if row[2] is not None]
    if not ok:
        return None
    (backend, algorithm), params, param_table, search = _search_finalists(spec, direction, pairs, rows, budget_s)
    return {
        "backend": backend,
        "algorithm": algorithm,
        "params": params,
        "table": [list(row) for row in rows],
        "param_table": param_table,
        "search": search,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _usable(entry: dict, spec: ConvSpec, direction: str, pairs: Sequence[tuple[Backend, str]]) -> bool:
    """Whether a cached entry names a runnable candidate with parameters it still accepts."""
    runnable: dict[tuple[object, object], Backend] = {(b.name, a): b for b, a in pairs}
    backend = runnable.get((entry.get("backend"), entry.get("algorithm")))
    params = entry.get("params", {})  # a dict: entries are checked when read (_entry_problem)
    if backend is None:
        return False
    try:  # parameters a newer version no longer has, or refuses on this case
        if not params:  # a backend of the older contract takes three arguments
            return backend.can_run(spec, entry["algorithm"], direction) is True
        return backend.can_run(spec, entry["algorithm"], direction, params) is True
    except (ValueError, TypeError):
        return False


def _decision_of(entry: dict, device: str, how: str) -> Decision:
    """The Decision a measured entry gives."""
    table = tuple(tuple(row) for row in entry["table"])
    param_table = tuple(tuple(row) for row in entry.get("param_table", ()))
    medians = [row[2] for row in table if row[2] is not None]
    if medians and table[0][2] is not None and table[0][2] > min(medians):
        reason = (
            f"single-core, within {SINGLE_CORE_TIE:.0%} of the fastest of {len(table)} candidates "
            f"timed on this {device} ({how})"
        )
    else:
        reason = f"fastest of {len(table)} candidates timed on this {device} ({how})"
    if entry.get("search"):
        reason += f"; parameters: {entry['search']}"
    params = tuple(sorted(entry.get("params", {}).items()))
    return Decision("", "measurement", reason, (), table, params, param_table)


def measured_choice(
    spec: ConvSpec, direction: str, pairs: list[tuple[Backend, str]], request: str, device: str, *, measure: bool
) -> tuple[tuple[Backend, str], Decision] | None:
    """A measured choice from the cache or, if ``measure``, from timing now."""
    backend_of = {b.name: b for b, _ in pairs}
    device_backend = next((b for b, _ in pairs if b.device == device), None)
    key = f"{fingerprint(device, device_backend)}|{problem_key(spec, direction, request)}"
    entry = _lookup(key)
    if entry is not None and _usable(entry, spec, direction, pairs):
        how = "measured earlier (tuning cache)"
    elif measure:
        entry = _tune_entry(spec, direction, pairs, autotune_budget())
        if entry is None:
            return None
        _store(key, entry)
        how = "measured now"
    else:
        return None
    return (backend_of[entry["backend"]], entry["algorithm"]), _decision_of(entry, device, how)


def tune_now(
    spec: ConvSpec,
    direction: str,
    name: str,
    algorithm: str,
    home: Backend | None,
    budget_s: float = TUNE_BUDGET_S,
) -> TuneResult:
    """Measure every candidate of the request now (and search parameters), store the winner, return the table."""
    device = data_device(home)
    pairs, considered = _registry.request_candidates(spec, direction, name, algorithm, device)
    if not pairs:
        reasons = "; ".join(f"{who}: {why}" for who, why in considered) or "no backend offers one"
        raise UnsupportedCaseError(f"no candidate can run this case ({reasons})")
    request = request_label(name, algorithm)
    entry = _tune_entry(spec, direction, pairs, budget_s)
    if entry is None:
        rows = measure_candidates(spec, direction, contenders(pairs))
        raise UnsupportedCaseError(f"no candidate could be timed: {rows}")
    device_backend = next((b for b, _ in pairs if b.device == device), None)
    key = f"{fingerprint(device, device_backend)}|{problem_key(spec, direction, request)}"
    _store(key, entry)
    _plan_cache.invalidate()
    return TuneResult(
        entry["backend"],
        entry["algorithm"],
        tuple(tuple(row) for row in entry["table"]),
        f"{device} ({device_name(device, device_backend)})",
        key,
        dict(entry["params"]),
        tuple(tuple(row) for row in entry["param_table"]),
        entry["search"],
    )


def contenders(pairs: Sequence[tuple[Backend, str]]) -> list[tuple[Backend, str]]:
    """The candidates worth timing: backends that declare ``contender = False`` are left out."""
    timed = [(b, a) for b, a in pairs if getattr(b, "contender", True)]
    return timed or list(pairs)
