"""The array library of an array (NumPy or CuPy), without importing CuPy needlessly."""

from __future__ import annotations

import sys

import numpy as np

from .._arrays import is_cupy_array

__all__ = ["array_module", "to_numpy"]


def array_module(array):
    """``cupy`` for a CuPy array, else ``numpy`` (like ``cupy.get_array_module``)."""
    if is_cupy_array(array):
        return sys.modules["cupy"]  # a CuPy array exists, so cupy is imported
    return np


def to_numpy(array) -> np.ndarray:
    """``array`` as a NumPy array (copied off the GPU when it lives there)."""
    if is_cupy_array(array):
        return array.get()
    return np.asarray(array)
