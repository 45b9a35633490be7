"""Backend table, lazy loading, selection and ``use_backend``.

Backends are named in a table of import paths and imported the first time
they are needed, so ``import convsuite`` loads no optional dependency. A
backend module itself imports its heavy dependency (numba, cupy, the compiled
extension) only inside ``available()``, so even ``list_backends()`` can say
*why* a backend is missing instead of failing.

Which backend a call uses, first match wins: the ``backend=`` argument, the
innermost ``use_backend`` block, ``set_backend``, the ``CONVSUITE_BACKEND``
environment variable, then ``"auto"``. A named backend never falls back
silently; ``"auto"`` walks the backends by priority and takes the first that
is available and can run the case.
"""

from __future__ import annotations

import importlib
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Iterator, NoReturn

import numpy as np

from . import _forksafe, _plan_cache
from ._environ import environment_reader
from ._errors import BackendUnavailableError, UnsupportedCaseError
from ._precision import admits, get_precision
from ._spec import ConvSpec
from .backends.base import Backend, Verdict

__all__ = [
    "BackendInfo",
    "Selection",
    "backend_names",
    "candidates",
    "home_backend",
    "get_backend",
    "list_backends",
    "register_backend",
    "registry_name",
    "request_candidates",
    "select",
    "set_backend",
    "unregister_backend",
    "use_backend",
]

ENV_VAR = "CONVSUITE_BACKEND"


_read_env_backend = environment_reader(ENV_VAR)

# name -> "module:Class"; loaded on first use. Order here is display order only.
_BUILTIN_BACKENDS = {
    "cupy": "convsuite.backends.cupy_backend:CupyBackend",
    "numba": "convsuite.backends.numba_backend:NumbaBackend",
    "cython": "convsuite.backends.cython_backend:CythonBackend",
    "joblib": "convsuite.backends.joblib_backend:JoblibBackend",
    "numpy": "convsuite.backends.numpy_backend:NumpyBackend",
    "python": "convsuite.backends.python_backend:PythonBackend",
}

_lock = _forksafe.rlock()
_table: dict[str, str | Backend] = dict(_BUILTIN_BACKENDS)
_scoped: ContextVar[tuple[str, ...]] = ContextVar("convsuite_backend_scope", default=())
_global_choice: str | None = None


class _BrokenBackend(Backend):
    """Stands in for a backend whose module failed to import, carrying why."""

    def __init__(self, name: str, reason: str) -> None:
        # One class stands for every backend whose module failed to import, so the name is per instance.
        self.name = name  # type: ignore[misc]
        self._reason = reason

    def available(self) -> Verdict:
        return self._reason

    def forward(self, *args: Any, **kwargs: Any) -> NoReturn:  # pragma: no cover - never selected
        raise BackendUnavailableError(self._reason)

    backward = forward


def register_backend(backend: Backend | str, *, name: str | None = None, replace: bool = False) -> None:
    """Add a backend to the table.

    Parameters
    ----------
    backend : Backend or str
        An instance, or an import path ``"package.module:ClassName"`` loaded on
        first use.
    name : str, optional
        Registry name; defaults to ``backend.name`` for instances.
    replace : bool
        Allow replacing an existing entry of the same name.
    """
    if name is None:
        if isinstance(backend, str):
            raise TypeError("`name` is required when `backend` is an import path")
        name = backend.name
    if not isinstance(name, str) or not name or name == "auto":
        raise ValueError(f"`name` must be a non-empty string other than 'auto'; got {name!r}")
    if not isinstance(backend, (Backend, str)):
        raise TypeError(
            f"`backend` must be a Backend instance or an import path 'module:Class'; got {type(backend).__name__}"
        )
    with _lock:
        if name in _table and not replace:
            raise ValueError(f"a backend named {name!r} is already registered; pass replace=True")
        _table[name] = backend
    _plan_cache.invalidate()


