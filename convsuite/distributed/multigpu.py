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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._arrays import is_cupy_array
from .._thread_pools import shared_pool
from ._tiling import even_bounds
from .captured_shards import CapturedShards

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
    from .. import _api

    if direction not in ("forward", "backward"):
        raise ValueError(f"`direction` must be 'forward' or 'backward'; got {direction!r}")
    devices = [s.device for s in shards]

    def forward(i, device):
        s = shards[i]
        fn = _api.conv1d if ndim == 1 else _api.conv2d
        y = fn(s.array, _replicate(w, device), _replicate(bias, device), **keywords)
        return Shard(device, s.start, s.stop, y)

    def backward(i, device):
        s = shards[i]
        fn = _api.conv1d_backward if ndim == 1 else _api.conv2d_backward
        gx, gw, gb = fn(grad_y[i].array, s.array, _replicate(w, device), **keywords)
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
