"""The array library of an array (NumPy or CuPy), without importing CuPy needlessly."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .._arrays import is_cupy_array

__all__ = ["array_module", "real_input", "to_numpy"]


def array_module(array: Any) -> Any:
    """``cupy`` for a CuPy array, else ``numpy`` (like ``cupy.get_array_module``)."""
    if is_cupy_array(array):
        return sys.modules["cupy"]  # a CuPy array exists, so cupy is imported
    return np


def real_input(x: Any, what: str) -> Any:
    """``x`` as a layer computes it: floats as they are, integers as float64, else a ``TypeError``.

    Integers are read as ``convsuite.conv2d`` reads them: in an integer dtype a
    mean, a variance, a softmax or ``-inf`` padding truncates (AvgPool2D and
    BatchNorm2D returned zeros). ``what`` names the operand in the messages
    (e.g. "MaxPool2D input `x`").
    """
    dtype = getattr(x, "dtype", None)
    if dtype is None or not hasattr(x, "ndim"):
        raise TypeError(f"{what} must be a NumPy or CuPy array; got {type(x).__name__}")
    if dtype.kind == "f":
        return x
    if dtype.kind in "iu":
        return x.astype(np.float64)  # NumPy or CuPy alike
    raise TypeError(
        f"{what} must have a real numeric dtype (a float type, or an integer type, which is computed in "
        f"float64); got dtype {dtype}"
    )


def to_numpy(array: Any) -> np.ndarray:
    """``array`` as a NumPy array (copied off the GPU when it lives there)."""
    if is_cupy_array(array):
        return array.get()
    return np.asarray(array)
