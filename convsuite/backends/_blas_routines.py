"""Which BLAS ``sgemm``/``dgemm`` the compiled CPU rungs call, found once per process.

The Cython ``gemm`` and the numba ``gemm`` algorithms spend nearly all their
time in one BLAS product per im2col tile, so the BLAS build is their speed.
SciPy's wheels carry an OpenBLAS (reached through
``scipy.linalg.cython_blas``, as scikit-learn does) that can be older than
the one NumPy carries: SciPy 1.17.1 ships OpenBLAS 0.3.30, NumPy 2.4 0.3.31.
Measured on the 2-core EPYC VM (2026-11-26, one thread, ``cblas_sgemm``
through ctypes, GFLOP/s, 0.3.30 -> 0.3.34): 64 x 576 x 56 (a 3x3 C=64 layer,
one output row per tile) 70 -> 78; 64 x 576 x 3136 79 -> 88; 24 x 96 x 3136
(a 1x1 C96 -> 24 image) 64 -> 83; 32 x 400 x 128 (5x5 C=16) 64 -> 76.

So the routines come from the ``scipy-openblas32`` package (the OpenBLAS
build SciPy itself links against, published on its own with a newer
version) when it is installed, and from SciPy's ``cython_blas`` otherwise.
Both export the Fortran interface with 32-bit integers (``sgemm_(&transa,
&transb, &m, &n, &k, &alpha, a, &lda, b, &ldb, &beta, c, &ldc)``,
column-major), so the kernels call either the same way, through the address
held here. ``CONVSUITE_BLAS=scipy`` forces SciPy's (to compare the two).

The library is loaded with ``RTLD_LOCAL``, not by importing
``scipy_openblas32`` (whose import loads it ``RTLD_GLOBAL``): its
``scipy_*`` symbols are the same names as those of SciPy's own OpenBLAS, and
a global copy could take their place in SciPy modules imported later. It is
set to one thread at load: the rungs call it from their own threads
(``prange`` items, joblib chunks), one product per call.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BLAS_ENV", "GemmRoutines", "gemm_address", "gemm_routines"]

#: Environment variable choosing the BLAS of the compiled rungs: ``scipy-openblas32``
#: (the default when that package is installed) or ``scipy`` (SciPy's ``cython_blas``).
BLAS_ENV = "CONVSUITE_BLAS"
_CHOICES = ("scipy-openblas32", "scipy")


@dataclass(frozen=True)
class GemmRoutines:
    """Addresses of a Fortran-interface ``sgemm`` and ``dgemm`` (32-bit integers, column-major).

    Attributes
    ----------
    source : str
        Where they come from, with the library's version when known.
    sgemm, dgemm : int
        Function addresses, valid for the life of the process.
    why : str
        Why this source and not the preferred one (empty when it is the preferred).
    """

    source: str
    sgemm: int
    dgemm: int
    why: str = ""

    def address(self, dtype) -> int:
        """The routine for ``dtype`` (float32 or float64)."""
        import numpy as np

        return self.sgemm if np.dtype(dtype) == np.float32 else self.dgemm


def _scipy_routines(why: str = "") -> GemmRoutines:
    """SciPy's ``cython_blas`` routines: their addresses from the module's capsules."""
    from scipy.linalg import cython_blas

    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype, get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]

    def address(name: str) -> int:
        capsule = cython_blas.__pyx_capi__[name]
        return get_pointer(capsule, get_name(capsule))

    import scipy

    return GemmRoutines(f"SciPy {scipy.__version__} cython_blas", address("sgemm"), address("dgemm"), why)


def _openblas32_file() -> Path:
    """The shared library of the installed ``scipy-openblas32`` package (not imported: see above)."""
    spec = importlib.util.find_spec("scipy_openblas32")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the scipy-openblas32 package is not installed")
    lib_dir = Path(next(iter(spec.submodule_search_locations))) / "lib"
    candidates = sorted(
        p
        for p in lib_dir.glob("libscipy_openblas*")
        if p.suffix in (".so", ".dylib", ".dll") and not p.name.endswith(".a")
    )
    if not candidates:
        raise ImportError(f"no libscipy_openblas shared library in {lib_dir}")
    return candidates[0]


def _openblas32_routines() -> GemmRoutines:
    """``scipy-openblas32``'s ``scipy_sgemm_``/``scipy_dgemm_``, the library at one thread."""
    from importlib.metadata import version

    path = _openblas32_file()
    lib = ctypes.CDLL(str(path), mode=getattr(os, "RTLD_LOCAL", 0))
    lib.scipy_openblas_set_num_threads(ctypes.c_int(1))
    get_config = lib.scipy_openblas_get_config
    get_config.restype = ctypes.c_char_p
    config = get_config().decode(errors="replace").split()
    _loaded.append(lib)  # referenced for the life of the process: the addresses point into it
    label = f"scipy-openblas32 {version('scipy-openblas32')}" + (f" ({' '.join(config[:2])})" if config else "")
    return GemmRoutines(
        label,
        ctypes.cast(lib.scipy_sgemm_, ctypes.c_void_p).value,
        ctypes.cast(lib.scipy_dgemm_, ctypes.c_void_p).value,
    )


_loaded: list = []


@functools.cache
def gemm_routines() -> GemmRoutines:
    """The ``sgemm``/``dgemm`` of the compiled rungs (see the module docstring), found once.

    Raises
    ------
    ValueError
        ``CONVSUITE_BLAS`` is set to something other than ``scipy-openblas32`` or ``scipy``.
    """
    choice = os.environ.get(BLAS_ENV, "").strip()
    if choice and choice not in _CHOICES:
        raise ValueError(f"{BLAS_ENV} must be one of {', '.join(_CHOICES)} (or unset); got {choice!r}")
    if choice == "scipy":
        return _scipy_routines(f"{BLAS_ENV}=scipy")
    try:
        return _openblas32_routines()
    except (ImportError, OSError, AttributeError) as exc:
        if choice:  # asked for by name: say so rather than fall back silently
            raise ImportError(f"{BLAS_ENV}={choice} but it cannot be loaded: {exc}") from exc
        return _scipy_routines(f"scipy-openblas32 unavailable: {exc}")


def gemm_address(dtype: str) -> int:
    """The address of this process's ``sgemm`` (``"float32"``) or ``dgemm`` (``"float64"``).

    Kernels that take the address get it from here at every launch, never
    from a value stored at plan time: a plan sent to another process
    (cloudpickle, as Dask ships tasks) must not carry this process's address.
    """
    try:
        return _addresses[dtype]
    except KeyError:  # first launch of this dtype in this process (a fork child shares the parent's)
        address = _addresses[dtype] = gemm_routines().address(dtype)
        return address


_addresses: dict[str, int] = {}
