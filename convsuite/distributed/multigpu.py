"""A batch split across every visible GPU, results gathered where the caller is.

The calling thread enters each GPU's ``cupy.cuda.Device`` context in turn
and queues the ordinary single-array call on its slice of the batch (so each
GPU uses the algorithm the settings choose); kernel launches return at once,
so every GPU is busy before the first one is waited for. (Not quite where a
plan reads a flag back to the host: layers with padding on algorithms that
skip halo taps check for non-finite operands each call, which waits for that
GPU before the next is queued. A thread per GPU
was measured first: on two H200s its hand-offs and the launchers' contention
for the GIL cost more than a millisecond layer's share.) Placing host data
(:func:`scatter`) does use a thread per GPU, since host-to-device copies of
pageable NumPy memory block the host. The slices are then copied to the
caller's device (or to the host for NumPy input) and, for the backward pass,
the weight and bias gradients of the slices are summed there.

For repeated work on data that already lives on the GPUs, :func:`scatter`
places the batch once and :func:`conv_shards` / :func:`gather` run and
collect without moving inputs again (what the scaling benchmark times);
:class:`CapturedShards` replays each GPU's share from a CUDA graph, so the
last GPU no longer starts a whole call's host time after the first.
For a Dask array of CuPy chunks, use a Dask cluster with one worker per GPU
(``dask_cuda.LocalCUDACluster``): every chunk then runs on its worker's GPU.

**Captured shards.** :func:`conv_shards` queues each GPU's call
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

import numpy as np

from .. import _planner
from .._arrays import is_cupy_array
from .._capture import graph_capture
from .._thread_pools import shared_pool
from .._tiling import even_bounds

__all__ = [
    "CapturedShards",
    "Shard",
    "conv1d",
    "conv1d_backward",
    "conv2d",
    "conv2d_backward",
    "conv_shards",
    "gather",
    "replicate",
    "scatter",
    "visible_gpus",
]


def _cupy():
    import cupy

    return cupy


def visible_gpus() -> list[int]:
    """Ids of the CUDA devices this process sees (``CUDA_VISIBLE_DEVICES`` applies); [] without CuPy or a GPU."""
    try:
        cupy = _cupy()
    except Exception:  # not installed, or installed but refusing to load (a broken CUDA setup): no GPU to use
        return []
    try:
        return list(range(cupy.cuda.runtime.getDeviceCount()))
    except Exception:  # no driver, or a driver/toolkit mismatch: the cupy backend reports these as unavailable
        return []


@dataclass(frozen=True)
class Shard:
    """One slice of the batch on one GPU: rows ``[start, stop)`` of the whole."""

    device: int
    start: int
    stop: int
    array: Any


def _devices(devices: Sequence[int] | None) -> list[int]:
    found = visible_gpus()
    if devices is None:
        devices = found
    devices = list(devices)
    if not devices or any(d not in found for d in devices):
        raise ValueError(f"`devices` must be a non-empty list of visible GPU ids {found}; got {devices!r}")
    return devices


def _on_each(devices: Sequence[int], work) -> list:
    """Run ``work(i, device)`` for every device, one host thread each, inside its device context."""
    cupy = _cupy()

    def run(item):
        i, device = item
        with cupy.cuda.Device(device):
            result = work(i, device)
            # The caller's device reads these results next: finish them here.
            cupy.cuda.get_current_stream().synchronize()
            return result

    return list(shared_pool("gpu", len(devices)).map(run, enumerate(devices)))


def _queue_on_each(devices: Sequence[int], work) -> list:
    """Queue ``work(i, device)`` on every device from this thread, then wait for all of them."""
    cupy = _cupy()
    results = []
    for i, device in enumerate(devices):
        with cupy.cuda.Device(device):
            results.append(work(i, device))  # returns once its kernels are queued
    for device in dict.fromkeys(devices):
        with cupy.cuda.Device(device):
            # The caller's device reads these results next: finish them here.
            cupy.cuda.get_current_stream().synchronize()
    return results


def scatter(x, devices: Sequence[int] | None = None) -> list[Shard]:
    """Split ``x (B, ...)`` along the batch into near-equal slices, one per GPU.

    Parameters
    ----------
    x : numpy.ndarray or cupy.ndarray
        Batched input; a CuPy array may live on any device (peer copies).
    devices : sequence of int, optional
        GPU ids; by default every visible GPU. Fewer slices than devices when
        the batch is smaller than the device count.
    """
    devices = _devices(devices)
    bounds = even_bounds(int(x.shape[0]), len(devices))
    spans = list(zip(bounds, bounds[1:]))

    def place(i, device):
        a, b = spans[i]
        return Shard(device, a, b, _replicate(x[a:b], device))

    return _on_each(devices[: len(spans)], place)


def replicate(array, devices: Sequence[int] | None = None) -> dict[int, Any]:
    """A copy of ``array`` (weights, a bias) on each GPU, placed once.

    :func:`conv_shards` takes the result in place of ``w`` or ``bias``: repeated
    calls then move nothing (otherwise NumPy weights are copied to every GPU
    on every call).
    """
    devices = _devices(devices)
    return dict(zip(devices, _on_each(devices, lambda i, device: _replicate(array, device))))


def _replicate(array, device: int):
    """``array`` (NumPy, CuPy on any device, or :func:`replicate`'s copies) as a CuPy array on ``device``."""
    if array is None:
        return None
    if isinstance(array, dict):  # placed by replicate(): this device's copy
        if device not in array:
            raise ValueError(
                f"an operand placed by replicate() has copies on devices {sorted(array)}, not on device {device}: "
                "replicate it to every device the shards use"
            )
        return array[device]
    cupy = _cupy()
    if not is_cupy_array(array):
        return cupy.asarray(array)
    if array.device.id == device:
        return array
    out = cupy.empty(array.shape, dtype=array.dtype)
    with array.device:  # any copy to make it contiguous happens where it lives
        source = cupy.ascontiguousarray(array)
        source.device.synchronize()
    out.data.copy_from_device(source.data, source.nbytes)  # a peer copy between GPUs
    return out


def conv_shards(
    shards: Sequence[Shard],
    w,
    bias=None,
    *,
    ndim: int = 2,
    direction: str = "forward",
    grad_y: Sequence[Shard] | None = None,
    **keywords,
) -> list:
    """Run the convolution of every shard on its own GPU, concurrently.

    Forward returns a list of :class:`Shard` outputs. Backward (``grad_y``:
    the matching shards of the output gradient) returns a list of
    ``(grad_x shard, grad_w, grad_b)`` per device, the last two still to be summed.
    ``w`` and ``bias`` may be :func:`replicate`'s per-GPU copies (nothing moved per call).
    """
    if direction not in ("forward", "backward"):
        raise ValueError(f"`direction` must be 'forward' or 'backward'; got {direction!r}")
    devices = [s.device for s in shards]

    def forward(i, device):
        s = shards[i]
        y = _planner.forward(ndim, s.array, _replicate(w, device), _replicate(bias, device), **keywords)
        return Shard(device, s.start, s.stop, y)

    def backward(i, device):
        s = shards[i]
        gx, gw, gb = _planner.backward(ndim, grad_y[i].array, s.array, _replicate(w, device), **keywords)
        return Shard(device, s.start, s.stop, gx), gw, gb

    return _queue_on_each(devices, forward if direction == "forward" else backward)


def gather(shards: Sequence[Shard], device: int | None = None):
    """Concatenate shards along the batch on ``device`` (a GPU id), or on the host with ``None``."""
    first = shards[0].array
    shape = (shards[-1].stop - shards[0].start, *first.shape[1:])
    if device is None:
        out = np.empty(shape, dtype=first.dtype)
        for s in shards:
            s.array.get(out=out[s.start - shards[0].start : s.stop - shards[0].start])
        return out
    cupy = _cupy()
    with cupy.cuda.Device(device):
        out = cupy.empty(shape, dtype=first.dtype)
        for s in shards:
            a = s.start - shards[0].start
            # Batch slices of a C-ordered array are contiguous: one copy each (peer if needed).
            out[a : a + s.array.shape[0]].data.copy_from_device(s.array.data, s.array.nbytes)
        cupy.cuda.get_current_stream().synchronize()
    return out


def _sum_on(parts, device):
    """Sum per-device arrays (weight or bias gradients) on ``device`` or on the host."""
    if device is None:
        return sum(p.get() for p in parts[1:]) + parts[0].get()
    with _cupy().cuda.Device(device):
        total = _replicate(parts[0], device).copy()
        for p in parts[1:]:
            total += _replicate(p, device)
        return total


def _caller_device(x):
    return x.device.id if is_cupy_array(x) else None


def _forward(ndim, x, w, bias, devices, keywords):
    shards = scatter(x, devices)
    return gather(conv_shards(shards, w, bias, ndim=ndim, **keywords), _caller_device(x))


def _backward(ndim, grad_y, x, w, devices, keywords):
    shards = scatter(x, devices)
    gy = scatter(grad_y, [s.device for s in shards])
    results = conv_shards(shards, w, ndim=ndim, direction="backward", grad_y=gy, **keywords)
    device = _caller_device(x)
    parts = [r[0] for r in results]
    grad_x = None if parts[0].array is None else gather(parts, device)  # None: input_grad=False
    return grad_x, _sum_on([r[1] for r in results], device), _sum_on([r[2] for r in results], device)


# The four public functions below get their docstrings from this template
# (assigned after their definitions), hence their ``noqa: D103``.
_DOC = """{what} of a batch split across GPUs (one slice per device, concurrently).

    Takes the arguments of :func:`convsuite.{name}` (batched layout) plus
    ``devices``, the GPU ids to use (default: every visible GPU). Results are
    gathered on the device of ``x`` (NumPy input gives NumPy output){extra}.
    """


def conv1d(x, w, bias=None, *, devices=None, **keywords):  # noqa: D103
    return _forward(1, x, w, bias, devices, keywords)


def conv2d(x, w, bias=None, *, devices=None, **keywords):  # noqa: D103
    return _forward(2, x, w, bias, devices, keywords)


def conv1d_backward(grad_y, x, w, *, devices=None, **keywords):  # noqa: D103
    return _backward(1, grad_y, x, w, devices, keywords)


def conv2d_backward(grad_y, x, w, *, devices=None, **keywords):  # noqa: D103
    return _backward(2, grad_y, x, w, devices, keywords)


for _f, _what in ((conv1d, "conv1d"), (conv2d, "conv2d")):
    _f.__doc__ = _DOC.format(what=_what, name=_what, extra="")
for _f, _what in ((conv1d_backward, "conv1d_backward"), (conv2d_backward, "conv2d_backward")):
    _f.__doc__ = _DOC.format(what=_what, name=_what, extra="; weight and bias gradients are summed there")


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
        return _planner.forward_plan(_planner.ndim_of(w), x, w, bias, **self.keywords)

    def _capture(self, shard, w, bias) -> _ShardGraph:
        """Warm up on a private pool and stream, then capture one call into the fixed output."""
        import cupy

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
