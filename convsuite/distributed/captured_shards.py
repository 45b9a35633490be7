"""Forward convolutions of device-resident shards, replayed from one CUDA graph per shard.

:func:`~convsuite.distributed.multigpu.conv_shards` queues each GPU's call
from the calling thread, so the last GPU starts one public call's host time
(~15-35 us on the H100 hosts, 2026-11-27) after the first: on a layer of a
third of a millisecond per GPU that lag alone costs ~8% of two GPUs' gain.
For work that is repeated on the same shards (a batch resident on the GPUs,
refilled in place between calls), :class:`CapturedShards` captures each
shard's call once and then launches each GPU's whole share with one graph
launch, a few microseconds of host time.

The rules are those of a CUDA graph (as in PyTorch's ``torch.cuda.graphs``):

- the graph reads the shards' input arrays and the weights in place: to run
  on new data, write it into ``shard.array`` (``shard.array[...] = new``) and
  call again; replacing the arrays themselves is not seen;
- the outputs are fixed arrays, written again by every call
  (:attr:`CapturedShards.outputs`): copy what must outlive the next call;
- a call waits for every GPU it used, as ``conv_shards`` does; one call at
  a time (two threads replaying the same graphs would write the same outputs).

Each capture runs on a stream of its own, with its buffers from a memory
pool private to the graph (two warm-up calls first, so that the capture
allocates nothing new and no other code is handed the addresses it bakes
in), and with :func:`convsuite._capture.graph_capture` on, so the plan takes
an algorithm that stream capture accepts. Where a capture is refused (a
layer whose plan reads a flag back to the host each call, say) that shard
runs eagerly into its fixed output instead, and :attr:`fallback_reason`
says why.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._arrays import is_cupy_array

__all__ = ["CapturedShards"]


@dataclass
class _ShardGraph:
    """One shard's graph (or, where capture failed, its eager plan) and what it reads and writes."""

    device: int
    graph: Any  # None: run ``plan`` eagerly
    plan: Any
    operands: tuple  # (x, w, bias) on the shard's device, kept alive for the graph
    out: Any
    pool: Any
    stream: Any


def _end_capture_quietly(stream) -> None:
    """End a capture that a failed call has invalidated (its own error is not the news)."""
    try:
        stream.end_capture()
    except Exception:
        pass


def _writing_plan(plan, device: int):
    """``plan``, if it can write into a given output array (a fixed output needs that)."""
    if not plan.accepts_out:
        raise ValueError(f"the plan for the shard on device {device} cannot write into a fixed output ({plan})")
    return plan


