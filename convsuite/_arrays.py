"""Which array library an object belongs to, without importing optional ones."""

from __future__ import annotations

import os

__all__ = ["is_cupy_array", "total_host_memory"]


def is_cupy_array(value: object) -> bool:
    """True for a ``cupy.ndarray``; checked by module name so cupy is not imported."""
    module = type(value).__module__ or ""
    return module == "cupy" or module.startswith("cupy.") or module.startswith("cupy._")


def total_host_memory() -> int | None:
    """Physical memory of this machine in bytes, or None where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None
