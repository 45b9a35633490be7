"""The CPU a rule table was measured on, and this one: the features that move the crossovers.

Which backend and algorithm is fastest on a CPU depends on the machine as
much as on the problem: how many cores the parallel rungs may use, how wide
a vector the compiled loops and the BLAS kernels fill, which BLAS does the
products, and how much cache a tile may fill. :class:`Machine` holds those
features; :func:`current` reads them once per process (the CPU model and
flags from ``/proc/cpuinfo``, cache sizes from sysfs, the BLAS through
threadpoolctl when installed), and again in a forked child, whose affinity
mask may differ (``os.register_at_fork``; the project's ``_forksafe`` helper
was not on main when this was written).

:meth:`Machine.key` names the hardware and BLAS, stably across processes and
software updates: a calibrated table is filed under it.
:func:`distance` compares two machines on a log scale, so the rule can use
the shipped table of the machine nearest to this one. The thread count
convsuite uses is not part of a machine: it changes within a process
(``set_num_threads``), so the rule takes it as a feature of each problem.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import platform
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Callable, Mapping

from . import _forksafe
from ._threads import get_num_threads, usable_cpus
from .backends._blas_routines import BLAS_ENV

__all__ = ["Machine", "current", "detect", "distance", "machine_features", "reset"]

CPUINFO = Path("/proc/cpuinfo")
CACHE_ROOT = Path("/sys/devices/system/cpu/cpu0/cache")

#: Vector extensions from the widest, with the register width they give (bits). aarch64's SVE
#: length is implementation-defined; 128 bits is the least it can be.
_SIMD = (
    ("avx512f", "AVX-512", 512),
    ("avx2", "AVX2", 256),
    ("avx", "AVX", 256),
    ("sve", "SVE", 128),
    ("asimd", "NEON", 128),
    ("neon", "NEON", 128),
    ("sse2", "SSE2", 128),
)

#: How much each difference between two machines counts in :func:`distance`, in units of "a factor
#: of two in core count". Cores and vector width move the crossovers most (the parallel rungs against
#: the single-core ones; how fast the BLAS products run); cache sizes move tile sizes, less; another
#: BLAS or another instruction set architecture is a different machine altogether.
_WEIGHTS = {"cores": 1.0, "simd": 1.0, "l2": 0.5, "l3": 0.5, "blas": 1.0, "kernel_blas": 0.5, "arch": 3.0}
#: A term whose value one of the machines does not know counts as this far.
_UNKNOWN = 1.0


@dataclass(frozen=True)
class Machine:
    """The features of a CPU machine that move the crossovers between backends.

    Attributes
    ----------
    model : str
        The CPU model name ("AMD EPYC", "Intel(R) Xeon(R) Gold 6338").
    arch : str
        The instruction set architecture (``platform.machine()``: x86_64, aarch64).
    logical_cores : int
        Logical CPUs of the machine (``os.cpu_count()``).
    usable_cores : int
        Logical CPUs this process may run on (its affinity mask).
    simd : str
        The widest vector extension ("AVX-512", "AVX2", "NEON", ... or "none").
    simd_bits : int
        Its register width in bits (0 when unknown).
    l2_bytes, l3_bytes : int or None
        Level 2 and 3 cache sizes of the first CPU (None when unknown).
    blas : str
        NumPy's BLAS: vendor and kernel architecture ("openblas Haswell"), or "unknown".
    kernel_blas : str
        The BLAS of the compiled rungs' gemm ("scipy-openblas32" or "scipy").
    """

    model: str
    arch: str
    logical_cores: int
    usable_cores: int
    simd: str
    simd_bits: int
    l2_bytes: int | None
    l3_bytes: int | None
    blas: str
    kernel_blas: str

    def key(self) -> str:
        """A stable name of this hardware and BLAS: readable head, hash of every identifying feature.

        The usable cores are left out (a ``taskset`` does not make another
        machine), and so are library versions (an update keeps the table).
        """
        known = self.__dict__.get("_key")
        if known is not None:
            return known
        identity = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "usable_cores"}
        digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
        simd = re.sub(r"[^a-z0-9]", "", self.simd.lower()) or "none"
        key = f"{re.sub(r'[^a-z0-9_]', '', self.arch.lower()) or 'cpu'}-{self.logical_cores}c-{simd}-{digest}"
        object.__setattr__(self, "_key", key)  # frozen, so computed once; not a field (equality ignores it)
        return key

    def describe(self) -> str:
        """In words, for ``explain()``: "a 16-core AVX-512 machine (Intel Xeon Gold 6338)"."""
        simd = f" {self.simd}" if self.simd != "none" else ""
        return f"{self.logical_cores}-core{simd} machine ({_short_model(self.model)})"

    def differences(self, other: Machine) -> list[str]:
        """What tells ``other`` from this machine, in words ("16 cores, here 2"), for ``explain()``."""

        def size(value: int | None) -> str:
            return "unknown" if not value else f"{value / 2**20:g} MiB" if value >= 2**20 else f"{value // 2**10} KiB"

        shown: dict[str, tuple[str, Callable[[Any], str]]] = {
            "model": ("CPU", str),
            "usable_cores": ("usable cores", str),
            "simd": ("vectors", str),
            "l2_bytes": ("L2", size),
            "l3_bytes": ("L3", size),
            "blas": ("NumPy's BLAS", str),
            "kernel_blas": ("gemm BLAS", str),
        }
        return [
            f"{label} {show(getattr(other, name))}, here {show(getattr(self, name))}"
            for name, (label, show) in shown.items()
            if getattr(other, name) != getattr(self, name)
        ]

    def to_dict(self) -> dict[str, Any]:
        """The features and the key, as JSON-ready values."""
        return asdict(self) | {"key": self.key()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Machine:
        """The machine a table records.

        Raises
        ------
        ValueError
            A feature missing or of the wrong type (the message names it).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a machine must be a mapping of its features; got {type(data).__name__}")
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in data:
                raise ValueError(f"the machine has no {f.name!r}")
            value = data[f.name]
            optional = f.name in ("l2_bytes", "l3_bytes")
            expected = int if f.name in ("logical_cores", "usable_cores", "simd_bits") or optional else str
            if value is None and optional:
                values[f.name] = None
                continue
            if not isinstance(value, expected) or isinstance(value, bool):
                raise ValueError(f"the machine's {f.name!r} must be {expected.__name__}; got {value!r}")
            values[f.name] = value
        if values["logical_cores"] < 1 or values["usable_cores"] < 1:
            raise ValueError(f"the machine's core counts must be >= 1; got {data!r}")
        return cls(**values)


