"""CUDA sources of the cupy backend: the record of one ``.cu`` file, and how NVRTC (or nvcc) compiles it.

No cupy import here: the CI syntax check (nvcc -ptx) reads these records too.
Each kernel is a template instantiated for float and double through
``cupy.RawModule(name_expressions=...)``. A :class:`CudaSource` is declared
by the algorithm module that owns the file, beside it
(``convsuite/backends/cupy/algorithms/``): the kernel templates it defines,
the ``-D`` constants its kernels read (with their defaults), which of them a
tunable parameter may set per configuration, and the architecture it is
compiled for. Constants that both the launch code and the kernels need are
defined there only and reach the source as ``-D`` options
(:func:`compile_options`); the headers shared by every source
(``include/common.cuh``, ``include/tf32x3.cuh``) read :data:`SHARED_DEFINES`
and refuse to compile without them, so a value can never be copied by hand
and drift.

Declaring a source registers it by file name (:func:`declared`), which is how
the runtime (``_cupy_runtime.module(filename, ...)``) finds a file's kernels,
constants and target: a module that launches a file's kernels imports the
module that declares it. The backend's tables of every source
(``_catalog.KERNELS``, ``OVERRIDABLE``, ``ARCH_TARGETS``, ``DEFINES``) are
derived from the algorithm records, never kept by hand.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

__all__ = [
    "CudaSource",
    "INCLUDE_DIR",
    "SHARED_DEFINES",
    "arch_options",
    "compile_options",
    "compile_source",
    "declared",
    "include_dirs",
    "name_expression",
    "name_expressions",
    "normalize_overrides",
    "source_path",
    "source_text",
]

#: The folder of the headers every source includes (common.cuh, tf32x3.cuh).
INCLUDE_DIR = Path(__file__).resolve().parent / "include"

#: Constants of the shared headers, given to every source (``common.cuh`` refuses to compile without them).
SHARED_DEFINES = {
    "CS_THREADS": 256,  # threads per block of the 1-D-block kernels
    "CS_CONST_BYTES": 65536,  # constant memory for the *_const algorithms (the hardware limit; c_weights)
    # tf32x3.cuh (every tf32x3 kernel): 1 sums each k-step's three MMAs in a zeroed tile that the float32
    # accumulator takes with rounded adds (tx_mma3); 0 accumulates in the MMAs themselves
    "CS_TX_PROMOTE": 1,
}

_CTYPES = {"float32": "float", "float64": "double"}


@dataclass(frozen=True, eq=False)
class CudaSource:
    """One ``.cu`` file: its kernel templates, its ``-D`` constants and its compilation target.

    Attributes
    ----------
    filename : str
        The file's name, unique across the backend (sources include each
        other by name: ``#include "implicit_gemm.cu"``).
    directory : Path
        The folder it lives in (the declaring module's).
    kernels : tuple of str
        The kernel templates it defines, each one module at run time. The
        scalar type is the first template argument; ``"@A,B"`` adds more (a
        register tile, a kernel size); a trailing ``"|I"`` marks kernels also
        templated on their index type, instantiated for int (fast division)
        and long long (grid-stride loops whose last index passes 2^31 - 1:
        ``_cupy_runtime.needs_wide_index``).
    defines : mapping of str to int
        The ``-D`` constants its kernels read beyond :data:`SHARED_DEFINES`,
        with their default values (the launch code reads the same values).
    overridable : mapping of str to tuple of int
        The constants of ``defines`` (or of an included source's) that a
        tunable parameter may set per configuration, each with every value
        proved correct for this file's kernels. A configuration is compiled as
        its own module (``_cupy_runtime.module``).
    includes : tuple of CudaSource
        Sources this file includes (a ``_masked`` twin includes its plain
        source): their constants are compiled in too.
    arch : str or None
        An architecture-specific target (``-arch``), for a source that uses
        instructions of one GPU generation only: Hopper's ``wgmma`` needs
        ``sm_90a``, which runs on compute capability 9.0 alone. None: the
        device's own architecture.
    """

    filename: str
    directory: Path
    kernels: tuple[str, ...]
    defines: Mapping[str, int] = field(default_factory=dict)
    overridable: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    includes: tuple["CudaSource", ...] = ()
    arch: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "directory", Path(self.directory))
        object.__setattr__(self, "kernels", tuple(self.kernels))
        object.__setattr__(self, "defines", MappingProxyType(dict(self.defines)))
        object.__setattr__(self, "overridable", MappingProxyType({k: tuple(v) for k, v in self.overridable.items()}))
        if not self.kernels:
            raise ValueError(f"CudaSource {self.filename!r}: `kernels` must list at least one kernel template")
        shared = sorted(set(self.defines) & set(SHARED_DEFINES))
        if shared:
            raise ValueError(f"CudaSource {self.filename!r} redefines shared constants {', '.join(shared)}")
        constants = self.constants()
        for name, values in self.overridable.items():
            if name not in constants:
                raise ValueError(f"CudaSource {self.filename!r}: overridable {name} is none of its `defines`")
            if constants[name] not in values:
                raise ValueError(
                    f"CudaSource {self.filename!r}: the default {name}={constants[name]} is not among its "
                    f"overridable values {values}"
                )
        _declare(self)

    def constants(self) -> dict[str, int]:
        """Its own ``-D`` constants and those of the sources it includes (not the shared ones)."""
        values: dict[str, int] = {}
        for included in self.includes:
            values.update(included.constants())
        values.update(self.defines)
        return values

    @property
    def path(self) -> Path:
        """Where the file is."""
        return self.directory / self.filename


_registry: dict[str, CudaSource] = {}
_registry_lock = threading.Lock()


def _declare(source: CudaSource) -> None:
    """Register ``source`` by file name; a second, different declaration of one name raises."""
    with _registry_lock:
        known = _registry.get(source.filename)
        if known is not None and (known.path, known.kernels, dict(known.defines), dict(known.overridable)) != (
            source.path,
            source.kernels,
            dict(source.defines),
            dict(source.overridable),
        ):
            raise ValueError(f"two different CUDA sources are named {source.filename!r} ({known.path}, {source.path})")
        _registry[source.filename] = source


def declared(filename: str) -> CudaSource:
    """The :class:`CudaSource` of ``filename`` (declared when its algorithm module was imported).

    Raises
    ------
    KeyError
        No imported module declares ``filename``.
    """
    try:
        return _registry[filename]
    except KeyError:
        known = ", ".join(sorted(_registry)) or "none"
        raise KeyError(
            f"{filename!r} is not a declared CUDA source (import the algorithm module that owns it; declared: {known})"
        ) from None


def include_dirs() -> tuple[Path, ...]:
    """The include path of every compile: the shared headers, then each folder holding a declared source."""
    with _registry_lock:
        folders = sorted({source.directory for source in _registry.values()})
    return (INCLUDE_DIR, *folders)


def arch_options(filename: str) -> tuple[str, ...]:
    """The options that compile ``filename`` for its architecture-specific target at run time (none
    for other files): ``-arch``, and ``-DCS_REQUIRE_ARCH_FEATURES=1``, which makes the source
    refuse to compile (``#error``) if the compiler did not take that target, instead of
    building kernels that trap when launched.
    """
    arch = declared(filename).arch
    if arch is None:
        return ()
    return (f"-arch={arch}", "-DCS_REQUIRE_ARCH_FEATURES=1")


def normalize_overrides(filename: str, overrides=()) -> tuple[tuple[str, int], ...]:
    """``overrides`` (a mapping or ``(name, value)`` pairs) as a sorted tuple without the defaults.

    Values equal to the source's defaults are dropped, so the default
    configuration is always the empty tuple and shares each kernel's one
    default module.

    Raises
    ------
    ValueError
        A constant that ``filename`` does not declare overridable, or a value
        outside its allowed values.
    """
    source = declared(filename)
    pairs = dict(overrides.items() if hasattr(overrides, "items") else overrides)
    defaults = source.constants()
    kept = []
    for name, value in sorted(pairs.items()):
        allowed = source.overridable.get(name)
        if allowed is None:
            tunable = ", ".join(source.overridable) or "none"
            raise ValueError(f"-D{name} is not a per-configuration constant of {filename} (those that are: {tunable})")
        if value not in allowed or type(value) is not int:
            raise ValueError(f"-D{name} accepts {', '.join(map(str, allowed))}; got {value!r}")
        if value != defaults[name]:
            kept.append((name, value))
    return tuple(kept)


def compile_options(filename: str, overrides=()) -> tuple[str, ...]:
    """The ``-D`` options that give ``filename`` the shared constants and its own (``overrides`` replacing some).

    ``overrides`` are ``(name, value)`` pairs already checked by
    :func:`normalize_overrides`.
    """
    values = {**SHARED_DEFINES, **declared(filename).constants(), **dict(overrides)}
    return tuple(f"-D{name}={value}" for name, value in values.items())


def name_expression(kernel: str, dtype: str, wide: bool = False) -> str:
    """``"conv2d_register_tiled@8"`` + float32 -> ``"conv2d_register_tiled<float, 8>"``;
    ``"conv2d_direct|I"`` + float32 -> ``"conv2d_direct<float, int>"`` (``long long`` if wide).
    """
    kernel, indexed, _ = kernel.partition("|")
    base, _, extra = kernel.partition("@")
    args = [_CTYPES[dtype], *(extra.split(",") if extra else [])]
    if indexed:
        args.append("long long" if wide else "int")
    return f"{base}<{', '.join(args)}>"


def name_expressions(filename: str, kernel: str | None = None) -> list[str]:
    """Every instantiation of ``filename`` (of its kernel template ``kernel`` only, if given).

    Raises
    ------
    KeyError
        ``kernel`` is not a kernel of ``filename``.
    """
    kernels = declared(filename).kernels
    if kernel is not None and kernel not in kernels:
        raise KeyError(f"{kernel!r} is not a kernel of {filename} (those that are: {', '.join(kernels)})")
    names = []
    for entry in kernels if kernel is None else [kernel]:
        for dtype in _CTYPES:
            names.append(name_expression(entry, dtype))
            if entry.endswith("|I"):
                names.append(name_expression(entry, dtype, wide=True))
    return names


def _find(name: str, folders: tuple[Path, ...]) -> Path:
    """The file ``name`` in the first of ``folders`` that has it (the compiler's ``-I`` search)."""
    for folder in folders:
        candidate = folder / name
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{name!r} is in none of the include folders {', '.join(map(str, folders))}")


def source_path(filename: str) -> Path:
    """Where ``filename`` (a declared source, or a shared header) is: found as the compiler finds it."""
    return _find(filename, include_dirs())


def source_text(filename: str) -> str:
    """The CUDA source of ``filename``."""
    return source_path(filename).read_text()


_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def _included(text: str, folders: tuple[Path, ...]) -> dict[str, Path]:
    """Every file ``text`` includes, directly or through the files it includes, and where it is."""
    found: dict[str, Path] = {}
    pending = _INCLUDE.findall(text)
    while pending:
        name = pending.pop()
        if name not in found:
            found[name] = _find(name, folders)
            pending += _INCLUDE.findall(found[name].read_text())
    return found


def compile_source(filename: str) -> str:
    """The text NVRTC compiles for ``filename``: the file, then the hash of each file it includes.

    CuPy's disk cache keys a module by its source text, options, architecture
    and compiler version, not by the headers NVRTC reads through ``-I``; the
    trailing comment makes an edited ``common.cuh`` a new key, so a cached
    binary built from an older header is never loaded. Included files count
    transitively (a ``_masked.cu`` module includes its plain source, which
    includes ``common.cuh``). (The comment is last so that compiler messages
    keep the file's line numbers.)
    """
    text = source_text(filename)
    included = _included(text, include_dirs())
    digests = [
        f"// {header} sha256 {hashlib.sha256(included[header].read_bytes()).hexdigest()}" for header in sorted(included)
    ]
    return text + "\n" + "\n".join(digests) + "\n"
