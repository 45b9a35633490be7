"""Dask arrays in, Dask arrays out: the convolution as a lazy task graph.

The graph has one task per output block. Output chunk boundaries follow the
input chunks, aligned with the stride in padded coordinates
(:func:`~convsuite._tiling.output_bounds_for_input_chunks`), so a
block reads its own input chunk plus exactly the halo its windows reach, cut
from however many neighbouring chunks that takes (kernels wider than a chunk
included). The channel axis is one chunk (the reduction needs every channel
of a group); the batch axis keeps its chunks. The weights and bias are one
graph key that every block depends on: the scheduler computes it once and
each worker fetches it once, instead of a copy embedded in every task.

Backward: each output block's share of the loss gives a slab gradient (its
input slab, halo included), a weight gradient and a bias gradient. Weight and
bias gradients are summed by Dask's tree reduction; an input chunk's
gradient is the sum of the overlapping slab gradients of its neighbours.
"""

from __future__ import annotations

import itertools
import math
import operator

import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from .._arrays import is_cupy_array
from .._registry import requested_backend
from .._tiling import output_bounds_for_input_chunks, overlapping_chunks, pieces
from .._validation import prepare_forward
from . import _blocks

__all__ = ["conv", "conv_backward"]


def _is_dask(value) -> bool:
    return isinstance(value, da.Array)


def _shape_proxy(value):
    """A zero-memory NumPy stand-in with the shape and dtype of a Dask or CuPy array, for validation.

    The chunks of the Dask array may be CuPy arrays; the front end's checks
    only need shapes and dtypes, on the host.
    """
    if not (_is_dask(value) or is_cupy_array(value)):
        return value
    return np.broadcast_to(np.zeros((), dtype=value.dtype), value.shape)


def _validate(op, ndim, x, w, bias, stride, padding, dilation, groups, extra=()):
    """The front end's own validation, run on stand-ins so nothing is computed."""
    for name, value in zip(("x", "w", "bias", "grad_y"), (x, w, bias, *extra)):
        if _is_dask(value) and any(math.isnan(c) for axis in value.chunks for c in axis):
            raise ValueError(
                f"`{name}` must have known chunk sizes to be cut into convolution blocks; got chunks "
                f"{value.chunks}. Call `{name}.compute_chunk_sizes()` first"
            )
    proxies = [_shape_proxy(a) for a in (x, w, bias, *extra)]
    try:
        call = prepare_forward(
            op, ndim, *proxies[:3], stride, padding, dilation, groups, extra=tuple(proxies[3:]), convert=False
        )
    except MemoryError:
        # The host-memory check is about an in-memory output; a Dask output is
        # made of chunks that live wherever the scheduler puts them. Check the
        # rest on one batch element (geometry does not depend on the batch).
        if x.ndim != ndim + 2:
            raise
        first = proxies[0][:1]
        call = prepare_forward(
            op, ndim, first, *proxies[1:3], stride, padding, dilation, groups, extra=tuple(proxies[3:]), convert=False
        )
        from dataclasses import replace

        call = replace(call, spec=replace(call.spec, batch=int(x.shape[0])))
    return call


def _canonical(x, layout: str):
    """A Dask array in the ``(B, C, ...)`` layout."""
    if layout == "batched":
        return x
    if layout == "unbatched":
        return x[None]
    return x[None, None]


def _prepare_input(x, layout, dtype):
    """Canonical layout, compute dtype, and one chunk along the channels."""
    xc = _canonical(x, layout).astype(dtype)
    return xc.rechunk({1: -1})


#: Axes before the spatial ones in each layout of the user's arrays (batch, channels).
_LEADING_AXES = {"batched": 2, "unbatched": 1, "signal": 0}


def _prepare_source(x, layout, dtype):
    """The user's array in its own layout, in the compute dtype, with one chunk along the channels.

    The forward graph reads these chunks directly: a lifted ``(1, 1, N)``
    view of a signal would be one more task per chunk (and one per output
    block to drop the axes again), each a scheduler round trip that costs
    about a millisecond on a 2-core machine.
    """
    source = x.astype(dtype)
    lead = _LEADING_AXES[layout]
    return source.rechunk({lead - 1: -1}) if lead else source