def _short_model(model: str) -> str:
    """The model name without trademark marks, "CPU" and the clock ("Intel Xeon Gold 6338")."""
    text = re.sub(r"\((R|TM|tm|r)\)", "", model)
    text = re.sub(r"\bCPU\b|@.*$|\b\d+-Core Processor\b|\bProcessor\b", "", text)
    return " ".join(text.split()) or "unknown CPU"


def read_cpuinfo(path: Path | str = CPUINFO) -> dict[str, str]:
    """The first processor's entries of a ``/proc/cpuinfo`` (empty where there is none)."""
    entries: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    if "flags" in entries or "Features" in entries:
                        break  # the first processor's block is complete
                    continue
                key, sep, value = line.partition(":")
                if sep:
                    entries.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return entries


def simd_of(flags: set[str] | frozenset[str]) -> tuple[str, int]:
    """The widest vector extension among the CPU's ``flags`` and its width in bits (``("none", 0)``)."""
    for flag, name, bits in _SIMD:
        if flag in flags:
            return name, bits
    return "none", 0


def parse_size(text: str) -> int | None:
    """A sysfs cache size ("48K", "1024K", "32M", "1G", "512") in bytes, or None if unreadable."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, flags=re.IGNORECASE)
    if not match:
        return None
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2).upper()]
    return int(match.group(1)) * scale


def cache_sizes(root: Path | str = CACHE_ROOT) -> dict[int, int]:
    """Data or unified cache size per level (bytes) from a sysfs ``cpu0/cache`` folder; {} where there is none."""
    sizes: dict[int, int] = {}
    try:
        folders = sorted(Path(root).glob("index*"))
    except OSError:
        return sizes
    for folder in folders:
        try:
            level = int((folder / "level").read_text().strip())
            kind = (folder / "type").read_text().strip()
            size = parse_size((folder / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified") and size:
            sizes[level] = max(size, sizes.get(level, 0))
    return sizes


def _numpy_blas() -> str:
    """NumPy's BLAS as "vendor architecture" through threadpoolctl, or "unknown" without it."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown"
    for pool in threadpool_info():
        if pool.get("user_api") == "blas":
            parts = [pool.get("internal_api") or "", pool.get("architecture") or ""]
            return " ".join(p for p in parts if p) or "unknown"
    return "unknown"


