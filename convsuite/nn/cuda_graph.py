"""Replay a whole network as one CUDA graph (cupy backend, fixed input shapes).

At batch 1 a network is launch bound: each of its ~150 kernels costs a few
microseconds of launch overhead on the host. :class:`CapturedNetwork` runs
the network once under stream capture (``cupy.cuda.Stream.begin_capture``)
and then replays the captured graph, one launch for the whole pass.

Correctness rules:

- Every buffer the graph touches is allocated from a memory pool private to
  that graph, during a warm-up on the capture stream, so the capture itself
  allocates nothing new and no other code can be handed those addresses
  while the graph lives (the graph bakes pointers in).
- A call with a new input shape or dtype captures a new graph (or, with
  ``on_new_shape="eager"``, runs the network eagerly); a change of the
  network's parameter arrays (``load_state_dict``, ``to``) re-captures. The
  result returned is a fresh array, never the graph's own output buffer,
  so a later replay cannot overwrite what a caller holds.
- If capture fails (an operation that synchronises the host, say) the call
  runs eagerly and :attr:`CapturedNetwork.fallback_reason` says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._arrays import is_cupy_array
from .._capture import graph_capture
from .module import Module, no_grad, state_generation

__all__ = ["CapturedNetwork"]


@dataclass
class _Capture:
    """One captured graph and the buffers it reads and writes."""

    graph: Any
    stream: Any
    pool: Any
    static_x: Any
    static_y: Any
    weights: tuple[int, ...]
    generation: int


class CapturedNetwork:
    """A network on the GPU replayed from a CUDA graph per input shape.

    Parameters
    ----------
    network : convsuite.nn.Module
        In evaluation mode, with its parameters on the GPU (``.to("gpu")``).
    on_new_shape : {'recapture', 'eager'}, default 'recapture'
        What a call with an input shape not seen before does.
    max_graphs : int, default 8
        Graphs kept (one per shape); the oldest is dropped beyond that.

    Attributes
    ----------
    captures, replays, eager_calls : int
        Counters (for tests and reports).
    fallback_reason : str or None
        Why the last capture failed, if it did.
    """

    def __init__(self, network: Module, *, on_new_shape: str = "recapture", max_graphs: int = 8) -> None:
        if not isinstance(network, Module):
            raise TypeError(f"`network` must be a convsuite.nn.Module; got {type(network).__name__}")
        if on_new_shape not in ("recapture", "eager"):
            raise ValueError(f"`on_new_shape` must be 'recapture' or 'eager'; got {on_new_shape!r}")
        if not isinstance(max_graphs, int) or max_graphs < 1:
            raise ValueError(f"`max_graphs` must be a positive integer; got {max_graphs!r}")
        self.network = network
        self.on_new_shape = on_new_shape
        self.max_graphs = max_graphs
        self._graphs: dict[tuple, _Capture] = {}
        self.captures = self.replays = self.eager_calls = 0
        self.fallback_reason: str | None = None

    def _weights(self) -> tuple[int, ...]:
        """Device addresses of every parameter and buffer: they change when arrays are replaced."""
        return tuple(int(v.data.ptr) if is_cupy_array(v) else id(v) for v in self.network.state_dict().values())

    def _check(self, x: Any) -> None:
        """The per-call checks: cheap ones only (the network's state is checked when it changes)."""
        if self.network.training:
            raise ValueError("CapturedNetwork needs the network in evaluation mode: call network.eval() first")
        if not is_cupy_array(x):
            raise TypeError(f"CapturedNetwork takes a CuPy array on the GPU; got {type(x).__name__}")

    def _check_state(self) -> None:
        """Every parameter on the GPU (run before a capture and whenever the state changed)."""
        if not all(is_cupy_array(p.data) for p in self.network.parameters()):
            raise ValueError("CapturedNetwork needs the network's parameters on the GPU: call network.to('gpu')")

    def _eager(self, x: Any) -> Any:
        self.eager_calls += 1
        with no_grad():
            return self.network(x)

    def _capture(self, x: Any) -> _Capture:
        """Warm up on a private pool and stream, then capture one pass."""
        import cupy

        generation = state_generation()
        stream = cupy.cuda.Stream(non_blocking=True)
        pool = cupy.cuda.MemoryPool()
        caller = cupy.cuda.get_current_stream()
        with cupy.cuda.using_allocator(pool.malloc), stream, no_grad(), graph_capture():
            stream.wait_event(caller.record())
            static_x = cupy.empty_like(x)
            static_x[...] = x
            # Two warm-up passes: the first compiles and plans, the second
            # allocates exactly what a steady-state pass does, so the pool
            # holds every block the capture will ask for.
            for _ in range(2):
                self.network(static_x)
            stream.synchronize()
            stream.begin_capture()
            try:
                static_y = self.network(static_x)
            finally:
                graph = stream.end_capture()
        self.captures += 1
        return _Capture(graph, stream, pool, static_x, static_y, self._weights(), generation)

    def __call__(self, x: Any) -> Any:
        """The network's output for ``x`` (a new CuPy array), from a graph replay when possible."""
        self._check(x)
        import cupy

        key = (tuple(x.shape), x.dtype.str)
        entry = self._graphs.get(key)
        if entry is not None and entry.generation != state_generation():
            # Something was replaced since the capture: re-read every address the graph uses.
            self._check_state()
            if entry.weights != self._weights():
                del self._graphs[key]  # parameters were replaced: the old graph reads stale arrays
                entry = None
            else:
                entry.generation = state_generation()
        if entry is None:
            if self._graphs and self.on_new_shape == "eager":
                return self._eager(x)
            self._check_state()
            try:
                entry = self._capture(x)
            except Exception as exc:  # capture refused (a synchronising operation, ...)
                self.fallback_reason = f"{type(exc).__name__}: {exc}"
                return self._eager(x)
            if len(self._graphs) >= self.max_graphs:
                self._graphs.pop(next(iter(self._graphs)))
            self._graphs[key] = entry
        caller = cupy.cuda.get_current_stream()
        stream = entry.stream
        with stream:
            stream.wait_event(caller.record())  # x is ready
            entry.static_x[...] = x
            entry.graph.launch(stream=stream)
            out = entry.static_y.copy()
        caller.wait_event(stream.record())  # the caller's later work sees the result
        self.replays += 1
        return out
