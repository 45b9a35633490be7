"""Checks of the convsuite settings a torch module or ``convert`` takes: ``backend`` and ``algorithm``."""

from __future__ import annotations

from typing import Any

from .._registry import backend_names, check_algorithm_exists, get_backend

__all__ = ["check_algorithm", "check_backend", "checked_settings"]


def check_backend(backend: Any) -> str | None:
    """``backend`` if it is None, 'auto' or a registered backend name; else a ValueError listing the names."""
    if backend is None:
        return None
    valid = ["auto", *backend_names()]
    if not isinstance(backend, str) or backend not in valid:
        raise ValueError(f"`backend` must be None or one of {', '.join(map(repr, valid))}; got {backend!r}")
    return backend


def check_algorithm(algorithm: Any, backend: str | None) -> str:
    """``algorithm`` if it is 'auto' or an algorithm of ``backend`` (of any backend when none is named)."""
    if not isinstance(algorithm, str):
        raise TypeError(f"`algorithm` must be a string such as 'auto'; got {algorithm!r}")
    if algorithm == "auto":
        return algorithm
    if backend in (None, "auto"):
        check_algorithm_exists(algorithm)  # raises, listing every backend's algorithms
        return algorithm
    names = get_backend(backend).algorithms
    if algorithm not in names:
        raise ValueError(
            f"`algorithm` must be 'auto' or one of backend {backend!r}'s algorithms "
            f"({', '.join(map(repr, names))}); got {algorithm!r}"
        )
    return algorithm


def checked_settings(backend: Any, algorithm: Any) -> tuple[str | None, str]:
    """``(backend, algorithm)``, each checked (the algorithm against the backend)."""
    backend = check_backend(backend)
    return backend, check_algorithm(algorithm, backend)
