"""Per-layer timing: while a recorder is open, every leaf layer times its calls.

A layer's forward and backward are timed with the timer of the device its
input lives on (``perf_counter`` on the CPU, CUDA events on the GPU, through
the backend device protocol), so GPU figures measure the device work of that
layer and not only its launch. With no recorder open the cost of a call is
one context-variable lookup.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from .._arrays import is_cupy_array
from .._registry import get_backend
from ..backends.base import WallTimer

__all__ = ["LayerTimes", "record_layer_times"]


@dataclass
class LayerTimes:
    """Seconds spent in each layer, per direction, collected by :func:`record_layer_times`.

    Attributes
    ----------
    names : dict
        ``id(layer) -> qualified name`` (``"features.3.conv.1.0"``) of the
        network being timed.
    samples : dict
        ``(name, direction) -> list of seconds``, one entry per call.
    kinds : dict
        ``name -> (layer class name, category)``; categories are those of
        the seed reports' tables: ``"convolution"``, ``"pooling"``,
        ``"element-wise"``, ``"batch norm"``, ``"activation"``,
        ``"fully connected"``, ``"reshape"``.
    """

    names: dict[int, str]
    samples: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    kinds: dict[str, tuple[str, str]] = field(default_factory=dict)

    def add(self, layer: Any, direction: str, seconds: float) -> None:
        """Record one call of ``layer``."""
        name = self.names.get(id(layer), type(layer).__name__)
        self.kinds[name] = (type(layer).__name__, layer.category)
        self.samples[(name, direction)].append(seconds)

    def totals(self, direction: str = "forward") -> dict[str, float]:
        """Total seconds per layer name in ``direction``, in call order."""
        return {name: sum(t) for (name, d), t in self.samples.items() if d == direction}

    def by_category(self, direction: str = "forward") -> dict[str, float]:
        """Total seconds per layer category in ``direction``."""
        out: dict[str, float] = defaultdict(float)
        for name, seconds in self.totals(direction).items():
            out[self.kinds[name][1]] += seconds
        return dict(out)


_RECORDER: ContextVar[LayerTimes | None] = ContextVar("convsuite_layer_recorder", default=None)


def current_recorder() -> LayerTimes | None:
    """The open recorder, or None."""
    return _RECORDER.get()


def timer_for(array: Any) -> Any:
    """The device timer of the backend that owns ``array`` (CUDA events for CuPy)."""
    return device_timer("gpu" if is_cupy_array(array) else "cpu")


def device_timer(device: str) -> Any:
    """A fresh timer for ``"cpu"`` (wall clock) or ``"gpu"`` (the cupy backend's CUDA events)."""
    return get_backend("cupy").timer() if device == "gpu" else WallTimer()


@contextmanager
def record_layer_times(network: Any) -> Iterator[LayerTimes]:
    """Time every leaf layer of ``network`` called inside the block.

    Parameters
    ----------
    network : convsuite.nn.Module
        Gives the layers their qualified names (``named_modules``).

    Yields
    ------
    LayerTimes
        Filled as layers run.
    """
    times = LayerTimes(names={id(m): name or type(m).__name__ for name, m in network.named_modules()})
    token = _RECORDER.set(times)
    try:
        yield times
    finally:
        _RECORDER.reset(token)
