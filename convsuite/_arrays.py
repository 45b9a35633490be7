"""Which array library an object belongs to, and how much host memory is free.

Nothing here imports an optional dependency.
"""

from __future__ import annotations

import os

__all__ = ["available_host_memory", "is_cupy_array", "total_host_memory"]


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


def _meminfo_available() -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes (Linux), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_headroom() -> int | None:
    """Bytes this process's cgroup (v2) may still allocate, or None when unlimited."""
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as handle:
            limit = handle.read().strip()
        if limit == "max":
            return None
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as handle:
            current = int(handle.read().strip())
        return max(int(limit) - current, 0)
    except (OSError, ValueError):
        return None


def available_host_memory() -> int | None:
    """Bytes that can be allocated now without swapping or the OOM killer.

    The smaller of the kernel's ``MemAvailable`` estimate and what the cgroup
    (a container's memory limit) still allows; physical memory where neither
    can be read (not Linux); None where nothing is known.
    """
    known = [v for v in (_meminfo_available(), _cgroup_headroom()) if v is not None]
    if known:
        return min(known)
    return total_host_memory()
