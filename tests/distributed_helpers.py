"""Backends the distributed tests register, importable by Dask worker processes."""

from __future__ import annotations

import threading

from convsuite.backends.base import Backend
from convsuite.testing import reference_forward


class ChunkFailure(RuntimeError):
    """The error a :class:`FailingBackend` raises inside a task."""


class FailingBackend(Backend):
    """Fails every forward call, to see the original error come back from a worker."""

    name = "failing"
    priority = -10

    def forward(self, spec, x, w, bias, out, algorithm):
        raise ChunkFailure(f"deliberate failure on a chunk of shape {spec.x_shape}")


class CountingBackend(Backend):
    """The float64 reference as a backend, counting its forward calls (laziness and settings tests)."""

    name = "counting"
    priority = -10

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def forward(self, spec, x, w, bias, out, algorithm):
        with self._lock:
            self.calls += 1
        out[...] = reference_forward(spec, x, w, bias).reshape(out.shape)
