"""The cupy backend's tables, derived from its algorithm modules: nothing here is kept by hand.

Every module of :mod:`convsuite.backends.cupy.algorithms` whose name does not
start with an underscore is imported (in name order) and its ``ALGORITHMS``
records are read; from them come the backend's algorithm list, the sources
with their kernels, constants, overridable constants and targets, and the
sets of algorithms that fuse an activation, read grad_y through a ReLU mask,
call cuBLAS or multiply padding zeros. A module that declares no
``ALGORITHMS``, a record that is not a
:class:`~convsuite.backends.cupy._record.CudaAlgorithm`, two records of one
name or two sources that disagree on a constant stop the import with a
message that names them.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from ..._epilogue import ACTIVATION_CODES
from ..._spec import ConvSpec
from ..base import Launch
from . import algorithms as _package
from ._record import CudaAlgorithm
from ._sources import SHARED_DEFINES, CudaSource

__all__ = [
    "ALGORITHMS",
    "ARCH_TARGETS",
    "CALLS_CUBLAS",
    "DEFINES",
    "FUSED_ACTIVATION",
    "FUSED_RELU_MASK",
    "IEEE_FORWARD",
    "KERNELS",
    "MODULES",
    "ONE_D_ALGORITHMS",
    "OVERRIDABLE",
    "RECORDS",
    "SOURCES",
    "TWO_D_ALGORITHMS",
    "algorithm_modules",
    "plan_backward_relu",
    "plan_forward_activation",
]


def algorithm_modules(package: ModuleType = _package) -> tuple[ModuleType, ...]:
    """Every algorithm module of ``package``: its modules whose names do not start with ``_``, by name."""
    names = sorted(info.name for info in pkgutil.iter_modules(package.__path__) if not info.name.startswith("_"))
    return tuple(importlib.import_module(f"{package.__name__}.{name}") for name in names)


def records_of(modules) -> dict[str, CudaAlgorithm]:
    """The records the ``modules`` declare (``ALGORITHMS``), by name, in module then declaration order.

    Raises
    ------
    TypeError
        A module without an ``ALGORITHMS`` tuple of CudaAlgorithm records.
    ValueError
        Two records of one name.
    """
    records: dict[str, CudaAlgorithm] = {}
    for module in modules:
        declared = getattr(module, "ALGORITHMS", None)
        if not isinstance(declared, tuple) or not declared:
            raise TypeError(
                f"algorithm module {module.__name__} must declare `ALGORITHMS`, a non-empty tuple of CudaAlgorithm "
                f"records; got {declared!r}"
            )
        for record in declared:
            if not isinstance(record, CudaAlgorithm):
                raise TypeError(f"{module.__name__}.ALGORITHMS holds {record!r}, not a CudaAlgorithm record")
            if record.name in records:
                raise ValueError(f"two cupy algorithms are named {record.name!r} (the second in {module.__name__})")
            records[record.name] = record
    return records


def sources_of(records) -> tuple[CudaSource, ...]:
    """Every source the ``records`` launch, once each, in order of first use."""
    seen: dict[str, CudaSource] = {}
    for record in records:
        for source in record.sources:
            for each in (*source.includes, source):
                known = seen.setdefault(each.filename, each)
                if known is not each:
                    raise ValueError(f"two CudaSource records name {each.filename!r}")
    return tuple(seen.values())


def defines_of(sources) -> dict[str, int]:
    """The ``-D`` constants of every source with their defaults (the shared ones first).

    Raises
    ------
    ValueError
        Two sources give one constant different defaults.
    """
    values = dict(SHARED_DEFINES)
    owner: dict[str, str] = {}
    for source in sources:
        for name, value in source.constants().items():
            if name in values and name in owner and values[name] != value:
                raise ValueError(
                    f"-D{name} is {values[name]} in {owner[name]} but {value} in {source.filename}: one constant, "
                    "one value"
                )
            values[name] = value
            owner.setdefault(name, source.filename)
    return values


def overridable_of(sources) -> dict[str, tuple[tuple[str, ...], tuple[int, ...]]]:
    """``{constant: (files, values)}``: where a tunable may set each constant, and its proved values.

    Raises
    ------
    ValueError
        Two sources offer one constant with different values.
    """
    table: dict[str, tuple[tuple[str, ...], tuple[int, ...]]] = {}
    for source in sources:
        for name, values in source.overridable.items():
            files, known = table.get(name, ((), values))
            if known != values:
                raise ValueError(f"-D{name} is offered as {known} in {files[0]} but {values} in {source.filename}")
            table[name] = ((*files, source.filename), values)
    return table


#: The algorithm modules, in name order.
MODULES = algorithm_modules()

#: name -> record, every cupy algorithm.
RECORDS: dict[str, CudaAlgorithm] = records_of(MODULES)

ONE_D_ALGORITHMS = tuple(name for name, r in RECORDS.items() if r.ndims == (1,))
TWO_D_ALGORITHMS = tuple(name for name in RECORDS if name not in ONE_D_ALGORITHMS)
#: What ``algorithm=`` accepts, 2-D algorithms first.
ALGORITHMS = TWO_D_ALGORITHMS + ONE_D_ALGORITHMS

#: Every source a record launches (and those they include).
SOURCES: tuple[CudaSource, ...] = sources_of(RECORDS.values())

#: file -> the kernel templates it defines (see :class:`~._sources.CudaSource`).
KERNELS: dict[str, list[str]] = {source.filename: list(source.kernels) for source in SOURCES}

#: Every ``-D`` constant shared by the launch code and the kernels, with its default.
DEFINES: dict[str, int] = defines_of(SOURCES)

#: The ``-D`` constants a tunable parameter may set per configuration: name -> (files, every value proved
#: correct for them). A configuration is compiled as its own module (``_cupy_runtime.module``).
OVERRIDABLE = overridable_of(SOURCES)

#: Sources compiled for an architecture-specific target: file -> target (``-arch``).
ARCH_TARGETS: dict[str, str] = {source.filename: source.arch for source in SOURCES if source.arch is not None}

#: Forward algorithms whose kernel applies ``activation=`` ("relu", "relu6") in its epilogue.
FUSED_ACTIVATION = tuple(name for name, r in RECORDS.items() if r.fuses_activation)

#: Backward algorithms whose every grad_y load (dX, dW and the db reduction) can read through the ReLU
#: output (``relu_output=``): :func:`plan_backward_relu`.
FUSED_RELU_MASK = tuple(name for name, r in RECORDS.items() if r.fuses_relu_mask)

#: Algorithms that multiply through cuBLAS (declined while a CUDA graph is captured).
CALLS_CUBLAS = frozenset(name for name, r in RECORDS.items() if r.calls_cublas)

#: Algorithms whose forward kernels multiply padding zeros on every case (depthwise does on some:
#: ``CudaAlgorithm.multiplies_padding``).
IEEE_FORWARD = frozenset(
    name for name, r in RECORDS.items() if not callable(r.ieee_padding) and "forward" in r.ieee_padding
)


def plan_forward_activation(spec: ConvSpec, algorithm: str, activation: str, params: dict | None = None) -> Launch:
    """The forward launch of a :data:`FUSED_ACTIVATION` algorithm with ``activation`` in the kernel's epilogue.

    ``activation``: ``"relu"`` or ``"relu6"``. ``params`` sets the
    algorithm's tunables as for the plain forward plan (resolved here:
    defaults filled in, names and values checked).

    Raises
    ------
    ValueError
        ``algorithm`` fuses no activation, or ``activation`` is not one a kernel fuses.
    """
    record = RECORDS.get(algorithm)
    if record is None or not record.fuses_activation:
        raise ValueError(
            f"{algorithm!r} fuses no activation into its kernel; those that do: {', '.join(FUSED_ACTIVATION)}"
        )
    act = ACTIVATION_CODES.get(activation) if isinstance(activation, str) else None
    if not act:
        fused = ", ".join(repr(a) for a in ACTIVATION_CODES if a)
        raise ValueError(f"`activation` of a fused epilogue must be one of {fused}; got {activation!r}")
    return record.plan_activation(spec, record.resolve(spec, "forward", params), act)


def plan_backward_relu(spec: ConvSpec, algorithm: str, params: dict | None = None) -> Launch:
    """The backward launch of a :data:`FUSED_RELU_MASK` algorithm that reads grad_y through the ReLU output.

    ``launch(grad_y, x, w, grad_x, grad_w, grad_b, relu_output)``: every load
    of grad_y in the dX and dW kernels, and the db reduction, reads
    ``0 if relu_output <= 0 else grad_y`` (``relu_output`` of grad_y's shape
    and dtype, contiguous), so no masked copy of grad_y is made. ``params``
    sets the algorithm's tunables as for the plain backward plan.

    Raises
    ------
    ValueError
        ``algorithm`` has no kernels that read grad_y through a ReLU mask.
    """
    record = RECORDS.get(algorithm)
    if record is None or not record.fuses_relu_mask:
        raise ValueError(
            f"{algorithm!r} does not read grad_y through a ReLU mask; those that do: {', '.join(FUSED_RELU_MASK)}"
        )
    return record.plan_relu_mask(spec, record.resolve(spec, "backward", params))
