"""Results handed back in the kind of array the caller gave.

Operands are read into NumPy or CuPy arrays once per call (``_validation``);
this module says how the results go back: a torch tensor in gives a torch
tensor out, on the same device, zero-copy through DLPack, and a float16 or
bfloat16 tensor gets its dtype back (computed in float32, as torch does).
NumPy and CuPy results need nothing: NumPy in is NumPy out, CuPy in is CuPy
out. Nothing here imports torch; a tensor's own module is used.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

__all__ = ["is_torch_tensor", "result_converter"]


def is_torch_tensor(value: Any) -> bool:
    """True for a ``torch.Tensor`` (or a subclass), told without importing torch."""
    if "torch" not in sys.modules:
        return False
    return isinstance(value, sys.modules["torch"].Tensor)


def result_converter(value: Any) -> Callable[[Any], Any] | None:
    """How a result goes back to the caller whose input was ``value``; None when it needs nothing."""
    if not is_torch_tensor(value):
        return None
    torch = sys.modules["torch"]
    dtype = value.dtype

    def to_torch(array: Any) -> Any:
        tensor = torch.from_dlpack(array)
        return tensor if tensor.dtype == dtype else tensor.to(dtype)

    return to_torch