def unregister_backend(name: str) -> None:
    """Remove a backend from the table (mainly for tests and plugins)."""
    global _global_choice
    with _lock:
        if name not in _table:
            raise ValueError(f"no backend named {name!r}; registered: {', '.join(backend_names())}")
        del _table[name]
        if _global_choice == name:
            _global_choice = None
    _plan_cache.invalidate()


def backend_names() -> list[str]:
    """Registered backend names, in registration order."""
    with _lock:
        return list(_table)


def _check_name(name: object, where: str) -> str:
    """An unknown name is a ValueError listing the valid ones."""
    valid = ["auto", *backend_names()]
    if not isinstance(name, str) or name not in valid:
        raise ValueError(f"{where} must be one of {', '.join(map(repr, valid))}; got {name!r}")
    return name


def get_backend(name: str) -> Backend:
    """The backend instance registered as ``name``, importing it if needed."""
    _check_name(name, "`backend`")
    if name == "auto":
        raise ValueError("`backend` must name one backend here, not 'auto'")
    with _lock:
        entry = _table[name]
        if isinstance(entry, Backend):
            return entry
        module_name, _, class_name = entry.partition(":")
        try:
            instance: Backend = getattr(importlib.import_module(module_name), class_name)()
        except Exception as exc:  # any import failure becomes a reason, not a crash
            instance = _BrokenBackend(name, f"backend module {module_name} failed to import: {exc!r}")
        _table[name] = instance
        return instance


def _by_priority() -> list[Backend]:
    backends = [get_backend(n) for n in backend_names()]
    return sorted(backends, key=lambda b: -b.priority)


@dataclass(frozen=True)
class BackendInfo:
    """One row of :func:`list_backends`."""

    name: str
    device: str
    available: bool
    reason: str | None
    algorithms: tuple[str, ...]
    priority: int
    description: str
    #: The float32 precision class of each algorithm (see :mod:`convsuite._precision`).
    precision: dict = field(default_factory=dict)

    def __str__(self) -> str:
        state = "available" if self.available else f"unavailable: {self.reason}"
        names = [
            a if self.precision.get(a, "highest") == "highest" else f"{a} [{self.precision[a]}]"
            for a in self.algorithms
        ]
        return f"{self.name} ({self.device}): {state}; algorithms: {', '.join(names)}"


def list_backends() -> list[BackendInfo]:
    """Every registered backend, highest priority first, with its availability.

    Returns
    -------
    list of BackendInfo
        ``name``, ``device`` (``"cpu"``/``"gpu"``), ``available``, ``reason``
        (why it is unavailable, else None), ``algorithms``, ``priority``, a
        one-line ``description`` and each algorithm's float32 ``precision``
        class.
    """
    rows = []
    for backend in _by_priority():
        verdict = backend.available()
        rows.append(
            BackendInfo(
                name=backend.name,
                device=backend.device,
                available=verdict is True,
                reason=None if verdict is True else verdict,
                algorithms=tuple(backend.algorithms),
                priority=backend.priority,
                description=backend.description,
                precision={name: record.precision for name, record in (backend.algorithm_table() or {}).items()},
            )
        )
    return rows


@contextmanager
def use_backend(name: str) -> Iterator[None]:
    """Use backend ``name`` for convsuite calls inside the ``with`` block.

    Blocks nest (the innermost wins) and are private to the thread or asyncio
    task that entered them. ``"auto"`` restores automatic selection inside
    the block. An unknown name raises at once; availability is checked when a
    call needs the backend.
    """
    _check_name(name, "`use_backend` name")
    token = _scoped.set(_scoped.get() + (name,))
    try:
        yield
    finally:
        _scoped.reset(token)


def set_backend(name: str | None) -> None:
    """Set the process-wide default backend (``None`` or ``"auto"`` to reset).

    ``use_backend`` blocks and the ``backend=`` argument still take precedence.
    """
    global _global_choice
    if name is not None:
        _check_name(name, "`set_backend` name")
    _global_choice = None if name in (None, "auto") else name
    _plan_cache.invalidate()