def _key_lead(lead: int, ib: int) -> tuple:
    """The chunk indices before the spatial ones in a key of an array with ``lead`` leading axes.

    Batch chunk ``ib`` and the one channel chunk, as many of them as the layout has.
    """
    return (ib, 0)[2 - lead :]


def _operands_task(w, bias, dtype, layout, spec):
    """The graph entry holding the weights and bias, and the collections it depends on."""
    refs, deps = [], []
    for array, shape in ((w, spec.w_shape), (bias, (spec.out_channels,))):
        if array is None:
            refs.append(None)
        elif _is_dask(array):
            # One chunk before the reshape: Dask's reshape of an array with a zero-size chunk
            # builds a graph with a missing key; the weights and bias are small anyway.
            single = array.astype(dtype).rechunk(-1).reshape(shape)
            deps.append(single)
            refs.append((single.name,) + (0,) * single.ndim)
        else:  # NumPy stays NumPy, CuPy stays on its device; the tasks move it where the chunks are
            xp = _blocks._xp(array)
            refs.append(xp.ascontiguousarray(xp.asarray(array).reshape(shape), dtype=dtype))
    return (_blocks.Operands, *refs), deps


def _axis_pieces(spec, spatial_chunks):
    """The :class:`Piece` list of every spatial axis (``spatial_chunks``: the input's chunks per spatial axis)."""
    result = []
    for axis in range(spec.ndim):
        chunks = spatial_chunks[axis]
        pad = spec.padding[axis][0]
        bounds = output_bounds_for_input_chunks(chunks, spec.out_size[axis], pad, spec.stride[axis])
        result.append(
            pieces(bounds, spec.in_size[axis], pad, spec.kernel_size[axis], spec.stride[axis], spec.dilation[axis])
        )
    return result


def _block_inputs(name, spatial_chunks, lead, combo, layer, prefix):
    """The nested list of keys of the input pieces a block reads.

    ``name`` and ``spatial_chunks`` are the input array's; ``lead`` the
    indices of its key before the spatial ones (batch and channel chunks, as
    its layout has them). A chunk the block reads whole is referenced as it
    is; of a chunk it reads only part of (the halo from a neighbour), a small
    task cuts that part first, where the chunk lives, so only the halo
    travels between workers.
    """
    per_axis = [overlapping_chunks(spatial_chunks[axis], p.in_lo, p.in_hi) for axis, p in enumerate(combo)]
    if any(not found for found in per_axis):
        return []

    def piece(found):
        key = (name, *lead, *(i for i, _, _ in found))
        sizes = [spatial_chunks[axis][i] for axis, (i, _, _) in enumerate(found)]
        if all(a == 0 and b == n for (_, a, b), n in zip(found, sizes)):
            return key
        index = (*(slice(None) for _ in lead), *(slice(a, b) for _, a, b in found))
        cut = (f"{prefix}-cut-{tokenize(key, index)}",)
        layer[cut] = (operator.getitem, key, index)
        return cut

    if len(combo) == 1:
        return [piece((f,)) for f in per_axis[0]]
    return [[piece((fh, fw)) for fw in per_axis[1]] for fh in per_axis[0]]


def _keywords(spec, backend, algorithm):
    """Keywords of the planner inside a task; settings are resolved here, on the client.

    The backend's availability is the workers' business (a GPU worker may
    run what the client cannot): a task that cannot run raises that error
    when the result is computed.
    """
    if not isinstance(algorithm, str):
        raise TypeError(f"`algorithm` must be a string such as 'auto'; got {algorithm!r}")
    name, _ = requested_backend(backend)
    return dict(stride=spec.stride, dilation=spec.dilation, groups=spec.groups, backend=name, algorithm=algorithm)


def _meta(x, dtype, ndim):
    """An empty array of the chunks' type (NumPy or CuPy) for the output's ``_meta``."""
    meta = getattr(x, "_meta", None)
    if meta is None or meta.size:
        return np.empty((0,) * ndim, dtype=dtype)
    return meta.astype(dtype).reshape((0,) * ndim)


def _to_user(array, layout):
    if layout == "batched":
        return array
    if layout == "unbatched":
        return array[0]
    return array[0, 0]


