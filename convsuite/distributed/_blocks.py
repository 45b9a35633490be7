"""What one Dask task runs: assemble a block's input, convolve it locally.

These functions run on the workers. They receive NumPy or CuPy blocks (the
array type of the Dask array's chunks) and call the public single-array API,
so each chunk is computed by the backend the settings chose on the client
(or, for ``"auto"``, by the best backend of the worker that runs it).

Threads: a Dask worker runs one task per worker thread, and its nanny starts
the worker process with ``OMP_NUM_THREADS=1`` (with MKL's and OpenBLAS's:
Dask's ``distributed.nanny.pre-spawn-environ``) so that the tasks, not the
libraries under them, are the parallelism. A chunk computed there follows
the same rule: the multicore backends (numba, joblib) use
``OMP_NUM_THREADS`` threads per task (1 when unset), instead of every core
of the host for each of the worker's tasks at once, unless the worker
process chose its own count (:func:`convsuite.set_num_threads`, e.g. through
``client.run``, or ``NUMBA_NUM_THREADS``).
"""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import _threads
from .._arrays import is_cupy_array

__all__ = [
    "BlockGeometry",
    "Operands",
    "backward_block",
    "forward_block",
    "gradient_of_chunk",
    "slab_part",
    "take",
    "task_thread_count",
]


@dataclass(frozen=True)
class Operands:
    """The weights (and bias) of one call: one graph key, shipped once per worker."""

    w: Any
    bias: Any = None


@dataclass(frozen=True)
class BlockGeometry:
    """How one block's input is cut from its neighbours and convolved.

    Attributes
    ----------
    ndim : int
        Spatial rank (1 or 2).
    padding : tuple of (int, int)
        The block's own padding per spatial axis.
    out_size : tuple of int
        Outputs of the block per spatial axis.
    keywords : dict
        stride, dilation, groups, backend, algorithm for the public API.
    """

    ndim: int
    padding: tuple
    out_size: tuple
    keywords: dict


def _xp(array):
    """The array module of ``array`` (cupy is already imported if a block is cupy)."""
    return sys.modules["cupy"] if is_cupy_array(array) else np


def _assemble(inputs, ndim: int):
    """Glue the pieces cut from neighbouring chunks (nested: rows of columns for 2-D) into one slab."""

    def join(parts, axis):
        return parts[0] if len(parts) == 1 else _xp(parts[0]).concatenate(parts, axis=axis)

    if ndim == 1:
        return join(inputs, -1)
    return join([join(row, -1) for row in inputs], -2)


def _on(xp, array):
    """``array`` moved to the array module of the blocks (weights to the GPU for CuPy chunks)."""
    if array is None or xp is np and isinstance(array, np.ndarray):
        return array
    return xp.asarray(array)


def _api(ndim: int, direction: str):
    """The public single-array function for this rank and direction."""
    from .. import _api

    name = f"conv{ndim}d" if direction == "forward" else f"conv{ndim}d_backward"
    return getattr(_api, name)


def _in_dask_worker() -> bool:
    """Whether this code runs inside a task of a ``distributed`` worker."""
    if "distributed" not in sys.modules:  # no worker without it
        return False
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return False
    return True


def task_thread_count() -> int | None:
    """Threads per task inside a Dask worker (see the module notes), or None to keep the process's count."""
    if _threads.user_set() or not _in_dask_worker():
        return None
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else 1


def _task_threads():
    """The thread count of one task: :func:`task_thread_count` when it applies."""
    n = task_thread_count()
    return nullcontext() if n is None else _threads.task_threads(n)


def forward_block(inputs, geometry: BlockGeometry, operands: Operands, batch: int):
    """The output block ``(b, M, *out_size)`` of one Dask task."""
    w = operands.w
    # Every tap of every output falls on padding (or the batch chunk is empty): the output is the bias.
    if not inputs or batch == 0:
        xp = _xp(w)
        out = xp.zeros((batch, w.shape[0], *geometry.out_size), dtype=w.dtype)
        if operands.bias is not None:
            out += _on(xp, operands.bias).reshape((-1,) + (1,) * geometry.ndim)
        return out
    x = _assemble(inputs, geometry.ndim)
    xp = _xp(x)
    conv = _api(geometry.ndim, "forward")
    with _task_threads():
        return conv(x, _on(xp, w), _on(xp, operands.bias), padding=geometry.padding, **geometry.keywords)


def backward_block(grad_y, inputs, geometry: BlockGeometry, operands: Operands, x_shape):
    """``(grad_x of the slab, grad_w, grad_b)`` for one output block's share of the loss."""
    xp = _xp(grad_y)
    w = _on(xp, operands.w)
    if not inputs or x_shape[0] == 0:  # outputs of pure padding (or no batch): only the bias saw them
        spatial = tuple(range(2, 2 + geometry.ndim))
        grad_b = grad_y.sum(axis=(0, *spatial))
        return xp.zeros(x_shape, dtype=w.dtype), xp.zeros_like(w), grad_b
    x = _assemble(inputs, geometry.ndim)
    backward = _api(geometry.ndim, "backward")
    with _task_threads():
        return backward(grad_y, x, w, padding=geometry.padding, **geometry.keywords)


def take(result, index: int, add_axis: bool = False):
    """One element of a task's tuple result, with a leading axis for stacking if asked."""
    part = result[index]
    return part[None] if add_axis else part


def slab_part(result, slab_slices):
    """The part of a block's slab gradient that falls into one input chunk."""
    return result[0][slab_slices]


def gradient_of_chunk(parts, shape, dtype):
    """Sum the overlapping slab-gradient parts that fall into one input chunk.

    ``parts`` lists ``(part, chunk_slices)``; neighbouring blocks share their
    halo, so a chunk's gradient is the sum of their shares.
    """
    xp = _xp(parts[0][0]) if parts else np
    out = xp.zeros(shape, dtype=dtype)
    for part, chunk_slices in parts:
        out[chunk_slices] += part
    return out