def requested_backend(explicit: str | None) -> tuple[str, str]:
    """The backend name a call asks for, and which setting asked for it."""
    if explicit is not None:
        # The per-call path: a known name is one dict lookup, not a list of names.
        if type(explicit) is str and (explicit == "auto" or explicit in _table):
            return explicit, "the backend= argument"
        return _check_name(explicit, "`backend`"), "the backend= argument"
    scoped = _scoped.get()
    if scoped:
        return scoped[-1], "use_backend()"
    if _global_choice is not None:
        return _global_choice, "set_backend()"
    env = _read_env_backend()
    env = "" if env is None else env.strip()
    if env:
        return _check_name(env, f"the environment variable {ENV_VAR}"), f"${ENV_VAR}"
    return "auto", "the default"


@dataclass(frozen=True)
class Selection:
    """What :func:`select` decided: a backend, an algorithm, and why."""

    backend: Backend
    algorithm: str
    source: str
    reason: str
    considered: tuple[tuple[str, str], ...]


def _check_algorithm(backend: Backend, algorithm: object) -> None:
    if algorithm != "auto" and algorithm not in backend.algorithms:
        valid = ", ".join(map(repr, ("auto", *backend.algorithms)))
        raise ValueError(f"`algorithm` must be one of {valid} for backend {backend.name!r}; got {algorithm!r}")


def _pick_algorithm(backend: Backend, spec: ConvSpec, algorithm: str, direction: str) -> tuple[str, Verdict, str]:
    """Resolve ``"auto"`` and ask the backend whether it can run the case."""
    if algorithm == "auto":
        algorithm, why = backend.choose_algorithm(spec, direction)
    else:
        why = "pinned by the algorithm= argument"
    return algorithm, backend.can_run(spec, algorithm, direction), why


def check_algorithm_exists(algorithm: str) -> None:
    """A pinned algorithm that no backend has is a ValueError listing those that exist."""
    backends = _by_priority()
    if algorithm != "auto" and not any(algorithm in b.algorithms for b in backends):
        every = sorted({a for b in backends for a in b.algorithms})
        raise ValueError(f"`algorithm` must be 'auto' or one of {', '.join(map(repr, every))}; got {algorithm!r}")


def select(spec: ConvSpec, backend: str | None, algorithm: str, direction: str, source: str | None = None) -> Selection:
    """Choose the backend and algorithm for one call by priority, or raise saying why none fits.

    ``source`` names the setting that asked for ``backend`` when the caller
    has already resolved it (see :func:`requested_backend`).
    """
    # A source without a name (backend=None) is resolved like no source: the settings name the backend.
    name, source = requested_backend(backend) if source is None or backend is None else (backend, source)
    if name != "auto":
        chosen = get_backend(name)
        verdict = chosen.available()
        if verdict is not True:
            raise BackendUnavailableError(f"backend {name!r} (requested by {source}) is unavailable: {verdict}")
        _check_algorithm(chosen, algorithm)
        algo, verdict, why = _pick_algorithm(chosen, spec, algorithm, direction)
        if verdict is not True:
            raise UnsupportedCaseError(
                f"backend {name!r}, algorithm {algo!r} (requested by {source}) cannot run "
                f"this {direction} case: {verdict}"
            )
        return Selection(chosen, algo, source, f"requested by {source}; algorithm: {why}", ())

    backends = _by_priority()
    check_algorithm_exists(algorithm)
    considered: list[tuple[str, str]] = []
    for candidate in backends:
        verdict = candidate.available()
        if verdict is not True:
            considered.append((candidate.name, f"unavailable: {verdict}"))
            continue
        if algorithm != "auto" and algorithm not in candidate.algorithms:
            considered.append((candidate.name, f"has no algorithm {algorithm!r}"))
            continue
        algo, verdict, why = _pick_algorithm(candidate, spec, algorithm, direction)
        if verdict is not True:
            considered.append((candidate.name, f"cannot run this case ({algo}): {verdict}"))
            continue
        reason = f"highest-priority backend that is available and can run the case; algorithm: {why}"
        return Selection(candidate, algo, source, reason, tuple(considered))
    details = "; ".join(f"{n}: {why}" for n, why in considered)
    raise UnsupportedCaseError(f"no backend can run this {direction} case ({details})")