def _on_top(graph: HighLevelGraph, below: str, name: str, layer: dict) -> HighLevelGraph:
    """``graph`` with one more layer ``name`` that reads the layer ``below``."""
    return HighLevelGraph(
        layers={**graph.layers, name: layer},
        dependencies={**graph.dependencies, name: {below}},
    )


def conv(op, ndim, x, w, bias, stride, padding, dilation, groups, backend, algorithm):
    """A lazy Dask array of ``conv{ndim}d(x, w, bias, ...)`` for a Dask array ``x``."""
    call = _validate(op, ndim, x, w, bias, stride, padding, dilation, groups)
    spec, layout = call.spec, call.layout
    # The blocks read the user's chunks and return blocks in the user's layout (a signal stays 1-D):
    # lifting to (B, C, ...) and back happens inside each task, as views.
    source = _prepare_source(x, layout, spec.dtype)
    lead = _LEADING_AXES[layout]
    spatial_chunks = source.chunks[lead:]
    batch_chunks = source.chunks[0] if layout == "batched" else (1,)
    keywords = _keywords(spec, backend, algorithm)
    operands, deps = _operands_task(w, bias, spec.dtype, layout, spec)
    token = tokenize(source.name, layout, operands, keywords, spec)
    name = f"{op}-{token}"
    operands_key = (f"{op}-operands-{token}",)
    layer = {operands_key: operands}
    axis_pieces = _axis_pieces(spec, spatial_chunks)
    for ib, batch in enumerate(batch_chunks):
        key_lead = _key_lead(lead, ib)
        for index, combo in zip(
            itertools.product(*(range(len(p)) for p in axis_pieces)), itertools.product(*axis_pieces)
        ):
            keys = _block_inputs(source.name, spatial_chunks, key_lead, combo, layer, name)
            geometry = _blocks.BlockGeometry(
                ndim=ndim,
                padding=tuple((p.pad_before, p.pad_after) for p in combo),
                out_size=tuple(p.out_size for p in combo),
                keywords=keywords,
            )
            task = (_blocks.forward_block, keys, geometry, operands_key, batch)
            if lead < 2:
                task = (_blocks.in_layout, lead, *task)
            layer[(name, *key_lead, *index)] = task
    graph = HighLevelGraph.from_collections(name, layer, dependencies=[source, *deps])
    out_spatial = tuple(tuple(p.out_size for p in ps) for ps in axis_pieces)
    chunks = (batch_chunks, (spec.out_channels,)) if lead == 2 else ((spec.out_channels,),) if lead else ()
    return da.Array(graph, name, chunks + out_spatial, meta=_meta(x, spec.dtype, ndim + lead))