def _kernel_blas() -> str:
    """The BLAS the compiled rungs' gemm calls, from the package present (not loaded: see ``_blas_routines``)."""
    if os.environ.get(BLAS_ENV, "").strip() == "scipy":
        return "scipy"
    return "scipy-openblas32" if importlib.util.find_spec("scipy_openblas32") is not None else "scipy"


def detect(
    cpuinfo: Path | str = CPUINFO,
    cache_root: Path | str = CACHE_ROOT,
    *,
    blas: str | None = None,
    kernel_blas: str | None = None,
    logical_cores: int | None = None,
    usable_cores: int | None = None,
    arch: str | None = None,
) -> Machine:
    """Read the machine's features (the paths and the keyword values let tests describe another machine)."""
    info = read_cpuinfo(cpuinfo)
    flags = frozenset((info.get("flags") or info.get("Features") or "").split())
    simd, bits = simd_of(flags)
    model = info.get("model name") or info.get("Model") or info.get("Hardware") or platform.processor()
    caches = cache_sizes(cache_root)
    return Machine(
        model=model or platform.machine() or "unknown CPU",
        arch=arch if arch is not None else platform.machine() or "unknown",
        logical_cores=logical_cores if logical_cores is not None else os.cpu_count() or 1,
        usable_cores=usable_cores if usable_cores is not None else usable_cpus(),
        simd=simd,
        simd_bits=bits,
        l2_bytes=caches.get(2),
        l3_bytes=caches.get(3),
        blas=blas if blas is not None else _numpy_blas(),
        kernel_blas=kernel_blas if kernel_blas is not None else _kernel_blas(),
    )


_current: Machine | None = None
_lock = _forksafe.lock()


def current() -> Machine:
    """The machine this process runs on, read once per process (and once more in a forked child)."""
    global _current
    machine = _current
    if machine is None:
        with _lock:
            if _current is None:
                _current = detect()
            machine = _current
    return machine


@_forksafe.at_fork_in_child
def reset() -> None:
    """Forget the machine read so far: the next :func:`current` reads it again (a forked child too)."""
    global _current
    _current = None


def machine_features() -> dict[str, Any]:
    """The features of the machine this runs on, its key, and the thread count convsuite uses now."""
    return current().to_dict() | {"threads": get_num_threads()}


def _log_ratio(a: int | None, b: int | None) -> float:
    """``|log2(a / b)|``; :data:`_UNKNOWN` when one of them is unknown (None or 0), 0 when both are."""
    if not a or not b:
        return 0.0 if not a and not b else _UNKNOWN
    return abs(math.log2(a / b))


def _blas_difference(a: str, b: str) -> float:
    """1 for another BLAS vendor (or one unknown), 0.5 for the same vendor's kernels for another CPU, 0 if equal."""
    if a == b:
        return 0.0
    vendor_a, vendor_b = (a.split() or ["unknown"])[0], (b.split() or ["unknown"])[0]
    return 0.5 if vendor_a == vendor_b != "unknown" else 1.0


def distance(a: Machine, b: Machine) -> float:
    """How different two machines are for the rule: 0 for the same features, about 1 per doubling of cores.

    A weighted Euclidean distance over log2 ratios of usable cores, vector
    width and cache sizes, plus a fixed term for another BLAS, another gemm
    BLAS or another architecture (:data:`_WEIGHTS`).
    """
    terms = {
        "cores": _log_ratio(a.usable_cores, b.usable_cores),
        "simd": _log_ratio(a.simd_bits, b.simd_bits),
        "l2": _log_ratio(a.l2_bytes, b.l2_bytes),
        "l3": _log_ratio(a.l3_bytes, b.l3_bytes),
        "blas": _blas_difference(a.blas, b.blas),
        "kernel_blas": float(a.kernel_blas != b.kernel_blas),
        "arch": float(a.arch != b.arch),
    }
    return math.sqrt(sum((_WEIGHTS[name] * value) ** 2 for name, value in terms.items()))
