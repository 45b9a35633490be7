"""Past one process: Dask arrays in and out, and a batch split across GPUs.

``cs.conv1d``/``cs.conv2d`` and their backward passes hand a Dask array to
:func:`conv` / :func:`conv_backward` here, which return lazy Dask arrays
(see :mod:`convsuite.distributed._dask`). Detection is by module name, so
nothing here imports Dask until a Dask array actually arrives; without Dask
installed nothing changes. :mod:`convsuite.distributed.multigpu` splits a
batch across the visible GPUs.
"""

from __future__ import annotations

__all__ = ["conv", "conv_backward", "is_dask_array"]


def is_dask_array(value: object) -> bool:
    """True for a ``dask.array.Array``; checked by module name so Dask is not imported."""
    cls = type(value)
    return cls.__name__ == "Array" and (cls.__module__ or "").startswith("dask.array")


def conv(op, ndim, x, w, bias, stride, padding, dilation, groups, backend, algorithm):
    """The forward convolution of a Dask array, as a lazy Dask array (see ``_dask.conv``)."""
    from . import _dask

    return _dask.conv(op, ndim, x, w, bias, stride, padding, dilation, groups, backend, algorithm)


def conv_backward(op, ndim, grad_y, x, w, stride, padding, dilation, groups, backend, algorithm):
    """The gradients for Dask operands, as lazy Dask arrays (see ``_dask.conv_backward``)."""
    from . import _dask

    return _dask.conv_backward(op, ndim, grad_y, x, w, stride, padding, dilation, groups, backend, algorithm)