def conv_backward(op, ndim, grad_y, x, w, stride, padding, dilation, groups, backend, algorithm):
    """Lazy Dask arrays ``(grad_x, grad_w, grad_b)`` for a Dask ``x`` or ``grad_y``."""
    if not _is_dask(x):
        x = da.from_array(x, chunks=x.shape)
    call = _validate(op, ndim, x, w, None, stride, padding, dilation, groups, extra=(grad_y,))
    spec, layout = call.spec, call.layout
    expected = call.user_shape(spec.y_shape)
    if tuple(grad_y.shape) != tuple(expected):
        raise ValueError(
            f"`grad_y` must have the shape of the forward output, {tuple(expected)}; got {tuple(grad_y.shape)}"
        )
    xc = _prepare_input(x, layout, spec.dtype)
    axis_pieces = _axis_pieces(spec, xc.chunks[2:])
    out_chunks = (xc.chunks[0], (spec.out_channels,), *(tuple(p.out_size for p in ps) for ps in axis_pieces))
    if not _is_dask(grad_y):
        grad_y = da.from_array(grad_y, chunks=grad_y.shape)
    gyc = _canonical(grad_y, layout).astype(spec.dtype).rechunk(out_chunks)
    keywords = _keywords(spec, backend, algorithm)
    operands, deps = _operands_task(w, None, spec.dtype, layout, spec)
    token = tokenize(xc.name, gyc.name, operands, keywords, spec)
    name = f"{op}-backward-{token}"
    operands_key = (f"{op}-operands-{token}",)
    layer = {operands_key: operands}
    n_blocks = 0
    gw_name, gb_name, gx_name = f"{op}-grad-w-{token}", f"{op}-grad-b-{token}", f"{op}-grad-x-{token}"
    gw_layer, gb_layer = {}, {}
    # contributions[(ib, *input chunk index)] -> [(key of a slab-gradient part, where it goes in the chunk)]
    contributions: dict[tuple, list] = {}
    for ib, batch in enumerate(xc.chunks[0]):
        for index, combo in zip(
            itertools.product(*(range(len(p)) for p in axis_pieces)), itertools.product(*axis_pieces)
        ):
            keys = _block_inputs(xc.name, xc.chunks[2:], (ib, 0), combo, layer, name)
            geometry = _blocks.BlockGeometry(
                ndim=ndim,
                padding=tuple((p.pad_before, p.pad_after) for p in combo),
                out_size=tuple(p.out_size for p in combo),
                keywords=keywords,
            )
            slab_shape = (batch, spec.in_channels, *(p.in_size for p in combo))
            key = (name, ib, 0, *index)
            layer[key] = (_blocks.backward_block, (gyc.name, ib, 0, *index), keys, geometry, operands_key, slab_shape)
            gw_layer[(gw_name, n_blocks) + (0,) * (ndim + 2)] = (_blocks.take, key, 1, True)
            gb_layer[(gb_name, n_blocks, 0)] = (_blocks.take, key, 2, True)
            n_blocks += 1
            per_axis = [overlapping_chunks(xc.chunks[2 + a], p.in_lo, p.in_hi) for a, p in enumerate(combo)]
            for found in itertools.product(*per_axis):
                slab_slices = [slice(None), slice(None)]
                chunk_slices = [slice(None), slice(None)]
                for (i, a, b), p, chunks in zip(found, combo, xc.chunks[2:]):
                    start = sum(chunks[:i])
                    slab_slices.append(slice(start + a - p.in_lo, start + b - p.in_lo))
                    chunk_slices.append(slice(a, b))
                chunk_index = (ib, *(i for i, _, _ in found))
                # Cut where the block ran, so only the part for this chunk travels.
                part = (f"{name}-part-{tokenize(key, chunk_index)}",)
                layer[part] = (_blocks.slab_part, key, tuple(slab_slices))
                contributions.setdefault(chunk_index, []).append((part, tuple(chunk_slices)))
    gx_layer = {}
    for ib, batch in enumerate(xc.chunks[0]):
        for index in itertools.product(*(range(len(c)) for c in xc.chunks[2:])):
            shape = (batch, spec.in_channels, *(c[i] for c, i in zip(xc.chunks[2:], index)))
            parts = [[part, where] for part, where in contributions.get((ib, *index), [])]
            gx_layer[(gx_name, ib, 0, *index)] = (_blocks.gradient_of_chunk, parts, shape, spec.dtype)
    blocks = HighLevelGraph.from_collections(name, layer, dependencies=[xc, gyc, *deps])
    w_chunks = tuple((s,) for s in spec.w_shape)
    gw_all = da.Array(
        _on_top(blocks, name, gw_name, gw_layer),
        gw_name,
        ((1,) * n_blocks, *w_chunks),
        meta=_meta(x, spec.dtype, ndim + 3),
    )
    gb_all = da.Array(
        _on_top(blocks, name, gb_name, gb_layer),
        gb_name,
        ((1,) * n_blocks, (spec.out_channels,)),
        meta=_meta(x, spec.dtype, 2),
    )
    gx = da.Array(_on_top(blocks, name, gx_name, gx_layer), gx_name, xc.chunks, meta=_meta(x, spec.dtype, ndim + 2))
    grad_x = _to_user(gx, layout)
    if _is_dask(x) and grad_x.chunks != x.chunks:
        grad_x = grad_x.rechunk(x.chunks)
    grad_w = gw_all.sum(axis=0, dtype=spec.dtype)
    if layout == "signal":
        grad_w = grad_w.reshape(spec.kernel_size)
    return grad_x, grad_w, gb_all.sum(axis=0, dtype=spec.dtype)
