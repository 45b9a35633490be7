"""The ``cython`` backend: compiled single-core kernels from ``cython_src/``.

The kernels live in the extension module ``convsuite._cython._conv_cy``,
built by ``pip install .``; it is imported only when the backend is first
asked for, so a missing build is reported with its reason instead of
breaking ``import convsuite``. There is no pure-Python stand-in.
"""

from __future__ import annotations

from ._kernel_module import KernelModuleBackend

__all__ = ["CythonBackend"]


class CythonBackend(KernelModuleBackend):
    """Single-core compiled loops (typed memoryviews, GIL released, no OpenMP)."""

    name = "cython"
    device = "cpu"
    priority = 20
    algorithms = ("direct",)
    description = "Cython, one core: tiled AXPY loops gcc vectorises, GIL released"
    kernel_module = "convsuite._cython._conv_cy"
    missing_hint = (
        "extension not built; reinstall with `pip install .` on a machine with a C compiler "
        "(set CONVSUITE_REQUIRE_EXTENSION=1 to see the build error)"
    )