class CapturedShards:
    """The forward convolution of fixed shards, one CUDA graph per shard, replayed per call.

    Parameters
    ----------
    shards : sequence of Shard
        :func:`~convsuite.distributed.multigpu.scatter`'s slices, each a CuPy
        array on its own device. Read in place by every call.
    w, bias : array or dict, optional
        As for :func:`~convsuite.distributed.multigpu.conv_shards`: arrays
        (copied once to each GPU) or :func:`~convsuite.distributed.multigpu.replicate`'s
        per-GPU copies (read in place).
    **keywords
        stride, padding, dilation, groups, backend, algorithm: as for
        :func:`convsuite.conv2d` (:func:`convsuite.conv1d` when ``w`` is 3-D).

    Attributes
    ----------
    outputs : list of Shard
        The fixed output of each shard, on its device; every call writes them again.
    captured : int
        Shards running from a graph (the others run eagerly; see ``fallback_reason``).
    fallback_reason : str or None
        Why a capture was refused, if one was.
    replays : int
        Calls made.

    Examples
    --------
    >>> from convsuite.distributed import multigpu  # doctest: +SKIP
    >>> shards = multigpu.scatter(x)  # doctest: +SKIP
    >>> run = multigpu.CapturedShards(shards, multigpu.replicate(w))  # doctest: +SKIP
    >>> outputs = run()  # doctest: +SKIP
    >>> y = multigpu.gather(outputs)  # doctest: +SKIP
    """

    def __init__(self, shards: Sequence, w, bias=None, **keywords) -> None:
        from .multigpu import Shard

        if "out" in keywords:
            raise TypeError("`out` is not taken: the outputs are the fixed arrays in `.outputs`")
        if keywords.get("direction", "forward") != "forward":
            raise ValueError(f"CapturedShards runs the forward pass only; got direction={keywords['direction']!r}")
        shards = list(shards) if isinstance(shards, (list, tuple)) else shards
        if not isinstance(shards, list) or not shards or not all(isinstance(s, Shard) for s in shards):
            raise TypeError(f"`shards` must be a non-empty list of multigpu.Shard; got {shards!r:.80}")
        for name, value in (("w", w), ("bias", bias)):
            missing = [s.device for s in shards if isinstance(value, dict) and s.device not in value]
            if missing:
                raise ValueError(
                    f"`{name}` holds per-GPU copies (multigpu.replicate) for devices {sorted(value)}, "
                    f"but shards live on {sorted(set(missing))} too: replicate it to every shard's device"
                )
        for i, s in enumerate(shards):
            if not is_cupy_array(s.array):
                raise TypeError(f"`shards[{i}].array` must be a CuPy array; got {type(s.array).__name__}")
            if s.array.device.id != s.device:
                raise ValueError(
                    f"`shards[{i}]` says device {s.device} but its array lives on device {s.array.device.id}"
                )
        self.keywords = dict(keywords)
        self.fallback_reason: str | None = None
        self.replays = 0
        self._graphs = [self._capture(s, w, bias) for s in shards]
        self.captured = sum(g.graph is not None for g in self._graphs)
        self.outputs = [Shard(s.device, s.start, s.stop, g.out) for s, g in zip(shards, self._graphs)]

    def _plan(self, x, w, bias):
        """The plan of one shard's call (in the caller's capture setting)."""
        from .. import _api

        return _api.plan(x, w, bias, **self.keywords)

    def _capture(self, shard, w, bias) -> _ShardGraph:
        """Warm up on a private pool and stream, then capture one call into the fixed output."""
        import cupy

        from .._capture import graph_capture
        from .multigpu import _replicate

        device = shard.device
        with cupy.cuda.Device(device):
            stream = cupy.cuda.Stream(non_blocking=True)
            pool = cupy.cuda.MemoryPool()
            caller = cupy.cuda.get_current_stream()
            with cupy.cuda.using_allocator(pool.malloc), stream:
                stream.wait_event(caller.record())  # the shard and the weights are ready
                operands = (shard.array, _replicate(w, device), _replicate(bias, device))
                with graph_capture():
                    plan = _writing_plan(self._plan(*operands), device)
                    out = cupy.empty(plan.user_y_shape, dtype=plan.dtype)
                    # Two warm-up calls (eager: an error here is the call's own, and is raised): the
                    # first compiles, the second allocates what a steady-state call does, so the
                    # pool holds every block the capture asks for.
                    for _ in range(2):
                        plan(*operands, out=out)
                    stream.synchronize()
                    graph = self._record(stream, plan, operands, out, device)
            if graph is None:  # eager, with the algorithm the settings choose outside capture
                plan = _writing_plan(self._plan(*operands), device)
            stream.synchronize()
        return _ShardGraph(device, graph, plan, operands, out, pool, stream)

    def _record(self, stream, plan, operands, out, device: int):
        """One call captured on ``stream`` as a graph, or None (and the reason kept) if capture refuses it."""
        stream.begin_capture()
        try:
            plan(*operands, out=out)
        except Exception as exc:  # a call that synchronises with the host, ...
            _end_capture_quietly(stream)
            self.fallback_reason = f"shard on device {device}: {type(exc).__name__}: {exc}"
            return None
        try:
            return stream.end_capture()
        except Exception as exc:  # the capture was invalidated without the call noticing
            self.fallback_reason = f"shard on device {device}: {type(exc).__name__}: {exc}"
            return None

    def __call__(self) -> list:
        """Run every shard (each GPU's graph on its current stream), wait for all; return :attr:`outputs`."""
        import cupy

        for g in self._graphs:
            with cupy.cuda.Device(g.device):
                if g.graph is not None:
                    g.graph.launch(stream=cupy.cuda.get_current_stream())
                else:
                    g.plan(*g.operands, out=g.out)
        for device in dict.fromkeys(g.device for g in self._graphs):
            with cupy.cuda.Device(device):
                cupy.cuda.get_current_stream().synchronize()
        self.replays += 1
        return self.outputs

    def __repr__(self) -> str:
        devices = sorted({g.device for g in self._graphs})
        return (
            f"<CapturedShards {self._graphs[0].plan.op}, {len(self._graphs)} shards on GPUs {devices}, "
            f"{self.captured} captured, {self.replays} replays>"
        )
