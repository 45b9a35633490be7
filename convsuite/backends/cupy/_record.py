"""The record of one CUDA algorithm: an :class:`~convsuite.backends.base.Algorithm` with every flag the
cupy backend reads.

Every field below is keyword-only and has no default: an algorithm module
that leaves one out fails at import with the field's name, so no flag can be
forgotten and silently take a default. The backend's tables (which
algorithms fuse an activation, read grad_y through a ReLU mask, call cuBLAS,
multiply padding zeros; every source's kernels, constants and target) are
derived from these records by ``_catalog``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..._spec import ConvSpec
from ..base import DIRECTIONS, Algorithm, Launch
from ._sources import CudaSource

__all__ = ["CudaAlgorithm"]


@dataclass(frozen=True, kw_only=True)
class CudaAlgorithm(Algorithm):
    """One CUDA algorithm of the cupy backend.

    Attributes
    ----------
    sources : tuple of CudaSource
        Every ``.cu`` file whose kernels its plans launch (its own, and those
        of shared helpers: the bias gradient, an input gradient run by another
        family's kernels). Their kernels, ``-D`` constants, overridable
        constants and architecture targets are the algorithm's.
    plan_activation : callable or None
        ``plan_activation(spec, params, act) -> Launch``: the forward launch
        with the activation of code ``act`` (``_epilogue.ACTIVATION_CODES``:
        1 ReLU, 2 ReLU6) in the kernel's epilogue, ``params`` the resolved
        tunables (empty without). None: no kernel of it fuses an activation.
    plan_relu_mask : callable or None
        ``plan_relu_mask(spec, params) -> Launch``: the backward launch that
        reads grad_y through the ReLU output (a seventh operand) at every
        load, db included. None: the front end masks grad_y first.
    ieee_padding : tuple of str, or callable
        The directions in which its kernels load padding as zeros and
        multiply them like any other input (IEEE results with non-finite
        weights, as torch: the front end's fix-up is skipped), or
        ``ieee_padding(spec, direction) -> bool`` where that depends on the
        case. ``()``: none.
    calls_cublas : bool
        Whether it multiplies through cuBLAS (declined while a CUDA graph is
        captured: CuPy refuses cuBLAS calls then).
    """

    sources: tuple[CudaSource, ...]
    plan_activation: Callable[[ConvSpec, Mapping[str, Any], int], Launch] | None
    plan_relu_mask: Callable[[ConvSpec, Mapping[str, Any]], Launch] | None
    ieee_padding: tuple[str, ...] | Callable[[ConvSpec, str], bool]
    calls_cublas: bool

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "sources", tuple(self.sources))
        if not self.sources or not all(isinstance(s, CudaSource) for s in self.sources):
            raise TypeError(f"Algorithm {self.name!r}: `sources` must list the CudaSource of every file it launches")
        if not callable(self.ieee_padding):
            unknown = [d for d in self.ieee_padding if d not in DIRECTIONS]
            if unknown:
                raise ValueError(
                    f"Algorithm {self.name!r}: `ieee_padding` must be directions among {DIRECTIONS} or a callable; "
                    f"got {self.ieee_padding!r}"
                )
        if self.plan_activation is not None and "forward" not in self.directions:
            raise ValueError(f"Algorithm {self.name!r}: `plan_activation` needs a forward direction")
        if self.plan_relu_mask is not None and "backward" not in self.directions:
            raise ValueError(f"Algorithm {self.name!r}: `plan_relu_mask` needs a backward direction")

    @property
    def fuses_activation(self) -> bool:
        """Whether its forward kernel applies ``activation=`` ("relu", "relu6") in its epilogue."""
        return self.plan_activation is not None

    @property
    def fuses_relu_mask(self) -> bool:
        """Whether its backward kernels can read grad_y through the ReLU output."""
        return self.plan_relu_mask is not None

    def multiplies_padding(self, spec: ConvSpec, direction: str) -> bool:
        """Whether its kernels multiply padding zeros like any other input on ``spec`` in ``direction``."""
        if callable(self.ieee_padding):
            return bool(self.ieee_padding(spec, direction))
        return direction in self.ieee_padding

    @property
    def kernels(self) -> dict[str, tuple[str, ...]]:
        """The kernel templates of each of its sources: ``{filename: kernels}``."""
        return {source.filename: source.kernels for source in self.sources}

    @property
    def arch_targets(self) -> dict[str, str]:
        """Its sources compiled for an architecture-specific target: ``{filename: target}``."""
        return {source.filename: source.arch for source in self.sources if source.arch is not None}

    @property
    def defines(self) -> dict[str, int]:
        """The ``-D`` constants its sources read beyond the shared ones, with their defaults."""
        values: dict[str, int] = {}
        for source in self.sources:
            values.update(source.constants())
        return values

    @property
    def overridable(self) -> dict[str, dict[str, tuple[int, ...]]]:
        """The constants a configuration may set, per source: ``{filename: {name: values}}`` (sources with any)."""
        return {source.filename: dict(source.overridable) for source in self.sources if source.overridable}
