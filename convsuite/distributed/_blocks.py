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

from .. import _buffers, _planner, _threads
from .._arrays import is_cupy_array
from .._errors import UnsupportedCaseError
from .._tiling import pieces

__all__ = [
    "BlockGeometry",
    "Operands",
    "backward_block",
    "forward_block",
    "gradient_of_chunk",
    "in_layout",
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


def _forward(geometry: BlockGeometry, x, w, bias):
    """One in-memory forward call of the block's geometry, through the planner (cached plans)."""
    k = geometry.keywords
    geometry_args = (k["stride"], geometry.padding, k["dilation"], k["groups"], k["backend"], k["algorithm"])
    return _planner.run_forward(geometry.ndim, x, w, bias, *geometry_args)


def _backward(geometry: BlockGeometry, grad_y, x, w):
    """One in-memory backward call of the block's geometry, through the planner (cached plans)."""
    k = geometry.keywords
    geometry_args = (k["stride"], geometry.padding, k["dilation"], k["groups"], k["backend"], k["algorithm"])
    return _planner.run_backward(geometry.ndim, grad_y, x, w, *geometry_args)


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


def _split_pieces(inputs, ndim: int):
    """The pieces along the split axis, or None when the block is not one of the in-place cases.

    The in-place cases: one batch element and one channel in and out
    (``b*C == 1`` and ``b*M == 1``, e.g. a plain signal or image), and for
    2-D only rows split (one column chunk), so that a range of the split
    axis is one contiguous run of memory in the input pieces and in the
    output block alike.
    """
    if ndim == 1:
        parts = list(inputs)
    elif all(len(row) == 1 for row in inputs):
        parts = [row[0] for row in inputs]
    else:
        return None
    if any(part.shape[0] * part.shape[1] != 1 or not part.flags.c_contiguous for part in parts):
        return None
    return parts


def _slab_range(parts, lo: int, hi: int):
    """Samples ``[lo, hi)`` of the slab the parts make along the split axis: a view if one part holds them."""
    axis = -1 if parts[0].ndim == 3 else -2
    found, offset = [], 0
    for part in parts:
        n = part.shape[axis]
        a, b = max(lo, offset), min(hi, offset + n)
        if a < b:
            index = (slice(None),) * (part.ndim + axis) + (slice(a - offset, b - offset),)
            found.append(part[index])
        offset += n
    return found[0] if len(found) == 1 else _xp(found[0]).concatenate(found, axis=axis)


def _slab_shape(parts, split: int) -> tuple:
    """The spatial shape of the slab the parts would glue into."""
    shape = list(parts[0].shape[2:])
    shape[split] = sum(part.shape[2 + split] for part in parts)
    return tuple(shape)


def _forward_in_place(parts, geometry: BlockGeometry, operands: Operands):
    """The block computed without gluing its slab: None when that cannot give the single-array result.

    The block's output is allocated once. Outputs whose windows lie inside
    one piece (the block's own chunk: nearly all of them) are computed from a
    view of that piece and written straight into the output; only the few
    outputs at each end, whose windows cross into a neighbour's halo or the
    padding, are computed from a small glued slab. Each part is a plain
    convolution with the block's stride and dilation and the padding that
    part still needs (:func:`~convsuite._tiling.pieces` on the
    slab's own coordinates), so every output is computed from the same taps
    as in one call.
    """
    ndim, keywords = geometry.ndim, geometry.keywords
    split = 0  # spatial index of the split axis: the signal's, or the rows
    stride, dilation = keywords["stride"][split], keywords["dilation"][split]
    w = operands.w
    kernel = w.shape[2 + split]
    pad_before, _ = geometry.padding[split]
    out_size = geometry.out_size[split]
    sizes = [part.shape[2 + split] for part in parts]
    main = max(range(len(parts)), key=sizes.__getitem__)  # the block's own chunk
    start = sum(sizes[:main])
    reach = dilation * (kernel - 1)
    # Outputs whose window [j*s - pad_before, j*s - pad_before + reach] lies inside the main piece.
    lo = -(-(start + pad_before) // stride)
    hi = min((start + sizes[main] - 1 - reach + pad_before) // stride + 1, out_size)
    if hi <= lo:
        return None
    plan_parts = pieces(sorted({0, lo, hi, out_size}), sum(sizes), pad_before, kernel, stride, dilation)
    if any(p.out_size and not p.in_size for p in plan_parts):  # a part of pure padding: keep the glued path
        return None
    xp = _xp(parts[0])
    w_on, bias = _on(xp, w), _on(xp, operands.bias)
    # The backend and algorithm the whole block would run, chosen on a stand-in of the glued slab's
    # shape: the parts are too small or too large for "auto" to pick the same, and another
    # algorithm may sum the taps in another order (a result off in the last bit).
    slab = xp.broadcast_to(xp.zeros((), dtype=w.dtype), (1, parts[0].shape[1], *_slab_shape(parts, split)))
    whole = _planner.planned(
        ndim,
        "forward",
        slab,
        w_on,
        bias,
        keywords["stride"],
        geometry.padding,
        keywords["dilation"],
        keywords["groups"],
        keywords["backend"],
        keywords["algorithm"],
    )
    if not whole.accepts_out:  # the chunks are not on the backend's device: it copies anyway
        return None
    runs = []
    for p in plan_parts:
        x = _slab_range(parts, p.in_lo, p.in_hi)
        padding = list(geometry.padding)
        padding[split] = (p.pad_before, p.pad_after)
        # The whole block's backend, algorithm and parameters, given explicitly: nothing is
        # chosen or tuned again for a part (autotune would time each edge shape inside the
        # task), and a part the algorithm declines sends the block back to the glued path.
        # Through the plan cache: equal chunks have equal parts, so only a worker's first
        # block builds them (two builds were ~0.5 ms of every block).
        try:
            plan = _planner.planned(
                ndim,
                "forward",
                x,
                w_on,
                bias,
                keywords["stride"],
                tuple(padding),
                keywords["dilation"],
                keywords["groups"],
                whole.backend.name,
                whole.algorithm,
                params=dict(whole.params),
            )
        except UnsupportedCaseError:
            return None
        runs.append((plan, x, p))
    out = _buffers.empty((1, w.shape[0], *geometry.out_size), w.dtype, xp)
    for plan, x, p in runs:
        plan._run_forward(x, w_on, bias, out=out[:, :, p.out_lo : p.out_hi])
    return out


def forward_block(inputs, geometry: BlockGeometry, operands: Operands, batch: int):
    """The output block ``(b, M, *out_size)`` of one Dask task.

    Where the block allows it (:func:`_split_pieces`), its slab is never
    glued (:func:`_forward_in_place`); otherwise the pieces are glued into
    one slab and convolved in one call.
    """
    w = operands.w
    # Every tap of every output falls on padding (or the batch chunk is empty): the output is the bias.
    if not inputs or batch == 0:
        xp = _xp(w)
        out = xp.zeros((batch, w.shape[0], *geometry.out_size), dtype=w.dtype)
        if operands.bias is not None:
            out += _on(xp, operands.bias).reshape((-1,) + (1,) * geometry.ndim)
        return out
    parts = _split_pieces(inputs, geometry.ndim) if operands.w.shape[0] * batch == 1 else None
    if parts is not None:
        with _task_threads():
            out = _forward_in_place(parts, geometry, operands)
        if out is not None:
            return out
    x = _assemble(inputs, geometry.ndim)
    xp = _xp(x)
    with _task_threads():
        return _forward(geometry, x, _on(xp, w), _on(xp, operands.bias))


def _lifted(inputs, missing: int):
    """The nested input pieces with ``missing`` leading axes of length 1 (views)."""
    if isinstance(inputs, list):
        return [_lifted(item, missing) for item in inputs]
    return inputs.reshape((1,) * missing + inputs.shape)


def in_layout(lead: int, block, inputs, geometry: BlockGeometry, operands: Operands, batch: int):
    """``block`` on pieces of an array with ``lead`` of the batch and channel axes (0: a signal or
    an image; 1: channels first), its ``(1, M, ...)`` output returned without the missing axes.

    The graph then reads the user's own chunks and its output is in the
    user's layout, instead of a task per chunk to add the axes and one per
    block to drop them.
    """
    out = block(_lifted(inputs, 2 - lead), geometry, operands, batch)
    return out.reshape(out.shape[2 - lead :])


def backward_block(grad_y, inputs, geometry: BlockGeometry, operands: Operands, x_shape):
    """``(grad_x of the slab, grad_w, grad_b)`` for one output block's share of the loss."""
    xp = _xp(grad_y)
    w = _on(xp, operands.w)
    if not inputs or x_shape[0] == 0:  # outputs of pure padding (or no batch): only the bias saw them
        spatial = tuple(range(2, 2 + geometry.ndim))
        grad_b = grad_y.sum(axis=(0, *spatial))
        return xp.zeros(x_shape, dtype=w.dtype), xp.zeros_like(w), grad_b
    x = _assemble(inputs, geometry.ndim)
    with _task_threads():
        return _backward(geometry, grad_y, x, w)


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