def home_backend(array: object) -> Backend | None:
    """The device backend that owns ``array``, or None for a host (NumPy) array.

    Asks each available non-CPU backend through the device protocol
    (:meth:`Backend.owns`), so the front end never names an array library.
    """
    if isinstance(array, np.ndarray):
        return None
    for backend in _by_priority():
        if backend.device != "cpu" and backend.available() is True and backend.owns(array):
            return backend
    return None


def selectable(backend: Backend) -> list[str]:
    """The algorithms of ``backend`` that ``algorithm="auto"`` may pick: all but those whose record says their
    results are not bit-reproducible (``Algorithm.deterministic``), or whose precision class the policy in
    force does not admit (``Algorithm.precision``, :mod:`._precision`); those run only when named.
    """
    table = backend.algorithm_table() or {}
    policy = get_precision()
    return [
        a
        for a in backend.algorithms
        if a not in table or (table[a].deterministic and admits(policy, table[a].precision))
    ]


def candidates(
    spec: ConvSpec, algorithm: str, direction: str, device: str | None = None
) -> tuple[list[tuple[Backend, str]], list[tuple[str, str]]]:
    """Every (backend, algorithm) that can run the case, by priority, and the skipped with why.

    ``algorithm="auto"`` lists each :func:`selectable` algorithm of each
    backend that can run; a pinned name lists only that one. ``device``
    keeps only backends of that device (``"cpu"``, ``"gpu"``).
    """
    able: list[tuple[Backend, str]] = []
    considered: list[tuple[str, str]] = []
    for backend in _by_priority():
        if device is not None and backend.device != device:
            considered.append((backend.name, f"computes on the {backend.device}, the data is on the {device}"))
            continue
        verdict = backend.available()
        if verdict is not True:
            considered.append((backend.name, f"unavailable: {verdict}"))
            continue
        names = selectable(backend) if algorithm == "auto" else (algorithm,)
        if algorithm != "auto" and algorithm not in backend.algorithms:
            considered.append((backend.name, f"has no algorithm {algorithm!r}"))
            continue
        refusals = []
        for name in names:
            verdict = backend.can_run(spec, name, direction)
            if verdict is True:
                able.append((backend, name))
            else:
                refusals.append(f"{name}: {verdict}")
        if refusals and not any(b is backend for b, _ in able):
            considered.append((backend.name, f"cannot run this case ({'; '.join(refusals)})"))
    return able, considered


def request_candidates(
    spec: ConvSpec, direction: str, name: str, algorithm: str, device: str
) -> tuple[list[tuple[Backend, str]], list[tuple[str, str]]]:
    """Candidates of a request: one named backend's algorithms, or every backend on the data's device.

    A named backend that is unavailable raises :class:`BackendUnavailableError`;
    for ``"auto"`` with nothing on the data's device, any device will do.
    """
    if name != "auto":
        backend = get_backend(name)
        verdict = backend.available()
        if verdict is not True:
            raise BackendUnavailableError(f"backend {name!r} is unavailable: {verdict}")
        names = selectable(backend) if algorithm == "auto" else (algorithm,)
        verdicts = {a: backend.can_run(spec, a, direction) for a in names}
        pairs = [(backend, a) for a, verdict in verdicts.items() if verdict is True]
        return pairs, [(f"{name}/{a}", str(verdict)) for a, verdict in verdicts.items() if verdict is not True]
    pairs, considered = candidates(spec, algorithm, direction, device)
    if not pairs:
        pairs, considered = candidates(spec, algorithm, direction, None)
    return pairs, considered


def registry_name(backend: Backend) -> str:
    """The name ``backend`` is registered under: its own ``name``, unless registered under another."""
    names = backend_names()
    if backend.name in names and get_backend(backend.name) is backend:
        return backend.name
    for name in names:
        if get_backend(name) is backend:
            return name
    return backend.name  # no longer registered: a recipe naming it says it is unknown when loaded
